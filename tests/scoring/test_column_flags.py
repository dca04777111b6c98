"""Tests for transforms/scoring/column_flags.py: the column flags resolved against the
input's columns, with messages that list what is available."""

from __future__ import annotations

import pytest

from transforms.scoring.column_flags import (
    DEFAULT_KEPT_COLUMNS,
    resolve_columns,
    resolve_kept_columns,
)

WIDE = ["question", "answer", "reference1", "reference2", "reference10", "scores", "system"]


def test_resolve_defaults_use_what_is_present():
    mapping = resolve_columns(["prediction", "references", "human", "id", "extra"])
    assert (mapping.prediction, mapping.references, mapping.human, mapping.id,
            mapping.system, mapping.question) == (
        "prediction", ("references",), "human", "id", None, None)


def test_resolve_prefix_orders_numerically():
    mapping = resolve_columns(WIDE, prediction_column="answer", reference_prefix="reference",
                              max_references=2, human_column="scores")
    assert mapping.references == ("reference1", "reference2", "reference10")
    assert (mapping.max_references, mapping.human, mapping.system, mapping.question) == (
        2, "scores", "system", "question")


@pytest.mark.parametrize("kwargs, message", [
    ({}, r"prediction column 'prediction' is not in the input; available columns: \['question'"),
    ({"prediction_column": "answer"}, "references column 'references'"),
    ({"prediction_column": "answer", "reference_columns": "reference1,ref9"},
     r"\['ref9'\] are not in the input"),
    ({"prediction_column": "answer", "reference_prefix": "gold"}, "no column is named gold"),
    ({"prediction_column": "answer", "reference_prefix": "reference",
      "reference_columns": "reference1"}, "contradict"),
    ({"prediction_column": "answer", "reference_prefix": "reference",
      "references_column": "reference1"}, "contradict"),
    ({"prediction_column": "answer", "reference_prefix": "reference", "max_references": 0},
     "max_references"),
    ({"prediction_column": "answer", "reference_prefix": "reference",
      "human_column": "label"}, "human column 'label'"),
    ({"prediction_column": "answer", "reference_columns": "reference1",
      "human_column": "reference1"}, "mapped both"),
])
def test_resolve_errors_list_what_is_available(kwargs, message):
    with pytest.raises(ValueError, match=message):
        resolve_columns(WIDE, **kwargs)


def test_keep_input_columns_resolution() -> None:
    available = ["answer", "reference1", "note", "id"]
    taken = ["row_key", "id", "em"]
    assert resolve_kept_columns(None, available, taken) == ()
    # The scored texts need no input column of that name.
    assert resolve_kept_columns(",".join(DEFAULT_KEPT_COLUMNS), available, taken) == (
        "question", "prediction", "references")
    assert resolve_kept_columns("note, prediction,note", available, taken) == (
        "note", "prediction")
    with pytest.raises(ValueError, match=r"\['nope'\] are not input columns"):
        resolve_kept_columns("note,nope", available, taken)
    with pytest.raises(ValueError, match=r"\['id'\] clash"):
        resolve_kept_columns("id", available, taken)
