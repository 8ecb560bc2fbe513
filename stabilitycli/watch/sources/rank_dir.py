"""`stab watch` of a `rank_dir` input: new complete lines each poll (`_files.follow_appended`)."""

from __future__ import annotations

from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.mirror import MirrorFollower
from stabilitycli.watch.sources._files import follow_appended

NAME = "rank_dir"


def follow(target: str, options: ReadOptions) -> MirrorFollower:
    return follow_appended(target, options, NAME)
