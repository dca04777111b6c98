"""Rows read and checked as columns (`split_records`, what `read.ReadRowsFn` reads a split
through): a block of JSONL lines parsed by pyarrow, or a Parquet record batch, checked
column by column, and the rows that pass every check built without
per-row parsing or validation. A row that a check does not pass, and every row of a block
pyarrow cannot read as this run's columns, is handed back for the per-row path
(`row_validation.to_scoring_row`), which gives it its exact answer: its row or its dead
letter with the reason. So the columnar path only ever takes rows whose answer it knows
to be the per-row path's; it is a faster way to the same rows, never a second set of
rules.

What sends rows to the per-row path: a column of another type than the run reads (a
number where text is expected, a string where a list of references is), a null or blank
value where one is needed, a reference list with a null or blank member or longer than
`--max_references`, text over `--max_text_chars`; and in a JSONL block, a line
pyarrow cannot parse, bytes that are not UTF-8, a byte-order mark, a surrogate escape
(a lone `\\ud83d`, which pyarrow refuses), or a line holding more than one value. Where
pyarrow names the row it fails on, that line alone goes the per-row way; otherwise the
block is cut in halves down to 8 lines.

Blank (Python's `str.strip`) is decided conservatively: a text passes when it holds a
letter, digit, mark, punctuation or symbol, none of which Python strips (a printable ASCII
character other than the space is looked for first, the Unicode classes only in the texts
without one); a text of other characters only goes the per-row way.
"""

from __future__ import annotations

import io
import itertools
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from transforms.metrics.base import QAExample
from transforms.scoring.reading.rows import (
    KEPT_TEXTS,
    ColumnMapping,
    RowError,
    RowSource,
    ScoringRow,
    parse_json_line,
)

# Lines parsed together, and the smallest part a failing block is cut down to.
BLOCK_LINES = 2048
SMALLEST_PART = 8
_NOT_BLANK = r"[\p{L}\p{N}\p{M}\p{P}\p{S}]"
# A printable ASCII character other than the space: never stripped, and found faster
_VISIBLE_ASCII = "[!-~]"
_FAILED_ROW = re.compile(r" in row (\d+)")
_BOM = b"\xef\xbb\xbf"


def columnar_mapping(mapping: ColumnMapping) -> bool:
    """Whether rows of this mapping can be read as columns: one reference column, and no
    kept input column but the scored texts (other kept values keep their JSON form)."""
    return len(mapping.references) == 1 and set(mapping.keep) <= set(KEPT_TEXTS)


def _schema(mapping: ColumnMapping) -> Any:
    import pyarrow as pa

    fields = [(mapping.prediction, pa.string()), (mapping.references[0], pa.list_(pa.string()))]
    fields += [(c, pa.string()) for c in (mapping.question, mapping.id, mapping.system) if c]
    if mapping.negative_references:
        fields.append((mapping.negative_references, pa.list_(pa.string())))
    if mapping.human:
        fields.append((mapping.human, pa.float64()))
    return pa.schema(fields)


def _readable(kind: Any, wanted: Any) -> bool:
    """Whether a Parquet column of type `kind` reads as `wanted` (the JSONL schema's
    type) with the per-row path's answers: text as text, lists of text, numbers (or
    nothing) for a human value, a column of nulls for an optional one."""
    import pyarrow as pa

    text = (pa.types.is_string(kind) or pa.types.is_large_string(kind))
    if pa.types.is_list(wanted):
        return ((pa.types.is_list(kind) or pa.types.is_large_list(kind))
                and (pa.types.is_string(kind.value_type)
                     or pa.types.is_large_string(kind.value_type)))
    if pa.types.is_floating(wanted):
        return (pa.types.is_floating(kind) or pa.types.is_integer(kind)
                or pa.types.is_null(kind))
    return text


class ColumnarRows:
    """Builds rows from columns for one mapping and text limit (see the module doc)."""

    def __init__(self, mapping: ColumnMapping, max_chars: int | None) -> None:
        self._mapping = mapping
        self._max = max_chars
        self._schema = _schema(mapping)

    def jsonl_block(self, lines: Sequence[tuple[int, bytes]], file: str
                    ) -> Iterator[tuple[int, bytes, ScoringRow | None]]:
        """(line, raw, row or None) per non-blank line of a block, in order: None for a
        line the per-row path must read. Where pyarrow names the row it fails on, the
        lines before it are parsed again, that line goes the per-row way and the rest
        follows; otherwise the block is cut in halves."""
        while lines:
            table, failed = self._parse(lines)
            if table is not None:
                rows = self.rows(table, file, [n for n, _ in lines])
                yield from ((n, raw, row) for (n, raw), row in zip(lines, rows, strict=True))
                return
            if failed is not None and failed < len(lines):
                yield from self.jsonl_block(lines[:failed], file)
                yield lines[failed][0], lines[failed][1], None
                lines = lines[failed + 1:]
                continue
            if len(lines) <= SMALLEST_PART:
                yield from ((n, raw, None) for n, raw in lines)
                return
            half = len(lines) // 2
            yield from self.jsonl_block(lines[:half], file)
            lines = lines[half:]

    def _parse(self, lines: Sequence[tuple[int, bytes]]) -> tuple[Any, int | None]:
        """(the block as a table of this run's columns, None), or (None, the index of the
        line to read row by row, when known) when pyarrow cannot read it as such or could
        read it otherwise than Python's json would (a byte-order mark, which pyarrow
        skips; two values on one line, which it reads as two rows)."""
        import pyarrow as pa
        import pyarrow.json as pj

        block = b"".join([raw for _, raw in lines])
        if not block.endswith(b"\n"):  # the file's last line
            block += b"\n"
        if _BOM in block:
            return None, next(i for i, (_, raw) in enumerate(lines) if _BOM in raw)
        try:
            block.decode("utf-8")
        except UnicodeDecodeError:
            return None, None
        try:
            table = pj.read_json(
                io.BytesIO(block),
                read_options=pj.ReadOptions(use_threads=False, block_size=len(block) + 1),
                parse_options=pj.ParseOptions(explicit_schema=self._schema,
                                              unexpected_field_behavior="ignore"))
        except pa.ArrowInvalid as e:
            found = _FAILED_ROW.search(str(e))
            return None, int(found.group(1)) if found else None
        return (table, None) if table.num_rows == len(lines) else (None, None)

    def parquet_batch(self, batch: Any, file: str, first_row: int
                      ) -> list[ScoringRow | None] | None:
        """A Parquet record batch -> per row its `ScoringRow` or None (the per-row path
        decides); None for the whole batch when a column is missing or of another type
        than the run reads as columns (a number for an id, text for a human value...)."""
        import pyarrow as pa

        names = set(batch.schema.names)
        for field in self._schema:
            if field.name not in names:
                return None
            kind = batch.schema.field(field.name).type
            if not _readable(kind, field.type):
                return None
        if self._mapping.human:
            at = batch.schema.get_field_index(self._mapping.human)
            batch = batch.set_column(at, self._mapping.human,
                                     batch.column(at).cast(pa.float64()))
        numbers = range(first_row, first_row + batch.num_rows)
        return self.rows(batch, file, numbers, lines=False)

    def rows(self, table: Any, file: str, numbers: Sequence[int], lines: bool = True
             ) -> list[ScoringRow | None]:
        """A table (pyarrow, of the run's columns) -> per row its `ScoringRow`, or None
        where the per-row path must decide. `numbers`: each row's 1-based row (its line
        too, with `lines`)."""
        m = self._mapping
        ok = self._texts_ok(table.column(m.prediction))
        references = self._lists(table.column(m.references[0]), m.max_references, ok)
        questions = self._optional(table, m.question, ok, limited=True)
        ids, systems = self._optional(table, m.id, ok), self._optional(table, m.system, ok)
        negatives = (self._lists(table.column(m.negative_references), None, ok, nullable=True)
                     if m.negative_references else None)
        humans = (table.column(m.human).to_pylist() if m.human else None)
        predictions = table.column(m.prediction).to_pylist()
        out: list[ScoringRow | None] = []
        for i, number in enumerate(numbers):
            if not ok[i]:
                out.append(None)
                continue
            example = QAExample(predictions[i], references[i],
                                questions[i] if questions else None,
                                negatives[i] if negatives else ())
            human = humans[i] if humans else None
            if human is not None and math.isnan(human):
                human = None
            out.append(ScoringRow(RowSource(file, number, number if lines else None), example,
                                  ids[i] if ids else None, systems[i] if systems else None,
                                  human, self._kept(example)))
        return out

    def _kept(self, example: QAExample) -> tuple[tuple[str, Any], ...]:
        if not self._mapping.keep:
            return ()
        values = {"question": example.question, "prediction": example.prediction,
                  "references": list(example.references)}
        return tuple((name, values[name]) for name in self._mapping.keep)

    def _length_ok(self, column: Any) -> np.ndarray:
        import pyarrow.compute as pc

        if self._max is None:
            return np.ones(len(column), dtype=bool)
        return pc.fill_null(pc.less_equal(pc.utf8_length(column), self._max), True
                            ).to_numpy(zero_copy_only=False)

    def _texts_ok(self, column: Any) -> np.ndarray:
        """Each value given, not blank and within the length limit."""
        import pyarrow.compute as pc

        given = pc.fill_null(pc.match_substring_regex(column, _VISIBLE_ASCII), False
                             ).to_numpy(zero_copy_only=False)
        rest = np.flatnonzero(~given)  # none of it: ask the Unicode classes (or null)
        if len(rest):
            given[rest] = pc.fill_null(pc.match_substring_regex(
                column.take(rest), _NOT_BLANK), False).to_numpy(zero_copy_only=False)
        return given & self._length_ok(column)

    def _lists(self, column: Any, most: int | None, ok: np.ndarray,
               nullable: bool = False) -> list:
        """Each list's texts as a tuple; `ok` cleared for a list that holds a null, blank
        or too long text, and (references: not `nullable`) for one that is null, empty
        or longer than `most`. A null list is () when `nullable`."""
        import pyarrow as pa
        import pyarrow.compute as pc

        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(column)
        bad = np.zeros(len(column), dtype=np.int64)
        if len(flat):
            owner = np.repeat(np.arange(len(column)), lengths)
            np.add.at(bad, owner, ~self._texts_ok(flat))
        fine = bad == 0
        if not nullable:
            fine &= column.is_valid().to_numpy(zero_copy_only=False) & (lengths > 0)
            if most is not None:
                fine &= lengths <= most
        ok &= fine
        return [tuple(v) if v is not None else () for v in column.to_pylist()]

    def _optional(self, table: Any, column: str | None, ok: np.ndarray,
                  limited: bool = False) -> list | None:
        """An optional text column's values (None: no such column); with `limited`, `ok`
        cleared for a text over the length limit."""
        if column is None:
            return None
        values = table.column(column)
        if limited:
            ok &= self._length_ok(values)
        return values.to_pylist()


def split_records(split: Any, mapping: ColumnMapping, max_chars: int | None
                  ) -> Iterator[tuple[RowSource, Any]]:
    """(source, record | RowError | ScoringRow) per row of a `read.ReadSplit`: JSONL lines
    in blocks and Parquet record batches read as columns where the mapping allows, the
    rows they leave and every other format record by record (for the per-row path)."""
    path = split.path
    columns = ColumnarRows(mapping, max_chars)
    if split.fmt == "parquet" and columnar_mapping(mapping):
        for first, batch in split.parquet_batches():
            rows, records = columns.parquet_batch(batch, path, first), None
            for i in range(batch.num_rows):
                if rows is not None and rows[i] is not None:
                    yield rows[i].source, rows[i]
                    continue
                records = records or batch.to_pylist()
                yield RowSource(file=path, row=first + i, line=None), records[i]
        return
    if split.fmt != "jsonl" or not columnar_mapping(mapping):
        for row, line, record in split.records():
            yield RowSource(file=path, row=row, line=line), record
        return
    lines = split.lines()
    while block := list(itertools.islice(lines, BLOCK_LINES)):
        for number, raw, row in columns.jsonl_block(block, path):
            if row is not None:
                yield row.source, row
                continue
            try:
                record: Any = parse_json_line(raw)
            except RowError as e:
                record = e
            yield RowSource(file=path, row=number, line=number), record
