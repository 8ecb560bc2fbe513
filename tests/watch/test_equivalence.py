"""Every fixture, real and pasted log that `stab watch` follows, replayed into a growing
file in random-sized chunks, ends with the JSON document `stab analyze` gives on the whole
file; and the last snapshot, once every record is complete, is that run too."""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path

import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.pipeline import run as pipeline
from stabilitycli.report.formats import Format
from stabilitycli.watch.loop import WatchSettings
from stabilitycli.watch.session import WatchRequest, open_follower, run_watch
from stabilitycli.watch.sources._files import appended
from tests.watch._replay import (
    ReplayClock,
    TailClock,
    copy_beside,
    label,
    live_inputs,
    replay_writes,
)

INPUTS = live_inputs()
# the fast suite: a sample, the same each run, that still holds every format followed
SAMPLE_SIZE = 24


def _sample() -> list[Path]:
    from stabilitycli.ingest import choose_reader

    by_format: dict[str, list[Path]] = {}
    for path in INPUTS:
        by_format.setdefault(choose_reader(str(path), ReadOptions())[0], []).append(path)
    rng = random.Random(38)
    picked = {rng.choice(paths) for paths in by_format.values()}
    rest = [p for p in INPUTS if p not in picked]
    picked |= set(rng.sample(rest, max(0, SAMPLE_SIZE - len(picked))))
    return sorted(picked)


def _document(analysis) -> dict:
    return json.loads(Format.json.render(analysis))


def _replayed(
    src: Path, tmp_path: Path, seed: int, clock_type: type[ReplayClock] = ReplayClock
) -> tuple[Path, ReplayClock]:
    dst = tmp_path / src.parent.name / src.name
    rng = random.Random(seed)
    writes = replay_writes(src, dst, rng)
    if src.is_dir():
        dst.mkdir(parents=True, exist_ok=True)
    copy_beside(src, dst) if src.is_file() else None
    return dst, clock_type(writes)


def check_replay(src: Path, tmp_path: Path, clock_type: type[ReplayClock] = ReplayClock) -> None:
    seed = zlib.crc32(label(src).encode())
    dst, clock = _replayed(src, tmp_path, seed, clock_type)
    thresholds = Thresholds()
    settings = WatchSettings(interval_s=1.0, idle_s=3.0, cpu_share=1.0)
    request = WatchRequest(str(dst), ReadOptions(), thresholds, settings)
    alerts: list = []
    said: list[str] = []
    try:
        final = run_watch(request, alerts.append, said.append, clock)
    except StabInputError as err:  # then analyze cannot read the whole log either: same line
        while clock.writes:
            clock.sleep(0)
        with pytest.raises(StabInputError) as raised:
            pipeline.analyze(str(dst), thresholds)
        assert str(raised.value) == str(err)
        return
    assert _document(final) == _document(pipeline.analyze(str(dst), thresholds)), label(src)
    assert not any("internal error" in line or "Traceback" in line for line in said)


def check_last_snapshot(src: Path, tmp_path: Path) -> None:
    """Followed to its end, the snapshot is the reader's run of the whole log."""
    dst, clock = _replayed(src, tmp_path, 1)
    while clock.writes:
        clock.sleep(0)
    try:
        follower, name = open_follower(str(dst), ReadOptions())
    except StabInputError as err:  # a store of several runs, with no --run: analyze says so too
        with pytest.raises(StabInputError) as raised:
            pipeline.analyze(str(dst), Thresholds())
        assert str(raised.value) == str(err)
        return
    try:
        follower.poll()
        files = [dst] if dst.is_file() else [p for p in dst.rglob("*") if p.is_file()]
        cut = [p for p in files if appended(p) and not p.read_bytes().endswith(b"\n")]
        if name == "blocklog" or cut:
            return  # the last record waits for the next one (or for its newline)
        try:
            snapshot = _document(pipeline.analyze(follower.snapshot(), Thresholds()))
        except StabInputError as err:
            snapshot = {"error": str(err)}
    finally:
        follower.close()
    try:
        expected = _document(pipeline.analyze(str(dst), Thresholds()))
    except StabInputError as err:
        expected = {"error": str(err)}
    assert snapshot == expected


@pytest.mark.parametrize("src", _sample(), ids=label)
def test_replayed_log_ends_as_analyze(src: Path, tmp_path: Path) -> None:
    check_replay(src, tmp_path)


@pytest.mark.parametrize("src", _sample(), ids=label)
def test_replayed_with_tail_judgments_ends_as_analyze(src: Path, tmp_path: Path) -> None:
    """Every poll after the first judged by its tail (where the format has one): the tail
    only adds alerts, the final document is still analyze's, and nothing crashes."""
    check_replay(src, tmp_path, TailClock)


@pytest.mark.parametrize("src", _sample(), ids=label)
def test_last_snapshot_is_the_reader_run(src: Path, tmp_path: Path) -> None:
    check_last_snapshot(src, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("src", INPUTS, ids=label)
def test_every_followed_log_ends_as_analyze(src: Path, tmp_path: Path) -> None:
    check_replay(src, tmp_path)
    check_last_snapshot(src, tmp_path / "snapshot")
