"""Folders of runs: which folders continue a run (a resume) and which are runs of their own.

Lightning cases read `fixtures/lightning/versions`, written by the real Lightning CSVLogger
(see tests/ingest/make_lightning_fixtures.py); TensorBoard cases are written here with
tensorboardX's SummaryWriter, in the layouts the Hugging Face Trainer and Accelerate leave.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from stabilitycli import ingest
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import resume
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.pipeline import batch
from tests.conftest import FIXTURES

VERSIONS = FIXTURES / "lightning" / "versions" / "lightning_logs"


def _accounted(source) -> None:
    assert source.rows_read == source.rows_used + source.rows_rejected + source.rows_rewritten


# --- the rule ---------------------------------------------------------------------------------


def test_rule_resume_inside_the_range_new_run_from_the_beginning_lost_start_alone():
    parts = [
        resume.Part("a", 5, 700, 5),  # HF: first logging step 5
        resume.Part("b", 605, 1000, 5),  # resumed from checkpoint-600
        resume.Part("c", 5, 300, 5),  # started again from scratch
        resume.Part("d", 305, 400, 5),  # resumed c right after its end
        resume.Part("e", 5000, 5100, 5),  # starts after 0, nothing here to resume
    ]
    groups = resume.chain(parts)
    assert [g.names for g in groups] == [["a", "b"], ["c", "d"], ["e"]]
    notes = " | ".join(resume.describe(groups))
    assert "b resumes a: its first step 605 is inside a's steps 5–700" in notes
    assert "d resumes c: it starts at step 305, right after c's steps 5–300" in notes
    assert "c: new run(s)" in notes and "e: read as run(s) of their own" in notes


# --- Lightning version_N ------------------------------------------------------------------------


def test_lightning_parent_reads_the_latest_run_and_says_which_versions_resume():
    run = ingest.read(VERSIONS)
    src = run.source
    assert src.restarts == []  # version_3 alone: a new run, not a resume of version_2
    assert run.frame["step"].to_list()[0] == 0 and src.last_step == 7
    assert src.run == "versions/version_3"
    notes = " ".join(src.notes)
    assert "version_1 resumes version_0: its first step 8 is inside version_0's steps 0–11" in notes
    assert "version_2, version_3: new run(s), not resumes" in notes
    assert any(
        "3 separate runs in 4 version folders" in w and f"stab analyze -r {VERSIONS}" in w
        for w in src.warnings
    )
    _accounted(src)


def test_lightning_version_folder_is_read_with_the_version_it_resumes():
    run = ingest.read(VERSIONS / "version_1")
    src = run.source
    assert [(r.resumed_from_step, r.last_step_before) for r in src.restarts] == [(8, 11)]
    assert src.first_step == 0 and src.last_step == 23
    assert any("version_1 resumes version_0" in n for n in src.notes)
    # version_0's steps 8-11 were rewritten by the resume: set aside, not rejected
    assert src.rows_rejected == 0 and src.rows_rewritten == 5
    assert run.abandoned["step"].to_list() == [8, 9, 11]
    _accounted(src)


def test_lightning_version_started_from_scratch_is_read_alone():
    run = ingest.read(VERSIONS / "version_2")
    assert run.source.restarts == [] and run.source.first_step == 0
    assert not any("resumes" in n for n in run.source.notes)


def _thirteen_versions(tmp_path: Path) -> Path:
    """The issue's lightning_logs: one real resume, then new runs from scratch."""
    logs = tmp_path / "lightning_logs"
    shutil.copytree(VERSIONS / "version_0", logs / "version_0")
    shutil.copytree(VERSIONS / "version_1", logs / "version_1")
    for number in range(2, 13):
        shutil.copytree(VERSIONS / "version_2", logs / f"version_{number}")
    return logs


def test_thirteen_versions_are_twelve_runs_and_no_restart(tmp_path: Path):
    logs = _thirteen_versions(tmp_path)
    run = ingest.read(logs)
    assert run.source.restarts == []
    assert not any("did not restore" in w for w in run.source.warnings)
    assert any("12 separate runs in 13 version folders" in w for w in run.source.warnings)
    offered = batch.discover([str(tmp_path)], recursive=True)
    assert offered == [str(logs / "version_1")] + [str(logs / f"version_{n}") for n in range(2, 13)]


def test_versions_of_one_run_stay_one_run_in_batch_mode():
    folder = FIXTURES / "lightning" / "lightning_logs"  # version_1 resumes version_0
    assert batch.discover([str(folder)], recursive=True) == [str(folder)]


def test_batch_analysis_of_the_versions_counts_no_rewritten_row_as_rejected():
    results = batch.analyze_many(
        batch.discover([str(VERSIONS)], recursive=True), batch.BatchSettings(), jobs=1
    )
    assert [r.ok for r in results] == [True, True, True]
    resumed = results[0].doc["source"]
    assert resumed["restarts"] and resumed["rows_rejected"] == 0 and resumed["rows_rewritten"] == 5
    assert resumed["rows"] == resumed["rows_used"] + resumed["rows_rewritten"]


def _frame_steps(run) -> list[int]:
    return run.frame.select(pl.col("step")).to_series().to_list()


# --- TensorBoard run folders (tensorboardX's SummaryWriter) -------------------------------------


def _loss(step: int) -> float:
    return 2.0 + 2.0 * 0.999**step + 0.01 * (step % 7)


def _write_tb(folder: Path, steps, hparams: dict | None = None, name: str | None = None) -> Path:
    """Scalars the way the HF Trainer's TensorBoard callback logs them, plus an optional
    config logged like Accelerate's `init_trackers` (`add_hparams` into a nested folder)."""
    tensorboardx = pytest.importorskip("tensorboardX")
    writer = tensorboardx.SummaryWriter(str(folder))
    if hparams is not None:
        writer.add_hparams(hparams, {}, name=name)
    for step in steps:
        writer.add_scalar("train/loss", _loss(step), step)
        writer.add_scalar("train/learning_rate", 1e-4, step)
    writer.close()
    return folder


def _hf_resumed(root: Path) -> Path:
    """A Trainer run killed at step 700 and resumed from checkpoint-600: two run folders."""
    runs = root / "out" / "runs"
    _write_tb(runs / "Jan01_00-00-00_host", range(5, 701, 5))
    _write_tb(runs / "Jan01_01-00-00_host", range(605, 1001, 5))
    return runs


def test_hf_trainer_resume_in_two_run_folders_is_one_run_with_a_restart(tmp_path: Path):
    runs = _hf_resumed(tmp_path)
    run = ingest.read(runs)
    src = run.source
    assert [(r.resumed_from_step, r.last_step_before) for r in src.restarts] == [(605, 700)]
    assert src.first_step == 5 and src.last_step == 1000
    assert run.frame.height == 200 and src.rows_rewritten == 20 and src.rows_rejected == 0
    assert any("Jan01_01-00-00_host resumes Jan01_00-00-00_host" in n for n in src.notes)
    _accounted(src)
    # the resumed folder alone is read with the folder it resumes; batch mode offers one run
    alone = ingest.read(runs / "Jan01_01-00-00_host")
    assert alone.frame["step"].to_list() == run.frame["step"].to_list()
    assert batch.discover([str(tmp_path)], recursive=True) == [str(runs)]


def test_tensorboard_runs_started_from_scratch_stay_separate_runs(tmp_path: Path):
    runs = _hf_resumed(tmp_path)
    _write_tb(runs / "Jan02_00-00-00_host", range(5, 301, 5))  # a new run, from step 5 again
    with pytest.raises(StabInputError) as err:
        ingest.read(runs)
    message = str(err.value)
    assert "\n" not in message and f"stab analyze {runs} --run FOLDER" in message
    assert "Jan01_01-00-00_host (resumes Jan01_00-00-00_host)" in message
    # the command the message offers works for both runs it names
    resumed = ingest.read(runs, ReadOptions(run="Jan01_01-00-00_host"))
    assert len(resumed.source.restarts) == 1 and resumed.source.last_step == 1000
    fresh = ingest.read(runs, ReadOptions(run="Jan02_00-00-00_host"))
    assert fresh.source.restarts == [] and fresh.source.last_step == 300
    offered = batch.discover([str(runs)], recursive=True)
    assert offered == [str(runs / "Jan01_01-00-00_host"), str(runs / "Jan02_00-00-00_host")]


def test_accelerate_config_folder_is_not_a_run(tmp_path: Path):
    out = tmp_path / "out"
    _write_tb(
        out / "char-gpt",
        range(0, 200),
        hparams={"lr": 3e-4, "mixed_precision": "bf16"},
        name="1796112292.0091643",
    )
    assert (out / "char-gpt" / "1796112292.0091643").is_dir()
    for target, options in (
        (out / "char-gpt", ReadOptions()),
        (out, ReadOptions()),
        (out, ReadOptions(run="char-gpt")),
    ):
        run = ingest.read(target, options)
        assert run.frame.height == 200 and run.source.run == "char-gpt"
        # the config is read for what it says: the dtype
        assert run.source.dtype == "bf16"
        assert any("hold no scalars" in n for n in run.source.notes)
    assert batch.discover([str(out)], recursive=True) == [str(out / "char-gpt")]


def test_event_file_with_only_hparams_is_not_a_run(tmp_path: Path):
    tensorboardx = pytest.importorskip("tensorboardX")
    folder = tmp_path / "config"
    with tensorboardx.SummaryWriter(str(folder)) as writer:
        writer.add_hparams({"lr": 0.1}, {}, name=".")
        writer.add_text("note", "only text here")
    with pytest.raises(StabInputError, match=r"no scalar summaries.*not a training run"):
        ingest.read(folder)
    assert batch.discover([str(tmp_path)], recursive=True) == []


# --- folders of per-rank files in any format ----------------------------------------------------


def _ddp_csv(folder: Path, ranks: int = 4, steps: int = 300, bad_rank: int = 2) -> Path:
    """What a DDP callback writing one CSV per process leaves: rank_0.csv ... rank_3.csv,
    rank 2's loss doubling from step 150."""
    import csv
    import math

    folder.mkdir(parents=True)
    for rank in range(ranks):
        with open(folder / f"rank_{rank}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["step", "train_loss", "grad_norm", "lr"])
            for step in range(steps):
                loss = 2 + 2 * math.exp(-step / 100) + 0.01 * math.sin(step + rank)
                if rank == bad_rank and step >= 150:
                    loss *= 2
                writer.writerow([step, repr(loss), 1.0, 1e-4])
    return folder


def test_per_rank_csv_files_are_one_per_rank_run_in_analyze_and_ranks(tmp_path: Path, cli):
    folder = _ddp_csv(tmp_path / "ddp")
    run = ingest.read(folder)
    assert run.source.format == "rank_dir" and run.source.ranks == 4
    assert run.frame.height == 1200 and run.source.rows_read == 1200
    _accounted(run.source)
    analyzed = cli("analyze", folder, "--format", "json")
    assert analyzed.exit_code == 1 and '"rank-outlier"' in analyzed.output
    ranks = cli("ranks", folder, "--format", "json")
    assert ranks.exit_code == 1 and '"rank": 2' in ranks.output
    # the same data as per-rank JSONL gives the same frame
    jsonl = tmp_path / "jsonl"
    jsonl.mkdir()
    for rank in range(4):
        table = pl.read_csv(folder / f"rank_{rank}.csv")
        table.write_ndjson(jsonl / f"rank_{rank}.jsonl")
    assert ingest.read(jsonl).frame.equals(run.frame)


def test_per_rank_text_logs_and_rank_folders(tmp_path: Path):
    line = (
        " iteration {it:8d}/     100 | consumed samples: {s:12d} | learning rate: 1.000000E-04 |"
        " global batch size:     8 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.000 |"
        " number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    for rank in range(2):
        (tmp_path / "logs").mkdir(exist_ok=True)
        text = "".join(line.format(it=i, s=8 * i, loss=3.0 - 0.01 * i + rank) for i in range(1, 41))
        (tmp_path / "logs" / f"rank_{rank}.log").write_text(text)
        sub = tmp_path / "tables" / f"rank_{rank}"
        sub.mkdir(parents=True)
        pl.DataFrame({"step": list(range(30)), "loss": [2.0 + rank] * 30}).write_parquet(
            sub / "metrics.parquet"
        )
    logs = ingest.read(tmp_path / "logs")
    assert logs.source.ranks == 2 and logs.source.last_step == 40
    assert logs.frame.filter(pl.col("rank") == 1)["loss"][0] == pytest.approx(3.99)
    tables = ingest.read(tmp_path / "tables")
    assert tables.source.ranks == 2 and tables.frame.height == 60


def test_a_bad_line_in_one_rank_file_is_named_with_the_file(tmp_path: Path):
    folder = _ddp_csv(tmp_path / "ddp", ranks=2, steps=30)
    text = (folder / "rank_1.csv").read_text().splitlines()
    text[5] = "4,oops,1.0,1e-4"
    (folder / "rank_1.csv").write_text("\n".join(text) + "\n")
    run = ingest.read(folder)
    assert run.source.rows_rejected == 1
    assert run.source.rejections[0].line == 6 and "rank_1.csv" in run.source.rejections[0].reason
    _accounted(run.source)


# --- a folder that holds one log -----------------------------------------------------------------


def test_docs_ci_example_runs_latest_as_junit(tmp_path: Path, cli, monkeypatch):
    """`stab analyze runs/latest --format junit`, exactly as docs/ci.md writes it."""
    latest = tmp_path / "runs" / "latest"
    latest.mkdir(parents=True)
    source = next((FIXTURES / "runs" / "healthy-low-noise").glob("run.jsonl*"))
    (latest / "metrics.jsonl").write_bytes(source.read_bytes())
    monkeypatch.chdir(tmp_path)
    assert (
        "stab analyze runs/latest --format junit"
        in (FIXTURES.parent / "docs" / "ci.md").read_text()
    )
    result = cli("analyze", "runs/latest", "--format", "junit")
    assert result.exit_code == 0 and result.output.startswith("<?xml")
    assert 'failures="0"' in result.output


@pytest.mark.parametrize(
    "name,content",
    [
        ("metrics.csv", "step,loss\n" + "".join(f"{s},{2.0 - s / 100}\n" for s in range(50))),
        ("train.log", None),  # an llm.c main.log by another name
        ("trainer_state.json", None),
    ],
)
def test_a_folder_holding_one_log_is_that_log(tmp_path: Path, name: str, content: str | None):
    folder = tmp_path / "run"
    folder.mkdir()
    if content is None:
        original = {
            "train.log": FIXTURES / "llmc" / "main.log",
            "trainer_state.json": FIXTURES / "hf_trainer" / "trainer_state.json",
        }[name]
        content = original.read_text()
    (folder / name).write_text(content)
    (folder / "README.md").write_text("notes about this run\n")
    run = ingest.read(folder)
    # a lone metrics.csv is read by the Lightning reader, which takes its folder
    assert run.source.path in (str(folder / name), str(folder))
    assert run.frame.height > 0


def test_every_fixture_run_folder_is_read_as_given(cli):
    folders = sorted(p for p in (FIXTURES / "runs").iterdir() if p.is_dir())
    assert len(folders) == 26
    result = cli("analyze", *folders, "--format", "json", "--jobs", "1", "-q")
    assert result.exit_code in (0, 1)
    assert '"stab.error/1"' not in result.output


def test_input_errors_are_one_line_and_the_formats_are_listed_once_in_help(tmp_path: Path, cli):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.md").write_text("nothing\n")
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (two / name).write_text('{"step": 0, "loss": 1.0}\n')
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    for target, expected in (
        (empty, "no log stab reads in this folder"),
        (two, f"stab analyze -r {two}"),
        (tmp_path / "blob.bin", "not a log stab reads"),
    ):
        result = cli("analyze", target)
        assert result.exit_code == 2
        message = result.output.strip()
        assert "\n" not in message and expected in message and "Parquet" not in message
    # the hint names commands that work
    assert cli("analyze", "-r", two, "-q").exit_code == 0
    assert cli("analyze", two / "a.jsonl").exit_code in (0, 1)
    help_text = cli("analyze", "--help").output
    assert help_text.count("Parquet") == 1


# --- one row count everywhere -------------------------------------------------------------------


def test_rows_a_resume_rewrote_are_not_rejected_in_any_output(tmp_path: Path, cli):
    import json

    from tests.conftest import run_fixture

    log = run_fixture("restart-clean")
    doc = json.loads(cli("analyze", log, "--format", "json").output)
    src = doc["source"]
    assert src["rows_rejected"] == 0 and src["rows_rewritten"] == 200
    assert src["rows"] == src["rows_used"] + src["rows_rejected"] + src["rows_rewritten"]
    assert not any("rewritten" in reason for reason in src["rejection_counts"])
    terminal = " ".join(cli("analyze", log).output.split())
    assert "0 rejected, 200 rewritten by a resume" in terminal
    markdown = cli("analyze", log, "--format", "markdown").output
    assert "0 rejected, 200 rewritten by a resume" in markdown
    page = tmp_path / "r.html"
    cli("report", log, "-o", page)
    assert "0 rejected, 200 rewritten by a resume" in page.read_text()
