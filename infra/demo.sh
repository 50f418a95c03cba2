#!/usr/bin/env bash
# The main job: the local pipeline. Starts MiniStack (and DynamoDB Local), builds the functions
# with `sam build` (cargo-lambda, host architecture), deploys the SAME template.yaml to MiniStack
# through CloudFormation with the SAM transform, feeds the sample streams with injected
# duplicates to the deployed servicing queue, waits until quiet, prints each account's final
# state (checked against its expected fixture), the counts and a reconciliation line. Exits
# non-zero when an invariant fails. The stack stays up (see .local/env); a second run reuses it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

echo "==> tools (sam, cargo-lambda) and local engines"
bash infra/tools.sh sam
if [[ ${ENGINE:-ministack} == localstack ]]; then
  # LocalStack started by the user (infra/localstack/docker-compose.yml); MiniStack's venv still
  # provides the pinned boto3 the deploy script uses.
  bash infra/engines.sh install
  export AWS_ENDPOINT_URL=${AWS_ENDPOINT_URL:-http://127.0.0.1:4566} AWS_REGION=${AWS_REGION:-us-east-1}
  export AWS_DEFAULT_REGION=$AWS_REGION AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
else
  infra/engines.sh start >/dev/null
  set -a
  # shellcheck source=/dev/null
  source .local/engines.env
  set +a
fi
# cargo-lambda finds zig through `python3 -m ziglang`: its venv must come first.
export PATH="$ROOT/.local/venv-tools/bin:$PATH"
.local/venv-engines/bin/python infra/local_pipeline.py
echo "(the engines keep running with the stack; stop them with: infra/engines.sh stop)"
