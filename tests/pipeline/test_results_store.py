"""`stab analyze --results`: a rerun analyses only what changed, and prints what a fresh
sweep prints; `stab summary` reads the store back, worst first."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3

import pytest

from stabilitycli.pipeline import batch
from tests.conftest import FIXTURES, run_fixture

NAMES = ("healthy-low-noise", "spike-persistent", "plateau", "insufficient-short")


def _runs(tmp_path):
    """Four logs and a per-rank folder (a run made of many files)."""
    root = tmp_path / "runs"
    root.mkdir()
    for name in NAMES:
        shutil.copy(run_fixture(name), root / f"{name}.jsonl")
    shutil.copytree(FIXTURES / "ranks" / "seed_64", root / "ranked")
    return root


def _sweep(cli, root, store, *extra):
    return cli("analyze", "-r", root, "--results", store, "--jobs", "1", *extra)


def _summary(cli, store, *extra) -> dict:
    result = cli("summary", store, "--format", "json", *extra)
    # the exit is the sweep's worst verdict (an unreadable run: 2), the document the same
    assert result.exit_code in (0, 1, 2), result.stderr
    return json.loads(result.stdout)


def test_a_second_sweep_reuses_every_run_and_prints_the_same(cli, tmp_path, analysed) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    first = _sweep(cli, root, store, "--format", "json")
    assert len(analysed) == len(NAMES) + 1
    analysed.clear()
    second = _sweep(cli, root, store, "--format", "json")
    assert analysed == []
    assert sorted(second.stdout.splitlines()) == sorted(first.stdout.splitlines())
    assert second.exit_code == first.exit_code == 1
    assert "5 of 5 runs reused" in second.stderr
    sweep = _summary(cli, store)["sweep"]
    assert (sweep["id"], sweep["analysed"], sweep["reused"]) == (2, 0, 5)


@pytest.mark.parametrize("fmt", ["terminal", "junit", "github", "concise", "markdown"])
def test_reused_runs_print_as_a_fresh_sweep_does(cli, tmp_path, analysed, fmt) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    fresh = cli("analyze", "-r", root, "--jobs", "1", "--format", fmt)
    _sweep(cli, root, store, "--format", fmt)
    analysed.clear()
    reused = _sweep(cli, root, store, "--format", fmt)
    assert analysed == []
    said = "stab: 5 of 5 runs reused from"
    # the terminal says how many were reused under its table; the CI formats print as before
    out = reused.stdout
    if fmt == "terminal":
        out, _, tail = out.rpartition(said)
        assert tail.strip().endswith("0 analysed")
    assert out == fresh.stdout
    assert reused.exit_code == fresh.exit_code


def test_a_run_whose_format_was_never_printed_is_analysed_for_it(cli, tmp_path, analysed) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    _sweep(cli, root, store, "--format", "json")
    analysed.clear()
    _sweep(cli, root, store, "--format", "github")  # no GitHub fragments stored yet
    assert len(analysed) == len(NAMES) + 1


def test_touching_one_log_or_one_file_of_a_run_folder_reanalyses_only_it(
    cli, tmp_path, analysed
) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    _sweep(cli, root, store)
    log = root / "plateau.jsonl"
    os.utime(log, ns=(log.stat().st_atime_ns, log.stat().st_mtime_ns + 1_000_000))
    rank_file = sorted((root / "ranked").iterdir())[3]
    rank_file.write_bytes(rank_file.read_bytes())  # same bytes, a new mtime
    os.utime(rank_file, ns=(0, rank_file.stat().st_mtime_ns + 1_000_000))
    analysed.clear()
    _sweep(cli, root, store)
    assert sorted(analysed) == sorted([str(log), str(root / "ranked")])


def test_changing_a_threshold_reanalyses_every_run(cli, tmp_path, analysed) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    _sweep(cli, root, store)
    analysed.clear()
    changed = _sweep(cli, root, store, "--set", "spike_sigma=4", "--format", "json")
    assert len(analysed) == len(NAMES) + 1
    assert all(json.loads(line)["settings"] for line in changed.stdout.splitlines())
    analysed.clear()
    _sweep(cli, root, store, "--set", "spike_sigma=4")
    assert analysed == []  # the same --set again: stored under those thresholds


def test_a_config_file_beside_the_runs_counts_as_a_threshold(cli, tmp_path, analysed) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    _sweep(cli, root, store)
    (root / "stab.toml").write_text("spike_sigma = 4\n")
    analysed.clear()
    _sweep(cli, root, store)
    assert len(analysed) == len(NAMES) + 1


def test_a_run_that_failed_stays_failed_without_being_read(cli, tmp_path, analysed) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    broken = root / "broken.jsonl"
    broken.write_text("{not json\n")
    first = _sweep(cli, root, store, "--format", "json")
    analysed.clear()
    second = _sweep(cli, root, store, "--format", "json")
    assert analysed == [] and second.exit_code == first.exit_code == 2
    assert second.stdout == first.stdout
    assert "broken.jsonl" in second.stderr and "line 1" in second.stderr
    shutil.copy(run_fixture("healthy-low-noise"), broken)  # fixed: its fingerprint changes
    third = _sweep(cli, root, store, "--format", "json")
    assert analysed == [str(broken)] and third.exit_code == 1


def _by_severity(runs: list[dict]) -> list[int]:
    order = {"error": 1, "warning": 2, "info": 3}
    return [0 if r["error"] else order[r["severity"]] for r in runs]


def test_summary_lists_runs_not_healthy_worst_first(cli, tmp_path) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    (root / "broken.jsonl").write_text("{not json\n")
    sweep = _sweep(cli, root, store, "--format", "json")
    verdicts = {
        (doc.get("source") or {}).get("path"): doc.get("verdict", {}).get("code", "unreadable")
        for doc in map(json.loads, sweep.stdout.splitlines())
    }
    summary = _summary(cli, store)
    assert summary["schema"] == "stab.summary/1"
    runs = summary["runs"]
    assert {r["location"] for r in runs} == {
        str(root / f"{n}.jsonl") for n in ("spike-persistent", "plateau", "insufficient-short")
    } | {str(root / "ranked"), str(root / "broken.jsonl")}
    assert summary["not_healthy"] == len(runs)
    assert _by_severity(runs) == sorted(_by_severity(runs))
    assert runs[0]["verdict"] == "unreadable" and "line 1" in runs[0]["error"]
    errors = [r for r in runs if r["severity"] == "error"]
    steps = [r["first_bad_step"] for r in errors]
    assert steps == sorted(steps)  # ties within a severity: the earliest bad step first
    assert all(verdicts.get(r["location"], r["verdict"]) == r["verdict"] for r in runs)
    every = _summary(cli, store, "--all")["runs"]
    assert len(every) == len(NAMES) + 2 and every[-1]["verdict"] == "healthy"
    terminal = cli("summary", store).stdout
    assert "5 of 6 runs not healthy" in terminal
    lines = terminal.splitlines()
    row = {
        v: next(i for i, line in enumerate(lines) if v in line) for v in ("unreadable", "plateau")
    }
    assert row["unreadable"] < row["plateau"]
    assert "healthy-low-noise" not in terminal


def test_summary_changed_after_a_verdict_change(cli, tmp_path) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    _sweep(cli, root, store)
    healthy = root / "healthy-low-noise.jsonl"
    shutil.copy(run_fixture("spike-persistent"), healthy)
    os.utime(healthy, ns=(0, healthy.stat().st_mtime_ns + 1_000_000))
    (root / "plateau.jsonl").unlink()
    shutil.copy(run_fixture("nan-fp32-origin"), root / "nan.jsonl")
    _sweep(cli, root, store)
    changes = _summary(cli, store, "--changed")["changed"]
    assert changes["previous_sweep"] == 1
    assert [
        (c["location"], c["previous_verdict"], c["verdict"]) for c in changes["verdict_changed"]
    ] == [(str(healthy), "healthy", "spike-persistent")]
    assert [(c["location"], c["verdict"]) for c in changes["new"]] == [
        (str(root / "nan.jsonl"), "nan")
    ]
    assert changes["gone"] == [{"location": str(root / "plateau.jsonl"), "verdict": "plateau"}]
    # piped: prose wraps at 100 columns
    terminal = " ".join(cli("summary", store, "--changed").stdout.split(" \n"))
    terminal = terminal.replace("\n", " ")
    assert "1 new, 1 gone, 1 verdicts changed" in terminal
    assert "gone: " in terminal and "plateau.jsonl (was plateau)" in terminal
    with sqlite3.connect(store) as conn:
        (old,) = conn.execute(
            "SELECT verdict FROM history WHERE location = ?", (str(healthy),)
        ).fetchone()
    assert old == "healthy"  # the replaced result is kept


def _other_database(path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")


def _newer_store(path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("PRAGMA application_id = 1398030658")  # 0x53544142, stab's mark
        conn.execute("PRAGMA user_version = 99")


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: p.write_text("lr: 3e-4\n" * 100), "not a stab results store"),
        (_other_database, "not a stab results store"),
        (_newer_store, "schema 99 is newer"),
    ],
    ids=["text", "other-sqlite", "newer-schema"],
)
def test_a_file_that_is_not_a_store_is_one_line_and_exit_2(cli, tmp_path, make, said) -> None:
    from typer.testing import CliRunner

    from stabilitycli.cli import app

    store = tmp_path / "results.db"
    make(store)
    before = store.read_bytes()
    root = _runs(tmp_path)
    runner = CliRunner()
    for args in (["summary", str(store)], ["analyze", "-r", str(root), "--results", str(store)]):
        result = runner.invoke(app, args)
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert result.exit_code == 2
        assert result.stderr.count("\n") == 1 and said in result.stderr, result.stderr
        assert "Traceback" not in result.output
    assert store.read_bytes() == before  # never written over


def test_summary_of_a_missing_store_is_exit_2(cli, tmp_path) -> None:
    result = cli("summary", tmp_path / "none.db")
    assert result.exit_code == 2 and "no such results store" in result.stderr
    assert not (tmp_path / "none.db").exists()


def test_every_summary_key_is_in_the_contract(cli, tmp_path) -> None:
    from tests.report.test_contract_doc import named, section

    root, store = _runs(tmp_path), tmp_path / "results.db"
    (root / "broken.jsonl").write_text("{not json\n")
    _sweep(cli, root, store)
    shutil.copy(run_fixture("spike-persistent"), root / "healthy-low-noise.jsonl")
    (root / "plateau.jsonl").unlink()
    shutil.copy(run_fixture("nan-fp32-origin"), root / "nan.jsonl")
    _sweep(cli, root, store)
    doc = _summary(cli, store, "--changed", "--all")
    changes = doc["changed"]
    assert changes["new"] and changes["gone"] and changes["verdict_changed"]
    found = (
        set(doc)
        | set(doc["sweep"])
        | {k for r in doc["runs"] for k in r}
        | set(changes)
        | {k for part in ("new", "gone", "verdict_changed") for r in changes[part] for k in r}
        | {doc["schema"], "unreadable"}
    )
    assert sorted(found - named(section("`stab summary`: `stab.summary/1`"))) == []


def test_a_rerun_does_not_sniff_the_logs_it_knows(cli, tmp_path, monkeypatch) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    (root / "notes.txt").write_text("lr sweep, seed 3\n")  # no run
    first = _sweep(cli, root, store, "--format", "json")
    sniffed: list[str] = []
    real = batch._is_run

    def spy(path):
        sniffed.append(path.name)
        return real(path)

    monkeypatch.setattr(batch, "_is_run", spy)
    second = _sweep(cli, root, store, "--format", "json")
    assert second.stdout == first.stdout
    assert sniffed == []  # nothing below the folder changed: the walk's list is reused
    shutil.copy(run_fixture("nan-fp32-origin"), root / "nan.jsonl")
    third = _sweep(cli, root, store, "--format", "json")
    assert len(third.stdout.splitlines()) == len(first.stdout.splitlines()) + 1
    # the tree changed: walked again, but the logs it knows are not sniffed again
    assert "nan.jsonl" in sniffed and "notes.txt" in sniffed
    assert not any(name.endswith(".jsonl") and name != "nan.jsonl" for name in sniffed)


def test_a_walk_is_not_reused_past_a_symlink(cli, tmp_path, monkeypatch) -> None:
    root, store = _runs(tmp_path), tmp_path / "results.db"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "linked").symlink_to(outside)
    _sweep(cli, root, store)
    shutil.copy(run_fixture("plateau"), outside / "late.jsonl")  # changes nothing below root
    result = _sweep(cli, root, store, "--format", "json")
    paths = [json.loads(line)["source"]["path"] for line in result.stdout.splitlines()]
    assert str(root / "linked" / "late.jsonl") in paths
