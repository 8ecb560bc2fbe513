"""A results store edited by hand or damaged (issue 33): a stored document or walk that is
not JSON is a cache miss (the run is analysed again, and the entry replaced), never an
internal error."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from tests.conftest import run_fixture

NAMES = ("spike-persistent", "plateau")


def _sweep(cli, root, store):
    return cli("analyze", "-r", root, "--results", store, "--jobs", "1", "--format", "json")


@pytest.mark.parametrize(
    ("table", "column", "damage"),
    [
        ("runs", "document", "not json"),
        ("runs", "document", "[1, 2]"),
        ("runs", "document", "[" * 100_000),
        ("walks", "runs", "{broken"),
        ("walks", "runs", '{"a": 1}'),
    ],
)
def test_a_damaged_stored_entry_is_analysed_again(
    cli, tmp_path, analysed, table, column, damage
) -> None:
    root, store = tmp_path / "runs", tmp_path / "results.db"
    root.mkdir()
    for name in NAMES:
        shutil.copy(run_fixture(name), root / f"{name}.jsonl")
    first = _sweep(cli, root, store)
    with sqlite3.connect(store) as conn:
        conn.execute(f"UPDATE {table} SET {column} = ?", (damage,))
    conn.close()
    analysed.clear()
    second = _sweep(cli, root, store)
    assert "internal error" not in second.stderr
    assert second.exit_code == first.exit_code
    assert sorted(second.stdout.splitlines()) == sorted(first.stdout.splitlines())
    if table == "runs":
        assert sorted(analysed) == sorted(str(root / f"{n}.jsonl") for n in NAMES)
    analysed.clear()
    _sweep(cli, root, store)
    assert analysed == []  # the damaged entries were replaced
