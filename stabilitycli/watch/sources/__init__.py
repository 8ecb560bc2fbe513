"""One module per reader family, named after the reader's `NAME` (`jsonl.py`, `tensorboard.py`...).

Each defines `follow(target, options) -> Follower` (see `watch/follow.py`); `stab watch`
picks the module of the reader that `stab analyze` would use on the same input.
"""
