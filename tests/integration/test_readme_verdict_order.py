"""The README names the verdicts in the order the tree picks them: that sentence is the
only place a user reads the order, so it follows `VERDICT_ORDER`."""

from __future__ import annotations

import re

from stabilitycli.classify.questions import VERDICT_ORDER
from tests.conftest import ROOT


def test_readme_lists_the_verdicts_in_the_tree_order() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    sentence = re.search(r"problem in this order: (.*?)\(or `insufficient-data`", text)
    assert sentence, "README: the verdict-order sentence is gone"
    named = re.findall(r"`([a-z0-9-]+)`", sentence.group(1))
    assert named == [*VERDICT_ORDER, "healthy"]
