"""One shape for every command (#37): the run path positional, default output files, exit
statuses by --fail-on, one vocabulary, errors that list what is allowed."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES, run_fixture

RANKS = FIXTURES / "ranks"


def test_ranks_takes_the_path_as_an_argument(cli) -> None:
    out = cli("ranks", RANKS / "seed_64", "-f", "json")
    assert out.exit_code == 1 and out.stderr == ""
    assert json.loads(out.stdout)["outliers"][0]["rank"] == 41


def test_ranks_run_option_is_a_deprecated_alias(cli) -> None:
    new = cli("ranks", RANKS / "seed_64", "-f", "json")
    old = cli("ranks", "--run", RANKS / "seed_64", "-f", "json")
    assert old.exit_code == new.exit_code and old.stdout == new.stdout
    assert "deprecated" in old.stderr and "stab ranks PATH" in old.stderr
    assert "--run" not in cli("ranks", "--help").stdout  # hidden


@pytest.mark.parametrize("args", [(), ("--run", RANKS / "pair_2.jsonl", RANKS / "pair_2.jsonl")])
def test_ranks_needs_the_path_once(cli, args) -> None:
    out = cli("ranks", *args)
    assert out.exit_code == 2 and "stab ranks PATH" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_ranks_terminal_and_json_say_mean_shift(cli) -> None:
    text = cli("ranks", RANKS / "seed_64").stdout
    doc = json.loads(cli("ranks", RANKS / "seed_64", "-f", "json").stdout)
    assert "mean shift" in text and "mean effect" not in text
    assert "mean_shift" in doc["outliers"][0]


def test_postmortem_writes_beside_the_current_directory_by_default(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = cli("postmortem", run_fixture("spike-persistent"))
    written = tmp_path / "spike-persistent.postmortem.md"
    assert "post-mortem" in written.read_text().splitlines()[0]
    assert out.stdout == "" and "wrote spike-persistent.postmortem.md" in out.stderr
    assert out.exit_code == 1  # a persistent spike is an error, as `stab analyze` exits
    piped = cli("postmortem", run_fixture("spike-persistent"), "-o", "-")
    assert piped.stdout == written.read_text() and piped.exit_code == 1


def test_report_writes_beside_the_current_directory_by_default(cli, tmp_path, monkeypatch):
    pytest.importorskip("plotly")
    monkeypatch.chdir(tmp_path)
    out = cli("report", run_fixture("healthy-low-noise"), "--js", "cdn")
    assert out.exit_code == 0, out.stderr
    assert "<html" in (tmp_path / "healthy-low-noise.stab.html").read_text()
    piped = cli("report", run_fixture("healthy-low-noise"), "--js", "cdn", "-o", "-")
    assert "<html" in piped.stdout and piped.exit_code == 0


@pytest.mark.parametrize(
    "fixture, fail_on, status",
    [
        ("spike-persistent", "error", 1),
        ("spike-long-tail", "error", 0),
        ("spike-long-tail", "warning", 1),
        ("healthy-low-noise", "error", 0),
    ],
)
def test_postmortem_exits_as_analyze_under_fail_on(cli, fixture, fail_on, status) -> None:
    analyzed = cli("analyze", run_fixture(fixture), "--fail-on", fail_on, "-q")
    written = cli("postmortem", run_fixture(fixture), "--fail-on", fail_on, "-o", "-")
    assert written.exit_code == analyzed.exit_code == status


def test_summary_exits_by_the_worst_verdict_of_the_sweep(cli, tmp_path) -> None:
    store = tmp_path / "results.db"
    runs = [run_fixture("healthy-low-noise"), run_fixture("spike-long-tail")]
    cli("analyze", *runs, "--results", store, "-f", "json")
    assert cli("summary", store).exit_code == 0  # the spike recovered: a warning
    assert cli("summary", store, "--fail-on", "warning").exit_code == 1
    cli("analyze", *runs, run_fixture("spike-persistent"), "--results", store, "-f", "json")
    assert cli("summary", store).exit_code == 1
    assert cli("summary", store, "-f", "json").exit_code == 1


def test_an_expect_error_lists_the_aggregates(cli) -> None:
    out = cli("compare", run_fixture("plateau"), "--expect", "median(loss)[0:10]<3")
    assert out.exit_code == 2
    assert "'median' is not an aggregate" in out.stderr
    assert "max, min, mean, last" in out.stderr
