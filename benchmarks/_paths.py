"""Paths as a committed report may print them: relative to the checkout, never this machine's.

A report in docs/ is read on other machines; `/work/main/...` or `/tmp/s30/...` there
says where one session happened to run, not how to rerun it. Paths inside the
checkout become relative to it, the shared data beside it `../shared`, the
temporary folder `$TMPDIR` and the home folder `~`.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def portable(text: str) -> str:
    """`text` with every absolute path of this machine written portably."""
    replacements = [
        (str(REPO_ROOT), "."),
        (str(REPO_ROOT.parent / "shared"), "../shared"),
        (tempfile.gettempdir().rstrip(os.sep), "$TMPDIR"),
        (str(Path.home()), "~"),
    ]
    for absolute, written in replacements:
        # whole path components only: /tmp must not rewrite /tmpfoo
        text = re.sub(re.escape(absolute) + r"(?=[/\s`'\"),;:]|$)", written, text)
    return text
