#!/usr/bin/env bash
# Pinned Python-distributed tools in git-ignored venvs under .local/ (idempotent):
#   .local/venv-tools    aws-sam-cli, cfn-lint, cargo-lambda (+ ziglang)
#   .local/venv-checkov  checkov
#   infra/tools.sh [sam|checkov]   (default: both)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=versions.env
source "$ROOT/infra/versions.env"

ensure_venv() { # dir, marker, packages...
  local dir=$1 marker=$2; shift 2
  if [[ -f "$dir/.installed" && "$(cat "$dir/.installed")" == "$marker" ]]; then return; fi
  echo "[tools] installing $* into $dir" >&2
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@"
  "$dir/bin/pip" check >/dev/null
  echo "$marker" >"$dir/.installed"
}

which=${1:-all}
if [[ $which == all || $which == sam ]]; then
  ensure_venv "$ROOT/.local/venv-tools" "sam=$AWS_SAM_CLI_VERSION cfn=$CFN_LINT_VERSION cl=$CARGO_LAMBDA_VERSION" \
    "aws-sam-cli==$AWS_SAM_CLI_VERSION" "cfn-lint==$CFN_LINT_VERSION" "cargo-lambda==$CARGO_LAMBDA_VERSION"
fi
if [[ $which == all || $which == checkov ]]; then
  ensure_venv "$ROOT/.local/venv-checkov" "checkov=$CHECKOV_VERSION" "checkov==$CHECKOV_VERSION"
fi
