"""Reading prediction files (JSONL, CSV, Parquet) into keyed `ScoringRow`s.

`ReadPredictions` matches a glob, reads every file with its row numbers and validates each
record (`rows.to_scoring_row`); it yields `(row_key, ScoringRow)` on `rows` and dead-letter
dicts on `dead_letter`. A file is read by one worker as a stream (rows are never all held in
memory); `Reshuffle` then spreads the rows so that scoring parallelises even when the input
is one large file. For a corpus too large for one reader, split it into several files.

`sniff_columns` runs on the launcher at graph build time: it reads the header (CSV), the
schema (Parquet) or the first rows (JSONL) of the matched files so that a missing column
fails before anything runs.

The iterators (`iter_jsonl`, `iter_csv`, `iter_parquet`) take a binary file object and are
Beam-free; each yields `(row, line, record_or_error)`. Files are opened by
`inputs.read_input`: decompressed by suffix, a file cut short is an error, and every error
of opening or reading a file (here and in `sniff_columns`) is an `InputFileError` naming it.
"""

import csv
import itertools
import logging
import re
from collections.abc import Iterator
from typing import IO, Any

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from transforms.io.counting import STATS_TAG, CountingDoFn
from transforms.scoring.inputs import COMPRESSIONS, open_input, read_input
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


_ITERATORS = {"jsonl": iter_jsonl, "csv": iter_csv, "parquet": iter_parquet}


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


class ReadRowsFn(CountingDoFn):
    """Reads one matched file and validates each record; bad ones go to `dead_letter`.
    Counts (namespace `read`): `passed` and `filtered:<reason>`."""

    def __init__(self, mapping: ColumnMapping, input_format: str | None = None,
                 max_text_chars: int | None = None) -> None:
        super().__init__("read", ["passed", *(f"filtered:{r}" for r in REASONS)])
        self._mapping = mapping
        self._input_format = input_format
        self._max_text_chars = max_text_chars

    def process(self, readable_file: fileio.ReadableFile) -> Iterator[Any]:
        path = readable_file.metadata.path
        fmt = input_format_of(path, self._input_format)
        text_cells = fmt == "csv"
        logger.info("reading %s as %s", path, fmt)
        for row, line, record in read_input(path, _ITERATORS[fmt], seekable=fmt == "parquet"):
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

    Returns a dict: `rows` -> `(row_key, ScoringRow)`, `dead_letter` -> dead-letter dicts,
    `stats` -> the `((namespace, name), n)` counts of `ReadRowsFn`.
    A file that cannot be read to its end (cut short, corrupt, unreadable) fails the run
    with an `InputFileError` naming it. `max_text_chars`: see `rows.to_scoring_row`.
    """

    def __init__(self, file_pattern: str, mapping: ColumnMapping,
                 input_format: str | None = None, max_text_chars: int | None = None) -> None:
        super().__init__()
        self._file_pattern = file_pattern
        self._mapping = mapping
        self._input_format = input_format
        self._max_text_chars = max_text_chars

    def expand(self, pbegin: beam.pvalue.PBegin):  # -> {"rows", "dead_letter", ...}
        read = (
            pbegin
            | "MatchInputFiles" >> fileio.MatchFiles(self._file_pattern)
            | "OpenInputFiles" >> fileio.ReadMatches()
            | "ReadAndValidateRows" >> beam.ParDo(
                ReadRowsFn(self._mapping, self._input_format,
                           self._max_text_chars)).with_outputs(
                    DEAD_LETTER, STATS_TAG, main="rows"))
        rows = read.rows | "SpreadRowsOverWorkers" >> beam.Reshuffle()
        return {"rows": rows, "dead_letter": read[DEAD_LETTER], "stats": read[STATS_TAG]}
