"""An incremental run's rows, batch by batch: which rows the previous run scored, what it
gave them, and each row's record finished with what was carried.

`AttachPrevious` gives each `RowBatch` a `Carry`: its rows' content keys, which of them
the previous run scored (`old`) and their previous values (the carried columns, then the
compared ones), and for each row the first row of the batch with its content (rows of
equal content are scored once). It looks the keys up in the previous run's tables, one
per shard of content key (previous_shards.py), a side input that a worker fetches shard
by shard and keeps (`TableCache`): no row crosses a shuffle to meet its previous values.

The scoring steps then compute, per batch, the recomputed metrics on every distinct row
and the carried ones on new rows only (`CarrySpec.carries`); `carried_values` and
`changed_columns` finish an old row's record as the scored record's `_carried` and
`_changed` fields (summary.py counts them).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from transforms.io.counting import STATS_TAG, CountingDoFn
from transforms.scoring.incremental.previous_shards import KEY_BYTES, PreviousTable, shard_of
from transforms.scoring.reading.batch_coder import typed_as
from transforms.scoring.reading.row_batch import Carry, RowBatch
from transforms.scoring.reading.rows import content_digest

_STAGE = "incremental"
CARRIED_FIELD = "_carried"  # scored records: the columns carried (not written)
CHANGED_FIELD = "_changed"  # scored records: recomputed columns whose value changed
# Bytes of previous tables a worker keeps decoded (least recently used dropped first): a
# run whose previous run is larger fetches shards again.
CACHE_BYTES = 512 << 20


@dataclasses.dataclass(frozen=True)
class CarrySpec:
    """What the scoring steps of an incremental run need of its `CarryPlan`.

    Attributes:
        carried: the columns of the metrics whose values are carried for rows the
            previous run scored (computed for the others).
        compared: the recomputed columns the previous run has too.
    """

    carried: tuple[str, ...]
    compared: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        """The previous values' columns, in order: carried, then compared."""
        return self.carried + self.compared

    def carries(self, metric: Any) -> bool:
        """Whether a metric's values are carried (it computes all its columns at once:
        they are carried together, `incremental.plan_carry`)."""
        return bool(metric.columns) and metric.columns[0] in self.carried


def carried_values(spec: CarrySpec, values: Sequence[float]) -> dict[str, float]:
    """An old row's carried columns from its previous values (a row of the table, as a
    list: `Carry.values.tolist()`, made once per batch)."""
    return dict(zip(spec.carried, values))


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def changed_columns(spec: CarrySpec, record: Mapping[str, Any], values: Sequence[float]
                    ) -> tuple[str, ...]:
    """The compared columns whose recomputed value differs from the previous one (NaN
    equals NaN)."""
    if not spec.compared:  # most runs compare nothing: no generator per old row
        return ()
    base = len(spec.carried)
    return tuple(c for i, c in enumerate(spec.compared)
                 if not _same(record[c], float(values[base + i])))


def finish_old_record(spec: CarrySpec, record: dict[str, Any], values: Sequence[float]
                      ) -> None:
    """Marks a scored record of an old row: its carried columns and changed ones."""
    record[CARRIED_FIELD] = spec.carried
    record[CHANGED_FIELD] = changed_columns(spec, record, values)


def batch_keys(batch: RowBatch) -> np.ndarray:
    """The content keys of a batch's rows, an `S16` array in row order."""
    return np.frombuffer(b"".join(content_digest(row.example) for _, row in batch.rows),
                         dtype=f"S{KEY_BYTES}")


def first_of_each(keys: np.ndarray) -> np.ndarray:
    """For each row, the first row of the batch with the same key (itself for the first)."""
    first: dict[bytes, int] = {}
    return np.array([first.setdefault(key, i) for i, key in enumerate(keys.tolist())],
                    dtype=np.int64)  # int64 for an empty batch too


class TableCache:
    """The previous tables a worker has fetched, by shard, least recently used dropped
    first past `budget` bytes."""

    def __init__(self, budget: int = CACHE_BYTES) -> None:
        self._budget = budget
        self._tables: collections.OrderedDict[int, PreviousTable] = collections.OrderedDict()
        self._bytes = 0
        self.fetches = 0

    def get(self, shard: int, side: Any, width: int) -> PreviousTable:
        table = self._tables.get(shard)
        if table is not None:
            self._tables.move_to_end(shard)
            return table
        found = list(side[shard])  # a shard holds one table, or none when no rows fell in it
        table = found[0] if found else PreviousTable.build([], width)
        self.fetches += 1
        self._tables[shard] = table
        self._bytes += table.nbytes
        while self._bytes > self._budget and len(self._tables) > 1:
            _, dropped = self._tables.popitem(last=False)
            self._bytes -= dropped.nbytes
        return table


class AttachPreviousFn(CountingDoFn):
    """`RowBatch` -> the batch with its `Carry` (see the module docstring), the previous
    tables a multimap side input by shard. Counts (namespace `incremental`): `old_rows`,
    `new_rows`, `duplicate_rows` (rows after the first of their content in a batch),
    `table_fetches` (shards fetched by a worker)."""

    def __init__(self, spec: CarrySpec, shards: int) -> None:
        super().__init__(_STAGE, ["old_rows", "new_rows", "duplicate_rows", "table_fetches"])
        self._spec = spec
        self._shards = shards
        self._cache: TableCache | None = None

    def setup(self) -> None:
        self._cache = TableCache()

    def process(self, batch: RowBatch, tables: Any) -> Iterator[RowBatch]:
        width = len(self._spec.columns)
        keys = batch_keys(batch)
        shard = shard_of(keys, self._shards)
        at = np.full(len(keys), -1)  # int64: -1 where the previous run has no such row
        values = np.full((len(keys), width), math.nan)
        fetched = self._cache.fetches
        for s in np.unique(shard):
            rows = np.flatnonzero(shard == s)
            table = self._cache.get(int(s), tables, width)
            found = table.find(keys[rows])
            hit = found >= 0
            at[rows[hit]] = found[hit]
            values[rows[hit]] = table.values[found[hit]]
        first = first_of_each(keys)
        old = at >= 0
        self.count("old_rows", int(old.sum()))
        self.count("new_rows", int((~old).sum()))
        self.count("duplicate_rows", int((first != np.arange(len(first))).sum()))
        self.count("table_fetches", self._cache.fetches - fetched)
        yield batch.with_carry(Carry(keys.tobytes(), old, values, first))


class AttachPrevious(beam.PTransform):
    """`RowBatch`es -> the same batches with their `Carry`, given the previous run's
    `(shard, PreviousTable)` (`previous_shards.ReadPreviousShards`)."""

    def __init__(self, spec: CarrySpec, tables: beam.PCollection, shards: int) -> None:
        super().__init__()
        self._spec = spec
        self._tables = tables
        self._shards = shards

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        attached = batches | "AttachPreviousValues" >> beam.ParDo(
            AttachPreviousFn(self._spec, self._shards),
            beam.pvalue.AsMultiMap(self._tables)).with_outputs(STATS_TAG, main="batches")
        return typed_as(attached.batches, RowBatch)


def unique_rows(carry: Carry | None, n: int) -> Sequence[int]:
    """The rows of a batch to score: the first of each content (every row without a
    carry)."""
    if carry is None:
        return range(n)
    return [i for i, f in enumerate(carry.first.tolist()) if f == i]
