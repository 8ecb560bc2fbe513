"""Reading never writes: every command leaves each input and its folders exactly as they were.

One input of each kind in fixtures/ is copied into a folder of its own; the
folder (names, kinds, sizes, modification times, a hash of every file) is
fingerprinted before and after every command that takes a path. A directory's
modification time changes when anything is created in it or removed from it,
so even a file made and deleted again (a journal, a lock, a `-wal`) is seen.
The commands run from an empty working folder, which must stay empty too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"

# kind -> (fixture, extra options that pick one run where the input holds several)
INPUTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "jsonl": ("runs/spike-persistent/run.jsonl", ()),
    "jsonl-gz": ("runs/nan-tokens-gz/run.jsonl.gz", ()),
    "csv": ("tabular/metrics.csv", ()),
    "parquet": ("tabular/metrics.parquet", ()),
    "arrow": ("tabular/metrics.arrow", ()),
    "tensorboard": ("tensorboard/spike", ()),
    "mlflow-file": ("mlflow/mlruns", ("--run", "spike")),
    "mlflow-sqlite": ("mlflow/mlflow.db", ("--run", "spike")),
    "mlflow-sqlite-wal": ("mlflow/mlflow.db", ("--run", "spike")),
    "hf-trainer": ("hf_trainer/output", ()),
    "lightning": ("lightning/lightning_logs/version_0", ()),
    "wandb-offline": ("wandb/wandb/offline-run-20261130_091434-stabfix1", ()),
    "wandb-csv": ("wandb_csv/export.csv", ("--run", "lr-sweep-3")),
    "text-nanogpt": ("textlogs/nanogpt/train.log", ()),
    "text-megatron": ("megatron/gpt_fp16.log", ()),
    "text-deepspeed": ("deepspeed/fused_4ranks.log", ()),
    "rank-dir": ("ranks/mixed_names", ()),
}
FORMATS = ("terminal", "json", "github", "junit", "markdown", "concise")


def _fingerprint(folder: Path) -> dict[str, tuple]:
    """Every entry below `folder`, the folder itself included, as (kind, size, mtime, hash)."""
    seen: dict[str, tuple] = {}
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in [".", *sorted(dirs), *sorted(files)]:
            full = Path(root) / name
            stat = full.lstat()
            rel = full.relative_to(folder).as_posix()
            if full.is_symlink():
                seen[rel] = ("link", os.readlink(full))
            elif full.is_dir():
                seen[rel] = ("dir", stat.st_mtime_ns, tuple(sorted(os.listdir(full))))
            else:
                digest = hashlib.sha256(full.read_bytes()).hexdigest()
                seen[rel] = ("file", stat.st_size, stat.st_mtime_ns, digest)
    return seen


def _copy_input(kind: str, into: Path) -> Path:
    fixture, _ = INPUTS[kind]
    source = FIXTURES / fixture
    assert source.exists(), f"fixture {fixture} is gone: update INPUTS"
    target = into / source.name
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target)
    if kind == "mlflow-sqlite-wal":
        conn = sqlite3.connect(target)
        assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
        conn.close()
        assert sorted(p.name for p in into.iterdir()) == [target.name]  # no -wal left
    return target


def _commands(path: str, extra: tuple[str, ...], out: Path) -> list[list[str]]:
    """Every command that takes a path (`explain` takes none), on this input and its folder."""
    analyze = [["analyze", path, *extra, "--format", fmt] for fmt in FORMATS]
    return [
        *analyze,
        ["analyze", path, *extra, "--format", "json", "--fail-on", "info"],
        ["analyze", str(Path(path).parent), "--recursive", "--jobs", "1", "--format", "json"],
        ["ranks", path],
        ["compare", path, path],
        ["postmortem", path, *extra, "-o", "-"],
        ["postmortem", path, *extra, "--output", str(out / "postmortem.md")],
        ["report", path, *extra, "--output", str(out / "report.html")],
    ]


@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_no_command_writes_beside_its_input(kind, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from stabilitycli.cli import app

    inputs = tmp_path / "inputs"
    folder = inputs / kind
    folder.mkdir(parents=True)
    path = _copy_input(kind, folder)
    out = tmp_path / "out"
    out.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    before = _fingerprint(inputs)
    cwd_before = _fingerprint(cwd)
    runner = CliRunner()
    changed = []
    read_ok = 0
    for args in _commands(str(path), INPUTS[kind][1], out):
        result = runner.invoke(app, args)
        read_ok += args[0] == "analyze" and result.exit_code in (0, 1)
        after = _fingerprint(inputs)
        if after != before:
            diff = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
            changed.append(f"stab {' '.join(args)} changed {diff}")
            before = after
    assert read_ok, f"{kind}: no analyze run read the input, so the test saw no read"
    assert not changed, "\n".join(changed)
    assert _fingerprint(cwd) == cwd_before, "a command wrote into the working folder"
