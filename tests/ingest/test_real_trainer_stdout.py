"""Stdout of real trainers, written by the trainers themselves (fixtures/textlogs/real/).

`scripts/make_real_trainer_stdout.py` ran a Hugging Face Trainer, a Lightning
Trainer and Keras `fit` on CPU with stdout and stderr captured into one file,
set the weights to NaN at a fixed step, and cut the file in the middle of its
last loss record. Beside each log is the trainer's own record of the same
numbers (Trainer.state.log_history, Lightning's and Keras' CSVLogger): the
expected steps and values are read from those, not from the log.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from stabilitycli import analyze, read
from stabilitycli.ingest import detect_format
from tests.conftest import FIXTURES

REAL = FIXTURES / "textlogs" / "real"


def _hf_expected(name: str) -> dict[int, float]:
    history = json.loads((REAL / f"{name}.log_history.json").read_text())
    return {h["step"]: h["loss"] for h in history if "loss" in h}


def _csv_expected(name: str, step_key: str, loss_key: str, offset: int) -> dict[int, float]:
    with (REAL / f"{name}.metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r[loss_key] != ""]
    return {int(r[step_key]) + offset: float(r[loss_key]) for r in rows}


# sample -> (reader, expected {step: loss} from the trainer's own record, relative tolerance
# of the printed value, the step the weights went NaN after)
CASES = {
    # transformers 5 prints each value with 4 significant digits, as a string: {'loss': '4.719'}
    "hf_trainer": ("dictlog", lambda: _hf_expected("hf_trainer"), 1e-3, 30),
    # Lightning's bar: 3 significant digits (`train_loss=2.870`); CSVLogger's step is 0-based
    "lightning": ("kvlog", lambda: _csv_expected("lightning", "step", "train_loss", 0), 5e-3, 44),
    # Keras: `loss: 5.7617` ({:.4f}) once an epoch; the CSVLogger's epoch is 0-based
    "keras_verbose1": ("kvlog", lambda: _csv_expected("keras_verbose1", "epoch", "loss", 1), 0, 8),
    "keras_verbose2": ("kvlog", lambda: _csv_expected("keras_verbose2", "epoch", "loss", 1), 0, 8),
}

# (Keras verbose=1: the cut epoch 12 keeps its last whole redraw, batch 11 of 14)
CUT_TOOK_LAST: set[str] = set()
# the cut record keeps the fields before the cut that something follows on the line (#39):
# HF's `{'loss': 'nan', 'grad_norm': 'nan', 'l`, Keras' `- loss: nan - m`
WHOLE_FIELDS_KEPT = {"hf_trainer", "keras_verbose2"}
KEPT = "the last {what} cut off mid-line after its field"


def _close(read_value: float, logged: float, rel: float) -> bool:
    if math.isnan(logged):
        return math.isnan(read_value)
    if rel == 0:  # printed with {:.4f}
        return abs(read_value - logged) <= 5e-5 + 1e-9
    return math.isclose(read_value, logged, rel_tol=rel)


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_sample_is_sniffed_and_read_as_the_trainer_logged_it(name: str) -> None:
    reader, expected_of, rel, _ = CASES[name]
    path = REAL / f"{name}.log"
    assert detect_format(path) == reader
    run = read(path)
    expected = expected_of()
    got = dict(zip(run.frame["step"].to_list(), run.frame["loss"].to_list(), strict=True))
    # every step the trainer logged is read, the last one too: the cut left its loss whole in
    # two logs (WHOLE_FIELDS_KEPT), and Lightning's died in a redraw of its last step, whose
    # value was printed whole before; Keras verbose=1 keeps an earlier redraw of epoch 12
    lost = {max(expected)} if name in CUT_TOOK_LAST else set()
    assert sorted(got) == sorted(set(expected) - lost)
    bad = {s: (got[s], expected[s]) for s in got if not _close(got[s], expected[s], rel)}
    assert not bad
    src = run.source
    assert src.rows_read == src.rows_used + src.rows_rejected + src.rows_rewritten
    assert not src.restarts


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_sample_keeps_nan_and_names_the_cut_line(name: str) -> None:
    _, _, _, nan_after = CASES[name]
    path = REAL / f"{name}.log"
    run = read(path)
    loss = dict(zip(run.frame["step"].to_list(), run.frame["loss"].to_list(), strict=True))
    assert all(math.isfinite(v) for s, v in loss.items() if s <= nan_after)
    assert all(math.isnan(v) for s, v in loss.items() if s > nan_after)
    n_lines = path.read_bytes().count(b"\n") + 1
    cut = [r.line for r in run.source.rejections if r.reason == "last record cut off mid-write"]
    if name in WHOLE_FIELDS_KEPT:
        what = "dict record" if name == "hf_trainer" else "record"
        assert cut == [], run.source.rejections
        assert any(
            w.startswith(f"line {n_lines}: " + KEPT.format(what=what)) for w in run.source.warnings
        )
    else:
        assert cut == [n_lines], run.source.rejections
        assert any("cut off mid-write" in w for w in run.source.warnings)


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_sample_gives_the_nan_verdict_at_the_first_nan_step(name: str) -> None:
    result = analyze(REAL / f"{name}.log")
    assert result.verdict.code == "nan"
    assert [f.step for f in result.findings if f.code == "nan"] == [CASES[name][3] + 1]


def test_hf_eval_dicts_take_the_training_bar_step_not_the_nested_eval_bar() -> None:
    # the eval bar (`2/2 [...]` followed by tqdm's cursor-up ESC[A) is drawn just before the
    # eval dict; its count is not the step
    history = json.loads((REAL / "hf_trainer.log_history.json").read_text())
    # the last eval (step 40) came after the cut
    evals = {h["step"]: h["eval_loss"] for h in history if "eval_loss" in h and h["step"] < 40}
    run = read(REAL / "hf_trainer.log")
    frame = run.frame.filter(run.frame["eval_loss"].is_not_null())
    assert frame["step"].to_list() == sorted(evals)
    for step, value in zip(frame["step"], frame["eval_loss"], strict=True):
        assert _close(value, evals[step], 1e-3)


def test_lightning_bar_values_are_read_from_its_padded_format(tmp_path: Path) -> None:
    # Tqdm.format_num pads to 5 characters: NaN is `nan.0`, +Inf `inf.0`, -Inf `-inf.`
    bar = "Epoch 0:  {p:3d}%|#| {n}/4 [00:00<00:00, 9.1it/s, v_num=0, train_loss={v}]"
    draws = [bar.format(p=25 * n, n=n, v=v) for n, v in enumerate(["1.230", "nan.0", "inf.0"], 1)]
    draws.append(bar.format(p=100, n=4, v="-inf."))
    path = tmp_path / "bar.log"
    path.write_text("\r".join(draws) + "\n")
    run = read(path)
    assert run.source.format == "kvlog"
    assert run.frame["step"].to_list() == [0, 1, 2, 3]
    values = run.frame["loss"].to_list()
    assert values[0] == 1.23 and math.isnan(values[1])
    assert values[2:] == [math.inf, -math.inf]
    assert "v_num" not in run.frame.columns


def test_hf_with_block_buffered_stdout_numbers_the_dicts_in_order_and_says_why() -> None:
    # without PYTHONUNBUFFERED / python -u, the dicts (stdout) reach the file after the bars
    # (stderr), in chunks: consecutive dicts share one bar, which gives no step. With
    # logging_steps=1 their order is their step.
    path = REAL / "hf_trainer_buffered.log"
    run = read(path)
    expected = _hf_expected("hf_trainer_buffered")
    got = dict(zip(run.frame["step"].to_list(), run.frame["loss"].to_list(), strict=True))
    assert sorted(got) == sorted(expected)  # the cut last dict keeps its whole pairs (#39)
    assert all(_close(got[s], expected[s], 1e-3) for s in got)
    assert any("block-buffered" in w and "python -u" in w for w in run.source.warnings)
    assert not run.source.restarts
    history = json.loads((REAL / "hf_trainer_buffered.log_history.json").read_text())
    evals = [h["step"] for h in history if "eval_loss" in h and h["step"] < 40]
    assert run.frame.filter(run.frame["eval_loss"].is_not_null())["step"].to_list() == evals
    result = analyze(path)
    assert result.verdict.code == "nan"
    assert [f.step for f in result.findings if f.code == "nan"] == [31]


def test_unbuffered_stdout_gives_no_buffering_warning() -> None:
    for path in (REAL / "hf_trainer.log", FIXTURES / "textlogs" / "hf_stdout" / "train.log"):
        assert not any("block-buffered" in w for w in read(path).source.warnings)


def test_hf_default_nan_filter_logs_a_finite_loss_and_a_nan_grad_norm() -> None:
    # logging_nan_inf_filter=True (the default) replaces a non-finite step loss: with
    # logging_steps=1 transformers 5 logs `'loss': '0'` and `'grad_norm': 'nan'` from the
    # first NaN step on. The reader keeps both as logged; the NaN grad norm still gives the
    # nan verdict at that step.
    path = REAL / "hf_trainer_nan_filter.log"
    history = json.loads((REAL / "hf_trainer_nan_filter.log_history.json").read_text())
    logged = {h["step"]: h for h in history if "loss" in h}  # 40 from the cut dict's whole pairs
    run = read(path)
    assert detect_format(path) == "dictlog"
    assert run.frame["step"].to_list() == sorted(logged)
    for row in run.frame.select("step", "loss", "grad_norm").iter_rows(named=True):
        want = logged[row["step"]]
        assert _close(row["loss"], want["loss"], 1e-3)
        assert _close(row["grad_norm"], want["grad_norm"], 1e-3)
    assert run.frame.filter(run.frame["step"] > 30)["loss"].to_list() == [0.0] * 10
    n_lines = path.read_bytes().count(b"\n") + 1
    kept = f"line {n_lines}: " + KEPT.format(what="dict record")
    assert any(w.startswith(kept) for w in run.source.warnings)
    result = analyze(path)
    assert result.verdict.code == "nan"
    assert [f.step for f in result.findings if f.code == "nan"] == [31]
