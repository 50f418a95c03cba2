#!/usr/bin/env bash
# Benchmarks (not part of the test suite; figures in docs/benchmarks.md come from these commands):
#   infra/bench.sh [loadgen options]   end-to-end on DynamoDB Local vs the Powertools baseline
#                                      (cost per fact: capacity units by AWS's rules and $ per
#                                      million facts; standard-queue and FIFO batch orders), the
#                                      payments API (apiload), cold start and binary sizes, the soak
#                                      (SOAK_MINUTES, default 5), criterion per-event benches, and
#                                      what the daily jobs read at two sizes of history
#                                      (RECONCILE_HISTORY, default 200000,2000000)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
source infra/versions.env
if [[ ! -x .local/venv-bench/bin/python ]] || ! .local/venv-bench/bin/python -c "import aws_lambda_powertools" 2>/dev/null; then
  python3 -m venv .local/venv-bench
  .local/venv-bench/bin/pip install -q --disable-pip-version-check \
    "aws-lambda-powertools==$POWERTOOLS_VERSION" "boto3==$BOTO_VERSION"
fi
infra/engines.sh start >/dev/null
set -a; source .local/engines.env; set +a

cargo build --quiet --locked --profile bench-local -p bench --bin loadgen
echo "== cost per fact (DynamoDB Local): 200 accounts x 5 events, 20 % duplicates, FIFO batches"
target/bench-local/loadgen --accounts 200 --events 5 --duplicates 20 --order fifo --repeats 3
for order in interleaved fifo; do
  echo "== end to end (DynamoDB Local), $order batches"
  target/bench-local/loadgen --order "$order" "$@"
done

echo "== cost per posted event: ledger-postings (DynamoDB Local), 200 accounts x 5 facts, 20 % redelivered"
cargo build --quiet --locked --profile bench-local -p bench --bin ledgerload
target/bench-local/ledgerload --accounts 200

echo "== what the daily jobs and listings read as history grows 10x under the same day (DynamoDB Local)"
cargo build --quiet --locked --profile bench-local -p bench --bin reconcile_load
# (the payments API's decision records, printed on stdout as in Lambda, are left out)
target/bench-local/reconcile_load --history "${RECONCILE_HISTORY:-200000,2000000}" | grep -v '^{'

echo "== the ledger's 7-day reach against the reconciler's 300 s (DynamoDB Local)"
target/bench-local/reconcile_load --reach-days 7 | grep -v '^{'

echo "== payments-api (DynamoDB Local)"
cargo run --quiet --locked --profile bench-local -p bench --bin apiload

echo "== cold start and size (release profile)"
cargo build --quiet --locked --release -p account-state
cargo build --quiet --locked --profile bench-local -p bench --bin coldstart
target/bench-local/coldstart target/release/account-state 30
size=$(stat -c %s target/release/account-state)
zipped=$(cd target/release && python3 -m zipfile -c /tmp/account-state.zip account-state && stat -c %s /tmp/account-state.zip)
echo "account-state x86_64 release binary: $((size / 1024)) KiB stripped, $((zipped / 1024)) KiB zipped"

echo "== soak (DynamoDB Local): production-shaped traffic for ${SOAK_MINUTES:-5} minutes, 0 differences expected"
cargo build --quiet --locked --profile bench-local -p bench --bin soak
target/bench-local/soak --minutes "${SOAK_MINUTES:-5}"

echo "== per event (criterion)"
cargo bench --locked -p bench --bench per_event -- --noplot 2>/dev/null | grep -B1 "time:" | grep -v "^--" || true
