#!/usr/bin/env bash
# Template checks: `sam validate --lint`, cfn-lint and checkov, all offline, all must pass.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash infra/tools.sh
# sam validate hangs without a region; it needs no real credentials.
export AWS_REGION=${AWS_REGION:-us-east-1} AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} \
  AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test} SAM_CLI_TELEMETRY=0
echo "--- sam validate --lint"
.local/venv-tools/bin/sam validate --lint --template-file template.yaml
echo "--- cfn-lint"
.local/venv-tools/bin/cfn-lint template.yaml
echo "--- checkov"
.local/venv-checkov/bin/checkov --skip-download --quiet --compact --framework cloudformation -f template.yaml
