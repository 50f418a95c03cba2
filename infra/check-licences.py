"""Licence check of every crate the build uses (offline: `cargo metadata` of the lock file).

Each dependency's SPDX expression must be satisfiable by the allowed licences (permissive ones,
compatible with this MIT project). An advisory check (RustSec) needs its database from GitHub,
which the build machines cannot reach: run `cargo deny check advisories` where they can.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

ALLOWED = {
    "MIT", "MIT-0", "Apache-2.0", "Apache-2.0 WITH LLVM-exception", "BSD-2-Clause", "BSD-3-Clause",
    "ISC", "Zlib", "Unicode-3.0", "Unicode-DFS-2016", "CC0-1.0", "Unlicense", "BSL-1.0", "0BSD",
    "CDLA-Permissive-2.0", "OpenSSL",
}


def satisfied(expression: str) -> bool:
    """`A OR B` needs one side, `A AND B` both; parentheses group; `/` is the old `OR`."""
    text = expression.replace("/", " OR ")
    # Innermost groups first.
    while "(" in text:
        text = re.sub(r"\(([^()]*)\)", lambda m: "MIT" if satisfied(m.group(1)) else "NONE", text)
    return any(
        all(term.strip() in ALLOWED for term in re.split(r"\s+AND\s+", alternative))
        for alternative in re.split(r"\s+OR\s+", text)
    )


def main() -> int:
    metadata = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        check=True, capture_output=True, text=True,
    ).stdout)
    workspace = set(metadata["workspace_members"])
    bad = []
    for package in metadata["packages"]:
        if package["id"] in workspace:
            continue
        licence = package.get("license")
        if not licence or not satisfied(licence):
            bad.append(f"{package['name']} {package['version']}: {licence or 'no licence declared'}")
    for line in bad:
        print(f"licence not allowed: {line}", file=sys.stderr)
    print(f"{len(metadata['packages']) - len(workspace)} dependencies checked, {len(bad)} not allowed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
