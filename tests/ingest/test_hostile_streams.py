"""Every stream bounded as it is read (issue 33, item 2): standard input is counted while
it arrives and the read stops at max_input_bytes, whatever is still coming."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _stab_reading(producer: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """`stab analyze -` with `producer`'s output piped in."""
    feed = subprocess.Popen(producer, stdout=subprocess.PIPE)
    try:
        return subprocess.run(
            [sys.executable, "-m", "stabilitycli", "analyze", "-"],
            stdin=feed.stdout,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        )
    finally:
        feed.kill()
        feed.wait()


def test_an_endless_stdin_stops_at_the_limit_and_says_so() -> None:
    # 40 times the limit (`yes` alone would never end): read whole first, it was all held
    endless = """yes '{"step": 1, "loss": 1.0}' | head -c 200000000"""
    result = _stab_reading(["sh", "-c", endless], {"STAB_LIMIT_MAX_INPUT_BYTES": "5000000"})
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert line.startswith("stab: error: <stdin>: standard input goes on past the limit")
    assert "max_input_bytes = 4.76837 MiB" in line and "STAB_LIMIT_MAX_INPUT_BYTES" in line


def test_stdin_under_the_limit_reads_as_before(tmp_path) -> None:
    log = ROOT / "fixtures" / "runs" / "spike-persistent" / "run.jsonl"
    result = _stab_reading(["cat", str(log)], {})
    assert result.returncode == 1, result.stderr  # the persistent spike: an error finding
    assert "<stdin>" in result.stdout


def test_whitespace_alone_on_stdin_is_nothing(tmp_path) -> None:
    result = _stab_reading(["printf", "  \\n\\n  "], {})
    assert result.returncode == 2
    assert "<stdin>: nothing on standard input" in result.stderr
