"""The longest-first order of tests/conftest.py names files that exist: a renamed or deleted
file left in LONGEST_FILES would silently drop out of the order."""

from __future__ import annotations

from tests.conftest import LONGEST_FILES, ROOT


def test_every_file_of_the_longest_first_order_exists() -> None:
    missing = [name for name in LONGEST_FILES if not (ROOT / name).is_file()]
    assert not missing, f"not test files any more (update LONGEST_FILES): {missing}"
    assert len(set(LONGEST_FILES)) == len(LONGEST_FILES)
