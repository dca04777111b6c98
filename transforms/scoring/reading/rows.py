"""A row's types and records: `ScoringRow` (a `QAExample` plus its metadata), where it
came from (`RowSource`, whose `key` is the stable row key every branch is joined on),
which input column holds what (`ColumnMapping`, `KEPT_TEXTS`), why a row cannot be
scored (`RowError`, with a stable reason code from `REASONS`), the JSONL line decoder
(`parse_json_line`), the content key that scores are carried over by (`content_key`),
and the records a row is written as (`scored_record`, `dead_letter`).

Pure Python: no Beam, no I/O. Validating an input record into a `ScoringRow` is
row_validation.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
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
    "invalid_text",
    "text_too_long",
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


# The version of `content_key`'s recipe: summary.json records it, and a run carries scores
# over from a previous run only when both used the same recipe.
CONTENT_KEY_VERSION = "ck1"


# json.dumps(..., ensure_ascii=False, separators=(",", ":")) without a new encoder per call
_KEY_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
# `_KEY_JSON.encode`'s C encoder, built once instead of once per call (a quarter of a
# row's key); the same text, without the check for circular lists a row cannot hold.
_KEY_ENCODE = (json.encoder.c_make_encoder(
    None, _KEY_JSON.default, json.encoder.encode_basestring, None, ":", ",", False, False,
    True) if json.encoder.c_make_encoder else None)


def content_digest(example: QAExample) -> bytes:
    """A hash of everything a row's scores depend on: the prediction, the references in
    order, the question and the negative references (128-bit BLAKE2b). Two rows with
    equal content keys get equal scores from every metric (given the same corpus
    statistics), wherever they sit in which file."""
    fields = [example.prediction, example.references, example.question,
              example.negative_references]  # tuples as JSON lists
    payload = "".join(_KEY_ENCODE(fields, 0)) if _KEY_ENCODE else _KEY_JSON.encode(fields)
    return hashlib.blake2b(payload.encode("utf-8"), digest_size=16).digest()


def content_key(example: QAExample) -> str:
    """`content_digest` in hex, as the scores files write it (`content_key`)."""
    return content_digest(example).hex()


@dataclasses.dataclass(frozen=True)
class ScoringRow:
    """A scorable row: the example every metric sees plus what the outputs carry."""

    source: RowSource
    example: QAExample
    id: str | None = None
    system: str | None = None
    human: float | None = None
    # (output column, value) of each `ColumnMapping.keep` name (--keep_input_columns).
    kept: tuple[tuple[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class ColumnMapping:
    """Which input column holds what; resolved against the inputs at graph build time.

    Attributes:
        prediction: the prediction column.
        references: one or more reference columns, in reference order.
        question, negative_references, id, system, human: optional columns (None: absent).
        max_references: keep at most this many references (None: all).
        keep: what the scores file carries of each row (--keep_input_columns): the
            names in `KEPT_TEXTS` are the texts the metrics scored, any other name an
            input column (written as a string: JSON for a non-string value).
    """

    prediction: str = "prediction"
    references: tuple[str, ...] = ("references",)
    question: str | None = None
    negative_references: str | None = None
    id: str | None = None
    system: str | None = None
    human: str | None = None
    max_references: int | None = None
    keep: tuple[str, ...] = ()

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


# --keep_input_columns names that mean the texts the metrics scored (whatever the input
# columns are called); the flag alone keeps these three.
KEPT_TEXTS = ("question", "prediction", "references")


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


def scored_record(row: ScoringRow, scores: Mapping[str, float], key: str | None = None
                  ) -> dict[str, Any]:
    """The output record of a scored row, with the input columns it keeps
    (--keep_input_columns); `key`: its content key when already known."""
    return {"row_key": row.source.key, "content_key": key or content_key(row.example),
            "file": row.source.file, "row": row.source.row,
            "id": row.id, "system": row.system, "human": row.human, **dict(row.kept),
            **scores}


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
