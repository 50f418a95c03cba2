#!/usr/bin/env bash
# The main job (for now): replay a sample stream, with injected duplicates, through the domain
# core and print each account's final state, the counts and a reconciliation line.
#   infra/demo.sh [events.jsonl] [duplicate percent]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
stream=${1:-fixtures/samples/basic.jsonl}
duplicates=${2:-50}
cargo run --quiet --locked -p ledgerctl -- replay "$stream" --inject-duplicates "$duplicates"
