"""Multi-line records (issue 39, item 1): a header with the step, then indented values.

The logs are written here as each trainer prints them (faithful copies of their print
statements, read in their repositories):

* OLMo, `olmo/train.py` `log_metrics_to_console`: `log.info(f"{prefix}\\n" + "\\n".join(
  f"    {name}={format_float(value)}"))` with `prefix = f"[step={step}/{max_steps},
  epoch={epoch}]"`, through the logging format of `olmo/util.py`
  (`%(asctime)s\\t%(hostname)s:%(local_rank)s\\t%(name)s:%(lineno)s\\t%(levelname)s\\t
  %(message)s`); `format_float` prints values over 1000 as `f"{int(value):,d}"`.
* OLMo-core, `olmo_core/train/callbacks/console_logger.py`: the same shape, with
  `[step={step}/{max_steps},epoch={epoch},eta={eta}]` and its own metric names.
* Composer / LLM Foundry, `composer/loggers/console_logger.py` `log_to_console`:
  `f"{progress}:"` then `f"\\n\\t {prefix}{name}: {format_log_data_value(value)}"` per
  metric (floats as `.4f`, ints as `str`), progress `[batch=N/M]` (or
  `[epoch=E][batch=N/M]` for a run measured in epochs), prefix `Train ` / `Eval `.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli import analyze, read
from stabilitycli.cli import app
from stabilitycli.ingest import detect_format

NAN_AT = 40


def _loss(step: int) -> float:
    return math.nan if step == NAN_AT else 11.0 - 0.05 * step


def _olmo_float(value: float) -> str:
    """OLMo's `format_float`."""
    if value < 0.0001:
        return str(value)
    if value > 1000:
        return f"{int(value):,d}"
    if value > 100:
        return f"{value:.1f}"
    if value > 10:
        return f"{value:.2f}"
    if value > 1:
        return f"{value:.3f}"
    return f"{value:.4f}"


def _olmo(steps: range, host: str = "intern-studio-160750", evals: bool = False) -> str:
    out = [f"2024-02-05 10:00:00.000\t{host}:0\tolmo.train:840\tINFO\tStarting training..."]
    for step in steps:
        loss = _loss(step)
        metrics = {
            "train/CrossEntropyLoss": loss,
            "train/Perplexity": math.exp(loss),
            "optim/total_grad_norm": 1.5 + 0.01 * step,
            "optim/learning_rate_group0": 0.0003,
            "throughput/total_tokens": 4_194_304 * step,
            "throughput/device/tokens_per_second": 1_048_576.0 + step,
        }
        prefix = f"[step={step}/739328,epoch=0]"
        message = f"{prefix}\n" + "\n".join(
            f"    {name}={_olmo_float(value)}" for name, value in metrics.items()
        )
        out.append(
            f"2024-02-05 10:00:{step % 60:02d}.123\t{host}:0\tolmo.train:966\tINFO\t{message}"
        )
        if evals and step % 20 == 0:
            # `eval()`: `log.info(f"[eval_step={eval_step + 1}/{num_eval_batches}]")`, then
            # `self.log_metrics_to_console(f"{evaluator.label}", metrics)`
            label = "v3-small-c4_en-validation"
            values = {f"eval/{label}/CrossEntropyLoss": 3.2, f"eval/{label}/Perplexity": 24.53}
            out.append(f"2024-02-05 10:01:00.000\t{host}:0\tolmo.train:1002\tINFO\t[eval_step=2/2]")
            out.append(
                f"2024-02-05 10:01:00.500\t{host}:0\tolmo.train:966\tINFO\t{label}\n"
                + "\n".join(f"    {name}={_olmo_float(v)}" for name, v in values.items())
            )
    return "\n".join(out) + "\n"


def _olmo_core(steps: range) -> str:
    out = []
    for step in steps:
        metrics = {
            "train/CE loss": _loss(step),
            "train/PPL": 1000.0,
            "optim/total grad norm": 0.9,
            "optim/LR (group 0)": 0.0004,
            "throughput/device/TPS": 25_123.0,
        }
        prefix = f"[step={step}/5000,epoch=0,eta=1h2m]"
        out.append(
            f"2025-01-10 08:00:00.000 node-3:0 olmo_core.train.callbacks.console_logger:67 "
            f"INFO {prefix}\n"
            + "\n".join(f"    {name}={_olmo_float(value)}" for name, value in metrics.items())
        )
    return "\n".join(out) + "\n"


def _composer_value(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:.4f}"


def _composer(steps: range, total: int = 100, epochs: bool = False) -> str:
    out = ["*" * 30, "Config:", "enabled_algorithms/GradientClipping: true", "*" * 30]
    for batch in steps:
        data = {
            "time/batch": batch - 1,
            "loss/train/total": _loss(batch),
            "metrics/train/LanguageCrossEntropy": _loss(batch),
            "lr-DecoupledAdamW/group0": 0.0006,
            "throughput/batches_per_sec": 1.25,
        }
        progress = f"[epoch=1][batch={batch}/{total}]" if epochs else f"[batch={batch}/{total}]"
        log = f"{progress}:" + "".join(
            f"\n\t Train {name}: {_composer_value(value)}" for name, value in data.items()
        )
        out.append(log)
        if batch % 20 == 0:
            out.append("[Eval batch=1/2] Eval on eval data")
            out.append(
                "[Eval batch=2/2] Eval on eval data:"
                "\n\t Eval metrics/eval/LanguageCrossEntropy: 3.2000"
            )
    return "\n".join(out) + "\n"


def _write(tmp_path: Path, text: str, name: str = "train.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _nan_steps(result) -> list[int]:
    return [f.step for f in result.findings if f.code == "nan"]


def _stdin_verdict(path: Path) -> tuple[str, list[int]]:
    result = CliRunner().invoke(app, ["analyze", "-", "-f", "json"], input=path.read_bytes())
    assert isinstance(result.exception, SystemExit), result.output  # exit 1: the NaN
    out = json.loads(result.output)
    assert out["source"]["format"] == "blocklog"
    return out["verdict"]["code"], [f["step"] for f in out["findings"] if f["code"] == "nan"]


@pytest.mark.parametrize(
    ("writer", "loss_key", "grad_key"),
    [
        (_olmo, "train/CrossEntropyLoss", "optim/total_grad_norm"),
        (_olmo_core, "train/CE loss", "optim/total grad norm"),
        (_composer, "loss/train/total", None),
    ],
)
def test_each_trainer_path_and_stdin(tmp_path: Path, writer, loss_key, grad_key) -> None:
    path = _write(tmp_path, writer(range(1, 61)))
    assert detect_format(path) == "blocklog"
    run = read(path)
    assert run.source.metrics["loss"] == loss_key  # the full path is the key
    if grad_key:
        assert run.source.metrics["grad_norm"] == grad_key
    assert run.frame["step"].to_list()[:3] == [1, 2, 3]
    result = analyze(path)
    assert result.verdict.code == "nan" and _nan_steps(result) == [NAN_AT]
    assert _stdin_verdict(path) == ("nan", [NAN_AT])


def test_olmo_host_and_logger_are_not_metrics_and_thousands_are_numbers(tmp_path: Path) -> None:
    run = read(_write(tmp_path, _olmo(range(1, 30))))
    columns = " ".join(run.frame.columns)
    assert "intern-studio" not in columns and "olmo.train" not in columns
    at5 = run.frame.row(4, named=True)
    assert at5["step"] == 5
    # `4,194,304 * 5` printed as `20,971,520`, read inside the value field
    assert at5["throughput/total_tokens"] == 20_971_520
    assert any("739328" in n for n in run.source.notes)  # the planned length


def test_composer_eval_record_takes_the_training_step_before_it(tmp_path: Path) -> None:
    run = read(_write(tmp_path, _composer(range(1, 41))))
    row = run.frame.filter(run.frame["step"] == 20).row(0, named=True)
    assert row["eval_loss"] == 3.2  # `Eval ` taken off, the path kept
    assert run.source.metrics["eval_loss"] == "metrics/eval/LanguageCrossEntropy"
    assert "enabled_algorithms/GradientClipping" not in run.frame.columns  # config, not a record


@pytest.mark.parametrize(
    ("text", "eval_key"),
    [
        (_olmo(range(1, 61), evals=True), "eval/v3-small-c4_en-validation/CrossEntropyLoss"),
        (_composer(range(1, 61)), "metrics/eval/LanguageCrossEntropy"),
    ],
    ids=["olmo", "composer"],
)
def test_eval_cross_entropy_is_the_eval_loss_at_the_step_before(
    tmp_path: Path, text: str, eval_key: str
) -> None:
    run = read(_write(tmp_path, text))
    assert run.source.metrics["eval_loss"] == eval_key  # matched by name: a cross-entropy
    evals = run.frame.filter(run.frame["eval_loss"].is_not_null())
    assert evals["step"].to_list() == [20, 40, 60] and evals["eval_loss"].to_list() == [3.2] * 3
    assert any("evaluation record(s) print no step" in n for n in run.source.notes)
    assert "v3-small-c4_en-validation" not in run.frame.columns  # the label is a header


def test_composer_in_epochs_counts_batches_over_epochs(tmp_path: Path) -> None:
    run = read(_write(tmp_path, _composer(range(1, 11), total=10, epochs=True)))
    assert run.frame["step"].to_list() == list(range(1, 11))
    assert any("(E-1)*M + N" in n for n in run.source.notes)


def test_an_indented_line_after_other_text_is_not_a_value(tmp_path: Path) -> None:
    text = _olmo(range(1, 4)) + "Some banner\n    not/a_metric=5\n"
    run = read(_write(tmp_path, text))
    assert "not/a_metric" not in run.frame.columns
