#!/usr/bin/env bash
# Checks Cargo.lock against the RustSec advisory database, offline: the snapshot vendored in
# infra/advisory-db (see its SNAPSHOT.md for its date: the horizon of what this check knows).
# Fails on any vulnerability, unmaintained or unsound crate not listed, with its reason, in
# infra/advisory-ignore.txt. First proves the check can fail: a lockfile holding a crate with a
# known advisory must be refused.
#   infra/advisories.sh            check
#   infra/advisories.sh refresh D  replace the vendored snapshot with the database at D
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=versions.env
source "$ROOT/infra/versions.env"
DB=$ROOT/infra/advisory-db

if [[ ${1:-} == refresh ]]; then
  src=${2:?usage: infra/advisories.sh refresh <advisory-db directory>}
  rm -rf "$DB" && mkdir -p "$DB"
  cp -r "$src/crates" "$src/rust" "$src/LICENSE.txt" "$DB/"
  cp "$src/SNAPSHOT.md" "$DB/" 2>/dev/null || date -u +"taken %Y-%m-%d from $src" >"$DB/SNAPSHOT.md"
  echo "[advisories] snapshot replaced from $src"
  exit 0
fi

TOOLS=$ROOT/.local/cargo-audit
AUDIT=$TOOLS/bin/cargo-audit
if [[ "$(cat "$TOOLS/.installed" 2>/dev/null)" != "$CARGO_AUDIT_VERSION" ]]; then
  echo "[advisories] building cargo-audit $CARGO_AUDIT_VERSION (once; ~7 min on 2 cores)" >&2
  cargo install -q cargo-audit --version "$CARGO_AUDIT_VERSION" --locked --no-default-features --root "$TOOLS"
  echo "$CARGO_AUDIT_VERSION" >"$TOOLS/.installed"
fi

ignores=()
while read -r id reason; do
  [[ -z $id || $id == \#* ]] && continue
  if [[ -z $reason ]]; then
    echo "[advisories] $id is ignored without a reason (infra/advisory-ignore.txt)" >&2
    exit 1
  fi
  ignores+=(--ignore "$id")
done <"$ROOT/infra/advisory-ignore.txt"

# --no-fetch: the vendored snapshot only; --stale: its age is stated, not an error;
# --no-yanked: yanked status needs the live crates.io index (cargo warns on it at update time).
audit() { "$AUDIT" audit --db "$DB" --no-fetch --stale --no-yanked --deny warnings "$@"; }

if audit --file "$ROOT/infra/policy/fixtures/vulnerable-lock/Cargo.lock" >/dev/null 2>&1; then
  echo "[advisories] the check passed a lockfile with a known advisory: it proves nothing" >&2
  exit 1
fi
echo "[advisories] $(grep -m1 -o 'commit `[0-9a-f]*` of [0-9-]*' "$DB/SNAPSHOT.md" || echo 'snapshot'): $(find "$DB/crates" "$DB/rust" -name '*.md' | wc -l) advisories (crates and the Rust toolchain)"
audit --file "$ROOT/Cargo.lock" "${ignores[@]}"
echo "[advisories] Cargo.lock: no unignored advisory"
