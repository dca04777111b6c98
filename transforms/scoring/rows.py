"""Input rows -> `ScoringRow` (a `QAExample` plus its metadata), or a dead-letter reason.

Pure Python: no Beam, no I/O. The readers in `read.py` hand each record here as a plain
mapping (a JSON object, a CSV `DictReader` row, a Parquet row) together with its
`RowSource` (file, 1-based row number, physical line); everything that makes a row
unscorable raises `RowError` with a stable reason code from `REASONS`.

Rules (see docs/decisions.md):
- prediction: must be present, a string, and not empty after stripping whitespace.
- references: from one list column (default `references`) or several columns
  (`reference_columns`); each value may be a string or a list of strings (in CSV a cell
  holding a JSON list of strings is a list, any other cell is one reference). The first
  `max_references` are kept *before* empty ones are dropped, so position j is always the
  j-th reference column (KPQA scores reference column j as its own corpus). No non-empty
  reference left -> `empty_references`.
- id and system are kept as strings (an integer id becomes "17"); human is a float; in CSV
  an empty cell, and anywhere a null or NaN, means "not given".
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.metrics.base import QAExample

# Every reason a row can be dead-lettered for; counters are created from this list.
REASONS = (
    "invalid_utf8",
    "malformed_json",
    "not_a_json_object",
    "malformed_csv",
    "wrong_field_count",
    "missing_prediction",
    "null_prediction",
    "non_string_prediction",
    "empty_prediction",
    "missing_references",
    "non_string_reference",
    "empty_references",
    "non_string_question",
    "non_numeric_human",
    "metric_input_error",
    "inference_failed",
    "missing_score",
)


class RowError(ValueError):
    """A row that cannot be scored.

    Attributes:
        reason: a code from `REASONS`.
        detail: a human-readable explanation.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown dead-letter reason {reason!r}; known: {REASONS}")
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class RowSource:
    """Where a row came from.

    Attributes:
        file: the input file path as matched.
        row: 1-based record number within the file (JSONL: the line number; CSV: the data
            record number, header excluded; Parquet: the row index + 1).
        line: 1-based physical line where the record starts (None for Parquet).
    """

    file: str
    row: int
    line: int | None = None

    @property
    def key(self) -> str:
        """The stable row key that every scoring branch is joined on."""
        return f"{self.file}:{self.row}"


@dataclasses.dataclass(frozen=True)
class ScoringRow:
    """A scorable row: the example every metric sees plus what the outputs carry."""

    source: RowSource
    example: QAExample
    id: str | None = None
    system: str | None = None
    human: float | None = None


@dataclasses.dataclass(frozen=True)
class ColumnMapping:
    """Which input column holds what; resolved against the inputs at graph build time.

    Attributes:
        prediction: the prediction column.
        references: one or more reference columns, in reference order.
        question, negative_references, id, system, human: optional columns (None: absent).
        max_references: keep at most this many references (None: all).
    """

    prediction: str = "prediction"
    references: tuple[str, ...] = ("references",)
    question: str | None = None
    negative_references: str | None = None
    id: str | None = None
    system: str | None = None
    human: str | None = None
    max_references: int | None = None

    def __post_init__(self) -> None:
        if not self.references:
            raise ValueError("at least one reference column is needed")
        if self.max_references is not None and self.max_references < 1:
            raise ValueError(f"max_references must be >= 1, got {self.max_references}")
        roles = {"prediction": self.prediction, "question": self.question,
                 "negative_references": self.negative_references, "id": self.id,
                 "system": self.system, "human": self.human}
        used: dict[str, str] = {}
        for role, column in [*roles.items(), *(("references", c) for c in self.references)]:
            if column is None:
                continue
            if column in used and not (role == used[column] == "references"):
                raise ValueError(
                    f"column {column!r} is mapped both as {used[column]} and as {role}")
            used[column] = role
        if len(set(self.references)) != len(self.references):
            raise ValueError(f"reference columns repeat: {list(self.references)}")

    @property
    def required_columns(self) -> tuple[str, ...]:
        """Columns that must exist in the input."""
        return (self.prediction, *self.references)


def parse_json_line(raw: bytes) -> dict[str, Any]:
    """Decodes one JSONL line into an object.

    Args:
        raw: the line's bytes (a trailing newline is fine).

    Returns:
        The JSON object as a dict.

    Raises:
        RowError: invalid_utf8, malformed_json or not_a_json_object.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RowError("invalid_utf8", str(e)) from e
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise RowError("malformed_json", str(e)) from e
    if not isinstance(value, dict):
        raise RowError("not_a_json_object", f"got {type(value).__name__}")
    return value


def _is_missing(value: Any, text_cells: bool) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return text_cells and value == ""


def _cell_references(value: Any, column: str, text_cells: bool) -> list[str | None]:
    """One reference column's value as a list (None entries are missing references)."""
    if _is_missing(value, text_cells):
        return [None]
    if isinstance(value, str):
        if text_cells and value.lstrip().startswith("["):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                return [value]
            if isinstance(parsed, list) and all(isinstance(v, str) for v in parsed):
                return list(parsed)
        return [value]
    if hasattr(value, "tolist"):  # a numpy array, when rows come through pandas
        value = value.tolist()
    if isinstance(value, list | tuple):
        items = list(value)
        for item in items:
            if item is not None and not isinstance(item, str):
                raise RowError("non_string_reference",
                               f"{column!r} holds a {type(item).__name__}")
        return items
    raise RowError("non_string_reference", f"{column!r} holds a {type(value).__name__}")


def _references(record: Mapping[str, Any], columns: Sequence[str], max_references: int | None,
                text_cells: bool) -> tuple[str, ...]:
    present = [c for c in columns if c in record]
    if not present:
        raise RowError("missing_references", f"none of the columns {list(columns)} present")
    values: list[str | None] = []
    for column in present:
        values.extend(_cell_references(record[column], column, text_cells))
    if max_references is not None:
        values = values[:max_references]
    return tuple(v for v in values if v is not None and v.strip())


def _optional_str(value: Any, text_cells: bool) -> str | None:
    if _is_missing(value, text_cells):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # an id column read as float by a CSV/Parquet writer
    return str(value)


def _human(value: Any, column: str, text_cells: bool) -> float | None:
    if _is_missing(value, text_cells):
        return None
    if isinstance(value, bool):
        return float(value)
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError) as e:
        raise RowError("non_numeric_human", f"{column!r} = {value!r}") from e
    return None if math.isnan(number) else number


def to_scoring_row(record: Mapping[str, Any], mapping: ColumnMapping, source: RowSource,
                   text_cells: bool = False) -> ScoringRow:
    """Validates one input record and builds its `ScoringRow`.

    Args:
        record: column -> value, as read (JSON object, CSV row, Parquet row).
        mapping: the resolved column mapping.
        source: where the record came from.
        text_cells: True for CSV, where every cell is a string and "" means missing.

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
    references = _references(record, mapping.references, mapping.max_references, text_cells)
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
    negatives: tuple[str, ...] = ()
    if mapping.negative_references is not None and mapping.negative_references in record:
        negatives = tuple(
            v for v in _cell_references(record[mapping.negative_references],
                                        mapping.negative_references, text_cells)
            if v is not None and v.strip())
    return ScoringRow(
        source=source,
        example=QAExample(prediction=prediction, references=references, question=question,
                          negative_references=negatives),
        id=_optional_str(record.get(mapping.id), text_cells) if mapping.id else None,
        system=_optional_str(record.get(mapping.system), text_cells) if mapping.system else None,
        human=_human(record.get(mapping.human), mapping.human, text_cells)
        if mapping.human else None,
    )


def partial_metadata(record: Mapping[str, Any] | None, mapping: ColumnMapping,
                     text_cells: bool = False) -> tuple[str | None, str | None]:
    """The (id, system) of a record that failed validation, as far as they can be read."""
    if not isinstance(record, Mapping):
        return None, None
    row_id = _optional_str(record.get(mapping.id), text_cells) if mapping.id else None
    system = _optional_str(record.get(mapping.system), text_cells) if mapping.system else None
    return row_id, system


def dead_letter(source: RowSource, reason: str, detail: str = "", row_id: str | None = None,
                system: str | None = None) -> dict[str, Any]:
    """The dead-letter record written to PREFIX.dead_letter.jsonl.

    Args:
        source: where the row came from.
        reason: a code from `REASONS`.
        detail: a human-readable explanation.
        row_id, system: the row's id and system when they could be read.

    Returns:
        A JSON-serialisable dict.
    """
    return {"file": source.file, "row": source.row, "line": source.line,
            "row_key": source.key, "id": row_id, "system": system,
            "reason": reason, "detail": detail}
