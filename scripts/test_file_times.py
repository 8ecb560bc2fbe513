"""Sum a pytest `--durations=0` listing per test file, longest first.

    .venv/bin/python -m pytest -n auto --durations=0 > durations.log
    .venv/bin/python scripts/test_file_times.py durations.log [--top 25]

With `--dist loadfile` a file is the unit a worker takes, so the per-file sums are what
the longest-first order in tests/conftest.py (LONGEST_FILES) is kept from: refresh that
list from this output when a file's time changes a lot.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

# "12.34s call     tests/x/test_y.py::test_z[param]" (setup and teardown lines too)
LINE = re.compile(
    r"^\s*(?P<seconds>\d+(?:\.\d+)?)s\s+(?:setup|call|teardown)\s+(?P<file>[^:\s]+)::"
)


def per_file(text: str) -> dict[str, float]:
    seconds_by_file: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            seconds_by_file[match["file"]] += float(match["seconds"])
    return dict(seconds_by_file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="pytest output with --durations=0")
    parser.add_argument("--top", type=int, default=30, help="files to print (default 30)")
    args = parser.parse_args()
    seconds_by_file = per_file(args.log.read_text(errors="replace"))
    total_s = sum(seconds_by_file.values())
    ranked = sorted(seconds_by_file.items(), key=lambda item: -item[1])
    for name, seconds in ranked[: args.top]:
        print(f"{seconds:8.1f} s  {100 * seconds / total_s:5.1f}%  {name}")
    print(f"{total_s:8.1f} s  in {len(ranked)} files (test-seconds summed over workers)")


if __name__ == "__main__":
    main()
