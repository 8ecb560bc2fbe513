"""`stab watch` of a `blocklog` input: a record (a header and its indented lines) is taken
once the next one begins, so a record is never read half-written."""

from __future__ import annotations

from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.mirror import MirrorFollower, whole_blocks
from stabilitycli.watch.sources._files import follow_appended

NAME = "blocklog"


def follow(target: str, options: ReadOptions) -> MirrorFollower:
    return follow_appended(target, options, NAME, whole_blocks)
