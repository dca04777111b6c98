"""Content keys of one-reference rows ("r"), as the previous run's tables hold them."""

from __future__ import annotations

import numpy as np

from transforms.metrics.base import QAExample
from transforms.scoring.reading.rows import content_key


def key_of(prediction: str) -> bytes:
    """The 16-byte content key of (prediction, ("r",))."""
    return bytes.fromhex(content_key(QAExample(prediction, ("r",))))


def keys_of(*predictions: str) -> np.ndarray:
    """The content keys of these predictions, as a table's keys (dtype S16)."""
    return np.frombuffer(b"".join(key_of(p) for p in predictions), dtype="S16")
