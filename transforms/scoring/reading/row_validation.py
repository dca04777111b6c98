"""Validating one input record into a `ScoringRow` (`to_scoring_row`), or a `RowError`
with the reason it cannot be scored; the (id, system) of a record that failed
(`partial_metadata`).

Pure Python: no Beam, no I/O. The readers in `read.py` hand each record here as a plain
mapping (a JSON object, a CSV `DictReader` row, a Parquet row) together with its
`RowSource` (file, 1-based row number, physical line); everything that makes a row
unscorable raises `RowError` with a stable reason code from `rows.REASONS`.

Rules (see docs/decisions.md):
- prediction: must be present, a string, and not empty after stripping whitespace.
- references: from one list column (default `references`) or several columns
  (`reference_columns`); each value may be a string or a list of strings (in CSV a cell
  holding a JSON list of strings is a list, any other cell is one reference). The first
  `max_references` are kept *before* empty ones are dropped, so position j is always the
  j-th reference column (KPQA scores reference column j as its own corpus). No non-empty
  reference left -> `empty_references`.
- id and system are kept as strings (an integer id becomes "17"); in CSV an empty cell, and
  anywhere a null or NaN, means "not given".
- human is a float. Not given (scored, left out of the report, counted as `human_missing`
  in the summary): null, NaN, or a string that is empty or one of `MISSING_HUMAN` (the
  strings pandas reads as missing: "n/a", "NA", "null", ...); any other non-number is
  `non_numeric_human`.
- Text that UTF-8 cannot encode (a lone surrogate, which JSON's `"\\ud83d"` escape can
  produce) in the prediction, a reference, the question, the id or the system is
  `invalid_text`: it would fail Beam's string coder later, far from its row.
- A prediction, reference, negative reference or question longer than `max_text_chars`
  characters is `text_too_long` (metric cost grows with text length, ROUGE-L's with the
  product of two lengths, so one huge row would stall a worker).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from transforms.metrics.base import QAExample
from transforms.scoring.reading.rows import ColumnMapping, RowError, RowSource, ScoringRow

# Human values that mean "not given" (compared stripped and lower-cased): pandas' default
# missing-value strings, less the float spellings that float() already reads as NaN.
MISSING_HUMAN = frozenset({"", "n/a", "na", "#n/a", "#n/a n/a", "#na", "<na>", "null", "none",
                           "nan", "-nan", "1.#ind", "-1.#ind", "1.#qnan", "-1.#qnan"})
# Lone surrogates: code points a Python str can hold and UTF-8 cannot encode.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _is_missing(value: Any, text_cells: bool) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return text_cells and value == ""


def check_text(value: str, field: str, max_chars: int | None = None) -> str:
    """Returns `value` when UTF-8 can encode it and it is at most `max_chars` long.

    Args:
        value: the text.
        field: how the dead letter names it, e.g. "'references'[2]".
        max_chars: the length limit (None: none).

    Raises:
        RowError: invalid_text (a lone surrogate) or text_too_long.
    """
    match = _SURROGATE.search(value)
    if match:
        raise RowError("invalid_text", f"{field} holds a lone surrogate "
                       f"U+{ord(match.group()):04X} at character {match.start()}, which "
                       "UTF-8 cannot encode")
    if max_chars is not None and len(value) > max_chars:
        raise RowError("text_too_long", f"{field} is {len(value):,} characters long, more "
                       f"than the limit of {max_chars:,} (--max_text_chars)")
    return value


def printable(value: str) -> str:
    """`value` with any lone surrogate written as its escape (`\\ud83d`), so that it can
    be written out (a dead letter's id or system)."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


class _Cell(NamedTuple):
    """One reference column's values (None: missing), and whether they came from a list
    (a dead letter then names a value by its position: `'references'[2]`)."""

    column: str
    values: list
    listed: bool


_TEXT_OR_NONE = frozenset({str, type(None)})


def _cell_references(value: Any, column: str, text_cells: bool) -> _Cell:
    """One reference column's values. Per value, only C-level calls: an EVOUNA-style row
    has a dozen references on average and up to 185, read at every row of every run."""
    if _is_missing(value, text_cells):
        return _Cell(column, [None], False)
    if isinstance(value, str):
        if text_cells and value.lstrip().startswith("["):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                return _Cell(column, [value], False)
            if isinstance(parsed, list) and all(isinstance(v, str) for v in parsed):
                return _Cell(column, parsed, True)
        return _Cell(column, [value], False)
    if hasattr(value, "tolist"):  # a numpy array, when rows come through pandas
        value = value.tolist()
    if isinstance(value, list | tuple):
        items = list(value)
        if not set(map(type, items)) <= _TEXT_OR_NONE:  # else: a str subclass, or not text
            for item in items:
                if item is not None and not isinstance(item, str):
                    raise RowError("non_string_reference",
                                   f"{column!r} holds a {type(item).__name__}")
        return _Cell(column, items, True)
    raise RowError("non_string_reference", f"{column!r} holds a {type(value).__name__}")


def _field(column: str, index: int | None) -> str:
    """A reference field as a dead letter names it: `'references'[2]`."""
    return repr(column) if index is None else f"{column!r}[{index}]"


def _checked_texts(cells: Sequence[_Cell], max_chars: int | None,
                   max_references: int | None = None) -> tuple[str, ...]:
    """The non-blank texts of `cells` (the first `max_references` values), checked: one
    scan of them all, and value by value only to name the field of a bad one."""
    values = [v for cell in cells for v in cell.values] if len(cells) != 1 else cells[0].values
    if max_references is not None:
        values = values[:max_references]
    texts = list(filter(None, values))  # None and "" out
    if any(map(str.isspace, texts)):
        texts = [v for v in texts if not v.isspace()]
    if _SURROGATE.search("".join(texts)) is None and (
            max_chars is None or not texts or max(map(len, texts)) <= max_chars):
        return tuple(texts)
    fields = [(cell.column, i if cell.listed else None, v)
              for cell in cells for i, v in enumerate(cell.values)]
    if max_references is not None:
        fields = fields[:max_references]
    return tuple(check_text(v, _field(c, i), max_chars) for c, i, v in fields
                 if v and not v.isspace())


def _references(record: Mapping[str, Any], columns: Sequence[str], max_references: int | None,
                text_cells: bool, max_chars: int | None) -> tuple[str, ...]:
    present = [c for c in columns if c in record]
    if not present:
        raise RowError("missing_references", f"none of the columns {list(columns)} present")
    cells = [_cell_references(record[column], column, text_cells) for column in present]
    return _checked_texts(cells, max_chars, max_references)


def _optional_str(value: Any, text_cells: bool) -> str | None:
    if _is_missing(value, text_cells):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # an id column read as float by a CSV/Parquet writer
    return str(value)


def _human(value: Any, column: str, text_cells: bool) -> float | None:
    if _is_missing(value, text_cells):
        return None
    if isinstance(value, str) and value.strip().lower() in MISSING_HUMAN:
        return None
    if isinstance(value, bool):
        return float(value)
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError) as e:
        raise RowError("non_numeric_human", f"{column!r} = {value!r}") from e
    return None if math.isnan(number) else number


def to_scoring_row(record: Mapping[str, Any], mapping: ColumnMapping, source: RowSource,
                   text_cells: bool = False, max_text_chars: int | None = None) -> ScoringRow:
    """Validates one input record and builds its `ScoringRow`.

    Args:
        record: column -> value, as read (JSON object, CSV row, Parquet row).
        mapping: the resolved column mapping.
        source: where the record came from.
        text_cells: True for CSV, where every cell is a string and "" means missing.
        max_text_chars: the longest prediction, reference, negative reference or question
            accepted, in characters (None: no limit).

    Returns:
        The row, ready for the metrics.

    Raises:
        RowError: the row cannot be scored; `reason` says why.
    """
    if mapping.prediction not in record:
        raise RowError("missing_prediction", f"no column {mapping.prediction!r}")
    prediction = record[mapping.prediction]
    if prediction is None:
        raise RowError("null_prediction", f"{mapping.prediction!r} is null")
    if not isinstance(prediction, str):
        raise RowError("non_string_prediction",
                       f"{mapping.prediction!r} holds a {type(prediction).__name__}")
    if not prediction.strip():
        raise RowError("empty_prediction", f"{mapping.prediction!r} is empty")
    check_text(prediction, repr(mapping.prediction), max_text_chars)
    references = _references(record, mapping.references, mapping.max_references, text_cells,
                             max_text_chars)
    if not references:
        raise RowError("empty_references", "no non-empty reference")
    question = None
    if mapping.question is not None:
        question = record.get(mapping.question)
        if _is_missing(question, text_cells):
            question = None
        elif not isinstance(question, str):
            raise RowError("non_string_question",
                           f"{mapping.question!r} holds a {type(question).__name__}")
        else:
            check_text(question, repr(mapping.question), max_text_chars)
    negatives: tuple[str, ...] = ()
    if mapping.negative_references is not None and mapping.negative_references in record:
        negatives = _checked_texts([_cell_references(
            record[mapping.negative_references], mapping.negative_references, text_cells)],
            max_text_chars)
    row_id, system = (_optional_text(record, column, text_cells)
                      for column in (mapping.id, mapping.system))
    example = QAExample(prediction=prediction, references=references, question=question,
                        negative_references=negatives)
    return ScoringRow(
        source=source, example=example, id=row_id, system=system,
        human=_human(record.get(mapping.human), mapping.human, text_cells)
        if mapping.human else None,
        kept=tuple((name, _kept_value(name, example, record)) for name in mapping.keep),
    )


def _kept_value(name: str, example: QAExample, record: Mapping[str, Any]) -> Any:
    if name == "question":
        return example.question
    if name == "prediction":
        return example.prediction
    if name == "references":
        return list(example.references)
    value = record.get(name)
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _optional_text(record: Mapping[str, Any], column: str | None, text_cells: bool
                   ) -> str | None:
    """An id or system value as a string (None: no column, or no value); invalid_text when
    UTF-8 cannot encode it."""
    value = _optional_str(record.get(column), text_cells) if column else None
    return None if value is None else check_text(value, repr(column))


def partial_metadata(record: Mapping[str, Any] | None, mapping: ColumnMapping,
                     text_cells: bool = False) -> tuple[str | None, str | None]:
    """The (id, system) of a record that failed validation, as far as they can be read; a
    lone surrogate in either is written as its escape (see `printable`)."""
    if not isinstance(record, Mapping):
        return None, None
    values = (_optional_str(record.get(column), text_cells) if column else None
              for column in (mapping.id, mapping.system))
    row_id, system = (None if v is None else printable(v) for v in values)
    return row_id, system
