"""CIDEr-D's frequencies kept in files, for a run whose workers share this machine's
files: no partial count, request or answer crosses a stage.

The sharded join (corpus_stats.py) sums each batch's partial counts per n-gram shard,
then sends every batch's request to each shard and each answer back to its batch: for
1,000,000 rows of long answers about 0.4 GB of partial counts, 0.9 GB of requests and
0.34 GB of answers, which the in-process runner holds in memory between stages and
copies several times where a stage reads them. A run on this machine
(`transforms.io.progress.is_local_runner`) writes the counts to files where they are made
instead (`WriteFrequencyTables`), named as the run's other temporary files beside its
output (`TableFileNames`: `PREFIX.cider_df-<statistic>-<corpus key>-<shard>[.<bundle>]
.npy.tmp-<run id>`):

- each bundle that reads batches sums its partial counts per (statistic, corpus key,
  shard) and writes them to a file of its own (`WritePartialTablesFn`);
- the files of each key are summed into its table, the n-grams with df >= 2
  (`SumTableFilesFn`): only file names are grouped;
- the scoring step reads every table once per worker process and bundle
  (`shared_tables`) and finds each batch's n-grams there (`table_frequencies`), with the
  lookup `answer_requests` makes: the same frequencies. Every table is in memory at once
  while the batches are scored (about 10 bytes per n-gram with df >= 2).

The files are removed once every batch is scored (`remove_files`); those of a run killed
before are removed by the next run at the prefix that completes, with its other
temporary files (outputs/finalize.py).
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from transforms.scoring.statistics.batch_texts import ReadBits
from transforms.scoring.statistics.ngram_hashes import add_part, fold_tables, lookup

TableKey = tuple[int, int, int]  # (statistic, corpus key, shard)


class TableFileNames:
    """The file of each (statistic, corpus key, shard) table of a run with output
    `prefix`, under the run's temporary name of it: `temp` (`OutputPaths.temp`)."""

    def __init__(self, prefix: str, temp: Callable[[str], str]) -> None:
        self.prefix, self._temp = prefix, temp

    def __call__(self, key: TableKey, part: str = "") -> str:
        """The summed table's file; with `part`, a bundle's partial counts'."""
        index, corpus, shard = key
        return self._temp(f"{self.prefix}.cider_df-{index}-{corpus}-{shard}"
                          f"{f'.{part}' if part else ''}.npy")

    @property
    def pattern(self) -> str:
        """Matches every table file of the run, summed or partial."""
        return self._temp(f"{self.prefix}.cider_df-*.npy")


def write_table(path: str, hashes: np.ndarray, dfs: np.ndarray) -> str:
    """Writes (hashes, dfs) to `path` as two `np.save` arrays; returns `path`."""
    with FileSystems.create(path) as f:  # a name of ours, never a compressed one's
        np.save(f, np.ascontiguousarray(hashes))
        np.save(f, np.ascontiguousarray(dfs))
    return path


class WriteTableFn(beam.DoFn):
    """((statistic, corpus key, shard), (hashes, dfs)) -> (that key, the file it is
    written to: `write_table`). For frequencies read from a statistics file."""

    def __init__(self, names: TableFileNames) -> None:
        self._names = names

    def process(self, element: tuple[TableKey, tuple[np.ndarray, np.ndarray]]
                ) -> Iterator[tuple[TableKey, str]]:
        key, (hashes, dfs) = element
        yield tuple(key), write_table(self._names(tuple(key)), hashes, dfs)


class WritePartialTablesFn(beam.DoFn):
    """A batch's partial counts ((statistic, corpus key, shard), (hashes, counts)), as
    `CiderBatchFn` emits them -> at the end of the bundle, per key, (key, the file of the
    bundle's counts summed: `write_table`, every count kept). In the stage that reads the
    batches, so the counts never cross a stage; only the file names do."""

    def __init__(self, names: TableFileNames) -> None:
        self._names = names

    def start_bundle(self) -> None:
        self._parts: dict[TableKey, list] = {}
        self._bundle = uuid.uuid4().hex[:12]

    def process(self, element: tuple[TableKey, tuple[np.ndarray, np.ndarray]]) -> None:
        key, part = element
        add_part(self._parts.setdefault(tuple(key), []), part)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        parts, self._parts = self._parts, {}
        for key, tables in parts.items():
            ((hashes, counts),) = fold_tables(tables)
            path = write_table(self._names(key, self._bundle), hashes, counts)
            yield WindowedValue((key, path), MIN_TIMESTAMP, [GlobalWindow()])


class SumTableFilesFn(beam.DoFn):
    """(key, the files of its partial counts) -> (key, the file of its summed table:
    the n-grams with df >= 2, as `SumDocumentFrequencies` keeps them)."""

    def __init__(self, names: TableFileNames) -> None:
        self._names = names

    def process(self, element: tuple[TableKey, Iterable[str]]
                ) -> Iterator[tuple[TableKey, str]]:
        key, paths = element
        key = tuple(key)
        ((hashes, dfs),) = fold_tables([read_table(path) for path in paths])
        keep = dfs >= 2
        yield key, write_table(self._names(key), hashes[keep], dfs[keep])


class WriteFrequencyTables(beam.PTransform):
    """The run's partial counts (`summed=False`: `CiderBatchFn`'s `df` output), or summed
    tables (read from a statistics file) -> ((statistic, corpus key, shard), the file of
    its summed table)."""

    def __init__(self, names: TableFileNames, summed: bool) -> None:
        super().__init__()
        self._names, self._summed = names, summed

    def expand(self, tables: beam.PCollection) -> beam.PCollection:
        if self._summed:
            return tables | "WriteTables" >> beam.ParDo(WriteTableFn(self._names))
        return (tables
                | "WritePartialTables" >> beam.ParDo(WritePartialTablesFn(self._names))
                | "GroupPartialTables" >> beam.GroupByKey()
                | "SumPartialTables" >> beam.ParDo(SumTableFilesFn(self._names)))


def read_table(path: str) -> tuple[np.ndarray, np.ndarray]:
    """The (hashes, dfs) `WriteTableFn` wrote to `path`; RuntimeError naming the file
    when it is missing, cut short or not such a table."""
    try:
        with FileSystems.open(path) as f:
            hashes = np.load(f)  # numpy loads no pickled object by default
            dfs = np.load(f)
            trailing = f.read(1)
    except (OSError, ValueError, EOFError) as e:
        raise RuntimeError(f"cannot read the document frequencies in {path}: {e}") from e
    if trailing or hashes.dtype != np.uint64 or len(hashes) != len(dfs):
        raise RuntimeError(f"{path} holds no table of document frequencies "
                           f"({len(hashes)} {hashes.dtype} hashes, {len(dfs)} frequencies)")
    return hashes, dfs


class _Tables(dict):
    """{(statistic, corpus key, shard): (hashes, dfs)} (a class: weakly referenced)."""


_LOADED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_LOADING = threading.Lock()


def shared_tables(files: Iterable[tuple[TableKey, str]]) -> _Tables:
    """Every table of `files` read, one copy per process for as long as a caller holds
    it (the worker threads of one stage share it)."""
    files = sorted((tuple(key), path) for key, path in files)
    token = tuple(path for _, path in files)
    with _LOADING:
        tables = _LOADED.get(token)
        if tables is None:
            tables = _Tables((key, read_table(path)) for key, path in files)
            _LOADED[token] = tables
    return tables


def table_frequencies(tables: dict[TableKey, tuple[np.ndarray, np.ndarray]]):
    """The frequencies of a batch's request from `tables`, as `batch_corpora` reads them:
    (statistic, shard, the request's sorted hashes, `ReadBits`) -> (corpus key, the
    hashes read there with df >= 2, their dfs as int64) for each corpus with a table."""

    def frequencies(index: int, shard: int, part: np.ndarray, reads: ReadBits
                    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        for key in reads.keys:
            table = tables.get((index, key, shard))
            if table is None:
                continue
            hashes, dfs = table
            asked = part[reads.read_in(key, len(part))]
            found, at = lookup(hashes, asked)
            yield key, asked[found], dfs[at[found]].astype(np.int64)

    return frequencies


def remove_files(_: Any, names: TableFileNames) -> list[Any]:
    """Removes every table file of the run, summed or partial (after every batch is
    scored: the first argument is what the removal waits for); yields nothing."""
    paths = [m.path for r in FileSystems.match([names.pattern]) for m in r.metadata_list]
    if paths:
        FileSystems.delete(paths)
    return []
