"""Seeded fuzzing of the sources added after the readers were hardened (issue 33, item 6):
standard input, the text-log families, config files beside a log, and results-store files
(object-store listings: tests/ingest/test_fuzz_object_store.py).

Each input must end as a read run or one input / usage error: never another exception
(an internal error), never a hang (a wall-clock bound on every test), never a file
written beside the input. Small, fixed seeds: each test takes a few seconds.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import shutil
import signal
import sqlite3
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli.cli import app
from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.ingest import read
from tests.conftest import FIXTURES, run_fixture

SEED = 33
TEST_SECONDS = 60  # far over what each test takes (a few seconds): only a hang reaches it

TEXT_SEEDS = (
    "textlogs/nanogpt/train.log",
    "textlogs/torchtitan/stdout.log",
    "textlogs/keras/fit.log",
    "textlogs/fairseq/simple.log",
    "textlogs/hf_stdout/train.log",
    "megatron/gpt_fp16.log",
    "deepspeed/fused_4ranks.log",
    "llmc/main.log",
)
# what a damaged or hostile log puts where a number or a key was
HOSTILE_NUMBERS = (
    "0.5",
    "2.5e0",
    "1e400",
    "-1",
    "-0",
    "nan",
    "inf",
    "99999999999999999999999",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: isdigit(), not ASCII
    "",
    "1_000",
    "0x10",
)
HOSTILE_TEXT = ("\ud800", "\x00", "\x1b[2J", "|", ":", "=", "{", "}", '"', "\u202e", "\r")


@contextmanager
def _bounded(seconds: int = TEST_SECONDS):
    """A hang fails the test instead of stalling the suite."""

    def late(signum, frame):
        raise TimeoutError(f"a fuzz input took over {seconds} s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _seed_path(name: str) -> Path:
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"fixture {name} is gone")
    return path


def _mutate_text(text: str, rng: random.Random) -> str:
    """One to three edits that know a text log: a number or a key made hostile, a line
    cut, doubled or dropped, a hostile character put in."""
    lines = text.splitlines(keepends=True) or [""]
    for _ in range(rng.randint(1, 3)):
        index = rng.randrange(len(lines))
        line = lines[index]
        edit = rng.randrange(6)
        numbers = list(re.finditer(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", line))
        if edit == 0 and numbers:
            span = rng.choice(numbers)
            line = line[: span.start()] + rng.choice(HOSTILE_NUMBERS) + line[span.end() :]
        elif edit == 1:
            keys = list(re.finditer(r"[A-Za-z_][\w /]*(?=\s*[:=])", line))
            if keys:
                span = rng.choice(keys)
                line = line[: span.start()] + line[span.end() :]  # `: 3.2` with no key
        elif edit == 2 and line:
            line = line[: rng.randrange(len(line))]
        elif edit == 3:
            lines.insert(index, line)
        elif edit == 4 and len(lines) > 1:
            line = ""
        else:
            at = rng.randrange(len(line) + 1)
            line = line[:at] + rng.choice(HOSTILE_TEXT) + line[at:]
        lines[index] = line
    return "".join(lines)


def _read_or_refuse(target, **options) -> None:
    """Read `target`; a read run or an input / usage error is an answer, anything else
    raised is the failure this test is for."""
    from stabilitycli.ingest.options import ReadOptions

    try:
        run = read(target, ReadOptions(**options))
    except (StabInputError, StabUsageError):
        return
    source = run.source
    assert source.rows_read == source.rows_used + source.rows_rejected + source.rows_rewritten


def _listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.mark.parametrize("seed_name", TEXT_SEEDS)
def test_text_log_families_answer_every_mutant(seed_name, tmp_path) -> None:
    text = _seed_path(seed_name).read_text(encoding="utf-8", errors="surrogateescape")
    rng = random.Random(f"{SEED}-{seed_name}")
    with _bounded():
        for number in range(12):
            path = tmp_path / f"m{number}" / Path(seed_name).name
            path.parent.mkdir()
            path.write_bytes(_mutate_text(text, rng).encode("utf-8", "surrogatepass"))
            before = _listing(path.parent)
            _read_or_refuse(path)
            assert _listing(path.parent) == before, f"{path}: something written beside it"


class _Piped:
    """Standard input holding `data`, as a pipe (not a terminal)."""

    def __init__(self, data: bytes):
        self.buffer = io.BytesIO(data)

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("seed_name", [*TEXT_SEEDS[:4], "jsonl", "csv"])
def test_stdin_answers_every_mutant(seed_name, monkeypatch) -> None:
    if seed_name == "jsonl":
        data = run_fixture("spike-persistent").read_bytes()
    elif seed_name == "csv":
        data = (FIXTURES / "tabular" / "metrics.csv").read_bytes()
    else:
        data = _seed_path(seed_name).read_bytes()
    text = data.decode("utf-8", "surrogateescape")
    rng = random.Random(f"{SEED}-stdin-{seed_name}")
    with _bounded():
        for number in range(10):
            mutant = _mutate_text(text, rng).encode("utf-8", "surrogatepass")
            if number % 3 == 0:  # raw bytes too: a binary blob piped in by mistake
                mutant = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
            monkeypatch.setattr("sys.stdin", _Piped(mutant))
            _read_or_refuse("-")


CONFIG_VALUES = (
    "3",
    "-1",
    "0",
    "1e400",
    "nan",
    "inf",
    '"text"',
    "true",
    "[1, 2]",
    "{a = 1}",
    "1979-05-27",
    "9223372036854775807",
    '"\\ud800"',
    "[" * 70 + "]" * 70,
)
CONFIG_KEYS = ("spike_sigma", "spike-sigma", "window_steps", "", "thresholds", "no_such", "ä")


def _config_text(rng: random.Random) -> tuple[str, str]:
    lines = []
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(CONFIG_KEYS) or '""'
        lines.append(f"{key} = {rng.choice(CONFIG_VALUES)}")
    body = "\n".join(lines) + "\n"
    if rng.random() < 0.2:
        cut = rng.randrange(len(body))
        body = body[:cut]
    if rng.random() < 0.5:
        return "stab.toml", ("[thresholds]\n" if rng.random() < 0.5 else "") + body
    return "pyproject.toml", "[tool.stab]\n" + body


def test_config_files_beside_a_log_answer_in_one_line(tmp_path) -> None:
    rng = random.Random(f"{SEED}-config")
    runner = CliRunner()
    with _bounded():
        for number in range(40):
            folder = tmp_path / f"c{number}"
            folder.mkdir()
            log = Path(shutil.copy(run_fixture("plateau"), folder / "run.jsonl"))
            name, text = _config_text(rng)
            (folder / name).write_bytes(text.encode("utf-8", "surrogatepass"))
            before = _listing(folder)
            result = runner.invoke(app, ["analyze", str(log)])
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                text,
                repr(result.exception),
            )
            assert "internal error" not in result.stderr, (text, result.stderr)
            if result.exit_code == 2:
                assert len(result.stderr.splitlines()) == 1, (text, result.stderr)
            assert _listing(folder) == before


STORE_JUNK = ("", "not json", "[1]", "{}", None, 1e19, -1, b"\xff\xfe", "x" * 5000, "[" * 200)


def test_a_damaged_results_store_is_never_an_internal_error(tmp_path) -> None:
    rng = random.Random(f"{SEED}-results")
    root = tmp_path / "runs"
    root.mkdir()
    for name in ("spike-persistent", "plateau"):
        shutil.copy(run_fixture(name), root / f"{name}.jsonl")
    clean = tmp_path / "clean.db"
    runner = CliRunner()
    runner.invoke(app, ["analyze", "-r", str(root), "--results", str(clean), "--jobs", "1"])
    with sqlite3.connect(clean) as conn:
        columns = [
            (table, column)
            for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for (_, column, *_) in conn.execute(f"PRAGMA table_info({table})")
        ]
    conn.close()
    with _bounded():
        for number in range(16):
            store = tmp_path / f"s{number}.db"
            shutil.copy(clean, store)
            if number % 4 == 3:  # bytes damaged: no longer a database sqlite can read whole
                data = bytearray(store.read_bytes())
                for _ in range(rng.randint(1, 20)):
                    data[rng.randrange(100, len(data))] = rng.randrange(256)
                store.write_bytes(bytes(data))
            else:
                with sqlite3.connect(store) as conn:
                    for _ in range(rng.randint(1, 3)):
                        table, column = rng.choice(columns)
                        junk = rng.choice(STORE_JUNK)
                        # one row: a column of unique values takes the junk once; an
                        # integer key refuses other kinds (the damage did not happen)
                        with contextlib.suppress(sqlite3.IntegrityError):
                            conn.execute(
                                f"UPDATE {table} SET {column} = ? WHERE rowid = "
                                f"(SELECT MIN(rowid) FROM {table})",
                                (junk,),
                            )
                conn.close()
            for args in (
                ["analyze", "-r", str(root), "--results", str(store), "--jobs", "1", "-q"],
                ["summary", str(store)],
                ["summary", str(store), "--changed", "--format", "json"],
            ):
                result = runner.invoke(app, args)
                assert result.exception is None or isinstance(result.exception, SystemExit), (
                    args,
                    repr(result.exception),
                )
                assert "internal error" not in result.stderr, (number, args, result.stderr)


LIGHTNING_CELLS = ("", "nan", "x", "1e400", "-1", "0.5", "inf", "-inf", "9223372036854775808")
LIGHTNING_COLUMNS = ("epoch", "lr-AdamW", "step", "train/loss_step", "val_loss", "", "loss")


def test_lightning_folders_of_versions_answer_every_mutant(tmp_path) -> None:
    """Random folders of versions: columns kept or dropped, cells damaged, versions that
    start anywhere or hold no row (this found an int(None) and an int(inf))."""
    from stabilitycli.ingest.tabular import lightning

    rng = random.Random(f"{SEED}-lightning")
    with _bounded():
        for number in range(150):
            logs = tmp_path / f"l{number}" / "lightning_logs"
            for version in rng.sample(range(5), rng.randint(1, 3)):
                folder = logs / f"version_{version}"
                folder.mkdir(parents=True)
                header = [c for c in LIGHTNING_COLUMNS if rng.random() < 0.5] or ["step"]
                start = rng.choice((0, 3, 1000))
                rows = [
                    ",".join(
                        rng.choice(LIGHTNING_CELLS)
                        if rng.random() < 0.3
                        else str(start + i if c in ("step", "epoch") else 1.0 / (i + 1))
                        for c in header
                    )
                    for i in range(rng.randint(0, 12))
                ]
                (folder / "metrics.csv").write_text(",".join(header) + "\n" + "\n".join(rows))
            before = _listing(logs)
            _read_or_refuse(logs)
            with contextlib.suppress(StabInputError, StabUsageError):
                lightning.run_paths(logs)  # what `-r` asks of such a folder
            assert _listing(logs) == before
