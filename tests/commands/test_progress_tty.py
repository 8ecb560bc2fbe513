"""Progress on a real terminal (issue #40, item 4): stderr is the slave end of a pty, so
nothing is forced; the bar's delay is set to 0 so that a small log shows it. The bar says
the rows a second, and it never reaches a machine format."""

from __future__ import annotations

import contextlib
import io
import os
import pty
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stabilitycli.cli import app
from stabilitycli.commands import bars


@pytest.fixture(scope="module")
def rank_log(tmp_path_factory) -> Path:
    """A 16-rank log as pandas writes JSON lines: loss falling, every rank alike."""
    ranks, steps = 16, 400
    rng = np.random.default_rng(40)
    step = np.repeat(np.arange(steps), ranks)
    frame = pd.DataFrame(
        {
            "step": step,
            "rank": np.tile(np.arange(ranks), steps),
            "loss": 2.0 + 3.0 / (1 + step / 50) + 0.01 * rng.standard_normal(step.size),
        }
    )
    path = tmp_path_factory.mktemp("tty") / "ranks.jsonl"
    frame.to_json(path, orient="records", lines=True)
    return path


def _on_a_terminal(monkeypatch, argv: list[str]) -> str:
    """What `stab ARGV` writes on stderr when stderr is a terminal (stdout is not)."""
    master, slave = pty.openpty()
    said = bytearray()

    def drain() -> None:  # the pty's buffer is small: read while the command writes
        with contextlib.suppress(OSError):  # EIO once the slave end is closed
            while chunk := os.read(master, 4096):
                said.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    terminal = open(slave, "w", closefd=True)  # noqa: SIM115 - closed below, then drained
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(bars, "PROGRESS_DELAY_SECONDS", 0)
    try:
        app(argv, standalone_mode=False)
    except SystemExit:
        pass
    finally:
        terminal.flush()
        terminal.close()
        reader.join(timeout=30)
        os.close(master)
    return said.decode(errors="replace")


def test_ranks_and_analyze_show_rows_a_second_on_a_terminal(monkeypatch, rank_log) -> None:
    ranks = _on_a_terminal(monkeypatch, ["ranks", str(rank_log)])
    assert "rows/s" in ranks
    assert "comparing the ranks" in ranks
    analysed = _on_a_terminal(monkeypatch, ["analyze", str(rank_log)])
    assert "rows/s" in analysed
    assert "checking the rules" in analysed


def test_no_bar_beside_json_even_on_a_terminal(monkeypatch, rank_log) -> None:
    for argv in (["ranks", "--format", "json"], ["analyze", "--format", "json"]):
        assert _on_a_terminal(monkeypatch, [*argv, str(rank_log)]) == ""
    assert _on_a_terminal(monkeypatch, ["analyze", "--quiet", str(rank_log)]) == ""
