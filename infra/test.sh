#!/usr/bin/env bash
# The whole test suite: starts the local engines (installing them on a fresh machine), runs every
# test of the workspace against them, and stops the engines it started.
#   infra/test.sh [cargo test args...]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

already_running=true
for pidfile in .local/engines/ministack.pid .local/engines/dynamodb-local.pid; do
  [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null || already_running=false
done
# Engines this run starts are stopped when it ends, whatever the outcome (also a failed start).
$already_running || trap 'infra/engines.sh stop' EXIT
infra/engines.sh start >/dev/null

set -a
# shellcheck source=/dev/null
source .local/engines.env
set +a
# The Lambda-path tests deploy the real function binaries to MiniStack.
cargo build --locked -p account-state -p outbox-relay -p collections
log=$(mktemp)
# Properties and sweeps record how many cases they ran (integration-tests record_figure).
rm -f target/test-figures.txt
status=0
cargo test --workspace --locked "$@" 2>&1 | tee "$log" || status=$?
# One closing line for the whole workspace (cargo prints one per test binary, doc-tests last).
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "summary: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
[[ -f target/test-figures.txt ]] && sed 's/^/figure: /' target/test-figures.txt
rm -f "$log"
exit "$status"
