"""The prediction file formats (JSONL, CSV, Parquet): which format a file is, and one
Beam-free iterator per format, or per part of a file read in parts, over its records.

Each iterator takes a binary file object (`inputs.open_input`) and yields
`(row, line, record_or_error)`: the 1-based row number, the line number where the format
has lines (None for Parquet), and the record as a dict or a `RowError` (a malformed line
or record, dead-lettered by `read.ReadRowsFn` with its file and line). `read.py` plans
the parts and reads them in the pipeline.
"""

import csv
import itertools
import re
from collections.abc import Iterator
from typing import IO, Any

from transforms.scoring.reading.inputs import COMPRESSIONS
from transforms.scoring.reading.rows import RowError, parse_json_line

FORMATS = ("jsonl", "csv", "parquet")
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


_CHUNK_BYTES = 64 << 10  # small enough that a file cut short names the rows read before


_BOM = b"\xef\xbb\xbf"


def iter_jsonl_lines(fobj: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Yields (line number, raw line) per non-blank line (read in chunks of 64 KiB); a
    UTF-8 byte-order mark at the start of the file is not part of its first line (as a
    CSV reader, an editor or pandas reads it)."""
    line_number, rest = 0, b""
    first = fobj.read(_CHUNK_BYTES)
    for chunk in itertools.chain([first.removeprefix(_BOM)] if first else [],
                                 iter(lambda: fobj.read(_CHUNK_BYTES), b"")):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for raw in lines:
            line_number += 1
            if raw.strip():
                yield line_number, raw + b"\n"
    if rest.strip():
        yield line_number + 1, rest


def parsed(lines: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, int | None, Record]]:
    """(row, line, object or RowError) per raw JSONL line; row == line for JSONL."""
    for line_number, raw in lines:
        try:
            yield line_number, line_number, parse_json_line(raw)
        except RowError as e:
            yield line_number, line_number, e


def iter_jsonl(fobj: IO[bytes]) -> Iterator[tuple[int, int | None, Record]]:
    """Yields (row, line, object or RowError) per non-blank line; row == line for JSONL."""
    return parsed(iter_jsonl_lines(fobj))


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


def iter_parquet_batches(fobj: IO[bytes], groups: tuple[int, ...] = (), first_row: int = 1
                         ) -> Iterator[tuple[int, Any]]:
    """Yields (1-based number of its first row, Arrow record batch) per batch of the file
    (of some row groups, `first_row` then the first group's first row in the file)."""
    import pyarrow.parquet as pq

    row_number = first_row
    for batch in pq.ParquetFile(fobj).iter_batches(
            batch_size=_PARQUET_BATCH_ROWS, row_groups=list(groups) if groups else None):
        yield row_number, batch
        row_number += batch.num_rows


def _parquet_records(batches: Iterator[tuple[int, Any]]
                     ) -> Iterator[tuple[int, int | None, Record]]:
    for first, batch in batches:
        for offset, record in enumerate(batch.to_pylist()):
            yield first + offset, None, record


def iter_parquet(fobj: IO[bytes]) -> Iterator[tuple[int, int | None, Record]]:
    """Yields (row index + 1, None, row dict) per Parquet row, reading batch by batch."""
    return _parquet_records(iter_parquet_batches(fobj))


def iter_jsonl_range_lines(fobj: IO[bytes], start: int, end: int, first_line: int
                           ) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of the non-blank lines that start at a byte offset in
    [start, end).

    Args:
        fobj: the seekable, uncompressed file.
        start, end: the byte range (a line starting before `end` is read to its end).
        first_line: the 1-based number of the line that holds byte `start` (1 plus the
            newlines before `start`; `PlanSplits` counts them).
    """
    line_number = first_line
    if start > 0:
        fobj.seek(start - 1)
        if fobj.read(1) != b"\n":  # `start` is inside a line: that line is the previous
            fobj.readline()         # split's; ours start after it
            line_number += 1
    elif fobj.read(len(_BOM)) != _BOM:  # the file's byte-order mark is no part of a line
        fobj.seek(0)
    position = fobj.tell()
    while position < end:
        raw = fobj.readline()
        if not raw:
            return
        position += len(raw)
        if raw.strip():
            yield line_number, raw
        line_number += 1


def iter_jsonl_range(fobj: IO[bytes], start: int, end: int, first_line: int
                     ) -> Iterator[tuple[int, int | None, Record]]:
    """`iter_jsonl` over the lines that start at a byte offset in [start, end)
    (`iter_jsonl_range_lines`)."""
    return parsed(iter_jsonl_range_lines(fobj, start, end, first_line))


def iter_parquet_groups(fobj: IO[bytes], groups: tuple[int, ...], first_row: int
                        ) -> Iterator[tuple[int, int | None, Record]]:
    """`iter_parquet` over some row groups; `first_row` is the 1-based number of the first
    group's first row in the file."""
    return _parquet_records(iter_parquet_batches(fobj, groups, first_row))


ITERATORS = {"jsonl": iter_jsonl, "csv": iter_csv, "parquet": iter_parquet}
