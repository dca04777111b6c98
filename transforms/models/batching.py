"""Batch shaping inside a handler: de-duplication, length sorting, token budgets, padding.

Pure functions on lists and numpy arrays (no torch), so they are tested on their own.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

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
    sizes = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-sizes, kind="stable").tolist()  # longest first, ties in input order
    sizes = sizes.tolist()
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        if current and (len(current) >= max_rows or (len(current) + 1) * longest > max_tokens):
            batches.append(current)
            current = []
        if not current:
            longest = sizes[i]
        current.append(i)
    if current:
        batches.append(current)
    return batches


class Padded(NamedTuple):
    """A padded pass: (rows, longest) arrays; token_type_ids None when the model has none.
    `pad_tokens` (scoring) gives int32 ids and segment ids and an int8 mask, which the
    device model widens; `pad` (training) gives int64 arrays."""

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


class TokenBatch(NamedTuple):
    """The encoded inputs of a window as flat arrays: input k's ids are
    `ids[offsets[k]:offsets[k + 1]]`, its segment ids the same slice of `types`, its answer
    span (keyphrase inputs only) `spans[k]`.

    One array per window instead of a tuple of Python ints per input: padding a pass is
    then a few numpy operations (`pad_tokens`), whatever its number of rows.
    """

    ids: np.ndarray
    types: np.ndarray
    offsets: np.ndarray
    spans: tuple[tuple[int, int], ...] | None = None

    @property
    def num_inputs(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, segment ids) of input k."""
        start, end = self.offsets[k], self.offsets[k + 1]
        return self.ids[start:end], self.types[start:end]

    @classmethod
    def from_pieces(cls, pieces: Sequence[np.ndarray], types: np.ndarray,
                    lengths: np.ndarray) -> TokenBatch:
        """The batch whose ids are `pieces` concatenated, cut by `lengths` (an input of
        length 0 is one that another batch fills, see `merge`)."""
        ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(ids.astype(np.int64, copy=False), np.asarray(types, dtype=np.int64), offsets)

    @classmethod
    def from_encoded(cls, encoded: Sequence[Any]) -> TokenBatch:
        """From `layouts.Encoded` rows (segment ids 0 where an encoding has none)."""
        lengths = np.array([len(e.input_ids) for e in encoded], dtype=np.int64)
        total = int(lengths.sum())
        ids = np.fromiter(itertools.chain.from_iterable(e.input_ids for e in encoded),
                          dtype=np.int64, count=total)
        types = np.fromiter(itertools.chain.from_iterable(
            e.token_type_ids if e.token_type_ids is not None else (0,) * len(e.input_ids)
            for e in encoded), dtype=np.int64, count=total)
        batch = cls.from_pieces([ids], types, lengths)
        spans = tuple(e.span for e in encoded) if any(e.span is not None for e in encoded) \
            else None
        return batch._replace(spans=spans)

    @classmethod
    def merge(cls, base: TokenBatch, other: TokenBatch, positions: np.ndarray) -> TokenBatch:
        """`base` with its inputs at `positions` replaced by `other`'s, in order."""
        source = np.zeros(base.num_inputs, dtype=np.int64)  # 0: base, 1: other
        source[positions] = 1
        where = np.zeros(base.num_inputs, dtype=np.int64)
        where[positions] = np.arange(len(positions))
        ids, types = [], []
        for k in range(base.num_inputs):
            batch, j = (other, where[k]) if source[k] else (base, k)
            start, end = batch.offsets[j], batch.offsets[j + 1]
            ids.append(batch.ids[start:end])
            types.append(batch.types[start:end])
        lengths = np.array([len(x) for x in ids], dtype=np.int64)
        return cls.from_pieces(ids, np.concatenate(types) if types else types, lengths)


def pad_tokens(batch: TokenBatch, positions: Sequence[int] | np.ndarray, pad_id: int,
               with_types: bool = True) -> Padded:
    """Right-pads the inputs at `positions` of a `TokenBatch` to the longest of them, with
    numpy gathers only (ids with `pad_id`, segment ids with 0). Ids and segment ids are
    int32 and the mask int8: what a pass costs to pickle to a model shared by several
    processes, and what the device model's one copy carries (int32), widened on the
    device."""
    positions = np.asarray(positions, dtype=np.int64)
    starts = batch.offsets[positions]
    lengths = batch.offsets[positions + 1] - starts
    longest = int(lengths.max()) if len(lengths) else 0
    columns = np.arange(longest, dtype=np.int64)
    mask = columns[None, :] < lengths[:, None]
    source = (starts[:, None] + columns[None, :])[mask]
    ids = np.full((len(positions), longest), pad_id, dtype=np.int32)
    ids[mask] = batch.ids[source]
    type_ids = None
    if with_types:
        type_ids = np.zeros((len(positions), longest), dtype=np.int32)
        type_ids[mask] = batch.types[source]
    return Padded(ids, mask.astype(np.int8), type_ids)
