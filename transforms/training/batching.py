"""Training batches: length-grouped order and padding (numpy only; torch in `to_tensors`).

Random batches of sentence pairs pad every row to the longest of 32 random rows; sorting
rows by length inside blocks of about 20 batches keeps the order random at the block
level and cuts the padding (docs/design.md: 2.5x less padding, 2.4x faster steps on 2 CPU
cores). The order of an epoch is a pure function of (seed, epoch, lengths), so a resumed
run replays exactly the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from transforms.models.batching import pad

IGNORE_INDEX = -100


class Features(NamedTuple):
    """One encoded training example.

    Attributes:
        input_ids: word-piece ids, special tokens included.
        token_type_ids: segment ids, or None for tokenizers without them.
        label: a float target (cross-encoder) or one label per token (keyphrases,
            `IGNORE_INDEX` where no label applies).
    """

    input_ids: tuple[int, ...]
    token_type_ids: tuple[int, ...] | None
    label: float | tuple[int, ...]


def epoch_batches(lengths: Sequence[int], batch_size: int, block_batches: int, seed: int,
                  epoch: int) -> list[list[int]]:
    """The batches of one epoch, as lists of row positions.

    Rows are shuffled, cut into blocks of `batch_size * block_batches` rows, sorted by
    length inside each block and cut into batches; the batches are then shuffled, so
    long and short batches alternate at random. `block_batches <= 1` gives plain random
    batches.

    Args:
        lengths: token count per row.
        batch_size: rows per batch (the last batch may be smaller).
        block_batches: batches per sorting block.
        seed: the run's seed.
        epoch: the epoch number (0-based).

    Returns:
        Every position exactly once, grouped into batches.

    Raises:
        ValueError: batch_size < 1 or no rows.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not len(lengths):
        raise ValueError("cannot batch an empty split")
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths)).tolist()
    block = batch_size * max(block_batches, 1)
    batches: list[list[int]] = []
    for start in range(0, len(order), block):
        chunk = order[start:start + block]
        if block_batches > 1:
            chunk = sorted(chunk, key=lambda i: lengths[i])
        batches += [chunk[j:j + batch_size] for j in range(0, len(chunk), batch_size)]
    if block_batches > 1:
        perm = rng.permutation(len(batches)).tolist()
        batches = [batches[i] for i in perm]
    return batches


def eval_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Evaluation batches: positions sorted by length (longest first), cut in order."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[j:j + batch_size] for j in range(0, len(order), batch_size)]


def padding_ratio(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Padded tokens / real tokens over `batches` (1.0 = no padding)."""
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return padded / real if real else 1.0


def collate(rows: Sequence[Features], pad_id: int, with_types: bool) -> dict[str, Any]:
    """Pads rows to their longest into numpy arrays (input_ids, attention_mask,
    token_type_ids when `with_types`, labels: float per row or int per token)."""
    padded = pad([r.input_ids for r in rows], [r.token_type_ids for r in rows], pad_id)
    batch: dict[str, Any] = {"input_ids": padded.input_ids,
                             "attention_mask": padded.attention_mask}
    if with_types and padded.token_type_ids is not None:
        batch["token_type_ids"] = padded.token_type_ids
    if isinstance(rows[0].label, tuple):
        labels = np.full(padded.input_ids.shape, IGNORE_INDEX, dtype=np.int64)
        for k, r in enumerate(rows):
            labels[k, : len(r.label)] = r.label
        batch["labels"] = labels
    else:
        batch["labels"] = np.asarray([r.label for r in rows], dtype=np.float32)
    return batch


def to_tensors(batch: dict[str, Any], device: Any) -> dict[str, Any]:
    """numpy arrays -> torch tensors on `device`."""
    import torch
    return {k: torch.from_numpy(v).to(device) for k, v in batch.items()}
