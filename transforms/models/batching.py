"""Batch shaping inside a handler: de-duplication, length sorting, token budgets, padding.

Pure functions on lists and numpy arrays (no torch), so they are tested on their own.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np


def dedup(items: Sequence[Hashable]) -> tuple[list[Hashable], list[int]]:
    """Returns the distinct items in first-seen order and, per item, its distinct index."""
    index: dict[Hashable, int] = {}
    inverse = [index.setdefault(x, len(index)) for x in items]
    return list(index), inverse


def plan_batches(lengths: Sequence[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """Groups positions into forward passes, longest first, under row and token caps.

    Sorting by length makes every pass pad only to its own longest row; a pass holds at
    most `max_rows` rows and at most `max_tokens` padded tokens (rows x longest). A row
    longer than `max_tokens` on its own still gets a pass of one.

    Args:
        lengths: token count of each input.
        max_rows: most rows per pass (>= 1).
        max_tokens: most padded tokens per pass (>= 1).

    Returns:
        Lists of positions into `lengths`; every position appears exactly once.
    """
    if max_rows < 1 or max_tokens < 1:
        raise ValueError(f"max_rows and max_tokens must be >= 1, got {max_rows}, {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (len(current) >= max_rows or (len(current) + 1) * longest > max_tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


class Padded(NamedTuple):
    """A padded pass: (rows, longest) arrays; token_type_ids None when the model has none."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray | None


def pad(rows: Sequence[Sequence[int]], types: Sequence[Sequence[int] | None],
        pad_id: int) -> Padded:
    """Right-pads rows to the longest of them (ids with `pad_id`, types with 0)."""
    longest = max(len(r) for r in rows)
    ids = np.full((len(rows), longest), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), longest), dtype=np.int64)
    with_types = all(t is not None for t in types)
    type_ids = np.zeros((len(rows), longest), dtype=np.int64) if with_types else None
    for k, row in enumerate(rows):
        ids[k, : len(row)] = row
        mask[k, : len(row)] = 1
        if type_ids is not None:
            type_ids[k, : len(row)] = types[k]
    return Padded(ids, mask, type_ids)
