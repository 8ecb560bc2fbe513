"""Trainers' own logs: stdout of Megatron, DeepSpeed, llm.c and `key: value` or dict
records, and Hugging Face's trainer_state.json.

The readers here share line reading (`textlog`), number and field scanning
(`_textline`, `_kv*`) and the messages a DeepSpeed run prints (`_dsmessages`).
This module declares each reader for `ingest` without importing it.
"""

from __future__ import annotations

from stabilitycli.ingest.base import ReaderEntry, Takes

_TEXT_LOG = Takes(text_log=True)

HF_TRAINER = ReaderEntry(
    "hf_trainer",
    "stabilitycli.ingest.text.hf_trainer",
    Takes(folders=True, suffixes=(".json",)),
    "Hugging Face trainer_state.json (or a checkpoint / output dir)",
)
LLMC = ReaderEntry("llmc", "stabilitycli.ingest.text.llmc", _TEXT_LOG, "llm.c main.log")
MEGATRON = ReaderEntry(
    "megatron",
    "stabilitycli.ingest.text.megatron",
    _TEXT_LOG,
    "Megatron / Megatron-DeepSpeed / GPT-NeoX / ms-swift stdout",
)
DICTLOG = ReaderEntry(
    "dictlog",
    "stabilitycli.ingest.text.dictlog",
    _TEXT_LOG,
    "dict / JSON lines (Hugging Face Trainer, fairseq)",
)
BLOCKLOG = ReaderEntry(
    "blocklog",
    "stabilitycli.ingest.text.blocklog",
    _TEXT_LOG,
    "multi-line records, a `[step=N/M]` or `[batch=N/M]:` header then indented "
    "`key=value` / `key: value` lines (OLMo, OLMo-core, Composer / LLM Foundry console)",
)
DEEPSPEED = ReaderEntry(
    "deepspeed",
    "stabilitycli.ingest.text.deepspeed",
    _TEXT_LOG,
    "DeepSpeed / DeepSpeed-Chat stdout",
)
KVLOG = ReaderEntry(
    "kvlog",
    "stabilitycli.ingest.text.kvlog",
    _TEXT_LOG,
    "trainer stdout with `key: value` records (nanoGPT, modded-nanogpt, torchtitan, litgpt, "
    "MLX-LM, Keras fit, NeMo, fairseq; anything else with --pattern)",
)
