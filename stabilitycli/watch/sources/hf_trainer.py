"""`stab watch` of a `hf_trainer` input: its files are saved whole again at each log, so a
changed file is read again whole (`_files.follow_rewritten`)."""

from __future__ import annotations

from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text.hf_trainer import FILE_NAME
from stabilitycli.watch.mirror import MirrorFollower
from stabilitycli.watch.sources._files import follow_rewritten

NAME = "hf_trainer"


def follow(target: str, options: ReadOptions) -> MirrorFollower:
    return follow_rewritten(target, options, NAME, keep=lambda p: p.name == FILE_NAME)
