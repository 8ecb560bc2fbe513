"""Count the files that name each finding code as a string literal.

A finding kind is one unit when its code is written in one place (its rule's
module) and that module's tests; every other reader asks the kind. This prints,
per code, the files under `stabilitycli/` whose string constants equal the code,
so a code that leaks into a table somewhere shows up by name.

    .venv/bin/python scripts/code_literals.py [--all]
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def finding_codes() -> set[str]:
    sys.path.insert(0, str(ROOT))
    from stabilitycli.detect.registry import load_rules

    return {code for rule in load_rules().values() for code in rule.emits}


def files_naming(codes: set[str]) -> dict[str, set[str]]:
    named: dict[str, set[str]] = defaultdict(set)
    for path in sorted((ROOT / "stabilitycli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in codes
            ):
                named[node.value].add(str(path.relative_to(ROOT)))
    return named


def main() -> int:
    codes = finding_codes()
    named = files_naming(codes)
    show_all = "--all" in sys.argv
    for code in sorted(codes, key=lambda c: (-len(named.get(c, ())), c)):
        files = sorted(named.get(code, ()))
        line = f"{len(files):3d}  {code}"
        print(line + (": " + ", ".join(files) if show_all or len(files) > 1 else ""))
    many = sum(1 for c in codes if len(named.get(c, ())) > 1)
    print(f"{len(codes)} finding codes; {many} named as a literal in more than one file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
