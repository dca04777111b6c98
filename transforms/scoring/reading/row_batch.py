"""Rows travelling as batches: a `RowBatch` is one element holding many `ScoringRow`s,
packed as compact bytes whenever it is pickled (between stages, and while a runner holds
it), so a run holds no Python object per row there. No Beam, no I/O.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from transforms.metrics.base import QAExample
from transforms.scoring.reading.rows import RowSource, ScoringRow


class Carry(NamedTuple):
    """What an incremental run knows of a batch's rows before it scores them (carry.py):
    `keys` (their 16-byte content keys, concatenated), `old` (the previous run scored the
    row: a bool array), `values` (their previous values, one row per row: carried
    columns, then compared ones; NaN for a new row) and `first` (the first row of the
    batch with the row's content)."""

    keys: bytes
    old: np.ndarray
    values: np.ndarray
    first: np.ndarray


class RowBatch:
    """A batch of rows as one element: `rows` is a list of (key, ScoringRow); `batch_id`
    is unique in the run (its first row's key); `results`, when the model metrics have
    scored the batch, one `(scores or None, reason, kind)` per row (`with_results`).

    A batch pickles as its id and one bytes object made once (`pack_rows`: the rows as
    JSON, zlib level 1, about a third of their pickle), so the in-process runner, which
    keeps every grouped element decoded and copies it twice more when it hands the group
    to the next stage, holds those bytes and no Python object per row; `rows` unpacks them
    when first read.
    """

    __slots__ = ("batch_id", "_rows", "_packed", "results", "carry")

    def __init__(self, batch_id: str, rows: list, results: list | None = None,
                 carry: Carry | None = None) -> None:
        if results is not None and len(results) != len(rows):
            raise ValueError(f"{len(results)} results for {len(rows)} rows")
        self.batch_id = batch_id
        self._rows: list | None = rows
        self._packed: bytes | None = None
        self.results = results
        self.carry = carry

    def _copy(self) -> RowBatch:
        batch = RowBatch.__new__(RowBatch)
        batch.batch_id, batch._rows, batch._packed = self.batch_id, self._rows, self._packed
        batch.results, batch.carry = self.results, self.carry
        return batch

    def with_carry(self, carry: Carry) -> RowBatch:
        """The same rows with an incremental run's `Carry` (carry.py)."""
        if len(carry.old) != len(self):
            raise ValueError(f"a carry of {len(carry.old)} rows for {len(self)} rows")
        batch = self._copy()
        batch.carry = carry
        return batch

    def with_results(self, results: Sequence[tuple]) -> RowBatch:
        """The same rows (still packed, if they were) with one result per row:
        `(scores, reason, kind)` tuples such as transforms/scoring's `ScoreResult`."""
        if len(results) != len(self):
            raise ValueError(f"{len(results)} results for {len(self)} rows")
        batch = self._copy()
        batch.results = [tuple(r) for r in results]
        return batch

    @property
    def rows(self) -> list:
        if self._rows is None:
            self._rows = unpack_rows(self._packed)
        return self._rows

    @property
    def packed(self) -> bytes | None:
        """The rows' packed bytes (`pack_rows`) once made (pickled, or read back from a
        pickle), else None."""
        return self._packed

    def __reduce__(self):
        if self._packed is None:
            self._packed = pack_rows(self._rows)
        results = None if self.results is None else pack_results(self.results)
        if self.carry is None:
            return _unpack_batch, (self.batch_id, self._packed, results)
        return _unpack_batch, (self.batch_id, self._packed, results, tuple(self.carry))

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"RowBatch({self.batch_id!r}, {len(self)} rows)"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RowBatch) and self.batch_id == other.batch_id
                and self.rows == other.rows and self.results == other.results
                and _same_carry(self.carry, other.carry))

    __hash__ = None  # type: ignore[assignment]


def _same_carry(a: Carry | None, b: Carry | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.keys == b.keys and np.array_equal(a.old, b.old) and np.array_equal(a.first, b.first)
            and np.array_equal(a.values, b.values, equal_nan=True))


def _unpack_batch(batch_id: str, packed: bytes, results: bytes | None = None,
                  carry: tuple | None = None) -> RowBatch:
    """A `RowBatch` read back from its pickle: its rows stay packed until read."""
    batch = RowBatch.__new__(RowBatch)
    batch.batch_id, batch._rows, batch._packed = batch_id, None, packed
    batch.results = unpack_results(results) if results is not None else None
    batch.carry = Carry(*carry) if carry is not None else None
    return batch


def pack_results(results: Sequence[tuple]) -> bytes:
    """Per-row `(scores dict or None, reason, kind)` -> compact bytes (JSON, zlib level 1;
    floats written as Python writes them, NaN included, so they read back bit for bit)."""
    text = json.dumps([list(r) for r in results], ensure_ascii=False, separators=(",", ":"))
    return zlib.compress(text.encode("utf-8", "surrogatepass"), 1)


def unpack_results(packed: bytes) -> list[tuple]:
    """The results `pack_results` packed."""
    return [tuple(r) for r in json.loads(zlib.decompress(packed).decode("utf-8", "surrogatepass"))]


def pack_rows(rows: Sequence[tuple[str, ScoringRow]]) -> bytes:
    """(key, ScoringRow) pairs -> compact bytes (JSON, zlib level 1); `unpack_rows` reads
    them back equal. A key equal to the row's own `source.key` is not repeated."""
    payload = [[None if key == row.source.key else key, row.source.file, row.source.row,
                row.source.line, row.example.prediction, row.example.references,
                row.example.question, row.example.negative_references, row.id, row.system,
                row.human, row.kept] for key, row in rows]
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return zlib.compress(text.encode("utf-8", "surrogatepass"), 1)


def unpack_rows(packed: bytes) -> list[tuple[str, ScoringRow]]:
    """The rows `pack_rows` packed."""
    out = []
    for (key, file, number, line, prediction, references, question, negatives, row_id,
         system, human, kept) in json.loads(zlib.decompress(packed).decode(
             "utf-8", "surrogatepass")):
        source = RowSource(file, number, line)
        example = QAExample(prediction, tuple(references), question, tuple(negatives))
        out.append((source.key if key is None else key,
                    ScoringRow(source, example, row_id, system, human,
                               tuple((name, value) for name, value in kept))))
    return out
