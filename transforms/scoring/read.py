"""Reading prediction files (JSONL, CSV, Parquet) into keyed `ScoringRow`s.

`ReadPredictions` matches a glob, reads every file with its row numbers and validates each
record (`rows.to_scoring_row`); it yields `(row_key, ScoringRow)` on `rows` and dead-letter
dicts on `dead_letter`. Each file is planned into splits (`plan_splits`) that workers read
in parallel as streams: Parquet by row group, uncompressed JSONL by byte ranges
(`SPLIT_BYTES`; a first pass counts the newlines of each range so that rows keep their
file line numbers: the row key stays `file:line`), compressed files and CSV whole (a CSV
field may hold a newline, so a byte range cannot tell where a record starts). `Reshuffle`
then spreads the rows so that scoring parallelises.

`sniff_columns` runs on the launcher at graph build time: it reads the header (CSV), the
schema (Parquet) or the first rows (JSONL) of the matched files so that a missing column
fails before anything runs.

The iterators (`iter_jsonl`, `iter_csv`, `iter_parquet`) take a binary file object and are
Beam-free; each yields `(row, line, record_or_error)`. Files are opened by
`inputs.read_input`: decompressed by suffix, a file cut short is an error, and every error
of opening or reading a file (here and in `sniff_columns`) is an `InputFileError` naming it.
"""

import csv
import dataclasses
import functools
import itertools
import logging
import os
import re
from collections.abc import Iterator
from typing import IO, Any

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from transforms.io.counting import STATS_TAG, CountingDoFn
from transforms.scoring.inputs import (
    COMPRESSIONS,
    READ_ERRORS,
    compression_of,
    input_error,
    open_input,
    read_input,
)
from transforms.scoring.row_batch import RowBatch
from transforms.scoring.rows import (
    REASONS,
    ColumnMapping,
    RowError,
    RowSource,
    dead_letter,
    parse_json_line,
    partial_metadata,
    to_scoring_row,
)

logger = logging.getLogger(__name__)

FORMATS = ("jsonl", "csv", "parquet")
DEAD_LETTER = "dead_letter"
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
               ".parquet": "parquet", ".pq": "parquet"}
_CSV_FIELD_LIMIT = 64 * 1024 * 1024
_PARQUET_BATCH_ROWS = 4096
# Uncompressed JSONL larger than this is read in byte ranges of this size, in parallel.
SPLIT_BYTES = 64 << 20
_SURROGATE = re.compile("[\udc80-\udcff]")

Record = dict[str, Any] | RowError


def input_format_of(path: str, override: str | None = None) -> str:
    """The input format of a file: `override` when given, else from its extension.

    Args:
        path: a file path; a compression suffix (.gz, .bz2, ...) is looked through.
        override: one of FORMATS, or None.

    Returns:
        One of FORMATS.

    Raises:
        ValueError: an unknown override, or an extension that names no format.
    """
    if override is not None:
        if override not in FORMATS:
            raise ValueError(f"unknown input format {override!r}; available: {list(FORMATS)}")
        return override
    name = path.lower()
    for suffix in COMPRESSIONS:
        name = name.removesuffix(suffix)
    for extension, fmt in _EXTENSIONS.items():
        if name.endswith(extension):
            return fmt
    raise ValueError(
        f"cannot tell the format of {path!r} from its extension "
        f"(known: {sorted(_EXTENSIONS)}); pass --input_format {'|'.join(FORMATS)}")


def iter_jsonl(fobj: IO[bytes]) -> Iterator[tuple[int, int | None, Record]]:
    """Yields (row, line, object or RowError) per non-blank line; row == line for JSONL."""
    for line_number, raw in enumerate(iter(fobj.readline, b""), start=1):
        if not raw.strip():
            continue
        try:
            yield line_number, line_number, parse_json_line(raw)
        except RowError as e:
            yield line_number, line_number, e


def _text_lines(fobj: IO[bytes]) -> Iterator[str]:
    """Decodes line by line; undecodable bytes become lone surrogates, checked per record."""
    for number, raw in enumerate(iter(fobj.readline, b"")):
        text = raw.decode("utf-8", "surrogateescape")
        yield text.removeprefix("\ufeff") if number == 0 else text


def _undecodable(fields: list[str]) -> bool:
    return any(_SURROGATE.search(f) for f in fields)


def iter_csv(fobj: IO[bytes]) -> Iterator[tuple[int, int | None, Record]]:
    """Yields (data record number, first physical line, row dict or RowError) per record.

    A record whose field count differs from the header's, or that holds bytes that are not
    UTF-8, is a RowError; a CSV syntax error ends the file with one RowError (the parser
    cannot resynchronise).
    """
    csv.field_size_limit(_CSV_FIELD_LIMIT)
    reader = csv.reader(_text_lines(fobj))
    header: list[str] | None = None
    row_number = 0
    last_line = 0
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            yield row_number + 1, last_line + 1, RowError(
                "malformed_csv", f"{e}; rest of file skipped")
            return
        first_line, last_line = last_line + 1, reader.line_num
        if not fields:
            continue
        if header is None:
            header = fields
            continue
        row_number += 1
        if _undecodable(fields):
            yield row_number, first_line, RowError("invalid_utf8", "bytes that are not UTF-8")
        elif len(fields) != len(header):
            yield row_number, first_line, RowError(
                "wrong_field_count", f"{len(fields)} fields, header has {len(header)}")
        else:
            yield row_number, first_line, dict(zip(header, fields, strict=True))


def csv_header(fobj: IO[bytes]) -> list[str]:
    """The header row of a CSV file (empty for an empty file)."""
    csv.field_size_limit(_CSV_FIELD_LIMIT)
    for fields in csv.reader(_text_lines(fobj)):
        if fields:
            return fields
    return []


def iter_parquet(fobj: IO[bytes]) -> Iterator[tuple[int, int | None, Record]]:
    """Yields (row index + 1, None, row dict) per Parquet row, reading batch by batch."""
    import pyarrow.parquet as pq

    row_number = 0
    for batch in pq.ParquetFile(fobj).iter_batches(batch_size=_PARQUET_BATCH_ROWS):
        for record in batch.to_pylist():
            row_number += 1
            yield row_number, None, record


class FileChangedError(ValueError):
    """A file read in parts whose size is not the one its parts were planned for: it was
    written to (appended, cut, replaced) while the run read it."""


def check_unchanged(fobj: IO[bytes], planned: int | None) -> None:
    """Raises `FileChangedError` when the seekable `fobj` is not `planned` bytes long (None:
    not read in parts, nothing to check); leaves it at its start."""
    if planned is None:
        return
    fobj.seek(0, os.SEEK_END)
    now = fobj.tell()
    fobj.seek(0)
    if now != planned:
        raise FileChangedError(
            f"it is {now:,} bytes now and was {planned:,} when the run planned its parts "
            "(a file must not be written while it is scored: rerun once it is complete)")


def iter_jsonl_range(fobj: IO[bytes], start: int, end: int, first_line: int,
                     size: int | None = None) -> Iterator[tuple[int, int | None, Record]]:
    """`iter_jsonl` over the lines that start at a byte offset in [start, end).

    Args:
        fobj: the seekable, uncompressed file.
        start, end: the byte range (a line starting before `end` is read to its end).
        first_line: the 1-based number of the line that holds byte `start` (1 plus the
            newlines before `start`; `PlanSplits` counts them).
        size: the file's size when the ranges were planned (`check_unchanged`).
    """
    check_unchanged(fobj, size)
    line_number = first_line
    if start > 0:
        fobj.seek(start - 1)
        if fobj.read(1) != b"\n":  # `start` is inside a line: that line is the previous
            fobj.readline()         # split's; ours start after it
            line_number += 1
    position = fobj.tell()
    while position < end:
        raw = fobj.readline()
        if not raw:
            return
        position += len(raw)
        if raw.strip():
            try:
                yield line_number, line_number, parse_json_line(raw)
            except RowError as e:
                yield line_number, line_number, e
        line_number += 1


def iter_parquet_groups(fobj: IO[bytes], groups: tuple[int, ...], first_row: int,
                        size: int | None = None) -> Iterator[tuple[int, int | None, Record]]:
    """`iter_parquet` over some row groups; `first_row` is the 1-based number of the first
    group's first row in the file; `size`: the file's size when its row groups were
    planned (`check_unchanged`)."""
    import pyarrow.parquet as pq

    check_unchanged(fobj, size)
    row_number = first_row - 1
    for batch in pq.ParquetFile(fobj).iter_batches(batch_size=_PARQUET_BATCH_ROWS,
                                                   row_groups=list(groups)):
        for record in batch.to_pylist():
            row_number += 1
            yield row_number, None, record


_ITERATORS = {"jsonl": iter_jsonl, "csv": iter_csv, "parquet": iter_parquet}


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
    """

    path: str
    fmt: str
    start: int = 0
    end: int | None = None
    first_line: int = 1
    groups: tuple[int, ...] = ()
    first_row: int = 1
    size: int | None = None

    def records(self) -> Iterator[tuple[int, int | None, Record]]:
        """(row, line, record or RowError) of the split, through `inputs.read_input`."""
        if self.groups:
            return read_input(self.path, functools.partial(
                iter_parquet_groups, groups=self.groups, first_row=self.first_row,
                size=self.size),
                seekable=True)
        if self.end is not None:
            return read_input(self.path, functools.partial(
                iter_jsonl_range, start=self.start, end=self.end,
                first_line=self.first_line, size=self.size), seekable=True)
        return read_input(self.path, _ITERATORS[self.fmt], seekable=self.fmt == "parquet")


def plan_splits(path: str, size: int, input_format: str | None, split_bytes: int
                ) -> list[ReadSplit]:
    """How a matched file is read: uncompressed JSONL larger than `split_bytes` in byte
    ranges of that size (their `first_line` still to count: `count_lines`), Parquet one
    split per row group (row numbers from the footer), everything else whole: compressed
    files (a compressed stream cannot be entered in the middle) and CSV (a quoted field may
    hold a newline, so a byte range cannot tell where a record starts)."""
    fmt = input_format_of(path, input_format)
    if compression_of(path) is not None:
        return [ReadSplit(path, fmt)]
    if fmt == "jsonl" and size > split_bytes:
        return [ReadSplit(path, fmt, start, min(start + split_bytes, size), size=size)
                for start in range(0, size, split_bytes)]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with open_input(path, seekable=True) as fobj:
            metadata = pq.ParquetFile(fobj).metadata
            fobj.seek(0, os.SEEK_END)
            planned = fobj.tell()
        splits, first = [], 1
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            splits.append(ReadSplit(path, fmt, groups=(group,), first_row=first,
                                    size=planned))
            first += rows
        return splits or [ReadSplit(path, fmt)]
    return [ReadSplit(path, fmt)]


def count_newlines(split: ReadSplit) -> tuple[str, tuple[int, int]]:
    """(path, (start, newlines in [start, end))) of a JSONL byte-range split."""
    count = 0
    try:
        with open_input(split.path, seekable=True) as fobj:
            check_unchanged(fobj, split.size)
            fobj.seek(split.start)
            remaining = split.end - split.start
            while remaining > 0:
                block = fobj.read(min(remaining, 1 << 22))
                if not block:
                    break
                count += block.count(b"\n")
                remaining -= len(block)
    except READ_ERRORS as e:
        raise input_error(split.path, e) from e
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


def sniff_columns(file_pattern: str, input_format: str | None = None, max_files: int = 20,
                  max_json_rows: int = 100) -> tuple[list[str], list[str]]:
    """Matches the input and reads the columns it offers (launcher side, graph build time).

    CSV: the header; Parquet: the schema; JSONL: the keys of the first `max_json_rows`
    objects. Only the first `max_files` matched files are opened.

    Args:
        file_pattern: a path or glob understood by Beam's FileSystems.
        input_format: one of FORMATS, or None to go by extension.
        max_files: how many matched files to look into.
        max_json_rows: how many JSON lines per file to look into.

    Returns:
        (matched file paths, columns present in every file looked into, in first-file order).

    Raises:
        ValueError: nothing matches, or a file's format is unknown.
        InputFileError: a file looked into cannot be read (a ValueError too).
    """
    metadata = FileSystems.match([file_pattern])[0].metadata_list
    files = sorted(m.path for m in metadata)
    if not files:
        raise ValueError(f"--input {file_pattern!r} matches no file")
    formats = {path: input_format_of(path, input_format) for path in files}
    common: list[str] | None = None
    for path in files[:max_files]:
        with open_input(path, seekable=formats[path] == "parquet") as fobj:
            if formats[path] == "csv":
                columns = csv_header(fobj)
            elif formats[path] == "parquet":
                import pyarrow.parquet as pq

                columns = list(pq.ParquetFile(fobj).schema_arrow.names)
            else:
                columns = []
                for _, _, record in itertools.islice(iter_jsonl(fobj), max_json_rows):
                    if isinstance(record, dict):
                        columns.extend(k for k in record if k not in columns)
        common = columns if common is None else [c for c in common if c in columns]
    logger.info("input %s: %d file(s), columns %s", file_pattern, len(files), common)
    return files, common or []


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
        for row, line, record in split.records():
            source = RowSource(file=path, row=row, line=line)
            if isinstance(record, RowError):
                self.count(f"filtered:{record.reason}")
                yield beam.pvalue.TaggedOutput(
                    DEAD_LETTER, dead_letter(source, record.reason, record.detail))
                continue
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
            self.count("passed")
            yield source.key, scoring_row


class ReadPredictions(beam.PTransform):
    """Reads and validates prediction rows.

    Files are read in splits (`plan_splits`, at most `split_bytes` per JSONL range).
    Returns a dict: `rows` -> `(row_key, ScoringRow)` spread over the workers (`Reshuffle`)
    or, with `batch_rows`, `batches` -> `RowBatch`es of that many consecutive rows of a
    split, as read; `dead_letter` -> dead-letter dicts, `stats` -> the
    `((namespace, name), n)` counts of `ReadRowsFn`.
    A file that cannot be read to its end (cut short, corrupt, unreadable) fails the run
    with an `InputFileError` naming it. `max_text_chars`: see `rows.to_scoring_row`.
    """

    def __init__(self, file_pattern: str, mapping: ColumnMapping,
                 input_format: str | None = None, max_text_chars: int | None = None,
                 split_bytes: int = SPLIT_BYTES, batch_rows: int | None = None) -> None:
        super().__init__()
        if split_bytes < 1:
            raise ValueError(f"split_bytes must be >= 1, got {split_bytes}")
        self._batch_rows = batch_rows
        self._file_pattern = file_pattern
        self._mapping = mapping
        self._input_format = input_format
        self._max_text_chars = max_text_chars
        self._split_bytes = split_bytes

    def expand(self, pbegin: beam.pvalue.PBegin):  # -> {"rows", "dead_letter", ...}
        input_format, split_bytes = self._input_format, self._split_bytes
        planned = (
            pbegin
            | "MatchInputFiles" >> fileio.MatchFiles(self._file_pattern)
            | "PlanSplits" >> beam.FlatMap(
                lambda m: plan_splits(m.path, m.size_in_bytes, input_format, split_bytes)))
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
        out = {"dead_letter": read[DEAD_LETTER], "stats": read[STATS_TAG]}
        if self._batch_rows is not None:
            return {"batches": read.rows, **out}
        return {"rows": read.rows | "SpreadRowsOverWorkers" >> beam.Reshuffle(), **out}
