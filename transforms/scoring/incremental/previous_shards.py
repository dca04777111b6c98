"""The previous run's scores as tables sharded by content key, for an incremental run's
batches to look up (carry.py).

`ReadPreviousShards` reads the previous run's scores file (Parquet row group by row
group, or JSONL in ranges) and makes one `PreviousTable` per shard of content keys: the
keys (16-byte digests, sorted) and one row of values per key, for the columns the run
carries or compares. Each part of the file is cut into shards where it is read, and the
parts of a shard are combined (`TablesCombineFn`, lifted before the shuffle), so what
crosses the shuffle is a partial table per part and shard, never a row.

Pure numpy apart from `ReadPreviousShards`: a table of a million rows of three columns is
40 MB (16 bytes of key and 8 per value), and a batch's keys are looked up in it with one
`searchsorted` per shard.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from transforms.scoring.incremental.previous_run import PreviousRun
from transforms.scoring.reading.parquet_parts import ParquetSource, ReadParquetBatches

KEY_BYTES = 16  # a content key: 128-bit BLAKE2b (rows.content_digest)
# Rows of the previous run per shard: a batch of rows looks up the shards of its keys, so
# a shard is fetched whole by every worker that needs it; 65,536 rows of three values are
# 2.5 MB.
ROWS_PER_SHARD = 1 << 16
MAX_SHARDS = 4096


def shards_for(previous: PreviousRun) -> int:
    """The number of content-key shards for a previous run, from the rows its summary
    says it scored (1 when it does not say)."""
    scored = (previous.summary.get("overall") or {}).get("scored")
    if not isinstance(scored, int):
        return 1
    return max(1, min(MAX_SHARDS, math.ceil(scored / ROWS_PER_SHARD)))  # 1 for none


def shard_of(keys: np.ndarray, shards: int) -> np.ndarray:
    """The shard of each 16-byte key (an `S16` array): its first four bytes, little
    endian, modulo `shards` (a uint32 array)."""
    return np.frombuffer(keys.tobytes(), dtype="<u4")[::KEY_BYTES // 4] % shards


class PreviousTable:
    """The previous values of one shard: `keys` (sorted `S16` array, unique) and `values`
    (float64, one row per key, one column per `columns` name; NaN where the previous run
    wrote null)."""

    __slots__ = ("keys", "values")

    def __init__(self, keys: np.ndarray, values: np.ndarray) -> None:
        self.keys = keys
        self.values = values

    @staticmethod
    def build(parts: Iterable[tuple[np.ndarray, np.ndarray]], width: int) -> PreviousTable:
        """One table from `(keys, values)` parts; a key in several parts (duplicate rows
        of the previous run, equal values) is kept once."""
        parts = [p for p in parts if len(p[0])]
        if not parts:
            return PreviousTable(np.empty(0, dtype=f"S{KEY_BYTES}"),
                                 np.empty((0, width)))
        keys = np.concatenate([k for k, _ in parts])
        values = np.concatenate([v for _, v in parts])
        keys, first = np.unique(keys, return_index=True)
        return PreviousTable(keys, values[first])

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The row of each key in this table, -1 where the table has none."""
        if not len(self.keys):
            return np.full(len(keys), -1)
        at = np.searchsorted(self.keys, keys)
        at[at == len(self.keys)] = 0
        return np.where(self.keys[at] == keys, at, -1)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes

    def __len__(self) -> int:
        return len(self.keys)

    def __reduce__(self):
        return PreviousTable, (self.keys, self.values)


class TablesCombineFn(beam.CombineFn):
    """`(keys, values)` parts of one shard -> its `PreviousTable`; accumulators are lists
    of parts, compacted into one table when they grow (so a worker holds the rows once)."""

    _COMPACT = 256  # parts an accumulator holds before they are made one

    def __init__(self, width: int) -> None:
        self._width = width

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, part: tuple[np.ndarray, np.ndarray]) -> list:
        accumulator.append(part)
        if len(accumulator) >= self._COMPACT:
            table = PreviousTable.build(accumulator, self._width)
            accumulator[:] = [(table.keys, table.values)]
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        return [part for accumulator in accumulators for part in accumulator]

    def extract_output(self, accumulator: list) -> PreviousTable:
        return PreviousTable.build(accumulator, self._width)


def _decode_keys(keys: Sequence[Any], row_keys: Sequence[Any], source: ParquetSource
                 ) -> np.ndarray:
    """Hex content keys (either case, as `bytes.fromhex` reads them) -> an `S16` array; a
    missing or malformed one fails naming its row."""
    if all(isinstance(key, str) and len(key) == 2 * KEY_BYTES for key in keys):
        try:
            return np.frombuffer(bytes.fromhex("".join(keys)), dtype=f"S{KEY_BYTES}")
        except ValueError:
            pass
    for key, row_key in zip(keys, row_keys, strict=True):
        if not isinstance(key, str):
            raise source.fail(f"a row without a content key (row_key {row_key!r})")
        if len(key) != 2 * KEY_BYTES or not all(c in string.hexdigits for c in key):
            raise source.fail(f"row_key {row_key!r} has a malformed content key {key[:40]!r}")
    raise source.fail("its content keys cannot be read")  # not reached: one is malformed


def _number(value: Any) -> float:
    if value is None:
        return math.nan  # a NaN is written as null; carried back as NaN, as the metric gave it
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def _values(records: Sequence[dict[str, Any]], columns: Sequence[str],
            source: ParquetSource) -> np.ndarray:
    out = np.empty((len(records), len(columns)))
    for i, record in enumerate(records):
        try:
            out[i] = [_number(record[c]) for c in columns]
        except (KeyError, TypeError, ValueError) as e:
            raise source.fail(f"row_key {record.get('row_key')!r} has no number for one of "
                              f"{list(columns)}", e) from e
    return out


def shard_parts(records: Sequence[dict[str, Any]], columns: Sequence[str], shards: int,
                source: ParquetSource) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """Previous-run records (`row_key`, `content_key` and `columns`) -> `(shard, (keys,
    values))` parts, one per shard present."""
    if not records:
        return
    keys = _decode_keys([r.get("content_key") for r in records],
                        [r.get("row_key") for r in records], source)
    values = _values(records, columns, source)
    shard = shard_of(keys, shards)
    for s in np.unique(shard):
        at = shard == s
        yield int(s), (keys[at], values[at])


def batch_parts(batch: Any, columns: Sequence[str], shards: int, source: ParquetSource
                ) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """A Parquet record batch of the previous run -> `shard_parts`, column by column when
    its value columns are numbers (or nulls) and every row has a content key; else record
    by record, which names the row at fault."""
    import pyarrow as pa

    numeric = all(pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_null(t)
                  for t in (batch.schema.field(c).type for c in columns))
    keys = batch.column("content_key")
    if not numeric or keys.null_count or not len(batch):
        yield from shard_parts(batch.to_pylist(), columns, shards, source)
        return
    decoded = _decode_keys(keys.to_pylist(), batch.column("row_key").to_pylist(), source)
    values = np.empty((len(batch), len(columns)))
    for j, column in enumerate(columns):  # a null (a NaN written) is read back as NaN
        values[:, j] = batch.column(column).cast(pa.float64()).to_numpy(zero_copy_only=False)
    shard = shard_of(decoded, shards)
    for s in np.unique(shard):
        at = shard == s
        yield int(s), (decoded[at], values[at])


def _parse_lines(lines: Sequence[str], source: ParquetSource) -> list[dict[str, Any]]:
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError as e:
            raise source.fail(f"a line is not JSON ({line[:60]!r}...)", e) from e
        if not isinstance(record, dict):
            raise source.fail(f"a line is not a JSON object ({line[:60]!r})")
        records.append(record)
    return records


class ReadPreviousShards(beam.PTransform):
    """PBegin -> `(shard, PreviousTable)`, one per shard that holds rows of the previous
    run, for `columns` (carried, then compared), in `shards` shards of content key."""

    _LINES_PER_PART = 4096

    def __init__(self, previous: PreviousRun, columns: Sequence[str], shards: int) -> None:
        super().__init__()
        self._previous = previous
        self._columns = tuple(columns)
        self._shards = shards

    def expand(self, p: beam.pvalue.PBegin) -> beam.PCollection:
        source, columns, shards = self._previous.source(), self._columns, self._shards
        if self._previous.output_format == "parquet":
            parts = (p
                     | "ReadPreviousParquet" >> ReadParquetBatches(
                         source, columns=["row_key", "content_key", *columns])
                     | "ShardByContentKey" >> beam.FlatMap(batch_parts, columns, shards,
                                                           source))
        else:
            parts = (p
                     | "ReadPreviousJsonLines" >> beam.io.ReadFromText(source.path)
                     | "LinesInParts" >> beam.BatchElements(
                         min_batch_size=self._LINES_PER_PART,
                         max_batch_size=self._LINES_PER_PART)
                     | "ParsePreviousJson" >> beam.Map(_parse_lines, source)
                     | "ShardByContentKey" >> beam.FlatMap(shard_parts, columns, shards,
                                                           source))
        return parts | "TablePerShard" >> beam.CombinePerKey(TablesCombineFn(len(columns)))
