"""Rows read and checked as columns: a block of JSONL lines parsed by pyarrow, or a Parquet
record batch, checked column by column, and the rows that pass every check built without
per-row parsing or validation. A row that a check does not pass, and every row of a block
pyarrow cannot read as this run's columns, is handed back for the per-row path
(`row_validation.to_scoring_row`), which gives it its exact answer: its row or its dead
letter with the reason. So the columnar path only ever takes rows whose answer it knows
to be the per-row path's; it is a faster way to the same rows, never a second set of
rules.

What sends rows to the per-row path: a column of another type than the run reads (a
number where text is expected, a string where a list of references is), a null or blank
value where one is needed, a reference list with a null or blank member or longer than
`--max_references`, text over `--max_text_chars`; and for a whole JSONL block, a line
pyarrow cannot parse, bytes that are not UTF-8, a byte-order mark, a surrogate escape
(`\\ud83d`), or a line holding more than one value. Blocks are cut in halves until the
lines pyarrow cannot parse are alone, so one broken line sends only itself (and a few
neighbours) the per-row way.

Blank (Python's `str.strip`) is decided conservatively: a text passes when it holds a
letter, digit, mark, punctuation or symbol, none of which Python strips; a text of other
characters only goes the per-row way.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from transforms.metrics.base import QAExample
from transforms.scoring.reading.rows import KEPT_TEXTS, ColumnMapping, RowSource, ScoringRow

# Lines parsed together, and the smallest part a failing block is cut down to.
BLOCK_LINES = 2048
SMALLEST_PART = 8
_NOT_BLANK = r"[\p{L}\p{N}\p{M}\p{P}\p{S}]"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
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


class ColumnarRows:
    """Builds rows from columns for one mapping and text limit (see the module doc)."""

    def __init__(self, mapping: ColumnMapping, max_chars: int | None) -> None:
        self._mapping = mapping
        self._max = max_chars
        self._schema = _schema(mapping)

    def jsonl_block(self, lines: Sequence[tuple[int, bytes]], file: str
                    ) -> Iterator[tuple[int, bytes, ScoringRow | None]]:
        """(line, raw, row or None) per non-blank line of a block, in order: None for a
        line the per-row path must read."""
        table = self._parse(lines)
        if table is None:
            if len(lines) <= SMALLEST_PART:
                yield from ((n, raw, None) for n, raw in lines)
                return
            half = len(lines) // 2
            yield from self.jsonl_block(lines[:half], file)
            yield from self.jsonl_block(lines[half:], file)
            return
        rows = self.rows(table, file, [n for n, _ in lines])
        yield from ((n, raw, row) for (n, raw), row in zip(lines, rows, strict=True))

    def _parse(self, lines: Sequence[tuple[int, bytes]]) -> Any:
        """The block as a table of this run's columns; None when pyarrow cannot read it
        as such, or could read it otherwise than Python's json would."""
        import pyarrow as pa
        import pyarrow.json as pj

        block = b"".join([raw for _, raw in lines])
        if not block.endswith(b"\n"):  # the file's last line
            block += b"\n"
        if _BOM in block or _SURROGATE_ESCAPE.search(block):
            return None
        try:
            block.decode("utf-8")
            table = pj.read_json(
                io.BytesIO(block),
                read_options=pj.ReadOptions(use_threads=False, block_size=len(block) + 1),
                parse_options=pj.ParseOptions(explicit_schema=self._schema,
                                              unexpected_field_behavior="ignore"))
        except (UnicodeDecodeError, pa.ArrowInvalid):
            return None
        return table if table.num_rows == len(lines) else None

    def rows(self, table: Any, file: str, numbers: Sequence[int]) -> list[ScoringRow | None]:
        """A table (pyarrow, of the run's columns) -> per row its `ScoringRow`, or None
        where the per-row path must decide. `numbers`: each row's 1-based row (= line)."""
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
            out.append(ScoringRow(RowSource(file, number, number), example,
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

        given = pc.fill_null(pc.match_substring_regex(column, _NOT_BLANK), False)
        return given.to_numpy(zero_copy_only=False) & self._length_ok(column)

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
