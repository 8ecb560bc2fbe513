"""The name matcher reads a cross-entropy as a loss (issue 39): Composer's torchmetrics name
`metrics/eval/LanguageCrossEntropy` and OLMo's `eval/<set>/CrossEntropyLoss` are eval losses,
and what is no loss (a policy's entropy, a perplexity) stays unmatched."""

from __future__ import annotations

import pytest

from stabilitycli.core.aliases import resolve


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        # Composer / LLM Foundry: the train loss by the alias table, the eval one by its name
        (
            [
                "loss/train/total",
                "metrics/eval/LanguageCrossEntropy",
                "metrics/eval/LanguagePerplexity",
            ],
            {"loss": "loss/train/total", "eval_loss": "metrics/eval/LanguageCrossEntropy"},
        ),
        (
            ["loss/train/total", "metrics/eval/CrossEntropyLoss"],
            {"loss": "loss/train/total", "eval_loss": "metrics/eval/CrossEntropyLoss"},
        ),
        # OLMo: one evaluator per data set; the shortest name is chosen, the others listed
        (
            [
                "train/CrossEntropyLoss",
                "eval/v3-small-c4_en-validation/CrossEntropyLoss",
                "eval/v3-small-dolma_books-validation/CrossEntropyLoss",
                "eval/v3-small-c4_en-validation/Perplexity",
            ],
            {
                "loss": "train/CrossEntropyLoss",
                "eval_loss": "eval/v3-small-c4_en-validation/CrossEntropyLoss",
            },
        ),
        # OLMo-core
        (
            ["train/CE loss", "eval/lm/c4_en-validation/CE loss", "eval/lm/c4_en-validation/PPL"],
            {"loss": "train/CE loss", "eval_loss": "eval/lm/c4_en-validation/CE loss"},
        ),
        # a training cross-entropy the table does not know is the loss
        (["metrics/train/LanguageCrossEntropy"], {"loss": "metrics/train/LanguageCrossEntropy"}),
        # an entropy alone (an RL policy's) is no loss
        (["entropy", "policy/entropy"], {}),
    ],
)
def test_cross_entropy_keys(keys: list[str], expected: dict[str, str]) -> None:
    mapping = resolve(keys).mapping
    assert {k: v for k, v in mapping.items() if k in ("loss", "eval_loss")} == expected
