"""TensorBoard event files, read without TensorFlow: TFRecord framing (`_tfrecord`)
and the few protobuf messages a scalar needs (`_proto`).

This module declares the reader for `ingest` without importing it.
"""

from __future__ import annotations

from stabilitycli.ingest.base import ReaderEntry, Takes

EVENTS = ReaderEntry(
    "tensorboard",
    "stabilitycli.ingest.tensorboard.reader",
    Takes(folders=True, marks=("events.out.tfevents.",)),
    "TensorBoard event files (events.out.tfevents.* or a log dir; run folders that resume "
    "one another are one run)",
)
