"""MLflow file store (`mlruns/`): layout, run selection, ranks, NaN/Inf, damaged metric files."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from stabilitycli import ingest
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.mlflow import file_store as mlflow_file
from stabilitycli.ingest.options import ReadOptions
from tests.ingest._synthetic_run import assert_same_values, log_mlflow, training_run

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "mlflow"
MLRUNS = FIXTURES / "mlruns"


def _run_folder(name: str, root: Path = MLRUNS) -> Path:
    for meta in root.glob("*/*/meta.yaml"):
        if mlflow_file.parse_meta(meta.read_text()).get("run_name") == name:
            return meta.parent
    raise LookupError(name)


def _copy_run(tmp_path: Path, name: str) -> Path:
    """A copy of one fixture run inside a copy of its experiment folder."""
    source = _run_folder(name)
    experiment = tmp_path / source.parent.name
    experiment.mkdir()
    shutil.copy(source.parent / "meta.yaml", experiment / "meta.yaml")
    shutil.copytree(source, experiment / source.name)
    return experiment / source.name


# --- the committed fixtures (written by the mlflow client) ------------------------


def test_spike_run_by_name_reads_every_point_and_the_dtype():
    run = ingest.read(MLRUNS, ReadOptions(run="spike"))
    expected = training_run(spike_at=30)
    assert run.source.format == "mlflow_file"
    assert run.frame["step"].to_list() == list(range(60))
    assert_same_values(run.frame["loss"].to_list(), expected["train/loss"])
    assert_same_values(run.frame["grad_norm"].to_list(), expected["train/grad_norm"])
    assert_same_values(run.frame["lr"].to_list(), expected["train/lr"])
    assert run.frame["loss"][30] == 9.5 and run.frame["grad_norm"][30] == 60.5
    assert run.source.metrics == {
        "loss": "train/loss",
        "grad_norm": "train/grad_norm",
        "lr": "train/lr",
    }
    assert run.source.dtype == "bf16" and "precision" in run.source.dtype_origin
    assert (run.source.rows_read, run.source.rows_used, run.source.rows_rejected) == (60, 60, 0)


def test_nan_run_keeps_nan_and_both_infinities_at_their_steps():
    run = ingest.read(MLRUNS, ReadOptions(run="nan"))
    loss, grad = run.frame["loss"].to_list(), run.frame["grad_norm"].to_list()
    assert math.isnan(loss[40]) and math.isnan(grad[40])
    assert math.isinf(loss[41]) and loss[41] > 0
    assert math.isinf(grad[42]) and grad[42] < 0
    assert [s for s in range(60) if not (math.isfinite(loss[s]) and math.isfinite(grad[s]))] == [
        40,
        41,
        42,
    ]
    assert run.source.dtype == "fp16"  # fp16=True param (Hugging Face style)


def test_run_folder_and_experiment_folder_are_accepted():
    folder = _run_folder("spike")
    by_folder = ingest.read(folder)
    by_experiment = ingest.read(folder.parent, ReadOptions(run="spike"))
    assert by_folder.frame.equals(by_experiment.frame)
    assert by_folder.source.run.endswith("(spike)")


def test_file_uri_is_the_same_store():
    by_uri = ingest.read(MLRUNS.as_uri(), ReadOptions(run="spike"))
    assert by_uri.source.format == "mlflow_file" and by_uri.frame["loss"][30] == 9.5


def test_run_id_and_id_prefix_select_the_same_run():
    run_id = _run_folder("nan").name
    full = ingest.read(MLRUNS, ReadOptions(run=run_id))
    prefix = ingest.read(MLRUNS, ReadOptions(run=run_id[:8]))
    assert full.frame.equals(prefix.frame) and full.source.run == prefix.source.run


def test_several_runs_and_no_choice_is_one_line_listing_ids_and_names():
    with pytest.raises(StabInputError) as err:
        ingest.read(MLRUNS, ReadOptions(experiment="stab-fixtures"))
    message = str(err.value)
    assert "\n" not in message and "--run" in message
    assert f"{_run_folder('spike').name} (spike)" in message and "(nan)" in message


def test_unknown_experiment_and_run_name_the_candidates():
    with pytest.raises(StabInputError, match="stab-fixtures"):
        ingest.read(MLRUNS, ReadOptions(experiment="nope"))
    with pytest.raises(StabInputError, match=r"no run with id or name 'nope'.*\(spike\)"):
        ingest.read(MLRUNS, ReadOptions(run="nope"))


def test_runs_named_by_rank_become_one_per_rank_run():
    run = ingest.read(MLRUNS, ReadOptions(experiment="stab-ranks"))
    frame = run.frame
    assert run.source.ranks == 4 and frame.height == 4 * 60
    rank2 = frame.filter(frame["rank"] == 2)
    assert math.isnan(rank2["loss"][20]) and rank2["loss"][21] == math.inf
    for rank in (0, 1, 3):
        values = frame.filter(frame["rank"] == rank)["loss"].to_list()
        assert_same_values(values, training_run(spike_at=None, seed=rank)["train/loss"])
    assert "rank 0 = " in run.source.notes[0]


def test_empty_run_is_a_one_line_input_error():
    with pytest.raises(StabInputError) as err:
        ingest.read(MLRUNS, ReadOptions(experiment="stab-empty"))
    assert "has no metrics logged" in str(err.value) and "(empty)" in str(err.value)
    assert "\n" not in str(err.value)


def test_detection_of_root_experiment_and_run_folders(tmp_path):
    folder = _run_folder("spike")
    for path in (MLRUNS, folder.parent, folder):
        assert ingest.detect_format(path) == "mlflow_file"
    # an artifact-only mlruns (what a sqlite store leaves behind) is not a file store
    (tmp_path / "mlruns" / "1" / "abc" / "artifacts").mkdir(parents=True)
    assert not mlflow_file.sniff(tmp_path / "mlruns", b"")


# --- layouts and damage, on copies ------------------------------------------------------


def test_deleted_runs_are_skipped_unless_asked(tmp_path):
    folder = _copy_run(tmp_path, "spike")
    meta = folder / "meta.yaml"
    meta.write_text(meta.read_text().replace("lifecycle_stage: active", "lifecycle_stage: deleted"))
    with pytest.raises(StabInputError, match="--include-deleted"):
        ingest.read(folder.parent)
    run = ingest.read(folder.parent, ReadOptions(include_deleted=True))
    assert run.frame["loss"][30] == 9.5


def test_metric_file_cut_off_mid_line_keeps_the_lines_before(tmp_path):
    folder = _copy_run(tmp_path, "nan")
    loss_file = folder / "metrics" / "train" / "loss"
    data = loss_file.read_bytes()
    loss_file.write_bytes(data[:-4])  # "...  0.5 59\n" loses its tail and newline
    run = ingest.read(folder)
    assert run.source.rows_rejected == 1
    assert run.source.rejections[0].line == 60 and "cut off" in run.source.rejections[0].reason
    assert any(":60: last line cut off" in w for w in run.source.warnings)
    assert run.frame["loss"][59] is None and run.frame["grad_norm"][59] is not None
    assert math.isnan(run.frame["loss"][40]) and run.frame["loss"][41] == math.inf


def test_corrupt_line_mid_file_is_rejected_alone(tmp_path):
    folder = _copy_run(tmp_path, "spike")
    loss_file = folder / "metrics" / "train" / "loss"
    lines = loss_file.read_text().splitlines(keepends=True)
    lines[25] = "17000\x0000000 garbage 25\n"
    loss_file.write_text("".join(lines))
    run = ingest.read(folder)
    assert run.source.rows_rejected == 1 and run.source.rejections[0].line == 26
    assert run.frame["loss"][25] is None
    expected = training_run(spike_at=30)["train/loss"]
    assert run.frame["loss"][26:].to_list() == expected[26:]  # everything after it read


def test_two_and_five_field_lines_and_nested_keys(tmp_path):
    folder = _copy_run(tmp_path, "spike")
    (folder / "metrics" / "old").write_text("1700000000000 2.5\n")  # MLflow < 1.0: no step
    nested = folder / "metrics" / "eval" / "val"
    nested.mkdir(parents=True)
    (nested / "loss").write_text(
        "1700000000000 3.25 10 my_dataset abc123\n1700000000001 nan 20 my_dataset abc123\n"
    )
    run = ingest.read(folder)
    assert run.frame["old"][0] == 2.5
    # the key "eval/val/loss" is read as eval_loss by its name; MLflow itself reports step 0
    # for 5-field lines, we keep the step
    assert run.frame["eval_loss"][10] == 3.25 and math.isnan(run.frame["eval_loss"][20])


def test_a_resumed_run_is_a_restart_not_a_mix(tmp_path):
    folder = _copy_run(tmp_path, "spike")
    loss_file = folder / "metrics" / "train" / "loss"
    # the job died after step 59 and resumed from step 50 with different losses
    extra = "".join(f"1800000000{step:03d} {1.0 + step / 100} {step}\n" for step in range(50, 70))
    loss_file.write_text(loss_file.read_text() + extra)
    run = ingest.read(folder)
    assert [(r.resumed_from_step, r.last_step_before) for r in run.source.restarts] == [(50, 59)]
    assert run.frame["loss"][55] == 1.55 and run.frame["step"].max() == 69
    assert run.abandoned.height == 10


def test_meta_yaml_parser_handles_quotes_and_folded_lines():
    text = (
        "artifact_uri: file:///tmp/x\n"
        "experiment_id: '123'\n"
        "run_name: 'it''s: a run'\n"
        "source_name: a very long source name that PyYAML folded\n"
        "  onto a second line\n"
        "tags: []\n"
        "end_time: null\n"
    )
    meta = mlflow_file.parse_meta(text)
    assert meta["experiment_id"] == "123"
    assert meta["run_name"] == "it's: a run"
    assert meta["source_name"].endswith("folded onto a second line")
    assert meta["end_time"] == ""


# --- the real writer ---------------------------------------------------------------------


def test_mlflow_client_file_store_round_trip(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="mlflow not installed (pip install mlflow)")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.chdir(tmp_path)
    expected = training_run(spike_at=30, nonfinite_at=45)
    uri = f"file://{tmp_path / 'mlruns'}"
    log_mlflow(expected, uri, experiment="e", run_name="both", params={"mixed_precision": "bf16"})
    for rank in range(2):
        log_mlflow(
            training_run(seed=rank),
            uri,
            experiment="r",
            run_name=f"job-{rank}",
            tags={"rank": str(rank)},
        )
    run = ingest.read(tmp_path / "mlruns", ReadOptions(experiment="e"))
    for key, column in (
        ("train/loss", "loss"),
        ("train/grad_norm", "grad_norm"),
        ("train/lr", "lr"),
    ):
        assert_same_values(run.frame[column].to_list(), expected[key])
    assert math.isnan(run.frame["loss"][45]) and run.frame["loss"][46] == math.inf
    assert run.frame["grad_norm"][47] == -math.inf
    assert run.source.dtype == "bf16"
    ranked = ingest.read(tmp_path / "mlruns", ReadOptions(experiment="r"))
    assert ranked.source.ranks == 2  # distinct `rank` tags, names say nothing
