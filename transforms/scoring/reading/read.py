"""Reading prediction files (JSONL, CSV, Parquet) into `RowBatch`es of `ScoringRow`s.

`ReadPredictions` matches a glob, reads every file with its row numbers and validates each
record (`row_validation.to_scoring_row`); it yields `RowBatch`es of consecutive rows on
`batches` and dead-letter dicts on `dead_letter`. Each file is planned into splits (`plan_splits`) that
workers read in parallel as streams: Parquet by row group, uncompressed JSONL by byte
ranges (`SPLIT_BYTES`; a first pass counts the newlines of each range so that rows keep
their file line numbers: the row key stays `file:line`), compressed files and CSV whole (a
CSV field may hold a newline, so a byte range cannot tell where a record starts).

The per-format iterators (formats.py: `iter_jsonl`, `iter_csv`, `iter_parquet`, and the
range and row-group readers) are Beam-free; each yields `(row, line, record_or_error)`.
A part of a file checks first that the file still has the size it was planned for
(`check_unchanged`). Files are opened by
`inputs.read_input`: decompressed by suffix, a file cut short is an error, and every error
of opening or reading a file (here and in sniff.py's `sniff_columns`) is an `InputFileError`
naming it.
"""

import dataclasses
import functools
import logging
from collections.abc import Iterator
from typing import IO, Any, NamedTuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from transforms.io.counting import STATS_TAG, CountingDoFn
from transforms.scoring.reading.batch_coder import typed_as
from transforms.scoring.reading.columnar import split_records
from transforms.scoring.reading.formats import (
    ITERATORS,
    Record,
    input_format_of,
    iter_jsonl_lines,
    iter_jsonl_range,
    iter_jsonl_range_lines,
    iter_parquet_batches,
    iter_parquet_groups,
)
from transforms.scoring.reading.inputs import (
    check_unchanged,
    compression_of,
    modified_time,
    open_input,
    read_input,
    size_of,
)
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.reading.row_validation import partial_metadata, to_scoring_row
from transforms.scoring.reading.rows import (
    REASONS,
    ColumnMapping,
    RowError,
    ScoringRow,
    dead_letter,
)

logger = logging.getLogger(__name__)
# rows between two `passed` counts of the reader (progress lines see them in steps of this)
_COUNT_EVERY = 128

DEAD_LETTER = "dead_letter"
# Uncompressed JSONL larger than this is read in byte ranges of this size, in parallel:
# 16 MB is 15,000 to 40,000 rows, so a file of a few hundred thousand rows keeps the 8 to
# 16 worker processes of one GPU machine reading.
SPLIT_BYTES = 16 << 20
# Where a local runner's workers are counted (`plan_for_workers`), JSONL ranges shrink
# (down to MIN_SPLIT_BYTES) so that each worker reads about RANGES_PER_WORKER of them.
MIN_SPLIT_BYTES = 1 << 20
RANGES_PER_WORKER = 4


@dataclasses.dataclass(frozen=True)
class ReadSplit:
    """A part of one input file that one worker reads.

    Attributes:
        path: the file.
        fmt: its format (one of FORMATS).
        start, end: JSONL byte range (`end` None: the whole file, any format).
        first_line: JSONL: the number of the line holding byte `start`.
        groups: Parquet row groups (empty: every group); first_row: the 1-based number of
            their first row.
        size: a file read in parts (ranges, row groups): its size when they were planned;
            each part fails with a `FileChangedError` if the file no longer has it.
        modified: likewise its modification time (a rewrite that keeps the size).
    """

    path: str
    fmt: str
    start: int = 0
    end: int | None = None
    first_line: int = 1
    groups: tuple[int, ...] = ()
    first_row: int = 1
    size: int | None = None
    modified: float | None = None

    def records(self) -> Iterator[tuple[int, int | None, Record]]:
        """(row, line, record or RowError) of the split, through `inputs.read_input`; a
        part of a file first checks that the file is still the one planned."""
        if self.groups:
            read = functools.partial(iter_parquet_groups, groups=self.groups,
                                     first_row=self.first_row)
        elif self.end is not None:
            read = functools.partial(iter_jsonl_range, start=self.start, end=self.end,
                                     first_line=self.first_line)
        else:
            return read_input(self.path, ITERATORS[self.fmt], seekable=self.fmt == "parquet")

        def checked(fobj: IO[bytes]) -> Iterator[tuple[int, int | None, Record]]:
            check_unchanged(fobj, self.size, self.path, self.modified)
            yield from read(fobj)
        return read_input(self.path, checked, seekable=True)

    def parquet_batches(self) -> Iterator[tuple[int, Any]]:
        """(first row number, Arrow record batch) of a Parquet split, as `records` reads
        them."""
        if not self.groups:
            return read_input(self.path, iter_parquet_batches, seekable=True)

        def checked(fobj: IO[bytes]) -> Iterator[tuple[int, Any]]:
            check_unchanged(fobj, self.size, self.path, self.modified)
            yield from iter_parquet_batches(fobj, self.groups, self.first_row)
        return read_input(self.path, checked, seekable=True)

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number, raw line) of a JSONL split's non-blank lines, as `records`
        reads them."""
        if self.end is None:
            return read_input(self.path, iter_jsonl_lines)

        def checked(fobj: IO[bytes]) -> Iterator[tuple[int, bytes]]:
            check_unchanged(fobj, self.size, self.path, self.modified)
            yield from iter_jsonl_range_lines(fobj, self.start, self.end, self.first_line)
        return read_input(self.path, checked, seekable=True)


def plan_splits(path: str, size: int, input_format: str | None, split_bytes: int,
                modified: float | None = None) -> list[ReadSplit]:
    """How a matched file is read: uncompressed JSONL larger than `split_bytes` in byte
    ranges of that size (their `first_line` still to count: `count_lines`), Parquet one
    split per row group (row numbers from the footer), everything else whole: compressed
    files (a compressed stream cannot be entered in the middle) and CSV (a quoted field may
    hold a newline, so a byte range cannot tell where a record starts). Parts carry the
    file's size and modification time (`modified`, from the match; looked up when None),
    which each part checks."""
    fmt = input_format_of(path, input_format)
    if compression_of(path) is not None:
        return [ReadSplit(path, fmt)]
    if fmt == "jsonl" and size > split_bytes:
        modified = modified_time(path) if modified is None else modified
        return [ReadSplit(path, fmt, start, min(start + split_bytes, size), size=size,
                          modified=modified)
                for start in range(0, size, split_bytes)]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        modified = modified_time(path) if modified is None else modified
        with open_input(path, seekable=True) as fobj:
            metadata = pq.ParquetFile(fobj).metadata
            planned = size_of(fobj)
        splits, first = [], 1
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            splits.append(ReadSplit(path, fmt, groups=(group,), first_row=first,
                                    size=planned, modified=modified))
            first += rows
        return splits or [ReadSplit(path, fmt)]
    return [ReadSplit(path, fmt)]


class SplitPlan(NamedTuple):
    """How the input will be read by `workers` workers (`plan_for_workers`)."""

    split_bytes: int  # the JSONL range size
    splits: int  # how many splits `plan_splits` makes of the files
    largest: int  # the largest split's bytes (a whole file's, compressed or not)
    total: int  # every file's bytes

    def spreads(self, workers: int) -> bool:
        """Whether the splits alone give `workers` workers a fair share each: at least
        two splits a worker, and none more than half a worker's share of the bytes (a
        whole compressed file or CSV among small ones would otherwise be one worker's
        alone)."""
        return (self.splits >= 2 * workers
                and self.largest * 2 * workers <= max(self.total, 1))


def plan_for_workers(file_pattern: str, input_format: str | None,
                     workers: int) -> SplitPlan:
    """The JSONL range size that gives each of `workers` workers about
    `RANGES_PER_WORKER` ranges of the input's uncompressed JSONL (between
    `MIN_SPLIT_BYTES` and `SPLIT_BYTES`), and the splits `plan_splits` then makes of the
    matched files (Parquet: one per row group, weighed as an equal share of the file;
    compressed files and CSV: one each, weighed by their size on disk, which understates
    a compressed file). Run on the launcher, to decide whether the splits alone spread
    the work over the workers."""
    matched = [m for result in FileSystems.match([file_pattern])
               for m in result.metadata_list]
    jsonl = sum(m.size_in_bytes for m in matched if compression_of(m.path) is None
                and input_format_of(m.path, input_format) == "jsonl")
    wanted = -(-jsonl // (RANGES_PER_WORKER * max(workers, 1)))
    split_bytes = min(SPLIT_BYTES, max(MIN_SPLIT_BYTES, wanted))
    splits = largest = 0
    for m in matched:
        planned = plan_splits(m.path, m.size_in_bytes, input_format, split_bytes,
                              m.last_updated_in_seconds or None)
        splits += len(planned)
        largest = max([largest] + [(s.end - s.start) if s.end is not None
                                   else -(-m.size_in_bytes // len(planned)) for s in planned])
    return SplitPlan(split_bytes, splits, largest, sum(m.size_in_bytes for m in matched))


def count_newlines(split: ReadSplit) -> tuple[str, tuple[int, int]]:
    """(path, (start, newlines in [start, end))) of a JSONL byte-range split; an error of
    reading it is `open_input`'s `InputFileError`, which names the file."""
    count = 0
    with open_input(split.path, seekable=True) as fobj:
        check_unchanged(fobj, split.size, split.path, split.modified)
        fobj.seek(split.start)
        remaining = split.end - split.start
        while remaining > 0:
            block = fobj.read(min(remaining, 1 << 22))
            if not block:
                break
            count += block.count(b"\n")
            remaining -= len(block)
    return split.path, (split.start, count)


def number_lines(splits: list[ReadSplit], counts: list[tuple[int, int]]) -> list[ReadSplit]:
    """The splits of one file with `first_line` set from the newline counts of the ranges
    before each (`counts`: (start, newlines) of every range of the file)."""
    before = 0
    first_line = {}
    for start, newlines in sorted(counts):
        first_line[start] = 1 + before
        before += newlines
    return [dataclasses.replace(s, first_line=first_line[s.start]) for s in splits]


def _describe(split: ReadSplit) -> str:
    if split.groups:
        return f"row groups {list(split.groups)}"
    if split.end is not None:
        return f"bytes {split.start}-{split.end}"
    return "whole file"


class ReadRowsFn(CountingDoFn):
    """Reads one split of a matched file (`ReadSplit`, or a whole `ReadableFile`) and
    validates each record; bad ones go to `dead_letter`. Yields `(row_key, ScoringRow)`
    per row, or with `batch_rows` `RowBatch`es of that many consecutive rows of the split
    (the last one shorter).
    Counts (namespace `read`): `passed` and `filtered:<reason>`."""

    def __init__(self, mapping: ColumnMapping, input_format: str | None = None,
                 max_text_chars: int | None = None, batch_rows: int | None = None) -> None:
        super().__init__("read", ["passed", *(f"filtered:{r}" for r in REASONS)])
        if batch_rows is not None and batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
        self._mapping = mapping
        self._input_format = input_format
        self._max_text_chars = max_text_chars
        self._batch_rows = batch_rows

    def process(self, split: ReadSplit | fileio.ReadableFile) -> Iterator[Any]:
        if self._batch_rows is None:
            yield from self._rows(split)
            return
        batch: list = []
        for element in self._rows(split):
            if isinstance(element, beam.pvalue.TaggedOutput):
                yield element
                continue
            batch.append(element)
            if len(batch) == self._batch_rows:
                yield RowBatch(batch[0][0], batch)
                batch = []
        if batch:
            yield RowBatch(batch[0][0], batch)

    def _rows(self, split: ReadSplit | fileio.ReadableFile) -> Iterator[Any]:
        if not isinstance(split, ReadSplit):  # a whole matched file
            path = split.metadata.path
            split = ReadSplit(path, input_format_of(path, self._input_format))
        path, fmt = split.path, split.fmt
        text_cells = fmt == "csv"
        logger.info("reading %s as %s (%s)", path, fmt, _describe(split))
        passed = 0  # counted every _COUNT_EVERY rows: a count costs a lock and a clock read
        for source, record in split_records(split, self._mapping, self._max_text_chars):
            if isinstance(record, ScoringRow):
                scoring_row = record
            elif isinstance(record, RowError):
                self.count(f"filtered:{record.reason}")
                yield beam.pvalue.TaggedOutput(
                    DEAD_LETTER, dead_letter(source, record.reason, record.detail))
                continue
            else:
                try:
                    scoring_row = to_scoring_row(record, self._mapping, source, text_cells,
                                                 self._max_text_chars)
                except RowError as e:
                    self.count(f"filtered:{e.reason}")
                    row_id, system = partial_metadata(record, self._mapping, text_cells)
                    logger.debug("dead-lettered %s: %s", source.key, e)
                    yield beam.pvalue.TaggedOutput(
                        DEAD_LETTER, dead_letter(source, e.reason, e.detail, row_id, system))
                    continue
            passed += 1
            if passed == _COUNT_EVERY:
                self.count("passed", passed)
                passed = 0
            yield source.key, scoring_row
        if passed:
            self.count("passed", passed)


class ReadPredictions(beam.PTransform):
    """Reads and validates prediction rows.

    Files are read in splits (`plan_splits`, at most `split_bytes` per JSONL range).
    Returns a dict: `batches` -> `RowBatch`es of up to `batch_rows` consecutive rows of a
    split, as read; `dead_letter` -> dead-letter dicts, `stats` -> the
    `((namespace, name), n)` counts of `ReadRowsFn`.
    A file that cannot be read to its end (cut short, corrupt, unreadable) fails the run
    with an `InputFileError` naming it. `max_text_chars`: see
    `row_validation.to_scoring_row`.
    """

    def __init__(self, file_pattern: str, mapping: ColumnMapping,
                 input_format: str | None = None, max_text_chars: int | None = None,
                 split_bytes: int = SPLIT_BYTES, batch_rows: int = 512) -> None:
        super().__init__()
        if split_bytes < 1:
            raise ValueError(f"split_bytes must be >= 1, got {split_bytes}")
        self._batch_rows = batch_rows
        self._file_pattern = file_pattern
        self._mapping = mapping
        self._input_format = input_format
        self._max_text_chars = max_text_chars
        self._split_bytes = split_bytes

    def expand(self, pbegin: beam.pvalue.PBegin):  # -> {"batches", "dead_letter", ...}
        input_format, split_bytes = self._input_format, self._split_bytes
        planned = (
            pbegin
            | "MatchInputFiles" >> fileio.MatchFiles(self._file_pattern)
            | "PlanSplits" >> beam.FlatMap(
                lambda m: plan_splits(m.path, m.size_in_bytes, input_format, split_bytes,
                                      m.last_updated_in_seconds or None)))
        ranges = planned | "ByteRanges" >> beam.Filter(lambda s: s.end is not None)
        numbered = (
            (ranges | "KeyRangesByFile" >> beam.Map(lambda s: (s.path, s)),
             ranges | "CountNewlines" >> beam.Map(count_newlines))
            | "RangesAndCounts" >> beam.Flatten()
            | "GroupByFile" >> beam.GroupByKey()
            | "NumberLines" >> beam.FlatMap(lambda kv: number_lines(
                [v for v in kv[1] if isinstance(v, ReadSplit)],
                [v for v in kv[1] if not isinstance(v, ReadSplit)])))
        splits = (
            (planned | "WholeOrRowGroups" >> beam.Filter(lambda s: s.end is None), numbered)
            | "AllSplits" >> beam.Flatten()
            | "SpreadSplitsOverWorkers" >> beam.Reshuffle())
        read = splits | "ReadAndValidateRows" >> beam.ParDo(
            ReadRowsFn(self._mapping, self._input_format, self._max_text_chars,
                       self._batch_rows)).with_outputs(DEAD_LETTER, STATS_TAG, main="rows")
        # typed: a runner sizes the batches without packing them (batch_coder)
        return {"batches": typed_as(read.rows, RowBatch), "dead_letter": read[DEAD_LETTER],
                "stats": read[STATS_TAG]}
