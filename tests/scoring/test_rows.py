"""Tests for transforms/scoring/rows.py: validation of one record, reason by reason."""

from __future__ import annotations

import math

import pytest

from transforms.metrics.base import QAExample
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

SOURCE = RowSource(file="in.jsonl", row=3, line=3)
DEFAULT = ColumnMapping(id="id", system="system", human="human", question="question",
                        negative_references="negative_references")


@pytest.mark.parametrize("raw, reason", [
    (b'{"prediction": "a", ', "malformed_json"),
    (b"\xff\xfe{}", "invalid_utf8"),
    (b'["a", "b"]', "not_a_json_object"),
    (b'"just a string"', "not_a_json_object"),
])
def test_parse_json_line_errors(raw, reason):
    with pytest.raises(RowError) as e:
        parse_json_line(raw)
    assert e.value.reason == reason


def test_parse_json_line_object():
    assert parse_json_line(b'{"prediction": "x"}\n') == {"prediction": "x"}


@pytest.mark.parametrize("record, reason", [
    ({"references": ["a"]}, "missing_prediction"),
    ({"prediction": None, "references": ["a"]}, "null_prediction"),
    ({"prediction": 7, "references": ["a"]}, "non_string_prediction"),
    ({"prediction": ["a"], "references": ["a"]}, "non_string_prediction"),
    ({"prediction": "", "references": ["a"]}, "empty_prediction"),
    ({"prediction": "  \t", "references": ["a"]}, "empty_prediction"),
    ({"prediction": "a"}, "missing_references"),
    ({"prediction": "a", "references": []}, "empty_references"),
    ({"prediction": "a", "references": None}, "empty_references"),
    ({"prediction": "a", "references": ["", "  "]}, "empty_references"),
    ({"prediction": "a", "references": ["b", 3]}, "non_string_reference"),
    ({"prediction": "a", "references": {"x": 1}}, "non_string_reference"),
    ({"prediction": "a", "references": ["b"], "question": 5}, "non_string_question"),
    ({"prediction": "a", "references": ["b"], "human": "good"}, "non_numeric_human"),
])
def test_invalid_records(record, reason):
    with pytest.raises(RowError) as e:
        to_scoring_row(record, DEFAULT, SOURCE)
    assert e.value.reason == reason
    assert reason in REASONS


def test_valid_record_keeps_metadata():
    record = {"prediction": "Paris", "references": ["Paris", "", None, "the city of Paris"],
              "question": "Capital?", "negative_references": ["Lyon"], "id": 17,
              "system": "sys-a", "human": 1}
    row = to_scoring_row(record, DEFAULT, SOURCE)
    assert row.example == QAExample("Paris", ("Paris", "the city of Paris"), "Capital?",
                                    ("Lyon",))
    assert (row.id, row.system, row.human) == ("17", "sys-a", 1.0)
    assert row.source.key == "in.jsonl:3"


def test_single_string_reference_and_nan_human():
    row = to_scoring_row({"prediction": "a", "references": "b", "human": math.nan},
                         DEFAULT, SOURCE)
    assert row.example.references == ("b",)
    assert row.human is None


@pytest.mark.parametrize("cell, expected", [
    ('["x", "y"]', ("x", "y")),
    ("x", ("x",)),
    ("[citation needed]", ("[citation needed]",)),
    ("[1, 2]", ("[1, 2]",)),
])
def test_csv_reference_cells(cell, expected):
    mapping = ColumnMapping()
    row = to_scoring_row({"prediction": "p", "references": cell}, mapping, SOURCE,
                         text_cells=True)
    assert row.example.references == expected


def test_csv_empty_cells_are_missing():
    record = {"prediction": "p", "r1": "a", "r2": "", "r3": "c", "human": "", "id": "",
              "system": ""}
    mapping = ColumnMapping(references=("r1", "r2", "r3"), human="human", id="id",
                            system="system")
    row = to_scoring_row(record, mapping, SOURCE, text_cells=True)
    assert row.example.references == ("a", "c")
    assert (row.id, row.system, row.human) == (None, None, None)
    with pytest.raises(RowError) as e:
        to_scoring_row({**record, "prediction": ""}, mapping, SOURCE, text_cells=True)
    assert e.value.reason == "empty_prediction"


def test_max_references_counts_positions_before_dropping_empties():
    record = {"prediction": "p", "r1": "a", "r2": "", "r3": "c"}
    two = ColumnMapping(references=("r1", "r2", "r3"), max_references=2)
    assert to_scoring_row(record, two, SOURCE, text_cells=True).example.references == ("a",)
    one_list = ColumnMapping(max_references=1)
    row = to_scoring_row({"prediction": "p", "references": ["a", "b"]}, one_list, SOURCE)
    assert row.example.references == ("a",)


@pytest.mark.parametrize("kwargs, message", [
    ({"references": ()}, "at least one reference"),
    ({"max_references": 0}, "max_references"),
    ({"prediction": "a", "references": ("a",)}, "mapped both"),
    ({"human": "x", "id": "x"}, "mapped both"),
    ({"references": ("a", "a")}, "repeat"),
])
def test_column_mapping_rejects_contradictions(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ColumnMapping(**kwargs)


def test_unknown_reason_is_a_bug():
    with pytest.raises(ValueError, match="unknown dead-letter reason"):
        RowError("no_such_reason")


def test_dead_letter_record_and_partial_metadata():
    record = {"prediction": None, "id": 4, "system": "s"}
    row_id, system = partial_metadata(record, DEFAULT)
    assert dead_letter(SOURCE, "null_prediction", "why", row_id, system) == {
        "file": "in.jsonl", "row": 3, "line": 3, "row_key": "in.jsonl:3", "id": "4",
        "system": "s", "reason": "null_prediction", "detail": "why"}
    assert partial_metadata(None, DEFAULT) == (None, None)
