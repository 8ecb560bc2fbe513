"""Helpers for the follower tests: is a snapshot the reader's answer, and a growing file."""

from __future__ import annotations

import json
import random
from pathlib import Path

from polars.testing import assert_frame_equal

from stabilitycli.frame import RunData


def assert_same_run(got: RunData, want: RunData, *, paths: dict[str, str] | None = None) -> None:
    """The same frame (NaN and Inf bit for bit), abandoned rows, lines and accounting.

    `paths` maps a path in `want`'s texts to the one `got` read (a reference copy made
    elsewhere), so that only the place differs."""
    assert_frame_equal(got.frame, want.frame, check_exact=True)
    assert_frame_equal(got.abandoned, want.abandoned, check_exact=True)
    assert (got.lines is None) == (want.lines is None)
    if got.lines is not None and want.lines is not None:
        assert_frame_equal(got.lines, want.lines, check_exact=True)
    expected = json.dumps(want.source.to_dict(), sort_keys=True)
    for old, new in (paths or {}).items():
        expected = expected.replace(old, new)
    assert json.loads(expected) == json.loads(json.dumps(got.source.to_dict(), sort_keys=True))


def cut_points(size: int, count: int, seed: int) -> list[int]:
    """`count` random cut points in (0, size), sorted, and the end itself."""
    rng = random.Random(seed)
    return [*sorted(rng.sample(range(1, size), min(count, size - 1))), size]


def grow(path: Path, data: bytes, old: int, new: int) -> None:
    """Append `data[old:new]` to `path`, as a writer would."""
    with open(path, "ab") as handle:
        handle.write(data[old:new])


def refuse_reading(monkeypatch, refused) -> None:
    """Reading a file for which `refused(path)` is true fails with a permission error, as
    after a `chmod 000` (which root, running the tests, would read through)."""
    from stabilitycli.watch.sources import _live_files

    real_open = open

    def guarded(path, *args, **kwargs):
        if refused(Path(path)):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(_live_files, "open", guarded, raising=False)


def assert_said_once(follower, words: str) -> None:
    """One problem line holding `words` on the next poll, and none on the poll after."""
    first, second = follower.poll(), follower.poll()
    assert len(first.problems) == 1 and words in first.problems[0], first.problems
    assert second.problems == []
