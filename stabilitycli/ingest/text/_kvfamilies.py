"""The trainers whose stdout `kvlog` recognises: how to tell each one, and what its keys mean.

Format strings as the trainers print them (from their sources):

* nanoGPT `train.py`: `iter {n}: loss {l:.4f}, time {dt*1000:.2f}ms, mfu {m*100:.2f}%`
  and `step {n}: train loss {t:.4f}, val loss {v:.4f}`;
* modded-nanogpt: `step:{n}/{N} train_loss:{l:.4f} train_time:{t:.0f}ms step_avg:{a:.2f}ms`
  and the same with `val_loss:` every `val_loss_every` steps;
* torchtitan: `step: {n:2}  loss: {l:7.4f}  grad_norm: {g:7.4f}  memory: {m:5.2f}GiB({p:.2f}%)
  tps: {t:,}  tflops: {f:,.2f}  mfu: {u:.2f}%`, each field in its ANSI colour;
* MLX-LM `tuner/trainer.py`: `Iter {n}: Train loss {l:.3f}, Learning Rate {r:.3e}, It/sec
  {i:.3f}, Tokens/sec {t:.3f}, Trained Tokens {k}, Peak mem {p:.3f} GB` and
  `Iter {n}: Val loss {v:.3f}, Val took {s:.3f}s`;
* litgpt: `Epoch {e} | iter {i} step {s} | loss train: {l:.3f}, val: {v} | iter time:
  {t:.2f} ms (step) remaining time: {h:m:s}` (older: `iter {i} step {s}: loss {l:.4f},
  iter time: {t:.2f}ms`);
* Keras `fit`: `Epoch {e}/{E}` then `{b}/{B} [====] - 5s 2ms/step - loss: {l:.4f} - ...`;
* NeMo (PyTorch Lightning's bar): `Epoch 0: 12%|...| 1200/10000 [..., reduced_train_loss=2.35,
  global_step=1199.0, ...]`;
* PyTorch Lightning's own bar: `Epoch 1:  83%|...| 25/30 [..., v_num=0, train_loss=2.870]`
  (`_lightningbar`);
* fairseq `--log-format simple`: `epoch 001:  100 / 1000 loss=13.7, ..., num_updates=100, ...`.
"""

from __future__ import annotations

import re
from dataclasses import field

from stabilitycli.core.records import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    marker: re.Pattern[str]
    # raw key -> the name it is read under (said in a note when it changes the meaning)
    rename: dict[str, str] = field(default_factory=dict)
    note: str = ""


FAMILIES: tuple[Family, ...] = (
    Family(
        "nanoGPT",
        re.compile(r"^iter \d+: loss \S+, time "),
        {"train loss": "eval_train_loss", "val loss": "val_loss", "time (ms)": "step_time_ms"},
        "nanoGPT: `loss` is one iteration's loss (the last micro-batch's, times the gradient "
        "accumulation steps); the `step N: train loss` of an evaluation is a mean over "
        "eval_iters batches, kept as eval_train_loss",
    ),
    Family(
        "modded-nanogpt",
        re.compile(r"^step:\d+/\d+ (?:train|val)_loss:"),
        {},
        "modded-nanogpt: `train_loss` is one step's loss; `train_time` is cumulative and "
        "`step_avg` its running mean",
    ),
    Family(
        "torchtitan",
        re.compile(r"\bstep:\s*\d+\s+loss:\s"),
        {"tps": "tokens_per_s", "wps": "tokens_per_s"},
        "torchtitan: `loss` is the mean over the data-parallel ranks of the logged step",
    ),
    Family(
        "MLX-LM",
        re.compile(r"^Iter \d+: (?:Train|Val) loss "),
        {
            "Train loss": "loss",
            "Val loss": "val_loss",
            "Learning Rate": "lr",
            "Tokens/sec": "tokens_per_s",
        },
        "MLX-LM: `Train loss` is the mean over the steps_per_report iterations before the line",
    ),
    Family(
        "litgpt",
        re.compile(r"\biter \d+ step \d+\b"),
        {"loss train": "loss", "val": "val_loss", "loss": "loss"},
        "litgpt: the step is the optimizer step (`step`), not the micro-batch `iter`",
    ),
    Family(
        "Keras fit",
        re.compile(r"^\s*\d+/\d+ .*? - (?:\w+: \S+ - )*loss: "),
        {},
        "Keras fit: one point per epoch (the `Epoch N/M` line), the epoch's running mean loss",
    ),
    Family(
        "NeMo / Lightning progress bar",
        re.compile(r"\bglobal_step="),
        {"reduced_train_loss": "loss"},
        "NeMo: the step is the bar's `global_step`; `reduced_train_loss` is the loss averaged "
        "over the data-parallel ranks",
    ),
    Family(
        "Lightning progress bar",
        re.compile(r"^Epoch \d+:\s+\d+%\|[^|]*\|\s*\d+/\d+ \["),
        {},
        "Lightning progress bar: a step is a batch (epoch x batches an epoch + the bar's count "
        "- 1, the global_step without gradient accumulation), its value the last draw of it; "
        "the bar shows 3 significant digits (`2.870`, `nan.0`)",
    ),
    Family("fairseq", re.compile(r"\bnum_updates="), {}, "fairseq: the step is `num_updates`"),
)
GENERIC = Family("text log", re.compile(r"$^"), {}, "")


def family_of(lines: list[str]) -> Family:
    """The family most of the first record lines match; the generic one when none does."""
    counts = {f.name: 0 for f in FAMILIES}
    for line in lines:
        for fam in FAMILIES:
            if fam.marker.search(line):
                counts[fam.name] += 1
                break
    best = max(FAMILIES, key=lambda f: counts[f.name])
    return best if counts[best.name] else GENERIC
