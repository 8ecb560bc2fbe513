"""What a live source gives `stab watch`: the contract every follower keeps.

A follower owns one run that is still being written (a file, a folder of event
files, a tracking-server run). Each `poll` reads only what was added since the
last one; `snapshot` is the run as read so far, the same `RunData` the format's
reader would give on the bytes (or records) complete at that poll. That
equality is what lets the watch end with the document `stab analyze` prints,
and each follower's tests check it at random cut points.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Protocol

from stabilitycli.core.records import dataclass

if TYPE_CHECKING:
    from stabilitycli.frame import RunData


@dataclass
class Poll:
    """What one poll found."""

    records_read: int = 0  # complete records (lines, events, metric points) new this poll
    # the source was truncated, rotated or replaced and was read again from its start
    reread: str | None = None
    # why the run is over (a tracking server's status, stdin closed); None while it goes on
    ended: str | None = None
    # one line each: file gone, permission lost, server unreachable; the watch goes on
    problems: list[str] = field(default_factory=list)


class Follower(Protocol):
    """One live run."""

    display: str  # the run's name as `stab analyze` names it

    def poll(self) -> Poll:
        """Read what is new; a partial last line or record waits for the next poll."""
        ...

    def snapshot(self) -> RunData:
        """The whole run read so far, canonical (ends in `frame.finalize`)."""
        ...

    def close(self) -> None:
        """Release files and connections."""
        ...
