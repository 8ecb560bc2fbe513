"""Never a silent pass: the metrics are found under the names people use, a run whose
loss was not read is refused by every command, and every output says what was checked."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from stabilitycli import analyze
from stabilitycli.core.aliases import resolve
from stabilitycli.core.errors import StabInputError
from tests.conftest import run_fixture

NO_LOSS_MESSAGE = "no loss series found"


# --- the matcher behind the alias table ---------------------------------------------------

# key -> the canonical metric it must be read as (issue 17's list, plus framework keys
# from shared/research/anchors.md that the alias table itself does not hold)
BY_NAME = {
    "Loss/train": "loss",
    "train/loss_step": "loss",
    "train_loss_epoch": "loss",
    "epoch_loss": "loss",
    "Training loss": "loss",
    "Train Loss": "loss",
    "loss_train": "loss",
    "act_loss": "loss",
    "Grad/norm_preclip": "grad_norm",
    "grad_norm/total": "grad_norm",
    "grad_2.0_norm_total": "grad_norm",
    "LR/lr": "lr",
    "lr-AdamW": "lr",
    "lr-AdamW/pg1": "lr",
    "lr_group_0": "lr",
    "optim/LR (group 0)": "lr",
    "Loss/val": "eval_loss",
    "epoch_val_loss": "eval_loss",
}


@pytest.mark.parametrize(("key", "canonical"), sorted(BY_NAME.items()))
def test_each_key_resolves_alone(key: str, canonical: str) -> None:
    resolution = resolve([key, "some_other_number"])
    if canonical == "eval_loss":
        # a validation loss alone stands in for the loss, and says so
        assert resolution.mapping == {"loss": key}
        assert resolution.origin["loss"] == "validation"
    else:
        assert resolution.mapping.get(canonical) == key


def test_training_per_step_wins_and_the_others_are_listed() -> None:
    keys = ["Loss/train_epoch", "Loss/val_epoch", "Loss/train_step", "aux_loss"]
    resolution = resolve(keys)
    assert resolution.mapping["loss"] == "Loss/train_step"
    assert resolution.mapping["eval_loss"] == "Loss/val_epoch"
    note = next(n for n in resolution.notes if n.startswith("loss <- "))
    assert "'Loss/train_epoch'" in note and "chosen by" in note and "--metric loss=KEY" in note


def test_a_rank_folder_prefers_the_rank_series_over_its_all_reduced_copy() -> None:
    keys = ["Loss/train_global_mean", "Loss/train"]
    assert resolve(keys, per_rank=True).mapping["loss"] == "Loss/train"


def test_lightning_learning_rate_monitor_takes_the_first_group() -> None:
    keys = ["lr-AdamW/pg2", "lr-AdamW/pg1", "grad_2.0_norm/layer.0.weight", "grad_2.0_norm_total"]
    mapping = resolve(keys).mapping
    assert mapping["lr"] == "lr-AdamW/pg1"
    assert mapping["grad_norm"] == "grad_2.0_norm_total"


def test_a_loss_term_alone_is_not_taken_for_the_loss() -> None:
    assert "loss" not in resolve(["aux_loss", "router_z_loss"]).mapping
    assert "loss" not in resolve(["loss_scale", "grad_scale"]).mapping


# --- logs written by the real writers -----------------------------------------------------


def _decaying(steps: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = 2.0 + 6.0 * np.exp(-np.arange(steps) / 150.0)
    return base * (1 + 0.02 * rng.standard_normal(steps))


def test_torch_style_tensorboard_tags_are_read(tmp_path) -> None:
    from tensorboardX import SummaryWriter

    loss = _decaying(600)
    writer = SummaryWriter(str(tmp_path / "run"))
    for step, value in enumerate(loss):
        writer.add_scalar("Loss/train", float(value), step)
        writer.add_scalar("Grad/norm_preclip", 1.0 + 0.01 * step, step)
        writer.add_scalar("LR/lr", 3e-4, step)
    writer.close()
    result = analyze(tmp_path / "run")
    assert result.source.metrics["loss"] == "Loss/train"
    assert result.source.metrics["grad_norm"] == "Grad/norm_preclip"
    assert result.source.metrics["lr"] == "LR/lr"
    assert result.verdict.code == "healthy"
    doc = result.to_dict()
    assert doc["source"]["metric_origin"]["loss"] == "name"
    assert any("Loss/train" in n for n in doc["source"]["notes"])


@pytest.mark.parametrize("tag", ["epoch_loss", "Training loss"])
def test_keras_and_plain_pytorch_loss_tags_are_read(tmp_path, tag: str) -> None:
    from tensorboardX import SummaryWriter

    loss = _decaying(400, seed=1)
    loss[300:] *= 2.0  # the loss doubles and stays there
    writer = SummaryWriter(str(tmp_path / "train"))
    for step, value in enumerate(loss):
        writer.add_scalar(tag, float(value), step)
    writer.close()
    result = analyze(tmp_path / "train")
    # the writer turns the space of "Training loss" into "_"; the key is found either way
    assert result.source.metrics["loss"].replace("_", " ") == tag.replace("_", " ")
    assert result.verdict.code == "spike-persistent"
    assert result.verdict.path[1].question == "Q2.1" and "300" in result.verdict.path[1].evidence


def test_lightning_monitor_columns_name_the_divergence_cause(tmp_path) -> None:
    run = pl.read_ndjson(run_fixture("divergence-lr-increasing"))
    run = run.rename({"train/loss": "train_loss_step", "train/lr": "lr-AdamW/pg1"})
    run = run.with_columns(
        pl.col("lr-AdamW/pg1").alias("lr-AdamW/pg2"),
        pl.col("train/grad_norm").alias("grad_2.0_norm_total"),
        (pl.col("train/grad_norm") / 3).alias("grad_2.0_norm/layer.0.weight"),
    ).drop("train/grad_norm")
    path = tmp_path / "metrics.csv"
    run.write_csv(path)
    result = analyze(path)
    assert result.source.metrics["lr"] == "lr-AdamW/pg1"
    assert result.source.metrics["grad_norm"] == "grad_2.0_norm_total"
    assert result.verdict.code == "divergence"
    assert result.verdict.cause == "lr-increasing"


# --- a run whose loss was not read is never analysed --------------------------------------


@pytest.fixture
def no_loss_log(tmp_path):
    path = tmp_path / "mystery.jsonl"
    rng = np.random.default_rng(2)
    with path.open("w") as out:
        for step in range(400):
            record = {"step": step, "objective_value": float(3 + rng.random()), "gpu_util": 0.9}
            out.write(json.dumps(record) + "\n")
    return path


def test_library_refuses_with_the_keys_it_saw(no_loss_log) -> None:
    with pytest.raises(StabInputError) as err:
        analyze(no_loss_log)
    message = str(err.value)
    assert str(no_loss_log) in message and NO_LOSS_MESSAGE in message
    assert "'objective_value'" in message and "--metric loss=KEY" in message


def test_the_suggested_flag_works(cli, no_loss_log) -> None:
    result = cli("analyze", no_loss_log, "--metric", "loss=objective_value", "--format", "json")
    assert result.exit_code in (0, 1)
    assert json.loads(result.stdout)["source"]["metrics"]["loss"] == "objective_value"


@pytest.mark.parametrize(
    "command",
    [
        ["analyze", "{log}"],
        ["analyze", "{log}", "--format", "json"],
        ["ranks", "{log}"],
        ["report", "{log}", "-o", "{tmp}/r.html"],
        ["postmortem", "{log}", "-o", "-"],
        ["compare", "{log}", "{log}"],
        ["compare", "--restart", "1", "{log}"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_every_command_exits_2_with_one_line(cli, no_loss_log, tmp_path, command) -> None:
    args = [a.format(log=no_loss_log, tmp=tmp_path) for a in command]
    result = cli(*args)
    assert result.exit_code == 2, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and NO_LOSS_MESSAGE in lines[0] and "--metric loss=KEY" in lines[0]
    assert "healthy" not in result.stdout


def test_batch_reports_the_unread_run_and_goes_on(cli, no_loss_log) -> None:
    healthy = run_fixture("healthy-low-noise")
    result = cli("analyze", healthy, no_loss_log, "--format", "json", "--jobs", "1")
    assert result.exit_code == 2  # the worst run's status: one run could not be read
    docs = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    verdicts = [d.get("verdict", {}).get("code") for d in docs]
    assert "healthy" in verdicts and len(docs) == 2
    assert NO_LOSS_MESSAGE in result.stderr


# --- every output says what was checked ---------------------------------------------------


def test_coverage_names_what_could_not_be_checked() -> None:
    result = analyze(run_fixture("healthy-low-noise"))
    coverage = result.to_dict()["coverage"]
    assert {"nan", "spike", "divergence"} <= set(coverage["checked"])
    not_checked = {item["check"]: item["reason"] for item in coverage["not_checked"]}
    assert "no per-rank values" in not_checked["ranks"]
    assert "loss-scale" in not_checked
    assert coverage["summary"].startswith("checked: ")


@pytest.mark.parametrize("fmt", ["terminal", "markdown"])
def test_coverage_line_is_in_the_text_outputs(cli, fmt: str) -> None:
    result = cli("analyze", run_fixture("healthy-low-noise"), "--format", fmt)
    assert "checked: " in result.stdout and "not checked: " in result.stdout


def test_coverage_line_is_in_the_html_report(cli, tmp_path) -> None:
    out = tmp_path / "report.html"
    result = cli("report", run_fixture("healthy-low-noise"), "-o", out)
    assert result.exit_code == 0
    assert 'class="coverage"' in out.read_text() and "not checked: " in out.read_text()


def test_a_partial_selection_is_not_called_plainly_healthy() -> None:
    result = analyze(run_fixture("healthy-low-noise"), select=["spike"])
    assert result.verdict.code == "healthy"
    assert "selected checks" in result.verdict.summary and "divergence" in result.verdict.summary


def test_a_log_too_short_for_the_trend_window_is_not_healthy(tmp_path) -> None:
    path = tmp_path / "short.jsonl"
    loss = _decaying(15)
    with path.open("w") as out:
        for i, value in enumerate(loss):
            out.write(json.dumps({"step": i * 10, "loss": float(value)}) + "\n")
    result = analyze(path)
    assert result.verdict.code == "insufficient-data"
    assert {"spike", "divergence"} & {s.code for s in result.coverage.not_checked}
