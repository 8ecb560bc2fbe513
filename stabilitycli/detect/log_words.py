"""What the log itself says about its loss and its grad norm, so that a sentence claims no more.

Three readings, each decided here once with the reason it rests on, and read by the verdict
and the post-mortem alike (spec 8, "Words"):

* `loss_is_token_ce`: the loss is a token cross-entropy in nats, so `exp(-loss)` is the
  geometric-mean probability of the right token and a grad-norm jump can be a rare-token
  batch. Known from the key (`lm loss`, `ce_loss`, `train/CrossEntropyLoss`, `nll`), the
  writer (Megatron, llm.c, nanoGPT and the other language-model trainers `kvlog` knows), a
  vocabulary size in a manifest, or a perplexity series equal to exp(loss). An unknown `loss`
  or an MSE is none of these.
* `grad_norm_is_preclip`: the logged grad norm is the one before clipping. Known per writer
  (docs/log-words.md cites each framework's source) or from a key that says so.
* `uses_dynamic_scaler`: under fp16 the writer scales the loss dynamically by itself (nanoGPT's
  `--dtype float16` wraps its steps in torch's GradScaler).

`LogWords.clip` is the clip threshold a remedy advises, taken from the run's own grad norms.
"""

from __future__ import annotations

import numpy as np

from stabilitycli.core.metric_names import words
from stabilitycli.core.model import SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.detect.series import SeriesView


@dataclass(frozen=True)
class Reading:
    """A yes/no about the log, and what it rests on (or why it cannot be said)."""

    holds: bool
    reason: str


# loss-key words that name a cross-entropy (a word set: all of it must be in the key)
_CE_WORDS = ({"lm"}, {"ce"}, {"nll"}, {"xent"}, {"crossentropy"}, {"cross", "entropy"}, {"trl"})
# the writers whose logged loss is a language model's token cross-entropy by construction
_LM_WRITERS = {
    "megatron": "Megatron's `lm loss` is the language-model cross-entropy",
    "llmc": "llm.c trains GPT-2 on the token cross-entropy",
    "nanoGPT": "nanoGPT's `loss` is the token cross-entropy of its GPT",
    "modded-nanogpt": "modded-nanogpt's `train_loss` is the token cross-entropy of its GPT",
    "torchtitan": "torchtitan's `loss` is the language model's token cross-entropy",
    "MLX-LM": "MLX-LM's `Train loss` is the language model's token cross-entropy",
    "litgpt": "litgpt's `loss` is the language model's token cross-entropy",
}
# the writers whose grad norm is the one before clipping (docs/log-words.md has the sources)
_PRECLIP_WRITERS = {
    "hf_trainer": "the HF Trainer logs the return of clip_grad_norm_, the norm before clipping",
    "megatron": "Megatron logs the norm get_grad_norm_fp32 computes before it clips",
    "deepspeed": "DeepSpeed stashes the global grad norm before unscale_and_clip_grads",
    "llmc": "llm.c prints the norm it computes before scaling the update by the clip",
}
# under fp16 these writers already scale the loss dynamically
_DYNAMIC_SCALER_WRITERS = {
    "nanoGPT": "nanoGPT's --dtype float16 wraps every step in torch's GradScaler",
}


def writer(source: SourceInfo) -> str:
    """The program that wrote the log, as far as its format tells (`''` when unknown)."""
    return source.writer or source.format


def loss_is_token_ce(view: SeriesView) -> Reading:
    """Whether the loss is known to be a token cross-entropy in nats, and why."""
    source = view.source
    key = source.metrics.get("loss", "")
    key_words = set(words(key))
    if source.metric_origin.get("loss") != "name" and any(w <= key_words for w in _CE_WORDS):
        return Reading(True, f"the loss key {key!r} names a cross-entropy")
    if writer(source) in _LM_WRITERS:
        return Reading(True, _LM_WRITERS[writer(source)])
    if source.vocab_size:
        return Reading(True, f"the manifest gives a vocabulary of {source.vocab_size:,} tokens")
    ppl = _perplexity_matches(view)
    if ppl:
        return Reading(True, ppl)
    return Reading(
        False,
        f"nothing says the loss {key!r} is a token cross-entropy (its key, its writer, a "
        "vocabulary size or a perplexity equal to exp(loss))",
    )


def _perplexity_matches(view: SeriesView) -> str:
    """'the series ppl equals exp(loss)' when a logged perplexity is exp of a loss series."""
    for name in view.columns:
        if not set(words(name)) & {"perplexity", "ppl"}:
            continue
        for loss_name in ("loss", "eval_loss"):
            if not view.has(loss_name):
                continue
            both = view.logged[name] & view.logged[loss_name]
            ppl, loss = view.columns[name][both], view.columns[loss_name][both]
            ok = np.isfinite(ppl) & np.isfinite(loss) & (loss < 50)
            if ok.sum() >= 3 and np.allclose(ppl[ok], np.exp(loss[ok]), rtol=0.02):
                return f"the logged {name!r} equals exp({loss_name}): a perplexity"
    return ""


def grad_norm_is_preclip(source: SourceInfo) -> Reading:
    """Whether the logged grad norm is known to be the one before clipping, and why."""
    key = source.metrics.get("grad_norm", "")
    key_words = set(words(key))
    if key_words & {"preclip", "unclipped"} or {"pre", "clip"} <= key_words:
        return Reading(True, f"the key {key!r} says it is taken before clipping")
    if writer(source) in _PRECLIP_WRITERS:
        return Reading(True, _PRECLIP_WRITERS[writer(source)])
    if source.writer == "torchtitan":
        return Reading(True, "torchtitan logs the return of clip_grad_norm_")
    if key.lower().startswith("grad_") and key.lower().endswith("_norm_total"):
        return Reading(True, "Lightning's grad_norm helper, called before it clips")
    return Reading(False, f"the writer does not say whether {key!r} is before or after clipping")


def uses_dynamic_scaler(source: SourceInfo) -> Reading:
    """Whether the writer scales an fp16 loss dynamically without the log showing a scale."""
    who = source.writer or ""
    if source.dtype == "fp16" and who in _DYNAMIC_SCALER_WRITERS:
        return Reading(True, _DYNAMIC_SCALER_WRITERS[who])
    return Reading(False, "")


@dataclass(frozen=True)
class ClipChoice:
    """The clip a remedy advises: a high quantile of the grad norm before the event."""

    value: float
    percentile: float
    first_step: int
    last_step: int
    points: int

    def words(self) -> str:
        return (
            f"about {self.value:.3g}, the {self.percentile:g}th percentile of the grad norm "
            f"over steps {self.first_step}-{self.last_step} ({self.points} points)"
        )


def clip_how_to_choose(percentile: float) -> str:
    """Where to clip, said when the log has no grad norm to take the number from."""
    percentile = min(percentile, 100.0)
    return (
        "a value near a high percentile of the run's usual grad norm (log the grad norm, then "
        f"take about its {percentile:g}th percentile over the healthy steps before the event)"
    )


@dataclass(frozen=True)
class LogWords:
    """The three readings of one run, and its finite grad norms for `clip`."""

    loss_is_token_ce: Reading
    grad_norm_is_preclip: Reading
    uses_dynamic_scaler: Reading
    grad_steps: np.ndarray
    grad_values: np.ndarray

    @property
    def grad_norm(self) -> str:
        """'pre-clip grad norm' when the writer logs that one, else 'grad norm'."""
        return "pre-clip grad norm" if self.grad_norm_is_preclip.holds else "grad norm"

    def clip(self, before_step: int | None, percentile: float) -> ClipChoice | None:
        """The `percentile` of the finite grad norms logged before `before_step` (all of them
        when no event step is given); None without at least 8 such points."""
        steps, grad = self.grad_steps, self.grad_values
        percentile = min(percentile, 100.0)
        if before_step is not None:
            keep = steps < before_step
            steps, grad = steps[keep], grad[keep]
        if grad.size < 8:
            return None
        value = float(np.percentile(grad, percentile))
        return ClipChoice(value, percentile, int(steps[0]), int(steps[-1]), int(grad.size))

    def remedy_words(self, start: int | None, percentile: float) -> dict[str, str]:
        """The remedy words the log decides: where to clip (from the run's grad norms before
        the event), the grad norm as the writer logs it, what an outlier batch holds."""
        return {
            "clip_at": self.clip_words(start, percentile),
            "grad_norm": self.grad_norm,
            "outlier_samples": (
                "rare or long-tail tokens"
                if self.loss_is_token_ce.holds
                else "unusual or long-tail samples"
            ),
        }

    def clip_words(self, before_step: int | None, percentile: float) -> str:
        """Where to clip, with what the number is; how to choose it when the log has none."""
        choice = self.clip(before_step, percentile)
        return choice.words() if choice else clip_how_to_choose(percentile)


def read_log_words(view: SeriesView) -> LogWords:
    """The readings of one run's log (decided here once, read by every output)."""
    empty = np.zeros(0)
    steps, grad = view.finite_points("grad_norm") if view.has("grad_norm") else (empty, empty)
    return LogWords(
        loss_is_token_ce(view),
        grad_norm_is_preclip(view.source),
        uses_dynamic_scaler(view.source),
        steps,
        grad,
    )


def no_log_words() -> LogWords:
    """The readings when no log was read for them: nothing is known."""
    unknown = Reading(False, "not read")
    empty = np.zeros(0)
    return LogWords(unknown, unknown, unknown, empty, empty)
