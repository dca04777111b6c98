"""Keyed rows batched by their references: rows with the same references (one question,
several systems) share a `RowBatch`, so that the batch's n-grams are requested and counted
once (corpus_stats.py), and a group of rows is streamed into batches, never held whole.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam

from transforms.scoring.row_batch import RowBatch


def reference_group(references: Sequence[str], groups: int) -> int:
    """The batching group of a row: a stable hash of its references, so that rows with the
    same references (one question, several systems) share a batch and its n-grams are
    requested and counted once per batch (`ChunkGroups`)."""
    value = 0
    for reference in references:
        value = zlib.crc32(reference.encode("utf-8", "surrogatepass"), value)
    return value % groups


class ChunkGroups(beam.DoFn):
    """(group, rows) -> `RowBatch`es of at most `size` rows, streamed from the group (a
    group may be large: it is never held whole)."""

    def __init__(self, size: int) -> None:
        self._size = size

    def process(self, element: tuple[int, Iterable[Any]]) -> Iterator[RowBatch]:
        _, rows = element
        chunk: list = []
        for row in rows:
            chunk.append(row)
            if len(chunk) == self._size:
                yield RowBatch(chunk[0][0], chunk)
                chunk = []
        if chunk:
            yield RowBatch(chunk[0][0], chunk)


class BatchByReferences(beam.PTransform):
    """`(row_key, ScoringRow)` -> `RowBatch`es of at most `size` rows, rows with equal
    references together (`reference_group`): `groups` keys, so about rows / groups rows
    per key."""

    def __init__(self, size: int, groups: int) -> None:
        super().__init__()
        if size < 1 or groups < 1:
            raise ValueError(f"size and groups must be >= 1, got {size}, {groups}")
        self._size = size
        self._groups = groups

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        groups = self._groups
        return (rows
                | "KeyByReferences" >> beam.Map(
                    lambda kv: (reference_group(kv[1].example.references, groups), kv))
                | "GroupByReferences" >> beam.GroupByKey()
                | "ChunkGroups" >> beam.ParDo(ChunkGroups(self._size)))
