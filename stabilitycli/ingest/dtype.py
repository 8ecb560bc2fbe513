"""The dtype regime (fp32, fp16, bf16) a run's own settings state, read the same way everywhere.

Readers with a run config (manifest.json, W&B config, MLflow params and tags,
TensorBoard hparams, Lightning's hparams.yaml, Megatron's argument dump) hand
it here. Only settings that fix the regime count: a value that does not name
one (`torch_dtype: auto`) is no evidence, and the readers' own inferences (a
loss scale that moves, DeepSpeed overflow messages) stay in the readers.
"""

from __future__ import annotations

from collections.abc import Mapping

from stabilitycli.core.errors import StabUsageError

DTYPES = ("fp32", "fp16", "bf16")

# setting names (the last component of a dotted or slashed key, lower case) that
# state the dtype, strongest first: the mixed-precision setting says what the
# matmuls ran in, while `torch_dtype` is often only what the weights were loaded in
DTYPE_KEYS = (
    "mixed_precision",
    "precision",
    "amp_dtype",
    "dtype",
    "compute_dtype",
    "train_dtype",
    "torch_dtype",
)
# boolean switches (HF TrainingArguments, Megatron arguments, DeepSpeed's config dump);
# weaker than a named setting, which can say `bf16-mixed` where a switch says only "on"
DTYPE_FLAGS = {
    "bf16": "bf16",
    "fp16": "fp16",
    "half": "fp16",
    "bfloat16_enabled": "bf16",
    "bf16_enabled": "bf16",
    "fp16_enabled": "fp16",
}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def normalise_dtype(text: str) -> str:
    """'bf16-mixed', 'torch.bfloat16', '16-mixed', 'fp16' ... -> fp32 / fp16 / bf16.

    Anything else comes back lower-cased, so a caller can tell it is not a regime.
    """
    value = text.strip().lower()
    if "bf16" in value or "bfloat16" in value:
        return "bf16"
    if "16" in value or "half" in value:
        return "fp16"
    if "32" in value or value in ("float", "full", "no", "false"):
        return "fp32"
    return value


def dtype_option(text: str | None) -> str | None:
    """The `--dtype` value as a regime; a value that names none is a usage error."""
    if text is None:
        return None
    dtype = normalise_dtype(text)
    if dtype not in DTYPES:
        raise StabUsageError(f"--dtype {text!r} is not a dtype regime; use {', '.join(DTYPES)}")
    return dtype


def dtype_from(*settings: tuple[str, Mapping[str, object]]) -> tuple[str, str] | None:
    """(dtype, origin) stated by `(label, {key: value})` settings, or None.

    A named setting (`mixed_precision=bf16`, `precision=16-mixed`) wins over a
    switch (`bf16=True`), whichever table holds it; for the same name the
    first table wins. An fp16 and a bf16 switch both off mean fp32 (the
    default of the Hugging Face Trainer, Megatron and DeepSpeed), the weakest
    evidence of all.
    """
    by_leaf: dict[str, tuple[str, str, str]] = {}
    for label, table in settings:
        for key, value in table.items():
            text = _text(value)
            if text is None:
                continue
            leaf = str(key).strip().lower().replace(".", "/").rsplit("/", 1)[-1]
            by_leaf.setdefault(leaf, (label, str(key), text))
    for name in DTYPE_KEYS:
        if name in by_leaf:
            label, key, value = by_leaf[name]
            dtype = normalise_dtype(value)
            if dtype in DTYPES:
                return dtype, f"{label} {key!r}={value!r}"
    flags = {name: by_leaf[name] for name in DTYPE_FLAGS if name in by_leaf}
    for name, (label, key, value) in flags.items():
        if value.strip().lower() in _TRUE:
            return DTYPE_FLAGS[name], f"{label} {key!r}={value!r}"
    off = [name for name, (_, _, value) in flags.items() if value.strip().lower() in _FALSE]
    if len(off) == len(flags) and {DTYPE_FLAGS[name] for name in off} == {"fp16", "bf16"}:
        label = flags[off[0]][0]
        return "fp32", f"{label} " + " and ".join(f"{flags[n][1]}={flags[n][2]}" for n in off)
    return None


def _text(value: object) -> str | None:
    """A setting's value as text; None for values that cannot name a dtype (lists, nulls)."""
    if isinstance(value, Mapping):  # W&B's old clients write {"value": ..., "desc": ...}
        value = value.get("value")
    if value is None or isinstance(value, (list, tuple, Mapping)):
        return None
    text = str(value)
    return text if text.strip() else None
