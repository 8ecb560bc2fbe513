"""Find the loss, grad norm, LR and loss scale among keys the alias table does not know.

People name metrics freely (`Loss/train`, `Training loss`, `epoch_loss`,
`Grad/norm_preclip`, `lr-AdamW/pg1`), and a run whose loss was not found must
never pass as healthy. Behind the exact alias table (`aliases.py`), this
matcher splits every key into lower-case words (on `/ . _ - :`, spaces and
camelCase) and scores each key against what each canonical metric is made
of. The rule for choosing, when several keys fit, is stated in `RULE` and
printed with the mapping; the keys not chosen are listed beside it.
"""

from __future__ import annotations

import re

from stabilitycli.core.records import dataclass

# how the best key is chosen; said in the mapping note so the choice can be checked
RULE = (
    "training over validation, per-step over per-epoch, the whole over a part "
    "(total, group 0), pre-clip over post-clip; then the shortest name"
)

# below this a key only half fits (a loss term such as aux_loss or z_loss alone)
MIN_SCORE = 65.0

_SPLIT = re.compile(r"[/._\-:\s()\[\]=,]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

_EVAL_WORDS = frozenset(
    {"val", "valid", "validation", "eval", "evaluation", "test", "dev", "holdout"}
)
_TRAIN_WORDS = frozenset({"train", "training", "trn"})
_EPOCH_WORDS = frozenset({"epoch", "epochs"})
_STEP_WORDS = frozenset({"step", "steps", "iter", "iteration", "batch"})
# a loss that is one term of the objective, not the objective
_PART_WORDS = frozenset(
    {"aux", "z", "kl", "router", "reg", "regularization", "penalty", "entropy", "balance"}
)
_CROSS_ENTROPY = frozenset({"cross", "entropy"})
_REDUCED_WORDS = frozenset({"global", "mean", "avg", "average", "reduced", "allreduce", "all"})
# words that change a metric into another quantity ("loss scale", "lr scheduler")
_NOT_LOSS_WORDS = frozenset({"scale", "scaler", "scaling", "weight", "coef", "coeff", "ratio"})
_NOT_VALUE_WORDS = frozenset({"scheduler", "warmup", "decay", "min", "max", "init", "initial"})


@dataclass(frozen=True)
class Match:
    canonical: str
    key: str
    score: float


def words(key: str) -> list[str]:
    """`Grad/norm_preclip` -> grad, norm, preclip; `trainLoss` -> train, loss."""
    spaced = _CAMEL.sub(" ", str(key))
    return [w for w in _SPLIT.split(spaced.lower()) if w]


def _loss_score(ws: list[str], per_rank: bool) -> tuple[str, float] | None:
    """('loss' or 'eval_loss', score) for a key that names a loss, else None."""
    word_set = set(ws)
    # a cross-entropy is the loss of a language model whatever it is called: Composer's
    # `metrics/eval/LanguageCrossEntropy`, OLMo's `eval/<set>/CrossEntropyLoss`
    cross_entropy = word_set >= _CROSS_ENTROPY or "crossentropy" in word_set
    if "loss" not in ws and "losses" not in ws and not cross_entropy:
        return None
    if word_set & _NOT_LOSS_WORDS:
        return None
    if cross_entropy:
        word_set = (word_set - _CROSS_ENTROPY - {"crossentropy", "language"}) | {"loss"}
    canonical = "eval_loss" if word_set & _EVAL_WORDS else "loss"
    score = 100.0
    if word_set & _TRAIN_WORDS:
        score += 5
    if word_set & _STEP_WORDS:
        score += 10
    if word_set & _EPOCH_WORDS:
        score -= 30
    if word_set & _PART_WORDS:
        score -= 40
    if per_rank and word_set & _REDUCED_WORDS:
        # in per-rank folders, the rank's own series is the signal; its reduced
        # copy is the same number on every rank
        score -= 20
    known = _TRAIN_WORDS | _EVAL_WORDS | _STEP_WORDS | _EPOCH_WORDS | _REDUCED_WORDS
    score -= 3 * len(word_set - known - {"loss", "losses", "total", "lm"})
    return canonical, score


def _grad_norm_score(ws: list[str]) -> float | None:
    word_set = set(ws)
    fused = {"gradnorm", "gnorm", "grad_norm"}
    if not (
        word_set & fused
        or ({"grad", "grads", "gradient", "gradients"} & word_set and "norm" in word_set)
    ):
        return None
    score = 100.0
    if word_set & {"total", "global", "preclip", "unclipped", "pre"}:
        score += 10
    if word_set & {"clipped", "postclip", "post", "after"}:
        score -= 20
    if word_set & _EVAL_WORDS:
        score -= 50
    # a norm per parameter or per layer carries its name: many extra words
    score -= 5 * len(
        word_set
        - fused
        - {
            "grad",
            "grads",
            "gradient",
            "gradients",
            "norm",
            "total",
            "global",
            "preclip",
            "unclipped",
            "pre",
            "l2",
            "2",
            "0",
            "train",
            "training",
            "optim",
            "step",
        }
    )
    return score


def _lr_score(ws: list[str]) -> float | None:
    word_set = set(ws)
    if not ("lr" in word_set or {"learning", "rate"} <= word_set or "learningrate" in word_set):
        return None
    if word_set & _NOT_VALUE_WORDS:
        return None
    # several parameter groups tie here; the natural-order tie-break then takes the
    # first group (Lightning's pg1, group 0), which stands for the schedule
    return 100.0 - 2 * len(word_set - {"lr", "learning", "rate", "train", "optim", "group", "pg"})


def _loss_scale_score(ws: list[str]) -> float | None:
    word_set = set(ws)
    if (
        {"loss", "scale"} <= word_set
        or {"grad", "scale"} <= word_set
        or {"scaler", "scale"} <= word_set
    ):
        return 100.0 - 2 * len(word_set - {"loss", "scale", "scaler", "grad", "amp", "train"})
    return None


def match_keys(
    raw_keys: list[str], wanted: set[str], per_rank: bool = False
) -> dict[str, list[Match]]:
    """For each wanted canonical metric, the keys that fit it, best first."""
    found: dict[str, list[Match]] = {}
    for key in raw_keys:
        ws = words(key)
        candidates: list[tuple[str, float]] = []
        loss = _loss_score(ws, per_rank)
        if loss is not None:
            candidates.append(loss)
        for canonical, scorer in (
            ("grad_norm", _grad_norm_score),
            ("lr", _lr_score),
            ("loss_scale", _loss_scale_score),
        ):
            score = scorer(ws)
            if score is not None:
                candidates.append((canonical, score))
        for canonical, score in candidates:
            if canonical in wanted:
                found.setdefault(canonical, []).append(Match(canonical, key, score))
    for matches in found.values():
        matches.sort(key=lambda m: (-m.score, len(m.key), _natural(m.key)))
    return found


def _natural(key: str) -> list[object]:
    # pg2 after pg1, group10 after group9: a run of digits sorts by its length, then its
    # text, which is its number's order without int() (which refuses 4,300 digits or more)
    parts = re.split(r"([0-9]+)", key.lower())
    return [(len(part), part) if i % 2 else part for i, part in enumerate(parts)]
