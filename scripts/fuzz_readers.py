#!/usr/bin/env python
"""Mutation fuzzer for the readers: damaged logs in, a clear answer out (issue #12).

Each input is a small valid log of one format (a fixture copied out of
`fixtures/`, or a run written by the writers in `tests/ingest/_synthetic_run.py`)
with one to three mutations: byte flips, inserts, deletes, truncations, and
edits that know the format and keep it well-formed where a checksum would
otherwise reject it first (TFRecord and W&B CRCs recomputed, gzip/zstd
recompressed around a damaged text, JSON values swapped for NaN, deep nesting,
huge strings or lone surrogates, CSV headers duplicated, MLflow sqlite rows
UPDATEd to TEXT/NULL/1e19/60.5).

Every input goes through `stabilitycli.ingest.read`, `pipeline.run.analyze`
and the terminal and JSON renderers in a worker process, and is one of:

    ok           read and analysed; rows read = used + rejected + rewritten
    input-error  a StabInputError (or StabUsageError) naming the input
    INTERNAL     any other exception (BaseException included: PanicException,
                 RecursionError), a worker that died, invalid JSON output, or an
                 input error that does not name the file
    WRAPPED      an input error the catch-all boundary of `ingest.read` made from an
                 unexpected exception (`cannot parse jsonl: NameError: ...`): one line for
                 the user, but a reader bug that rejects the whole file
    HANG         not done within --timeout seconds (the worker is killed)
    MEMORY       the worker's RSS went over --max-rss-mb (killed), or MemoryError
    IDENTITY     read, but the row accounting does not add up
    LOSS         one byte changed in place (a point mutation of a text or record
                 format) and far fewer rows read than from the unmutated log: rows
                 dropped without being counted as rejected
(a file created or changed in the input's folder while reading is INTERNAL
WroteBesideInput: `-wal`/`-shm` beside a sqlite store, say)

Failures are deduplicated by (reader, outcome, exception type, innermost
stabilitycli frame); the first input of each is reduced (lines, then bytes) and
saved under OUT/repro/, and written up in OUT/<reader>.txt as it is found.
OUT/SUMMARY.md has the counts per reader.

    .venv/bin/python scripts/fuzz_readers.py --reader all --count 10000 --seed 1 \
        --out /tmp/fuzz-findings
    .venv/bin/python scripts/fuzz_readers.py --replay /tmp/fuzz-findings/repro/<id>

`stabilitycli` never imports this; it imports `stabilitycli` like any caller.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import math
import multiprocessing as mp
import os
import random
import re
import shlex
import shutil
import sqlite3
import struct
import sys
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stabilitycli import ingest  # noqa: E402  (after the checkout is on sys.path)

FIXTURES = ROOT / "fixtures"
# every reader of a file or folder (a tracking server is fuzzed by its loopback tests)
READERS = tuple(name for name in ingest.READERS if name != "mlflow_server")
OUTCOMES = ("ok", "input-error", "INTERNAL", "WRAPPED", "HANG", "MEMORY", "IDENTITY", "LOSS")

# --- seeds -------------------------------------------------------------------------


@dataclass
class Seed:
    """A small valid input: a folder copied for each mutant, the path handed to `read`
    (relative to the folder), and the files a mutation may touch with their kind."""

    reader: str
    name: str
    folder: Path
    target: str
    files: dict[str, str]  # relative path -> kind (see MUTATORS)
    options: dict = field(default_factory=dict)  # ReadOptions fields (run=...)
    rows: int | None = None  # rows read from it unmutated (check_seeds sets it)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copyfile(src, dst)


def _kind_of(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        return "gz"
    if name.endswith(".zst"):
        return "zst"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith(".json"):
        return "json"
    if name.endswith((".csv", ".tsv")):
        return "csv"
    if name.endswith(".parquet"):
        return "binary"
    if name.endswith((".arrow", ".feather", ".ipc")):
        return "binary"
    if name.endswith(".wandb"):
        return "wandb"
    if "tfevents" in name:
        return "tfrecord"
    if name.endswith(".db"):
        return "sqlite"
    if name.endswith(".yaml"):
        return "yaml"
    return "text"


def _file_seed(reader: str, name: str, base: Path, src: Path, as_name: str | None = None) -> Seed:
    folder = base / reader / name
    target = as_name or src.name
    _copy(src, folder / target)
    return Seed(reader, name, folder, target, {target: _kind_of(folder / target)})


def _tree_seed(reader: str, name: str, base: Path, src: Path, target: str = ".") -> Seed:
    folder = base / reader / name
    _copy(src, folder)
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            rel = path.relative_to(folder).as_posix()
            kind = _kind_of(path)
            if reader == "mlflow_file" and "/metrics/" in f"/{rel}":
                kind = "mlflow_metric"
            files[rel] = kind
    return Seed(reader, name, folder, target, files)


def build_seeds(base: Path) -> dict[str, list[Seed]]:
    """Every seed, by reader, written under `base` (fixtures are copied, never touched)."""
    from tests.ingest import _synthetic_run as syn

    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    seeds: dict[str, list[Seed]] = {r: [] for r in READERS}

    def add(seed: Seed) -> None:
        seeds[seed.reader].append(seed)

    gen = base / "_generated"
    gen.mkdir()
    run = syn.training_run(spike_at=30, nonfinite_at=45, steps=60)
    short = syn.training_run(spike_at=None, nonfinite_at=10, steps=24)
    jsonl = syn.write_jsonl(run, gen / "run.jsonl")
    text = jsonl.read_bytes()
    (gen / "run.jsonl.gz").write_bytes(gzip.compress(text, mtime=0))
    try:
        import zstandard

        (gen / "run.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(text))
    except ImportError:
        pass
    for path in sorted(gen.glob("run.jsonl*")):
        add(_file_seed("jsonl", path.name.replace(".", "_"), base, path))
    add(_file_seed("jsonl", "hf_style", base, FIXTURES / "runs/healthy-hf-style/run.jsonl"))

    # tables
    import polars as pl

    frame = pl.DataFrame(
        {"step": run["step"], **{syn.CANONICAL[k]: run[k] for k in syn.KEYS}},
    )
    frame.write_csv(gen / "metrics.csv")
    frame.write_csv(gen / "metrics.tsv", separator="\t")
    frame.write_parquet(gen / "metrics.parquet")
    frame.write_ipc(gen / "metrics.arrow")
    for name in ("metrics.csv", "metrics.tsv", "metrics.parquet", "metrics.arrow"):
        add(_file_seed("tabular", "gen_" + name.replace(".", "_"), base, gen / name))
    for name in ("metrics.csv", "metrics.parquet", "metrics.arrow"):
        add(
            _file_seed("tabular", "fx_" + name.replace(".", "_"), base, FIXTURES / "tabular" / name)
        )

    # per-rank folder: three small JSONL logs
    ranks = gen / "ranks"
    ranks.mkdir()
    for rank in range(3):
        syn.write_jsonl(
            syn.training_run(spike_at=None, seed=rank, steps=30), ranks / f"rank_{rank}.jsonl"
        )
    add(_tree_seed("rank_dir", "gen_3ranks", base, ranks))
    seed = _tree_seed("rank_dir", "fx_custom_names", base, FIXTURES / "ranks/custom_names")
    seed.options = {"rank_pattern": r"gpu(\d+)"}
    add(seed)

    # TensorBoard: tensorboardX's file, our TF2 encoding, and the fixtures
    tb = gen / "tb"
    syn.write_events(tb / "tf2" / "events.out.tfevents.1700000000.host", short, "tf2")
    syn.write_events(tb / "simple" / "events.out.tfevents.1700000000.host", short, "simple")
    for enc in ("tf2", "simple"):
        add(_tree_seed("tensorboard", f"gen_{enc}", base, tb / enc))
    for name in ("spike", "nan", "tf2"):
        add(_tree_seed("tensorboard", f"fx_{name}", base, FIXTURES / "tensorboard" / name))

    # MLflow: one run folder of the file store, the sqlite store
    mlruns = FIXTURES / "mlflow/mlruns"
    exp = mlruns / "885139116478235027"
    run_dir = sorted(p for p in exp.iterdir() if p.is_dir())[0]
    folder = base / "mlflow_file" / "fx_experiment"
    _copy(exp / "meta.yaml", folder / "mlruns" / exp.name / "meta.yaml")
    _copy(run_dir, folder / "mlruns" / exp.name / run_dir.name)
    seed = _tree_seed("mlflow_file", "fx_experiment", base / "_tmp", folder)
    seed.folder = folder
    seed.target = f"mlruns/{exp.name}/{run_dir.name}"
    add(seed)
    for run_name in ("spike", "nan"):
        seed = _file_seed("mlflow_db", f"fx_db_{run_name}", base, FIXTURES / "mlflow/mlflow.db")
        seed.options = {"run": run_name}
        add(seed)

    add(_file_seed("hf_trainer", "fx_state", base, FIXTURES / "hf_trainer/trainer_state.json"))
    hf = {
        "global_step": len(short["step"]),
        "log_history": [
            {
                "step": s + 1,
                "loss": short["train/loss"][i],
                "grad_norm": short["train/grad_norm"][i],
                "learning_rate": short["train/lr"][i],
                "epoch": s / 10,
            }
            for i, s in enumerate(short["step"])
        ],
    }
    (gen / "trainer_state.json").write_text(json.dumps(hf, indent=2))
    add(_file_seed("hf_trainer", "gen_state", base, gen / "trainer_state.json"))

    for wandb in sorted((FIXTURES / "wandb/wandb").glob("*/*.wandb")):
        add(_file_seed("wandb_offline", wandb.stem, base, wandb))
    for run_name in ("lr-sweep-3", "lr-sweep-4"):
        seed = _file_seed("wandb_csv", f"fx_{run_name}", base, FIXTURES / "wandb_csv/export.csv")
        seed.options = {"run": run_name}
        add(seed)
    add(
        _tree_seed(
            "lightning", "fx_version0", base, FIXTURES / "lightning/lightning_logs/version_0"
        )
    )
    seed = seeds["lightning"][-1]
    seed.files = {k: v for k, v in seed.files.items()}  # both metrics.csv and hparams.yaml

    # text logs: whatever reader detection picks for each fixture
    from stabilitycli.ingest import detect_format

    texts = [
        *sorted((FIXTURES / "textlogs").rglob("*.log")),
        *sorted((FIXTURES / "textlogs").rglob("*.txt")),
        FIXTURES / "llmc/main.log",
        FIXTURES / "megatron/gpt_fp16.log",
        *sorted((FIXTURES / "deepspeed").glob("*.log")),
    ]
    for path in texts:
        try:
            name = detect_format(path)
        except Exception:
            continue
        if name not in seeds or path.stat().st_size > 64_000:
            continue
        label = f"fx_{path.parent.name}_{path.stem}"
        add(_file_seed(name, label, base, path))
    return seeds


# --- mutations ---------------------------------------------------------------------

INTERESTING_NUMBERS = (
    b"NaN",
    b"nan",
    b"-nan",
    b"Infinity",
    b"-Infinity",
    b"inf",
    b"-inf",
    b"1e309",
    b"-1e309",
    b"0",
    b"-0",
    b"-1",
    b"60.5",
    b"1e19",
    b"9223372036854775807",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"4.9e-324",
    b"1.7976931348623157e308",
    b"1" * 400,
    b"0x10",
    b"1_000",
    b"",
    b"null",
    b"None",
    b"true",
    b'"1"',
    b"[]",
    b"{}",
)
INTERESTING_BYTES = (
    b"\x00",
    b"\xff",
    b"\r",
    b"\n",
    b'"',
    b"{",
    b"}",
    b"[",
    b",",
    b"\t",
    b"\\",
    b"\xef\xbb\xbf",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\x1b[31m",
    b"[/]",
    b"|",
    b":",
)
NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|NaN|-?Infinity|-?inf|nan")


def deep(depth: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * depth + closer * depth


def json_values(rng: random.Random) -> bytes:
    return rng.choice(
        (
            b"NaN",
            b"Infinity",
            b"-Infinity",
            b"[1, 2]",
            b'{"a": 1}',
            b"null",
            b"true",
            b'"x"',
            deep(rng.choice((100, 1000, 100_000))),
            deep(100_000, b'{"a":', b"}"),
            b'"' + b"x" * rng.choice((200_000, 2_000_000)) + b'"',
            b'"\\ud800"',
            b'"\\udfff x"',
            b"1e19",
            b"60.5",
            b"-1",
            b"1e999",
            b"12345678901234567890123",
            b"0.0",
            b"-0.0",
            b'"NaN"',
            b'"inf"',
            b"[NaN]",
            b'{"value": NaN}',
        )
    )


def m_flip(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(buf))
        buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf)


def m_byte(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return rng.choice(INTERESTING_BYTES)
    i = rng.randrange(len(data))
    if rng.random() < 0.5:
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1 :]
    return data[:i] + rng.choice(INTERESTING_BYTES) + data[i:]


def m_insert(data: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(data) + 1)
    blob = rng.choice(
        (
            rng.randbytes(rng.randint(1, 64)),
            rng.choice(INTERESTING_BYTES) * rng.randint(1, 50),
            b"x" * 200_000,
            rng.choice(INTERESTING_NUMBERS),
        )
    )
    return data[:i] + blob + data[i:]


def m_delete(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    j = min(len(data), i + rng.choice((1, 1, 2, 8, 64, 1024)))
    return data[:i] + data[j:]


def m_truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def m_duplicate(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    j = min(len(data), i + rng.randint(1, 256))
    return data[:j] + data[i:j] * rng.randint(1, 4) + data[j:]


def m_number(data: bytes, rng: random.Random) -> bytes:
    found = list(NUMBER.finditer(data[:2_000_000]))
    if not found:
        return m_insert(data, rng)
    hit = rng.choice(found)
    return data[: hit.start()] + rng.choice(INTERESTING_NUMBERS) + data[hit.end() :]


BYTE_MUTATIONS: tuple[Callable[[bytes, random.Random], bytes], ...] = (
    m_flip,
    m_byte,
    m_insert,
    m_delete,
    m_truncate,
    m_duplicate,
    m_number,
)


def m_bytes(data: bytes, rng: random.Random) -> bytes:
    return rng.choice(BYTE_MUTATIONS)(data, rng)


def m_lines(data: bytes, rng: random.Random) -> bytes:
    """Line edits: duplicate, drop, swap, cut, a giant line, a blank or a CRLF."""
    lines = data.split(b"\n")
    if not lines:
        return data
    i = rng.randrange(len(lines))
    choice = rng.randrange(10)
    if choice == 8:  # a `key: value` / `key=value` field of the line repeated or emptied
        # bounded repeats: a lazy `*?` here is quadratic on a megabyte line
        field_re = rb"[A-Za-z_][\w /.-]{0,40}?\s{0,3}[:=]\s{0,3}[^\s|,]{1,64}"
        fields = list(re.finditer(field_re, lines[i][:65536]))
        if fields:
            hit = rng.choice(fields)
            extra = hit.group(0) if rng.random() < 0.7 else hit.group(0).split(b":")[0] + b":"
            lines[i] = lines[i][: hit.end()] + b" " + extra + lines[i][hit.end() :]
            return b"\n".join(lines)
        choice = 3
    if choice == 9:  # only one line left, cut
        line = lines[i]
        return line[: rng.randrange(len(line) + 1)]
    if choice == 0:
        lines.insert(i, lines[i])
    elif choice == 1:
        del lines[i]
    elif choice == 2:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif choice == 3:
        lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    elif choice == 4:
        lines.insert(i, b"y" * rng.choice((70_000, 140_000, 1_000_000)))
    elif choice == 5:
        lines[i] = lines[i] + b"\r"
    elif choice == 6:
        lines.insert(i, lines[0])  # a header (or first record) again in the middle
    else:
        lines[i] = m_number(lines[i], rng)
    return b"\n".join(lines)


def m_text(data: bytes, rng: random.Random) -> bytes:
    return m_lines(data, rng) if rng.random() < 0.5 else m_bytes(data, rng)


def _json_value_spans(line: bytes) -> list[tuple[int, int]]:
    """Spans of scalar values after a `:` in a JSON object text (approximate, cheap)."""
    return [
        (m.start(1), m.end(1)) for m in re.finditer(rb':\s*("(?:[^"\\]|\\.)*"|[^,}\]\s]+)', line)
    ]


def m_json(data: bytes, rng: random.Random) -> bytes:
    """Replace one value (or a key) of one JSON text with something hostile."""
    lines = data.split(b"\n")
    candidates = [i for i, line in enumerate(lines) if b":" in line]
    if not candidates:
        return m_text(data, rng)
    i = rng.choice(candidates)
    if len(lines[i]) > 65536:  # the value regex is linear per colon: keep it off huge lines
        return m_text(data, rng)
    spans = _json_value_spans(lines[i])
    if not spans:
        return m_text(data, rng)
    a, b = rng.choice(spans)
    line = lines[i]
    if rng.random() < 0.15:  # a key instead: control characters, markup, a repeat
        new_key = rng.choice((b'"step"', b'"loss"', b'"a\\nb"', b'"[/]"', b'"\\u001b[31m"', b'""'))
        key = re.search(rb'"[^"]*"\s*:\s*$', line[:a])
        if key:
            lines[i] = line[: key.start()] + new_key + b": " + line[a:]
            return b"\n".join(lines)
    lines[i] = line[:a] + json_values(rng) + line[b:]
    return b"\n".join(lines)


def m_csv(data: bytes, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    header = lines[0] if lines else b""
    sep = b"\t" if header.count(b"\t") > header.count(b",") else b","
    choice = rng.randrange(7)
    if choice == 0 and header:  # a duplicate column name
        cells = header.split(sep)
        cells.append(rng.choice(cells))
        lines[0] = sep.join(cells)
    elif choice == 1 and len(lines) > 1:  # a giant cell
        i = rng.randrange(1, len(lines))
        cells = lines[i].split(sep)
        cells[rng.randrange(len(cells))] = b"9" * rng.choice((140_000, 1_000_000))
        lines[i] = sep.join(cells)
    elif choice == 2 and len(lines) > 1:  # extra or missing fields
        i = rng.randrange(1, len(lines))
        cells = lines[i].split(sep)
        lines[i] = sep.join(
            cells + [b"1"] * rng.randint(1, 5) if rng.random() < 0.5 else cells[:-1]
        )
    elif choice == 3 and len(lines) > 1:  # one cell hostile
        i = rng.randrange(1, len(lines))
        cells = lines[i].split(sep)
        cells[rng.randrange(len(cells))] = rng.choice(
            (*INTERESTING_NUMBERS, b'"a\nb"', b'"', b"[/]")
        )
        lines[i] = sep.join(cells)
    elif choice == 4:  # the header again
        lines.insert(rng.randrange(1, len(lines) + 1), header)
    else:
        return m_text(data, rng)
    return b"\n".join(lines)


_BOMBS: dict[str, bytes] = {}
BOMB_BYTES = 200 * 1024 * 1024  # inflated size of the bomb member appended to some mutants


def bomb(kind: str) -> bytes:
    """A compressed member of 200 MB of newlines, made once: gzip members and zstd frames
    concatenate, so it is appended to a small valid stream."""
    if kind not in _BOMBS:
        if kind == "gz":
            packer = zlib.compressobj(9, zlib.DEFLATED, 31)
            chunk = b"\n" * (1 << 20)
            parts = [packer.compress(chunk) for _ in range(BOMB_BYTES >> 20)]
            _BOMBS[kind] = b"".join(parts) + packer.flush()
        else:
            import zstandard

            packer = zstandard.ZstdCompressor(level=19).compressobj()
            chunk = b"\n" * (1 << 20)
            parts = [packer.compress(chunk) for _ in range(BOMB_BYTES >> 20)]
            _BOMBS[kind] = b"".join(parts) + packer.flush()
    return _BOMBS[kind]


def m_gz(data: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.3:
        return m_bytes(data, rng)
    try:
        unpacker = zlib.decompressobj(31)
        inner = unpacker.decompress(data, 16 << 20)
        if unpacker.unconsumed_tail or not unpacker.eof:
            return m_bytes(data, rng)  # damaged already, or a bomb was appended
    except zlib.error:
        return m_bytes(data, rng)
    out = gzip.compress(m_json(inner, rng), compresslevel=6, mtime=0)
    return out + bomb("gz") if rng.random() < 0.05 else out


def m_zst(data: bytes, rng: random.Random) -> bytes:
    import zstandard

    if rng.random() < 0.3:
        return m_bytes(data, rng)
    try:
        inner = zstandard.ZstdDecompressor().decompress(data, max_output_size=16 << 20)
        if len(inner) >= 16 << 20:
            return m_bytes(data, rng)
    except zstandard.ZstdError:
        return m_bytes(data, rng)
    out = zstandard.ZstdCompressor().compress(m_json(inner, rng))
    return out + bomb("zst") if rng.random() < 0.05 else out


# protobuf wire format, for payloads of TensorBoard events and W&B records


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _put_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def pb_parse(buf: bytes) -> list[tuple[int, int, object]]:
    """[(field, wire type, value)]: an int for varints, bytes otherwise; ValueError if not a
    message."""
    out: list[tuple[int, int, object]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
            out.append((number, wire, value))
        elif wire == 1:
            if pos + 8 > len(buf):
                raise ValueError("short")
            out.append((number, wire, buf[pos : pos + 8]))
            pos += 8
        elif wire == 5:
            if pos + 4 > len(buf):
                raise ValueError("short")
            out.append((number, wire, buf[pos : pos + 4]))
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("short")
            out.append((number, wire, buf[pos : pos + length]))
            pos += length
        else:
            raise ValueError("wire type")
    return out


def pb_encode(fields: list[tuple[int, int, object]]) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += _put_varint(number << 3 | wire)
        if wire == 0:
            out += _put_varint(int(value))  # type: ignore[call-overload]
        elif wire == 2:
            assert isinstance(value, bytes)
            out += _put_varint(len(value)) + value
        else:
            assert isinstance(value, bytes)
            out += value
    return bytes(out)


FLOAT_BITS = (math.nan, math.inf, -math.inf, 5e-324, 1e-45, 3.4e38, -0.0, 1e300, 60.5)
FLOAT32_BITS = (math.nan, math.inf, -math.inf, 1e-45, 1.2e-38, 3.4e38, -0.0, 60.5, 1e-30)


def m_protobuf(buf: bytes, rng: random.Random, depth: int = 0) -> bytes:
    """Change one leaf of a protobuf message (any depth), lengths kept consistent."""
    try:
        fields = pb_parse(buf)
    except ValueError:
        fields = []
    if not fields or depth > 6:
        return m_bytes(buf, rng) if depth else buf
    i = rng.randrange(len(fields))
    number, wire, value = fields[i]
    roll = rng.random()
    if roll < 0.05:
        fields.insert(i, fields[i])  # a repeated field
    elif roll < 0.1:
        del fields[i]
    elif wire == 0:
        fields[i] = (number, wire, rng.choice((0, 1, 2**31, 2**63 - 1, 2**63, 2**64 - 1, -1, 60)))
    elif wire == 5:
        fields[i] = (number, wire, struct.pack("<f", rng.choice(FLOAT32_BITS)))
    elif wire == 1:
        fields[i] = (number, wire, struct.pack("<d", rng.choice(FLOAT_BITS)))
    else:
        assert isinstance(value, bytes)
        inner: bytes
        if rng.random() < 0.5:
            inner = m_protobuf(value, rng, depth + 1)
        elif value[:1] in (b"{", b"[", b'"', b"-") or value[:1].isdigit() or value in (b"NaN",):
            inner = json_values(rng)  # a JSON text (W&B value_json)
        else:
            inner = rng.choice(
                (m_bytes(value, rng), b"\xff\xfe", b"[/]\n::error x", b"x" * 300_000)
            )
        fields[i] = (number, wire, inner)
    return pb_encode(fields)


# TFRecord


def tfrecords(data: bytes) -> list[bytes] | None:
    from stabilitycli.ingest.tensorboard._tfrecord import masked_crc

    out, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        if masked_crc(data[pos : pos + 8]) != struct.unpack_from("<I", data, pos + 8)[0]:
            return None
        end = pos + 12 + length
        if end + 4 > len(data):
            return None
        out.append(data[pos + 12 : end])
        pos = end + 4
    return out if pos == len(data) else None


def tfrecord_frame(payload: bytes, length: int | None = None) -> bytes:
    from stabilitycli.ingest.tensorboard._tfrecord import masked_crc

    header = struct.pack("<Q", len(payload) if length is None else length)
    return (
        header
        + struct.pack("<I", masked_crc(header))
        + payload
        + struct.pack("<I", masked_crc(payload))
    )


def m_tfrecord(data: bytes, rng: random.Random) -> bytes:
    records = tfrecords(data)
    if records is None or rng.random() < 0.2:
        return m_bytes(data, rng)
    if not records:
        return data + tfrecord_frame(rng.randbytes(20))
    i = rng.randrange(len(records))
    roll = rng.random()
    framed = [tfrecord_frame(r) for r in records]
    if roll < 0.5:
        framed[i] = tfrecord_frame(m_protobuf(records[i], rng))
    elif roll < 0.7:
        framed[i] = tfrecord_frame(m_bytes(records[i], rng))
    elif roll < 0.8:  # a length that lies, with a valid CRC of its own
        lie = rng.choice((0, len(records[i]) + 1, 2**31, 2**40, 2**64 - 1))
        framed[i] = tfrecord_frame(records[i], lie)
    elif roll < 0.9:
        framed.insert(i, framed[i] * rng.randint(1, 3))
    else:  # a big record: an image summary (kept under the memory budget)
        framed.insert(i, tfrecord_frame(m_protobuf(records[i], rng) + rng.randbytes(10) * 200_000))
    return b"".join(framed)


# W&B LevelDB-log framing

WANDB_MAGIC_LEN = 7
WANDB_BLOCK = 32768


def wandb_records(data: bytes) -> list[bytes] | None:
    pos, out, pending = WANDB_MAGIC_LEN, [], bytearray()
    while pos < len(data):
        left = WANDB_BLOCK - pos % WANDB_BLOCK
        if left < 7:
            pos += left
            continue
        if pos + 7 > len(data):
            return None
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0 and length == 0:
            pos += left
            continue
        payload = data[pos + 7 : pos + 7 + length]
        if len(payload) != length or zlib.crc32(payload, zlib.crc32(bytes([kind]))) != crc:
            return None
        pos += 7 + length
        if kind == 1:
            out.append(payload)
        elif kind == 2:
            pending = bytearray(payload)
        elif kind == 3:
            pending += payload
        elif kind == 4:
            out.append(bytes(pending + payload))
        else:
            return None
    return out


def wandb_frame(header: bytes, records: list[bytes], kinds: dict[int, int] | None = None) -> bytes:
    out = bytearray(header)
    for n, record in enumerate(records):
        rest, first = record, True
        while True:
            left = WANDB_BLOCK - len(out) % WANDB_BLOCK
            if left < 7:
                out += b"\x00" * left
                continue
            piece, rest = rest[: left - 7], rest[left - 7 :]
            last = not rest
            kind = 1 if first and last else 2 if first else 4 if last else 3
            if kinds and n in kinds:
                kind = kinds[n]
            crc = zlib.crc32(piece, zlib.crc32(bytes([kind])))
            out += struct.pack("<IHB", crc, len(piece), kind) + piece
            first = False
            if last:
                break
    return bytes(out)


def m_wandb(data: bytes, rng: random.Random) -> bytes:
    records = wandb_records(data)
    if records is None or rng.random() < 0.2:
        return m_bytes(data, rng)
    header = data[:WANDB_MAGIC_LEN]
    if not records:
        return data
    i = rng.randrange(len(records))
    roll = rng.random()
    kinds = None
    if roll < 0.6:
        records[i] = m_protobuf(records[i], rng)
    elif roll < 0.75:
        records[i] = m_bytes(records[i], rng)
    elif roll < 0.85:
        records.insert(
            i, records[i] + rng.randbytes(50) * rng.choice((10, 1000, 2000))
        )  # spans blocks
    elif roll < 0.95:
        kinds = {i: rng.choice((0, 2, 3, 4, 5, 255))}  # a chunk type that lies, CRC valid
    else:
        del records[i]
    return wandb_frame(header, records, kinds)


def m_yaml(data: bytes, rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.15:  # aliases that multiply (billion laughs, small)
        lines = [b"a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [
            b"a%d: &a%d [" % (n, n) + b", ".join([b"*a%d" % (n - 1)] * 10) + b"]"
            for n in range(1, 9)
        ]
        return data + b"\n" + b"\n".join(lines) + b"\n"
    if roll < 0.25:
        return data + b"\ndeep: " + deep(100_000) + b"\n"
    if roll < 0.35:
        return data + b"\nprecision: !!python/object/apply:os.system ['true']\n"
    return m_text(data, rng)


def m_mlflow_metric(data: bytes, rng: random.Random) -> bytes:
    """`timestamp value step` lines: a field hostile, missing, extra."""
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    cells = lines[i].split(b" ")
    roll = rng.random()
    if roll < 0.6 and cells:
        cells[rng.randrange(len(cells))] = rng.choice(INTERESTING_NUMBERS)
    elif roll < 0.7:
        cells = cells[:-1]
    elif roll < 0.8:
        cells.append(b"7")
    else:
        return m_text(data, rng)
    lines[i] = b" ".join(cells)
    return b"\n".join(lines)


SQL_VALUES = (
    "'abc'",
    "NULL",
    "1e19",
    "60.5",
    "-1",
    "9223372036854775807",
    "'NaN'",
    "X'00ff'",
    "1e308*10",
    "-1e308*10",
    "''",
    "'1.5'",
    "randomblob(300000)",
    "'[/]'",
    "'a' || char(10) || '::error x'",
    "0.1",
)


def m_sqlite(path: Path, rng: random.Random) -> None:
    """Edit a copy of an MLflow sqlite store in place with SQL (it stays a valid database)."""
    if rng.random() < 0.15:
        path.write_bytes(m_bytes(path.read_bytes(), rng))
        return
    conn = sqlite3.connect(path)
    try:
        tables = {
            r[0]: [c[1] for c in conn.execute(f"PRAGMA table_info('{r[0]}')")]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        roll = rng.random()
        if roll < 0.05:
            conn.execute(f"DROP TABLE {rng.choice(['metrics', 'runs', 'params', 'experiments'])}")
        elif roll < 0.1:
            conn.execute("PRAGMA journal_mode=WAL")
        else:
            table = rng.choice(
                [
                    t
                    for t in ("metrics", "latest_metrics", "runs", "params", "tags", "experiments")
                    if t in tables
                ]
            )
            column = rng.choice(tables[table])
            where = rng.choice(
                (
                    "",
                    f" WHERE rowid % {rng.randint(2, 9)} = 0",
                    f" WHERE rowid = (SELECT rowid FROM {table} LIMIT 1 OFFSET "
                    f"{rng.randint(0, 30)})",
                )
            )
            value = rng.choice(SQL_VALUES)
            if value.startswith("randomblob"):  # one big cell, not a 300 MB database
                where = f" WHERE rowid = (SELECT rowid FROM {table} LIMIT 1)"
            conn.execute(f"UPDATE {table} SET {column} = {value}{where}")
        conn.commit()
    except sqlite3.Error:
        pass
    finally:
        conn.close()


MUTATORS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "jsonl": lambda d, r: m_json(d, r) if r.random() < 0.5 else m_text(d, r),
    "json": lambda d, r: m_json(d, r) if r.random() < 0.6 else m_bytes(d, r),
    "csv": lambda d, r: m_csv(d, r),
    "text": m_text,
    "gz": m_gz,
    "zst": m_zst,
    "binary": m_bytes,
    "tfrecord": m_tfrecord,
    "wandb": m_wandb,
    "yaml": m_yaml,
    "mlflow_metric": m_mlflow_metric,
}


# formats where one byte changed in place damages one record (or two, when a separator
# changes), so a reader that reads on past damage keeps all the other rows
POINT_KINDS = ("jsonl", "json", "csv", "text", "tfrecord", "wandb", "mlflow_metric")
POINT_FRACTION = 0.15
POINT_SLACK = 2  # rows a point mutation may cost


def make_input(seed: Seed, rng: random.Random, dest: Path) -> tuple[list[str], bool]:
    """Copy the seed to `dest` and mutate it; what was done (for the report), and whether it
    was one byte changed in place (a point mutation, checked for silent row loss)."""
    shutil.copytree(seed.folder, dest)
    done = []
    if rng.random() < POINT_FRACTION:
        files = [rel for rel, kind in seed.files.items() if kind in POINT_KINDS]
        if files:
            rel = rng.choice(files)
            path = dest / rel
            data = bytearray(path.read_bytes())
            if data:
                at = rng.randrange(len(data))
                data[at] = (data[at] + rng.randrange(1, 256)) % 256
                path.write_bytes(bytes(data))
                return [f"point:{seed.files[rel]}:{rel}@{at}"], True
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        rel = rng.choice(list(seed.files))
        kind = seed.files[rel]
        path = dest / rel
        if not path.exists():
            continue
        if kind == "sqlite":
            m_sqlite(path, rng)
        else:
            path.write_bytes(MUTATORS[kind](path.read_bytes(), rng))
        done.append(f"{kind}:{rel}")
    return done, False


# --- running one input (in a worker) ----------------------------------------------


def _stab_frame(tb) -> str:
    """The innermost frame inside stabilitycli/ (file:function), or the innermost frame."""
    frames = traceback.extract_tb(tb)
    inside = [f for f in frames if "/stabilitycli/" in f.filename]
    pick = (inside or frames or [None])[-1]
    if pick is None:
        return "?"
    name = (
        pick.filename.split("/stabilitycli/")[-1]
        if "/stabilitycli/" in pick.filename
        else (Path(pick.filename).name)
    )
    return f"{name}:{pick.name}"


def _frame_nonfinite_ok(frame) -> bool:
    return True


def run_one(target: str, reader: str | None, folder: str, options: dict | None = None) -> dict:
    """Read, analyse and render one input; the outcome as a dict (never raises)."""
    from rich.console import Console

    from stabilitycli.core.errors import StabInputError, StabUsageError
    from stabilitycli.ingest import read
    from stabilitycli.ingest.options import ReadOptions
    from stabilitycli.pipeline.run import analyze
    from stabilitycli.report.formats import Format

    started = time.monotonic()
    out: dict = {"outcome": "ok"}
    stage = "read"
    before = _snapshot(folder)
    try:
        data = read(target, ReadOptions(format_in=reader, **(options or {})))
        out["format"] = data.source.format
        src = data.source
        out["rows"] = [src.rows_read, src.rows_used, src.rows_rejected, src.rows_rewritten]
        if (
            src.rows_read != src.rows_used + src.rows_rejected + src.rows_rewritten
            or min(out["rows"]) < 0
        ):
            out["outcome"] = "IDENTITY"
            out["type"] = "identity"
            out["message"] = (
                f"rows_read {src.rows_read} != used {src.rows_used} + rejected "
                f"{src.rows_rejected} + rewritten {src.rows_rewritten}"
            )
            out["frame"] = f"ingest/{src.format}"
            return out
        stage = "analyze"
        analysis = analyze(data)
        stage = "render"
        console = Console(
            file=io.StringIO(), width=100, force_terminal=True, color_system="truecolor"
        )
        console.print(Format.terminal.render(analysis))
        text = Format.json.render(analysis)
        assert isinstance(text, str)
        try:
            json.loads(text, parse_constant=_no_constant)
        except ValueError as err:
            out.update(
                outcome="INTERNAL",
                type="InvalidJSONOutput",
                message=str(err)[:300],
                frame="report/json_report.py:render",
                stage=stage,
            )
    except (StabInputError, StabUsageError) as err:
        message = str(err)
        out.update(outcome="input-error", type=type(err).__name__, message=message[:500])
        cause = _wrapped_cause(err)
        if cause is not None:
            out.update(
                outcome="WRAPPED",
                type=type(cause).__name__,
                frame=_stab_frame(cause.__traceback__),
                stage=stage,
                traceback="".join(traceback.format_exception(cause))[-4000:],
            )
        elif folder not in message and target not in message:
            tb = err.__traceback__
            out.update(
                outcome="INTERNAL",
                type=f"{type(err).__name__}(unnamed)",
                frame=_stab_frame(tb),
                stage=stage,
            )
    except MemoryError as err:
        out.update(
            outcome="MEMORY",
            type="MemoryError",
            message=str(err)[:300],
            frame=_stab_frame(err.__traceback__),
            stage=stage,
        )
    except BaseException as err:  # PanicException and RecursionError included
        if isinstance(err, KeyboardInterrupt):
            raise
        out.update(
            outcome="INTERNAL",
            type=type(err).__name__,
            message=str(err)[:500],
            frame=_stab_frame(err.__traceback__),
            stage=stage,
            traceback="".join(traceback.format_exception(err))[-4000:],
        )
    finally:
        out["seconds"] = round(time.monotonic() - started, 3)
    after = _snapshot(folder)
    if after != before and out["outcome"] in ("ok", "input-error"):
        changed = sorted(set(after.items()) ^ set(before.items()))
        out.update(
            outcome="INTERNAL",
            type="WroteBesideInput",
            frame=f"ingest/{reader}",
            message=f"the input folder changed: {changed[:4]}",
            stage="read",
        )
    return out


def _snapshot(folder: str) -> dict[str, tuple[int, int]]:
    """Every file under the input folder with its size and mtime: reading writes nothing."""
    found = {}
    root = Path(folder)
    if root.is_dir():
        for path in root.rglob("*"):
            with contextlib.suppress(OSError):
                info = path.lstat()
                found[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns)
    return found


_WRAPPER_WORDS = (
    "nested too deeply to follow",
    "the decoder failed on damaged data",
    "out of memory",
)


def _wrapped_cause(err: BaseException) -> BaseException | None:
    """The unexpected exception a catch-all boundary turned into this input error, if any.

    A reader's own error says what is wrong with the input; the boundary's fallback
    names the exception type (`cannot parse jsonl: NameError: ...`) or one of a few
    stock phrases. OSError causes (permission denied, ...) are input errors.
    """
    from stabilitycli.core.errors import StabInputError

    cause = err.__cause__
    while isinstance(cause, StabInputError) and cause.__cause__ is not None:
        cause = cause.__cause__
    if cause is None or isinstance(cause, (StabInputError, OSError)):
        return None
    message = str(err)
    if f"{type(cause).__name__}:" in message or any(w in message for w in _WRAPPER_WORDS):
        return cause
    return None


def _no_constant(name: str):
    raise ValueError(f"bare {name} in the JSON output")


def _hwm_kib() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _reset_hwm() -> None:
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def worker_main(conn, address_space_mb: int) -> None:
    import resource
    import warnings

    warnings.simplefilter("ignore")  # numpy overflow warnings from the rules: not findings
    os.environ.setdefault("POLARS_MAX_THREADS", "1")
    if address_space_mb:
        limit = address_space_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    import polars  # noqa: F401  (loaded once, before the first input is timed)

    import stabilitycli.pipeline.run  # noqa: F401

    conn.send({"ready": True})
    while True:
        task = conn.recv()
        if task is None:
            return
        _reset_hwm()
        result = run_one(task["target"], task["reader"], task["folder"], task.get("options"))
        result["peak_kib"] = _hwm_kib()
        conn.send(result)


class Worker:
    def __init__(self, ctx, address_space_mb: int):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, address_space_mb), daemon=True)
        self.proc.start()
        child.close()
        self.conn.recv()  # ready
        self.task: dict | None = None
        self.deadline = 0.0
        self.peak_seen = 0

    def rss_kib(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.join(5)


def _message(task: dict) -> dict:
    return {k: task.get(k) for k in ("target", "reader", "folder", "options")}


class Pool:
    """At most `jobs` worker processes; each input has a deadline and an RSS ceiling."""

    def __init__(self, jobs: int, timeout: float, max_rss_mb: int, address_space_mb: int):
        self.ctx = mp.get_context("spawn")
        self.timeout = timeout
        self.max_rss_kib = max_rss_mb * 1024
        self.address_space_mb = address_space_mb
        self.workers = [Worker(self.ctx, address_space_mb) for _ in range(jobs)]

    def run(self, tasks, on_result) -> None:
        """Run every task (a dict with target/reader/folder); on_result(task, result)."""
        from multiprocessing.connection import wait

        pending = iter(tasks)
        exhausted = False
        while True:
            for i, worker in enumerate(self.workers):
                if worker.task is None and not exhausted:
                    task = next(pending, None)
                    if task is None:
                        exhausted = True
                        continue
                    worker.task = task
                    worker.deadline = time.monotonic() + self.timeout
                    worker.peak_seen = 0
                    try:
                        worker.conn.send(_message(task))
                    except (BrokenPipeError, OSError):
                        self._replace(i)
                        self.workers[i].task = task
                        self.workers[i].deadline = time.monotonic() + self.timeout
                        self.workers[i].conn.send(_message(task))
            busy = [w for w in self.workers if w.task is not None]
            if not busy:
                return
            ready = wait([w.conn for w in busy], timeout=0.05)
            for i, worker in enumerate(self.workers):
                if worker.task is None:
                    continue
                task = worker.task
                if worker.conn in ready:
                    try:
                        result = worker.conn.recv()
                    except (EOFError, OSError):
                        code = worker.proc.exitcode
                        result = {
                            "outcome": "INTERNAL",
                            "type": "WorkerDied",
                            "message": f"worker exit code {code}",
                            "frame": "?",
                        }
                        self._replace(i)
                    self.workers[i].task = None
                    result["peak_kib"] = max(result.get("peak_kib", 0), worker.peak_seen)
                    on_result(task, result)
                    continue
                rss = worker.rss_kib()
                worker.peak_seen = max(worker.peak_seen, rss)
                if rss > self.max_rss_kib:
                    self._replace(i)
                    on_result(
                        task,
                        {
                            "outcome": "MEMORY",
                            "type": "RSS",
                            "message": f"RSS {rss // 1024} MB over the ceiling",
                            "frame": "?",
                            "peak_kib": rss,
                        },
                    )
                elif time.monotonic() > worker.deadline:
                    self._replace(i)
                    on_result(
                        task,
                        {
                            "outcome": "HANG",
                            "type": "Timeout",
                            "message": f"not done after {self.timeout:g} s",
                            "frame": "?",
                            "peak_kib": worker.peak_seen,
                        },
                    )

    def _replace(self, i: int) -> None:
        self.workers[i].kill()
        self.workers[i] = Worker(self.ctx, self.address_space_mb)

    def close(self) -> None:
        for worker in self.workers:
            with contextlib.suppress(Exception):
                worker.conn.send(None)
            worker.proc.join(2)
            worker.kill()


# --- the campaign ------------------------------------------------------------------


@dataclass
class Tally:
    inputs: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    peak_kib: int = 0
    seconds: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)  # input-error messages, normalised
    failures: dict[str, tuple[dict, dict]] = field(default_factory=dict)


def failure_key(reader: str, result: dict) -> str:
    return f"{reader}|{result['outcome']}|{result.get('type')}|{result.get('frame')}"


class Findings:
    """Distinct failures, each written to OUT/<reader>.txt with its reproducer."""

    def __init__(self, out: Path):
        self.out = out
        (out / "repro").mkdir(parents=True, exist_ok=True)
        self.seen: dict[str, dict] = {}
        self._load()

    def _load(self) -> None:
        index = self.out / "findings.json"
        if index.exists():
            with contextlib.suppress(ValueError):
                self.seen = json.loads(index.read_text())

    def save(self) -> None:
        (self.out / "findings.json").write_text(json.dumps(self.seen, indent=1))

    def add(self, reader: str, task: dict, result: dict) -> tuple[str, bool]:
        key = failure_key(reader, result)
        entry = self.seen.get(key)
        if entry is not None:
            entry["count"] = entry.get("count", 0) + 1
            entry["last_seen"] = time.strftime("%H:%M:%S", time.gmtime())
            entry["still_failing"] = True
            return key, False
        ident = hashlib.sha1(key.encode()).hexdigest()[:10]
        dest = self.out / "repro" / f"{reader}-{ident}"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(task["folder"], dest)
        target = str(dest / task["rel_target"]) if task["rel_target"] != "." else str(dest)
        meta = {
            "reader": task["reader"],
            "target": target,
            "under_test": reader,
            "options": task.get("options") or {},
            "mutations": task["mutations"],
            "seed": task["seed_name"],
            "baseline": task.get("baseline"),
        }
        (dest.parent / f"{dest.name}.json").write_text(json.dumps(meta, indent=1))
        self.seen[key] = {
            "reader": reader,
            "outcome": result["outcome"],
            "type": result.get("type"),
            "frame": result.get("frame"),
            "message": result.get("message", ""),
            "stage": result.get("stage"),
            "repro": str(dest),
            "target": target,
            "format_in": task["reader"],
            "baseline": task.get("baseline"),
            "count": 1,
            "id": ident,
            "options": task.get("options") or {},
            "first_seen": time.strftime("%H:%M:%S", time.gmtime()),
            "traceback": result.get("traceback", ""),
            "mutations": task["mutations"],
            "reduced": False,
            "still_failing": True,
        }
        return key, True

    def write_reports(self) -> None:
        by_reader: dict[str, list[dict]] = {}
        for entry in self.seen.values():
            by_reader.setdefault(entry["reader"], []).append(entry)
        for reader, entries in by_reader.items():
            lines = [
                f"# fuzz findings for {reader} (updated {time.strftime('%H:%M:%S', time.gmtime())}"
                " UTC)",
                f"# {len(entries)} distinct failure(s); replay one with the command under it",
                "",
            ]
            for e in sorted(entries, key=lambda e: e["first_seen"]):
                lines += [
                    f"## {e['outcome']} {e['type']} at {e['frame']}" + status(e),
                    f"message: {e['message'][:400]!r}",
                    f"stage: {e.get('stage')}; inputs that hit it: {e['count']}; first seen "
                    f"{e['first_seen']} UTC; mutations: {', '.join(e['mutations'])}"
                    + ("; reproducer reduced" if e.get("reduced") else ""),
                    f"reproducer: {e['target']}",
                    f"python: {one_liner(e)}",
                    f"replay: .venv/bin/python scripts/fuzz_readers.py --replay {e['repro']}",
                    f"cli:    {cli_line(e)}",
                ]
                if e.get("traceback"):
                    tail = e["traceback"].strip().splitlines()[-8:]
                    lines += ["traceback (tail):", *("    " + t for t in tail)]
                lines.append("")
            (self.out / f"{reader}.txt").write_text("\n".join(lines))


def status(e: dict) -> str:
    if e.get("still_failing", True):
        return ""
    if e.get("rechecked"):
        return f"   [FIXED? its reproducer gives {e.get('now', 'ok')} at {e['rechecked']} UTC]"
    return "   [not seen in the latest run]"


def one_liner(e: dict) -> str:
    """A python command that reads, analyses and renders the reproducer as the fuzzer did."""
    options = ", ".join(
        [f"format_in={json.dumps(e['format_in']) if e['format_in'] else None}"]
        + [f"{k}={json.dumps(v)}" for k, v in e.get("options", {}).items()]
    )
    code = (
        "from stabilitycli.ingest import read; from stabilitycli.ingest.options import "
        "ReadOptions; from stabilitycli.pipeline.run import analyze; from stabilitycli.report "
        "import json_report, terminal; from rich.console import Console; "
        f"a = analyze(read({json.dumps(e['target'])}, ReadOptions({options}))); "
        "Console(width=100).print(terminal.build(a)); print(json_report.render(a))"
    )
    return f".venv/bin/python -c {shlex.quote(code)}"


def cli_line(e: dict) -> str:
    words = ["STAB_DEBUG=1", ".venv/bin/stab", "analyze", shlex.quote(e["target"])]
    if e["format_in"]:
        words += ["--format-in", e["format_in"]]
    for k, v in e.get("options", {}).items():
        words += [f"--{k.replace('_', '-')}", shlex.quote(str(v))]
    return " ".join(words)


def tasks_for(
    reader: str,
    seeds: list[Seed],
    count: int,
    seed: int,
    work: Path,
    auto_fraction: float,
    deadline: float | None = None,
):
    """The mutants of one reader, made as they are asked for: `count` of them, or fewer if
    time.monotonic() passes `deadline`. The same seed gives the same inputs."""
    rng = random.Random(f"{seed}-{reader}")
    for n in range(count):
        if deadline is not None and time.monotonic() > deadline:
            return
        chosen = rng.choice(seeds)
        folder = work / f"{reader}-{n}"
        if folder.exists():
            shutil.rmtree(folder)
        try:
            mutations, point = make_input(chosen, rng, folder)
        except Exception as err:  # a bug of the fuzzer, not of stab: say it and go on
            print(
                f"  mutation failed ({type(err).__name__}: {err}); input skipped", file=sys.stderr
            )
            shutil.rmtree(folder, ignore_errors=True)
            continue
        target = str(folder / chosen.target) if chosen.target != "." else str(folder)
        forced = rng.random() >= auto_fraction
        yield {
            "target": target,
            "reader": reader if forced else None,
            "folder": str(folder),
            "rel_target": chosen.target,
            "mutations": mutations,
            "seed_name": chosen.name,
            "n": n,
            "options": chosen.options,
            "baseline": chosen.rows if point else None,
        }


def check_seeds(pool: Pool, reader: str, seeds: list[Seed], work: Path) -> list[str]:
    """Each unmutated seed must read cleanly with --format-in; say so when one does not.
    Sets each seed's `rows`, the baseline of the silent-loss check; returns the seeds that
    did not read."""
    by_name = {seed.name: seed for seed in seeds}
    bad: list[str] = []
    tasks = []
    for seed in seeds:
        folder = work / f"seedcheck-{reader}-{seed.name}"
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(seed.folder, folder)
        target = str(folder / seed.target) if seed.target != "." else str(folder)
        tasks.append(
            {
                "target": target,
                "reader": reader,
                "folder": str(folder),
                "options": seed.options,
                "name": seed.name,
            }
        )

    def done(task, result):
        if result["outcome"] == "ok":
            by_name[task["name"]].rows = result["rows"][0]
        else:
            bad.append(f"{task['name']}: {result['outcome']} {result.get('message', '')[:200]}")
            print(
                f"  seed {reader}/{task['name']} is not ok unmutated: {result['outcome']} "
                f"{result.get('type')} {result.get('message', '')[:200]}",
                file=sys.stderr,
            )
        shutil.rmtree(task["folder"], ignore_errors=True)

    pool.run(tasks, done)
    return bad


def reduce(pool_run: Callable[..., dict], reader: str, entry: dict, budget_s: float = 20.0) -> None:
    """Shrink the reproducer while the failure keeps its key: drop lines, then byte chunks, of
    each text-like file (binary stores are kept whole)."""
    dest = Path(entry["repro"])
    key = f"{reader}|{entry['outcome']}|{entry['type']}|{entry['frame']}"
    started = time.monotonic()

    def still(path: Path, data: bytes) -> bool:
        old = path.read_bytes()
        path.write_bytes(data)
        result = pool_run(entry["target"], entry["format_in"], str(dest), entry.get("options"))
        if failure_key(reader, result) == key:
            return True
        path.write_bytes(old)
        return False

    files = [p for p in dest.rglob("*") if p.is_file() and _kind_of(p) not in ("sqlite",)]
    for path in files:
        data = path.read_bytes()
        for sep in (b"\n", None):
            parts = (
                data.split(b"\n") if sep else [data[i : i + 64] for i in range(0, len(data), 64)]
            )
            joiner = sep or b""
            chunk = max(1, len(parts) // 2)
            while chunk >= 1 and time.monotonic() - started < budget_s:
                i, changed = 0, False
                while i < len(parts) and time.monotonic() - started < budget_s:
                    trial = parts[:i] + parts[i + chunk :]
                    if trial and still(path, joiner.join(trial)):
                        parts, changed = trial, True
                    else:
                        i += chunk
                if not changed:
                    chunk //= 2
            data = path.read_bytes()
    entry["reduced"] = True


def owner_of(reader: str, task: dict, result: dict) -> str:
    """The reader a failure belongs to: the one that read the input, else the one whose module
    raised, else the one under test (format detection may hand a mutant to another)."""
    if result.get("format") in READERS:
        return result["format"]
    if task["reader"]:
        return task["reader"]
    match = re.match(r"ingest/(\w+)\.py:", result.get("frame") or "")
    if match and match.group(1) in READERS:
        return match.group(1)
    return reader


def lost_rows(reader: str, task: dict, result: dict) -> None:
    """A point mutation read as far fewer rows than its seed: rows dropped uncounted (LOSS)."""
    baseline = task.get("baseline")
    if baseline is None or result["outcome"] != "ok" or result.get("format") != reader:
        return
    rows = result["rows"][0]
    if rows < baseline - POINT_SLACK:
        result.update(
            outcome="LOSS",
            type="SilentLoss",
            frame=f"ingest/{reader}",
            stage="read",
            message=f"{rows} rows read (used + rejected + rewritten) of the {baseline} the "
            f"unmutated log gives, after one byte changed ({task['mutations'][0]}): rows "
            "dropped without being counted as rejected",
        )


def sample(
    pool: Pool,
    reader: str,
    seeds: list[Seed],
    count: int,
    seed: int,
    work: Path,
    auto_fraction: float = 0.2,
    on_failure: Callable[[dict, dict], None] | None = None,
    keep: Path | None = None,
    seconds: float | None = None,
) -> Tally:
    """`count` mutants of `reader`'s seeds through the pool; the tally, with each distinct
    failure (outcome|type|frame) and the first task that hit it in `tally.failures` (its input
    copied to `keep`/<n>, task["kept"] the path to read, when `keep` is given)."""
    tally = Tally()
    started = time.monotonic()

    def on_result(task, result):
        tally.inputs += 1
        lost_rows(reader, task, result)
        outcome = result["outcome"]
        tally.counts[outcome] = tally.counts.get(outcome, 0) + 1
        tally.peak_kib = max(tally.peak_kib, result.get("peak_kib", 0))
        if outcome == "input-error":
            said = re.sub(r"\S*stab-fuzz-\S*|\d+", "#", result.get("message", ""))[:90]
            tally.errors[said] = tally.errors.get(said, 0) + 1
        if outcome not in ("ok", "input-error"):
            key = f"{outcome}|{result.get('type')}|{result.get('frame')}"
            if key not in tally.failures:
                if keep is not None:
                    copy = keep / f"{reader}-{len(tally.failures)}"
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.copytree(task["folder"], copy)
                    rel = task["rel_target"]
                    task["kept"] = str(copy / rel) if rel != "." else str(copy)
                tally.failures[key] = (task, result)
            if on_failure is not None:
                on_failure(task, result)
        shutil.rmtree(task["folder"], ignore_errors=True)
        if tally.inputs % 1000 == 0:
            print(f"  {reader}: {tally.inputs} ...", file=sys.stderr, flush=True)

    deadline = None if seconds is None else started + seconds
    pool.run(tasks_for(reader, seeds, count, seed, work, auto_fraction, deadline), on_result)
    tally.seconds = time.monotonic() - started
    return tally


def campaign(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="stab-fuzz-"))
    readers = READERS if args.reader == "all" else tuple(args.reader.split(","))
    seeds = build_seeds(work / "seeds")
    findings = Findings(out)
    if args.fresh:
        findings.seen = {}
    for entry in findings.seen.values():
        if entry["reader"] in readers:
            entry["still_failing"] = False
    pool = Pool(args.jobs, args.timeout, args.max_rss_mb, args.address_space_mb)
    tallies: dict[str, Tally] = {}
    new_keys: list[tuple[str, str]] = []
    budget_end = None if args.budget is None else time.monotonic() + args.budget
    try:
        for position, reader in enumerate(readers):
            share = None
            if budget_end is not None:  # what is left, shared by the readers still to run
                share = max(10.0, (budget_end - time.monotonic()) / (len(readers) - position))
            if not seeds.get(reader):
                print(f"{reader}: no seeds", file=sys.stderr)
                continue
            check_seeds(pool, reader, seeds[reader], work / "inputs")

            def on_failure(task, result, reader=reader):
                owner = owner_of(reader, task, result)
                key, new = findings.add(owner, task, result)
                if new:
                    new_keys.append((owner, key))
                    findings.write_reports()
                    findings.save()
                    print(f"  new: {key}", file=sys.stderr, flush=True)

            tally = sample(
                pool,
                reader,
                seeds[reader],
                args.count,
                args.seed,
                work / "inputs",
                args.auto_fraction,
                on_failure,
                seconds=share,
            )
            tallies[reader] = tally
            print(
                f"{reader}: {tally.inputs} inputs in {tally.seconds:.0f} s "
                + " ".join(f"{k}={v}" for k, v in tally.counts.items() if v),
                flush=True,
            )
            if args.verbose:
                for said, n in sorted(tally.errors.items(), key=lambda kv: -kv[1])[:8]:
                    shown = "".join(c if c.isprintable() else "?" for c in said)
                    print(f"    {n:5d}  {shown}", flush=True)
            write_summary(out, tallies, args)
        if args.reduce:
            single = Pool(1, args.timeout, args.max_rss_mb, args.address_space_mb)

            def pool_run(target, reader, folder, options):
                box: dict = {}
                single.run(
                    [{"target": target, "reader": reader, "folder": folder, "options": options}],
                    lambda _t, r: box.update(r),
                )
                return box

            try:
                for owner, key in new_keys:
                    entry = findings.seen[key]
                    if entry["outcome"] in ("HANG", "MEMORY", "LOSS"):
                        continue
                    reduce(pool_run, owner, entry)
                    findings.write_reports()
                    findings.save()
            finally:
                single.close()
    finally:
        pool.close()
        findings.write_reports()
        findings.save()
        shutil.rmtree(work, ignore_errors=True)
    write_summary(out, tallies, args)
    bad = sum(t.counts[k] for t in tallies.values() for k in OUTCOMES[2:])
    return 1 if bad else 0


def write_summary(out: Path, tallies: dict[str, Tally], args) -> None:
    """OUT/SUMMARY.md: the latest run of each reader (kept in OUT/tallies.json), so a run of
    a few readers updates their rows and keeps the others'."""
    command = (
        f".venv/bin/python scripts/fuzz_readers.py --reader {args.reader} --count "
        f"{args.count} --seed {args.seed} --jobs {args.jobs} --timeout {args.timeout:g} "
        f"--out {args.out}" + ("" if args.budget is None else f" --budget {args.budget:g}")
    )
    store = out / "tallies.json"
    kept: dict[str, dict] = {}
    if store.exists():
        with contextlib.suppress(ValueError):
            kept = json.loads(store.read_text())
    now = time.strftime("%H:%M", time.gmtime())
    for reader, t in tallies.items():
        kept[reader] = {
            "inputs": t.inputs,
            "counts": t.counts,
            "peak_kib": t.peak_kib,
            "failures": sorted(t.failures),  # outcome|type|frame, for tests' KNOWN_FAILURES
            "seconds": round(t.seconds),
            "at": now,
            "commit": _commit(),
            "command": command,
        }
    store.write_text(json.dumps(kept, indent=1))
    head = (
        "| reader | inputs | ok | input-error | internal | wrapped | hang | memory "
        "| identity-broken | silent loss | peak RSS (MB) | seconds | run at (UTC) | commit |"
    )
    rows = [head, "|" + "---|" * 14]
    total = Tally()
    commands: list[str] = []
    for reader in READERS:
        if reader not in kept:
            continue
        t = kept[reader]
        c = {k: t["counts"].get(k, 0) for k in OUTCOMES}
        rows.append(
            f"| {reader} | {t['inputs']} | {c['ok']} | {c['input-error']} | {c['INTERNAL']} "
            f"| {c['WRAPPED']} | {c['HANG']} | {c['MEMORY']} | {c['IDENTITY']} | {c['LOSS']} "
            f"| {t['peak_kib'] // 1024} | {t['seconds']} | {t['at']} | {t['commit']} |"
        )
        total.inputs += t["inputs"]
        for k in OUTCOMES:
            total.counts[k] += c[k]
        total.peak_kib = max(total.peak_kib, t["peak_kib"])
        total.seconds += t["seconds"]
        if t["command"] not in commands:
            commands.append(t["command"])
    c = total.counts
    rows.append(
        f"| **all** | {total.inputs} | {c['ok']} | {c['input-error']} | {c['INTERNAL']} "
        f"| {c['WRAPPED']} | {c['HANG']} | {c['MEMORY']} | {c['IDENTITY']} | {c['LOSS']} "
        f"| {total.peak_kib // 1024} | {total.seconds:.0f} | | |"
    )
    text = "\n".join(
        [
            "# Reader fuzzing: summary",
            "",
            f"Written {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC.",
            "",
            "Command(s) (each reader's row is from its latest run):",
            "",
            "```",
            *commands,
            "```",
            "",
            *rows,
            "",
            f"Per input: {args.timeout:g} s deadline (HANG), {args.max_rss_mb} MB RSS ceiling "
            "(MEMORY); peak RSS is the worker's high-water mark during one input (Python, polars "
            "and stab loaded: about 150-250 MB before any input).",
            "internal: an exception other than StabInputError reached the caller (a traceback, or "
            "`internal error` from the CLI). wrapped: a StabInputError that the catch-all boundary "
            "in `ingest.read` made from an unexpected exception (`cannot parse jsonl: NameError: "
            "...`): the user sees one line, but it is a reader bug that rejects the whole file.",
            "silent loss: one byte changed in place in a text or record format, and more than "
            f"{POINT_SLACK} fewer rows read than from the unmutated log (rows dropped uncounted).",
            "Distinct failures: the <reader>.txt files beside this one.",
            "",
        ]
    )
    (out / "SUMMARY.md").write_text(text)


def _commit() -> str:
    try:
        head = (ROOT / ".git" / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            return (ROOT / ".git" / head[5:]).read_text().strip()[:12]
        return head[:12]
    except OSError:
        return "?"


def recheck(args) -> int:
    """Replay every saved reproducer in OUT and mark each finding fixed or still failing
    (quick: one input a finding; run it after a reader fix is committed)."""
    out = Path(args.out)
    findings = Findings(out)
    pool = Pool(args.jobs, args.timeout, args.max_rss_mb, args.address_space_mb)
    still = 0
    try:
        entries = list(findings.seen.items())
        tasks = [
            {
                "target": e["target"],
                "reader": e["format_in"],
                "folder": e["repro"],
                "options": e.get("options") or {},
                "key": key,
                "baseline": e.get("baseline"),
                "mutations": e.get("mutations", []),
            }
            for key, e in entries
            if Path(e["repro"]).exists()
        ]

        def done(task, result):
            nonlocal still
            entry = findings.seen[task["key"]]
            lost_rows(entry["reader"], task, result)
            same = failure_key(entry["reader"], result) == task["key"]
            entry["still_failing"] = same
            entry["rechecked"] = time.strftime("%H:%M:%S", time.gmtime())
            if not same:
                entry["now"] = f"{result['outcome']} {result.get('type', '')}"
            still += same
            print(
                f"{'FAILS' if same else 'fixed'}  {task['key']}"
                + ("" if same else f"  -> now {entry['now']}")
            )

        pool.run(tasks, done)
    finally:
        pool.close()
        findings.write_reports()
        findings.save()
    print(f"{still} of {len(findings.seen)} findings still fail")
    return 1 if still else 0


def replay(args) -> int:
    repro = Path(args.replay.rstrip("/"))
    meta = json.loads(Path(f"{repro}.json").read_text())
    result = run_one(meta["target"], meta["reader"], str(repro), meta.get("options"))
    task = {"baseline": meta.get("baseline"), "mutations": meta.get("mutations", [])}
    lost_rows(meta["reader"] or meta["under_test"], task, result)
    if result.get("traceback"):
        print(result["traceback"], file=sys.stderr)
    print(json.dumps({k: v for k, v in result.items() if k != "traceback"}, indent=1))
    return 0 if result["outcome"] in ("ok", "input-error") else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reader", default="all", help="a reader name, a comma list, or all")
    parser.add_argument("--count", type=int, default=300, help="inputs per reader")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for the whole run, shared evenly by the readers; each "
        "stops at --count or at its share (the summary says how many ran)",
    )
    parser.add_argument("--out", default="/tmp/fuzz-findings")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per input")
    parser.add_argument("--max-rss-mb", type=int, default=1024)
    parser.add_argument(
        "--address-space-mb",
        type=int,
        default=0,
        help="RLIMIT_AS of each worker (0: none; the RSS ceiling still holds)",
    )
    parser.add_argument(
        "--auto-fraction",
        type=float,
        default=0.2,
        help="share of inputs read with format detection instead of --format-in",
    )
    parser.add_argument(
        "--reduce",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="shrink the reproducer of each new failure",
    )
    parser.add_argument("--fresh", action="store_true", help="forget earlier findings in --out")
    parser.add_argument("--verbose", action="store_true", help="the commonest input errors")
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="replay every reproducer in --out and mark what is fixed",
    )
    parser.add_argument("--replay", help="run one saved reproducer (a repro/<id> folder)")
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args)
    if args.recheck:
        return recheck(args)
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())
