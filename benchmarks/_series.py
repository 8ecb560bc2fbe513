"""What the reader benchmarks write: one loss curve with a NaN and a +Inf in it, and the
TFRecord framing of an event."""

from __future__ import annotations

import math
import struct

import numpy as np


def loss_curve(points: int) -> np.ndarray:
    """A decaying loss with Gaussian noise; NaN and +Inf at the middle: readers must keep them."""
    rng = np.random.default_rng(0)
    t = np.arange(points, dtype=float)
    loss = 2.2 + 8.6 * (1 + t / 4000.0) ** -0.75 + 0.04 * rng.standard_normal(points)
    loss[points // 2] = math.nan
    loss[points // 2 + 1] = math.inf
    return loss


def tfrecord(payload: bytes) -> bytes:
    """One TFRecord: the length, its masked CRC, the payload, its masked CRC."""
    from stabilitycli.ingest.tensorboard._tfrecord import masked_crc

    header = struct.pack("<Q", len(payload))
    return (
        header
        + struct.pack("<I", masked_crc(header))
        + payload
        + struct.pack("<I", masked_crc(payload))
    )
