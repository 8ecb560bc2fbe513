"""Many runs at once: discovery, parallel analysis, summary, JSON Lines, exit status."""

from __future__ import annotations

import json
import shutil

import pytest

from stabilitycli.pipeline import batch
from stabilitycli.pipeline.batch import BatchSettings, analyze_many, discover, exit_status
from tests.conftest import FIXTURES, RUNS, all_runs, expected, run_fixture


def _tree(tmp_path):
    """A directory of runs in the shapes people keep them in, with non-run files beside them."""
    root = tmp_path / "runs"
    (root / "a").mkdir(parents=True)
    shutil.copy(run_fixture("spike-persistent"), root / "a" / "run.jsonl")
    (root / "a" / "notes.txt").write_text("lr sweep, seed 3\n")
    (root / "a" / "config.yaml").write_text("lr: 3e-4\n")
    # a README quoting DeepSpeed output reads like a log to the text sniffers: walks skip documents
    (root / "a" / "README.md").write_text(
        "[Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]\n"
    )
    (root / "deep" / "b").mkdir(parents=True)
    shutil.copy(run_fixture("nan-tokens-gz"), root / "deep" / "b" / "run.jsonl.gz")
    shutil.copytree(
        FIXTURES / "ranks" / "seed_64", root / "ranked"
    )  # a per-rank directory: one run
    shutil.copytree(
        FIXTURES / "tensorboard" / "spike", root / "tb" / "spike"
    )  # a TensorBoard log dir
    (root / ".hidden").mkdir()
    shutil.copy(run_fixture("healthy-low-noise"), root / ".hidden" / "run.jsonl")
    return root


def test_recursive_discovery_counts_run_directories_once(tmp_path) -> None:
    root = _tree(tmp_path)
    found = discover([str(root)], recursive=True)
    assert found == [
        str(root / "a" / "run.jsonl"),
        str(root / "deep" / "b" / "run.jsonl.gz"),
        str(root / "ranked"),
        str(root / "tb" / "spike"),
    ]


def test_without_recursive_every_target_is_one_run(tmp_path) -> None:
    root = _tree(tmp_path)
    assert discover([str(root), str(root)], recursive=False) == [str(root)]


def test_parallel_results_equal_single_run_results(tmp_path) -> None:
    from stabilitycli.pipeline import run as pipeline

    names = ["spike-persistent", "healthy-low-noise", "nan-fp32-origin"]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    paths = [str(run_fixture(n)) for n in names[:2]] + [str(broken)] + [str(run_fixture(names[2]))]
    results = analyze_many(paths, BatchSettings(), jobs=2)
    assert [r.path for r in results] == paths  # input order, whatever order the workers finished in
    assert [r.ok for r in results] == [True, True, False, True]
    assert "broken.jsonl" in results[2].error and "line 1" in results[2].error
    for r in (results[0], results[1], results[3]):
        assert r.doc == json.loads(json.dumps(pipeline.analyze(r.path).to_dict()))
    assert exit_status(results) == 2  # the broken run is the worst


def test_exit_status() -> None:
    ok = batch.RunResult("a", doc={}, worst=None)
    warn = batch.RunResult("b", doc={}, worst=1)
    err = batch.RunResult("c", doc={}, worst=2)
    bad = batch.RunResult("d", error="d: no such file or directory")
    assert exit_status([ok, bad]) == 2  # a run that was not read never passes
    assert exit_status([ok, warn]) == 0 and exit_status([ok, warn], "warning") == 1
    assert exit_status([warn, err]) == 1 and exit_status([warn, err, bad]) == 2
    assert exit_status([bad, bad]) == 2


def test_every_fixture_through_the_cli_in_parallel(cli) -> None:
    result = cli("analyze", "--recursive", RUNS, "--format", "json", "--jobs", "2")
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(docs) == len(all_runs())
    for doc in docs:
        name = doc["source"]["run"]
        assert doc["schema"] == "stab.analysis/1"
        assert doc["verdict"]["code"] == expected(name)["verdict"], name
    assert result.exit_code == 1
    assert result.stderr == ""  # not a TTY: no progress bar


def test_summary_table_and_unreadable_run(cli, tmp_path) -> None:
    missing = tmp_path / "gone.jsonl"
    result = cli(
        "analyze", run_fixture("spike-long-tail"), run_fixture("healthy-low-noise"), missing
    )
    assert result.exit_code == 2  # the unreadable run is the worst; the others are reported
    out = result.stdout
    assert (
        "stab: 3 runs" in out
        and "spike-recoverable" in out
        and "long-tail-token" in out
        and "900" in out
    )
    assert "unreadable" in out
    assert "gone.jsonl: no such file or directory" in result.stderr


def test_all_unreadable_is_exit_2(cli, tmp_path) -> None:
    result = cli("analyze", tmp_path / "x.jsonl", tmp_path / "y.jsonl", "--format", "json")
    assert result.exit_code == 2
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["schema"] for r in records] == ["stab.error/1", "stab.error/1"]


@pytest.mark.slow  # ~1.5 s: three batch runs, each starting a process pool
def test_batch_ci_formats(cli, tmp_path) -> None:
    import xml.etree.ElementTree as ET

    paths = [
        run_fixture("spike-persistent"),
        run_fixture("healthy-low-noise"),
        tmp_path / "gone.jsonl",
    ]
    junit = ET.fromstring(cli("analyze", *paths, "--format", "junit").stdout)
    suites = junit.findall("testsuite")
    assert len(suites) == 3 and suites[2].get("errors") == "1"
    github = cli("analyze", *paths, "--format", "github").stdout.splitlines()
    assert github[-1].startswith("::error file=") and "unreadable" in github[-1]
    md = cli("analyze", *paths, "--format", "markdown").stdout
    assert md.startswith("## stab: 3 runs") and md.count("### ") == 3


def test_bad_rule_code_is_a_usage_error_not_n_failures(cli) -> None:
    result = cli(
        "analyze",
        run_fixture("spike-long-tail"),
        run_fixture("healthy-low-noise"),
        "--select",
        "nope",
    )
    assert result.exit_code == 2 and "nope" in result.stderr


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_jobs_do_not_change_the_answer(cli, jobs) -> None:
    paths = [run_fixture(n) for n in ("spike-lr-jump", "plateau", "loss-scale-static")]
    lines = cli("analyze", *paths, "--format", "json", "--jobs", jobs).stdout.splitlines()
    assert [json.loads(line)["verdict"]["code"] for line in lines] == [
        "spike-recoverable",
        "plateau",
        "loss-scale-static",
    ]
