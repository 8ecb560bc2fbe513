"""Issue #34 parts 3, 4 and 6 through `stab analyze --format json`, on logs written by real
writers at test time: a broken eval, over-fitting, a healthy run with an eval series (its
headline names what it rests on), and a rank that fell silent."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests._mlflow_store import new_sqlite_store

STEPS = 1000
EVERY = 50  # one evaluation every 50 steps: 20 evaluations


def _train(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(STEPS, dtype=float)
    return 2.2 + 8.6 * (1 + t / 40.0) ** -0.75 * (1 + 0.02 * rng.standard_normal(STEPS))


def _evals(kind: str) -> np.ndarray:
    """The eval loss at steps 49, 99, ... 999."""
    rng = np.random.default_rng(7)
    t = np.arange(EVERY - 1, STEPS, EVERY, dtype=float)
    evals = 2.3 + 8.6 * (1 + t / 40.0) ** -0.75 + rng.normal(0.0, 0.004, t.size)
    if kind == "nan":
        evals[t >= 499] = np.nan  # every evaluation from step 499 on
    elif kind == "overfit":
        evals[t > 549] = evals[t == 549][0] + 0.04 * np.arange(1, int((t > 549).sum()) + 1)
    return evals


def _eval_steps() -> np.ndarray:
    return np.arange(EVERY - 1, STEPS, EVERY)


def write_tensorboardx(folder, kind: str) -> str:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(folder / "tb"))
    for step, value in enumerate(_train(1)):
        writer.add_scalar("train/loss", float(value), step)
    for step, value in zip(_eval_steps(), _evals(kind), strict=True):
        writer.add_scalar("eval/loss", float(value), int(step))
    writer.close()
    return str(folder / "tb")


def write_mlflow(folder, kind: str) -> tuple[str, ...]:
    pytest.importorskip("sqlalchemy")
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    uri = new_sqlite_store(folder / "mlflow.db")
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(client.create_experiment("evals")).info.run_id
    metrics = [
        Metric("train/loss", float(v), 1_700_000_000_000 + s, s) for s, v in enumerate(_train(1))
    ]
    metrics += [
        Metric("eval/loss", float(v), 1_700_000_000_000 + int(s), int(s))
        for s, v in zip(_eval_steps(), _evals(kind), strict=True)
    ]
    for i in range(0, len(metrics), 1000):  # the client's batch limit
        client.log_batch(run_id, metrics=metrics[i : i + 1000])
    client.set_terminated(run_id)
    return (uri, "--experiment", "evals")


def write_jsonl(folder, kind: str) -> str:
    evals = dict(zip(_eval_steps().tolist(), _evals(kind), strict=True))
    path = folder / "run.jsonl"
    with path.open("w") as out:
        for step, value in enumerate(_train(1)):
            row = {"step": step, "loss": float(value)}
            if step in evals:
                row["val_loss"] = float(evals[step])  # json writes NaN bare, as training does
            out.write(json.dumps(row) + "\n")
    return str(path)


def write_pandas_csv(folder, kind: str) -> str:
    import pandas as pd

    frame = pd.DataFrame({"step": np.arange(STEPS), "train_loss": _train(1)})
    frame["val_loss"] = pd.Series(_evals(kind), index=_eval_steps())
    frame.to_csv(folder / "metrics.csv", index=False)
    return str(folder / "metrics.csv")


def write_parquet(folder, kind: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    evals = np.full(STEPS, np.nan)
    evals[_eval_steps()] = _evals(kind)
    logged = np.zeros(STEPS, dtype=bool)
    logged[_eval_steps()] = True
    table = pa.table(
        {
            "step": pa.array(np.arange(STEPS)),
            "loss": pa.array(_train(1)),
            "eval_loss": pa.array(evals, mask=~logged),  # null where no evaluation ran
        }
    )
    pq.write_table(table, folder / "run.parquet")
    return str(folder / "run.parquet")


def _analyze(cli, target) -> tuple[dict, int]:
    args = target if isinstance(target, tuple) else (target,)
    result = cli("analyze", *args, "--format", "json")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return json.loads(result.stdout), result.exit_code


@pytest.mark.parametrize("writer", [write_tensorboardx, write_mlflow, write_jsonl])
def test_a_nan_eval_loss_is_the_verdict(cli, tmp_path, writer) -> None:
    doc, status = _analyze(cli, writer(tmp_path, "nan"))
    assert doc["verdict"]["code"] == "eval-nonfinite"
    assert status == 1
    (finding,) = [f for f in doc["findings"] if f["code"] == "eval-nonfinite"]
    assert finding["severity"] == "error" and finding["step"] == 499
    ev = finding["evidence"]
    assert (ev["count"], ev["points"], ev["train_loss_finite"]) == (11, 20, True)
    assert ev["key"] in ("eval/loss", "val_loss")
    assert ev["key"] in doc["verdict"]["summary"]


@pytest.mark.parametrize("writer", [write_jsonl, write_pandas_csv, write_tensorboardx])
def test_an_eval_loss_rising_while_training_falls_is_overfitting(cli, tmp_path, writer) -> None:
    doc, status = _analyze(cli, writer(tmp_path, "overfit"))
    assert doc["verdict"]["code"] == "overfitting"
    assert doc["verdict"]["severity"] == "warning"
    assert status == 0  # a warning: the default --fail-on is error
    (finding,) = [f for f in doc["findings"] if f["code"] == "overfitting"]
    ev = finding["evidence"]
    assert finding["step"] == ev["onset_step"] == 549
    assert ev["eval_end"] > ev["bar"] > ev["eval_at_onset"]
    assert ev["train_end"] < ev["train_start"]
    assert "step 549" in doc["verdict"]["summary"]


@pytest.mark.parametrize("writer", [write_parquet, write_mlflow, write_pandas_csv])
def test_a_healthy_run_says_what_it_rests_on(cli, tmp_path, writer) -> None:
    doc, status = _analyze(cli, writer(tmp_path, "healthy"))
    verdict = doc["verdict"]
    assert (verdict["code"], status) == ("healthy", 0)
    basis = {b["series"]: b for b in verdict["basis"]}
    assert basis["loss"]["points"] == STEPS
    assert basis["eval_loss"]["points"] == 20 and basis["eval_loss"]["role"] == "eval"
    assert {"eval-nonfinite", "overfitting"} <= set(basis["eval_loss"]["checks"])
    assert {"nan", "spike", "divergence"} <= set(basis["loss"]["checks"])
    assert "loss 1,000 points (steps 0-999), eval_loss 20 evaluations" in verdict["summary"]
    assert [s["series"] for s in doc["coverage"]["series"]][:2] == ["loss", "eval_loss"]


def test_a_run_without_eval_says_so_in_its_headline(cli, tmp_path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(
        "".join(json.dumps({"step": s, "loss": float(v)}) + "\n" for s, v in enumerate(_train(3)))
    )
    doc, _ = _analyze(cli, str(path))
    assert doc["verdict"]["code"] == "healthy"
    assert "not checked: eval loss (none logged)" in doc["verdict"]["summary"]
    assert [b["series"] for b in doc["verdict"]["basis"]] == ["loss"]


def test_too_few_evaluations_are_a_skip_reason(cli, tmp_path) -> None:
    path = tmp_path / "run.jsonl"
    rows = [{"step": s, "loss": float(v)} for s, v in enumerate(_train(3))]
    for row in rows[::250]:
        row["eval_loss"] = 3.0
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc, _ = _analyze(cli, str(path))
    reasons = {s["code"]: s["reason"] for s in doc["skipped"]}
    assert reasons["overfitting"] == "insufficient data: 4 finite eval_loss evaluations (needs 6)"


# --- a rank that fell silent, written per rank by two writers --------------------------


def _rank_losses(ranks: int = 8) -> np.ndarray:
    rng = np.random.default_rng(11)
    t = np.arange(400, dtype=float)
    return 2.5 + 3.0 * (1 + t / 50.0) ** -0.7 + 0.02 * rng.standard_normal((ranks, t.size))


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_a_silent_rank_is_in_the_headline(cli, tmp_path, suffix) -> None:
    import pandas as pd

    losses = _rank_losses()
    for rank, values in enumerate(losses):
        last = 250 if rank == 5 else values.size  # rank 5's log ends after step 249
        frame = pd.DataFrame({"step": np.arange(last), "loss": values[:last]})
        if suffix == "csv":
            frame.to_csv(tmp_path / f"rank_{rank}.csv", index=False)
        else:
            frame.to_json(tmp_path / f"rank_{rank}.jsonl", orient="records", lines=True)
    doc, status = _analyze(cli, str(tmp_path))
    verdict = doc["verdict"]
    assert verdict["code"] == "rank-silent" and verdict["severity"] == "warning"
    assert "Rank 5 stops reporting loss after step 249" in verdict["summary"]
    assert status == 0  # a warning verdict
    assert {"series": "ranks", "points": 8}.items() <= verdict["basis"][-1].items()
