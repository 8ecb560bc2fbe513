"""Never learned and loss collapse (#34 parts 1-2), through the CLI on logs written by real
writers (tensorboardX, the MLflow client on sqlite, JSONL, pyarrow Parquet) in tmp_path."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests._mlflow_store import new_sqlite_store

SHARED = Path(__file__).resolve().parents[3] / "shared"
VOCAB = 50257


def _stuck(points: int = 400, every: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    """Loss flat at ln(50257) with a grad norm about 1e-6, LR warmed up over 100 steps."""
    rng = np.random.default_rng(seed)
    steps = np.arange(points) * every
    return {
        "step": steps,
        "loss": math.log(VOCAB) + 0.02 * rng.standard_normal(points),
        "grad_norm": 1e-6 * np.exp(0.1 * rng.standard_normal(points)),
        "lr": 3e-4 * np.minimum(1.0, steps / 100),
    }


def _learned(points: int = 400, every: int = 5, seed: int = 1) -> dict[str, np.ndarray]:
    """Learned, then converged: 10.8 -> 3 with the usual noise and a live grad norm."""
    rng = np.random.default_rng(seed)
    steps = np.arange(points) * every
    level = 3.0 + 7.8 * np.exp(-steps / (0.1 * steps[-1]))
    return {
        "step": steps,
        "loss": level * (1 + 0.01 * rng.standard_normal(points)),
        "grad_norm": 0.5 * np.exp(0.2 * rng.standard_normal(points)),
        "lr": 3e-4 * np.minimum(1.0, steps / 100),
    }


def _collapse(points: int = 2000, at: int = 800, seed: int = 2) -> dict[str, np.ndarray]:
    """About 3.5, then 1e-4 from step `at` on (a masking bug)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(points)
    loss = (2.0 + 1.5 * np.exp(-steps / 300)) * (1 + 0.02 * rng.standard_normal(points))
    loss[at:] = 1e-4 * (1 + 0.1 * np.abs(rng.standard_normal(points - at)))
    return {"step": steps, "loss": loss}


def _gradual(points: int = 2000, seed: int = 3) -> dict[str, np.ndarray]:
    """A classifier creeping to 1e-3 over a thousand steps: convergence, not a collapse."""
    rng = np.random.default_rng(seed)
    steps = np.arange(points)
    loss = (0.7 * np.exp(-steps / 150) + 1e-3) * (1 + 0.05 * rng.standard_normal(points))
    return {"step": steps, "loss": loss}


def _tensorboardx(run: dict[str, np.ndarray], folder: Path) -> Path:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(folder))
    for i, step in enumerate(run["step"]):
        for key, values in run.items():
            if key != "step":
                writer.add_scalar(f"train/{key}", float(values[i]), int(step))
    writer.close()
    return folder


def _mlflow(run: dict[str, np.ndarray], db: Path, params: dict[str, str]) -> str:
    import mlflow
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    uri = new_sqlite_store(db)
    mlflow.set_tracking_uri(uri)
    client = MlflowClient(uri)
    experiment = client.create_experiment("learn")
    run_id = client.create_run(experiment, run_name="run").info.run_id
    for key, value in params.items():
        client.log_param(run_id, key, value)
    metrics = [
        Metric(key, float(values[i]), 0, int(step))
        for key, values in run.items()
        if key != "step"
        for i, step in enumerate(run["step"])
    ]
    for first in range(0, len(metrics), 900):
        client.log_batch(run_id, metrics=metrics[first : first + 900])
    client.set_terminated(run_id)
    return uri


def _jsonl(run: dict[str, np.ndarray], path: Path) -> Path:
    keys = list(run)
    with path.open("w") as out:
        for i in range(run["step"].size):
            out.write(json.dumps({k: run[k][i].item() for k in keys}) + "\n")
    return path


def _parquet(run: dict[str, np.ndarray], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({k: pa.array(v) for k, v in run.items()}), path)
    return path


def _analyze(cli, target, *extra: str) -> tuple[dict, int]:
    result = cli("analyze", target, "--format", "json", *extra)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return json.loads(result.stdout), result.exit_code


def _codes(report: dict) -> dict[str, dict]:
    return {f["code"]: f for f in report["findings"]}


# ------------------------------------------------------------------ never learned


def test_never_learned_tensorboardx_with_vocab_set(cli, tmp_path):
    folder = _tensorboardx(_stuck(), tmp_path / "tb")
    report, status = _analyze(cli, folder, "--set", f"vocab_size={VOCAB}")
    assert report["verdict"]["code"] == "not-learning"
    assert status == 1
    finding = _codes(report)["no-learning"]
    assert finding["severity"] == "error"
    ev = finding["evidence"]
    assert ev["at_chance"] is True and ev["no_decrease"] is True and ev["grad_norm_vanished"]
    assert 90 <= ev["warmup_end_step"] <= 100
    assert "ln(50,257) = 10.82" in finding["message"]


def test_never_learned_mlflow_vocab_from_param(cli, tmp_path):
    uri = _mlflow(_stuck(), tmp_path / "m.db", {"vocab_size": str(VOCAB)})
    report, status = _analyze(cli, uri)
    assert report["verdict"]["code"] == "not-learning"
    assert status == 1
    assert _codes(report)["no-learning"]["evidence"]["vocab_size"] == VOCAB


def test_no_vocab_no_chance_sentence_and_flat_loss_is_a_warning(cli, tmp_path):
    run = _stuck()
    run["grad_norm"] = 0.3 * np.ones_like(run["loss"])  # a live gradient: only "no decrease"
    report, status = _analyze(cli, _parquet(run, tmp_path / "run.parquet"))
    finding = _codes(report)["no-learning"]
    assert report["verdict"]["code"] == "not-learning"
    assert report["verdict"]["severity"] == "warning"
    assert finding["severity"] == "warning" and status == 0
    assert "chance" not in finding["message"] and "ln(" not in finding["message"]
    assert "vocab_size" not in finding["evidence"]


def test_never_learned_jsonl_vanished_grad_without_vocab(cli, tmp_path):
    report, status = _analyze(cli, _jsonl(_stuck(), tmp_path / "run.jsonl"))
    finding = _codes(report)["no-learning"]
    assert finding["severity"] == "error" and status == 1
    assert finding["evidence"]["grad_norm_vanished"] is True


@pytest.mark.parametrize("writer", ["tensorboardx", "mlflow"])
def test_learned_and_converged_is_not_flagged(cli, tmp_path, writer):
    run = _learned()
    target = (
        _tensorboardx(run, tmp_path / "tb")
        if writer == "tensorboardx"
        else _mlflow(run, tmp_path / "m.db", {"vocab_size": str(VOCAB)})
    )
    report, status = _analyze(cli, target, "--set", f"vocab_size={VOCAB}")
    assert "no-learning" not in _codes(report)
    assert report["verdict"]["code"] == "healthy" and status == 0


def test_low_noise_run_that_learned_a_little_is_not_flagged(cli, tmp_path):
    # a fall of 1% is under a relative bar but 20 sigmas of this run's own noise
    rng = np.random.default_rng(4)
    steps = np.arange(2000)
    loss = 2.0 - 0.02 * steps / steps[-1] + 5e-4 * rng.standard_normal(steps.size)
    report, _ = _analyze(cli, _jsonl({"step": steps, "loss": loss}, tmp_path / "r.jsonl"))
    assert "no-learning" not in _codes(report)


def test_late_start_flat_fine_tune_is_not_judged(cli, tmp_path):
    # an excerpt from step 20,000 of a converged run: flat, no warmup logged
    rng = np.random.default_rng(5)
    steps = 20_000 + np.arange(1000)
    loss = 1.9 + 0.02 * rng.standard_normal(steps.size)
    report, status = _analyze(cli, _parquet({"step": steps, "loss": loss}, tmp_path / "r.parquet"))
    assert "no-learning" not in _codes(report)
    assert report["verdict"]["code"] == "healthy" and status == 0
    skipped = {s["code"]: s["reason"] for s in report["skipped"]}
    assert skipped["no-learning"].startswith("decrease not judged: the log starts at step 20,000")
    # healthy must not read as "it learned": the headline names what was not judged
    assert (
        "not checked: whether it learned (the log starts at step 20,000)"
        in (report["verdict"]["summary"])
    )


def test_short_log_is_not_judged(cli, tmp_path):
    run = {k: v[:12] for k, v in _stuck().items()}
    report, _ = _analyze(cli, _jsonl(run, tmp_path / "r.jsonl"), "--set", f"vocab_size={VOCAB}")
    assert "no-learning" not in _codes(report)
    assert any(s["code"] == "no-learning" for s in report["skipped"])


# ------------------------------------------------------------------ collapse


@pytest.mark.parametrize("writer", ["jsonl", "parquet"])
def test_collapse_to_near_zero(cli, tmp_path, writer):
    run = _collapse()
    path = (_jsonl if writer == "jsonl" else _parquet)(run, tmp_path / f"run.{writer}")
    report, status = _analyze(cli, path)
    assert report["verdict"]["code"] == "loss-collapse" and status == 1
    finding = _codes(report)["loss-collapse"]
    assert finding["severity"] == "error" and finding["step"] == 800
    ev = finding["evidence"]
    assert ev["step_before"] == 799 and ev["points_taken"] == 1
    assert ev["points_after"] == ev["points_after_near_zero"] == 1199
    assert "label leaking" in finding["message"] and "Causes to check" in finding["message"]


def _slow_collapse(points: int = 2000, at: int = 1400, over: int = 40) -> dict[str, np.ndarray]:
    """Logged every step, the loss slides from about 3.2 to 5e-5 over `over` steps (40
    points: more than collapse_max_points, within collapse_max_steps)."""
    rng = np.random.default_rng(7)
    steps = np.arange(points)
    loss = (3.2 + 2.8 * np.exp(-steps / 300)) * (1 + 0.01 * rng.standard_normal(points))
    share = np.clip((steps - at) / over, 0, 1)
    return {"step": steps, "loss": np.exp(np.log(loss) * (1 - share) + np.log(5e-5) * share)}


@pytest.mark.parametrize("writer", ["jsonl", "tensorboardx"])
def test_collapse_over_forty_steps_logged_every_step(cli, tmp_path, writer):
    run = _slow_collapse()
    path = (
        _jsonl(run, tmp_path / "run.jsonl")
        if writer == "jsonl"
        else _tensorboardx(run, tmp_path / "tb")
    )
    report, status = _analyze(cli, path)
    assert report["verdict"]["code"] == "loss-collapse" and status == 1
    ev = _codes(report)["loss-collapse"]["evidence"]
    # the first point at or below 0.05 and 100x under the level, and where the slide began
    assert 1410 <= _codes(report)["loss-collapse"]["step"] <= 1440
    assert 1 < ev["points_taken"] <= 40 and ev["step_before"] >= 1400


@pytest.mark.parametrize("writer", ["tensorboardx", "mlflow"])
def test_collapse_to_exact_zero_in_a_short_log(cli, tmp_path, writer):
    # OLMo: cross-entropy 12.18 -> 1.8e-6 -> 0.0 in two logged steps; too short for a window
    run = {"step": np.arange(1, 7), "loss": np.array([12.18, 1.8e-6, 0.0, 0.0, 0.0, 0.0])}
    target = (
        _tensorboardx(run, tmp_path / "tb")
        if writer == "tensorboardx"
        else _mlflow(run, tmp_path / "m.db", {})
    )
    report, status = _analyze(cli, target)
    assert report["verdict"]["code"] == "loss-collapse" and status == 1
    ev = _codes(report)["loss-collapse"]["evidence"]
    assert ev["value_before"] == pytest.approx(12.18) and ev["exact_zeros"] == 4
    assert "12.18" in report["verdict"]["summary"]


@pytest.mark.parametrize("writer", ["jsonl", "parquet"])
def test_gradual_convergence_to_small_loss_is_no_collapse(cli, tmp_path, writer):
    run = _gradual()
    path = (_jsonl if writer == "jsonl" else _parquet)(run, tmp_path / f"run.{writer}")
    report, status = _analyze(cli, path)
    assert "loss-collapse" not in _codes(report)
    assert "no-learning" not in _codes(report)
    assert status == 0


def test_loss_that_crosses_zero_is_not_judged(cli, tmp_path):
    rng = np.random.default_rng(6)
    steps = np.arange(1000)
    loss = 0.5 - steps / 500 + 0.01 * rng.standard_normal(steps.size)
    loss[600] = 1e-5
    report, _ = _analyze(cli, _jsonl({"step": steps, "loss": loss}, tmp_path / "r.jsonl"))
    assert "loss-collapse" not in _codes(report)
    assert "no-learning" not in _codes(report)


# ------------------------------------------------------------------ real logs, explain


def _real_logs() -> list[Path]:
    root = SHARED / "real-logs"
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".md")


@pytest.mark.parametrize("path", _real_logs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_logs_never_fire(path):
    from stabilitycli import analyze
    from stabilitycli.core.errors import StabInputError

    try:
        result = analyze(str(path))
    except StabInputError:  # a log with no loss series (the SFT log holds eval ppl only)
        return
    codes = {f.code for f in result.findings}
    assert not codes & {"no-learning", "loss-collapse"}


def test_explain_new_codes(cli):
    for code in ("no-learning", "loss-collapse", "not-learning"):
        result = cli("explain", code)
        assert result.exception is None and result.exit_code == 0, code
        assert result.stdout.strip()


def test_a_later_lr_jump_is_not_taken_for_warmup(tmp_path, cli):
    # the benchmark's spike+lr case: warmup, then a cosine, and the LR doubles at 60% of the
    # run; the run learned before the jump, so judging from the jump would call it stuck
    rng = np.random.default_rng(7)
    steps = np.arange(3000)
    loss = (2.0 + 8.0 * np.exp(-steps / 150)) * (1 + 0.01 * rng.standard_normal(steps.size))
    lr = 3e-4 * np.minimum(1.0, (steps + 1) / 60) * (0.55 + 0.45 * np.cos(np.pi * steps / 3000))
    lr[1800:] *= 2.0
    run = {"step": steps, "loss": loss, "lr": lr}
    report, _ = _analyze(cli, _parquet(run, tmp_path / "r.parquet"))
    assert "no-learning" not in _codes(report)
