"""Names that tell runs apart (#37): batch and summary tables name each run by its path
below the swept root, and `analyze` of a folder of runs suggests `-r`."""

from __future__ import annotations

import json
from pathlib import Path

from stabilitycli.pipeline.batch import relative_names
from tests.conftest import FIXTURES, run_fixture

RULES = FIXTURES / "rules"


def test_relative_names_drop_only_the_folders_every_run_shares() -> None:
    assert relative_names(["s/a/fires/run.jsonl", "s/a/quiet/run.jsonl", "s/b/fires"]) == [
        "a/fires/run.jsonl",
        "a/quiet/run.jsonl",
        "b/fires",
    ]
    assert relative_names(["s3://b/runs/1/m.jsonl", "s3://b/runs/2/m.jsonl"]) == [
        "1/m.jsonl",
        "2/m.jsonl",
    ]
    assert relative_names(["only/one/run.jsonl"]) == ["only/one/run.jsonl"]


def _table_names(stdout: str) -> list[str]:
    """The cell of each table row that holds a path."""
    rows = [line.split("│") for line in stdout.splitlines() if line.startswith("│")]
    return [next(c.strip() for c in cells if "/" in c) for cells in rows]


def test_a_recursive_sweep_names_every_run_apart(cli) -> None:
    out = cli("analyze", "-r", RULES)
    names = _table_names(out.stdout)
    # one row per run file under the rules' fires/quiet folders
    logs = [p for p in Path(RULES).rglob("run.*") if p.is_file()]
    assert len(names) == len(set(names)) == len(logs)
    assert "spike/fires/run.jsonl" in names and "fires" not in names
    # a row may be wider than 100 columns (a table is as wide as its content), never cut
    assert all(line.rstrip().endswith("│") for line in out.stdout.splitlines() if "│" in line)


def test_markdown_batch_names_runs_by_their_path_below_the_root(cli) -> None:
    out = cli("analyze", "-r", RULES / "spike", RULES / "nan", "-f", "markdown")
    assert "| spike/fires/run.jsonl |" in out.stdout and "| nan/quiet/run.jsonl |" in out.stdout


def test_summary_names_runs_by_their_path_below_the_root(cli, tmp_path) -> None:
    store = tmp_path / "results.db"
    cli("analyze", "-r", RULES / "spike", RULES / "nan", "--results", store, "-f", "json")
    out = cli("summary", store, "--all")
    names = _table_names(out.stdout)
    assert "spike/fires/run.jsonl" in names and "nan/fires/run.jsonl" in names
    doc = json.loads(cli("summary", store, "-f", "json").stdout)
    assert all(r["location"].startswith(str(RULES)) for r in doc["runs"])  # JSON: whole


def test_a_folder_of_run_folders_suggests_recursive(cli) -> None:
    out = cli("analyze", RULES)
    assert out.exit_code == 2
    assert f"stab analyze -r {RULES}" in out.stderr
    assert run_fixture("plateau").exists()
