#!/usr/bin/env bash
# Template checks: `sam validate --lint`, cfn-lint with this project's policy rules
# (infra/policy: what the local engines do not enforce) and checkov, all offline, all must pass.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash infra/tools.sh
# sam validate hangs without a region; it needs no real credentials.
export AWS_REGION=${AWS_REGION:-us-east-1} AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} \
  AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test} SAM_CLI_TELEMETRY=0
echo "--- sam validate --lint"
.local/venv-tools/bin/sam validate --lint --template-file template.yaml
echo "--- cfn-lint + policy rules (infra/policy)"
.local/venv-tools/bin/cfn-lint template.yaml --append-rules infra/policy
# The rules must be able to fail: each one fires on the template as issue #15 found it, or on
# a later issue's fixture that names it (checked below).
echo "--- policy rules on infra/policy/fixtures/template-as-filed.yaml (each must fire)"
fired=$(.local/venv-tools/bin/cfn-lint infra/policy/fixtures/template-as-filed.yaml \
  --append-rules infra/policy --format parseable 2>/dev/null | grep -o ':E91[0-9][0-9]:' | sort -u | tr -d ':' || true)
named=$(sed -s -n '1s/^# policy rules that must fire://p' infra/policy/fixtures/*.yaml | tr ' ' '\n' | grep -o 'E91[0-9][0-9]' | sort -u || true)
missing=$(comm -23 <(grep -o 'id = "E91[0-9][0-9]"' infra/policy/servicing_rules.py | grep -o 'E91[0-9]*' | sort -u) \
  <(printf '%s\n%s\n' "$fired" "$named" | sort -u))
if [[ -n $missing ]]; then
  echo "policy rules that fire on no fixture: $missing" >&2
  exit 1
fi
echo "$(echo "$fired" | wc -l) rules fired on the fixture, the others on their issue's fixture"
# Later issues' fixtures (a template cut down to what the issue found) name, on their first
# line, the rules that must fire on them: `# policy rules that must fire: E9113 ...`.
for fixture in infra/policy/fixtures/*.yaml; do
  [[ $fixture == */template-as-filed.yaml ]] && continue
  expected=$(sed -n '1s/^# policy rules that must fire://p' "$fixture" | tr ' ' '\n' | grep -o 'E91[0-9][0-9]' | sort -u || true)
  if [[ -z $expected ]]; then
    echo "$fixture names no rule that must fire on it (first line: # policy rules that must fire: E91xx)" >&2
    exit 1
  fi
  echo "--- policy rules on $fixture (must fire: ${expected//$'\n'/ })"
  found=$(.local/venv-tools/bin/cfn-lint "$fixture" --append-rules infra/policy --format parseable 2>/dev/null || true)
  fired=$(echo "$found" | grep -o ':E91[0-9][0-9]:' | sort -u | tr -d ':' || true)
  missing=$(comm -23 <(echo "$expected") <(echo "$fired"))
  if [[ -n $missing ]]; then
    echo "policy rules that did not fire on $fixture: $missing" >&2
    exit 1
  fi
  # A rule that fires may fire for another reason than the one the fixture is about: a header
  # line `# E91xx says: <text>` names what that rule must say (each such line is checked).
  while IFS= read -r said; do
    rule=${said%% says: *} text=${said#* says: }
    if ! echo "$found" | grep ":$rule:" | grep -qF -- "$text"; then
      echo "$rule did not say \"$text\" on $fixture" >&2
      exit 1
    fi
  done < <(sed -n 's/^# \(E91[0-9][0-9] says: .*\)$/\1/p' "$fixture")
done
echo "--- checkov"
.local/venv-checkov/bin/checkov --skip-download --quiet --compact --framework cloudformation -f template.yaml
