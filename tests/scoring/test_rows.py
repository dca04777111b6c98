"""Tests for transforms/scoring/reading/row_validation.py and rows.py: validation of one record,
reason by reason; content keys and dead-letter records."""

from __future__ import annotations

import json
import math

import pytest

from transforms.metrics.base import QAExample
from transforms.scoring.reading.row_validation import partial_metadata, to_scoring_row
from transforms.scoring.reading.rows import (
    CONTENT_KEY_VERSION,
    REASONS,
    ColumnMapping,
    RowError,
    RowSource,
    content_key,
    dead_letter,
    parse_json_line,
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


# Text UTF-8 cannot encode (JSON's "\ud83d" escape alone) is a dead
# letter, whichever text field holds it, instead of a coder error far from its row.
LONE = json.loads('"\\ud83d"')


@pytest.mark.parametrize("field, record, where", [
    ("prediction", {"prediction": f"a {LONE}"}, "'prediction'"),
    ("references", {"references": ["b", f"x{LONE}"]}, "'references'[1]"),
    ("question", {"question": LONE}, "'question'"),
    ("negative_references", {"negative_references": [LONE]}, "'negative_references'[0]"),
    ("id", {"id": LONE}, "'id'"),
    ("system", {"system": f"sys{LONE}"}, "'system'"),
])
def test_unencodable_text_in_any_text_field_is_invalid_text(field, record, where):
    base = {"prediction": "a", "references": ["b"], "id": "r1", "system": "s"}
    with pytest.raises(RowError) as e:
        to_scoring_row({**base, **record}, DEFAULT, SOURCE)
    assert e.value.reason == "invalid_text"
    assert e.value.detail.startswith(f"{where} holds a lone surrogate U+D83D at character")


def test_unencodable_text_in_a_csv_reference_list_is_invalid_text():
    with pytest.raises(RowError) as e:
        to_scoring_row({"prediction": "a", "references": '["b", "\\ud83d"]'}, ColumnMapping(),
                       SOURCE, text_cells=True)
    assert (e.value.reason, e.value.detail[:18]) == ("invalid_text", "'references'[1] ho")


def test_surrogate_pairs_are_text_and_dead_letters_can_be_written():
    row = to_scoring_row(json.loads('{"prediction": "\\ud83d\\ude00", "references": ["b"]}'),
                         DEFAULT, SOURCE)
    assert row.example.prediction == "\U0001F600"
    row_id, system = partial_metadata({"id": LONE, "system": f"s{LONE}"}, DEFAULT)
    assert (row_id, system) == ("\\ud83d", "s\\ud83d")
    letter = dead_letter(SOURCE, "invalid_text", "why", row_id, system)
    json.dumps(letter, ensure_ascii=False).encode("utf-8")  # what the writer does


# A missing human value leaves the row scored, without a label.
@pytest.mark.parametrize("value", ["", "  ", "n/a", "N/A", "NA", "na", " n/a ", "null", "NULL",
                                   "None", "NaN", "nan", "#N/A", "<NA>", None, math.nan])
@pytest.mark.parametrize("text_cells", [False, True])
def test_missing_human_values_mean_no_label(value, text_cells):
    record = {"prediction": "a", "references": ["b"], "human": value}
    assert to_scoring_row(record, DEFAULT, SOURCE, text_cells).human is None


@pytest.mark.parametrize("value, expected", [("0.5", 0.5), (" 1 ", 1.0), (0, 0.0), (True, 1.0)])
def test_human_values_that_are_numbers(value, expected):
    record = {"prediction": "a", "references": ["b"], "human": value}
    assert to_scoring_row(record, DEFAULT, SOURCE, text_cells=True).human == expected


@pytest.mark.parametrize("value", ["good", "n/a!", "1,5", [1]])
def test_human_values_present_but_not_numbers_stay_dead_letters(value):
    with pytest.raises(RowError) as e:
        to_scoring_row({"prediction": "a", "references": ["b"], "human": value}, DEFAULT,
                       SOURCE)
    assert e.value.reason == "non_numeric_human"


# A text longer than --max_text_chars is dead-lettered before any metric.
@pytest.mark.parametrize("record, where, length", [
    ({"prediction": "p" * 11}, "'prediction'", 11),
    ({"references": ["r", "r" * 12]}, "'references'[1]", 12),
    ({"question": "q" * 13}, "'question'", 13),
    ({"negative_references": ["n" * 14]}, "'negative_references'[0]", 14),
])
def test_texts_longer_than_the_limit_are_too_long(record, where, length):
    record = {"prediction": "a", "references": ["b"], **record}
    with pytest.raises(RowError) as e:
        to_scoring_row(record, DEFAULT, SOURCE, max_text_chars=10)
    assert e.value.reason == "text_too_long"
    assert e.value.detail == (f"{where} is {length} characters long, more than the limit of "
                              "10 (--max_text_chars)")
    assert to_scoring_row(record, DEFAULT, SOURCE, max_text_chars=length).example
    assert to_scoring_row(record, DEFAULT, SOURCE).example  # no limit


def test_the_limit_applies_to_the_references_kept():
    record = {"prediction": "a", "references": ["b", "r" * 50]}
    mapping = ColumnMapping(max_references=1)
    row = to_scoring_row(record, mapping, SOURCE, max_text_chars=10)
    assert row.example.references == ("b",)


def test_kept_columns_carry_the_scored_texts_and_input_cells() -> None:
    from transforms.scoring.reading.row_validation import to_scoring_row
    from transforms.scoring.reading.rows import ColumnMapping, RowSource

    mapping = ColumnMapping(prediction="answer", references=("r1", "r2"), max_references=1,
                            question="q", keep=("question", "prediction", "references",
                                                "meta", "absent"))
    row = to_scoring_row({"answer": "a", "r1": "x", "r2": "y", "q": "why?",
                          "meta": {"k": [1, "é"]}}, mapping, RowSource("f", 1))
    assert row.kept == (("question", "why?"), ("prediction", "a"), ("references", ["x"]),
                        ("meta", '{"k": [1, "é"]}'), ("absent", None))
    assert to_scoring_row({"answer": "a", "r1": "x"}, ColumnMapping(
        prediction="answer", references=("r1",)), RowSource("f", 1)).kept == ()
def test_content_key_depends_on_exactly_what_scores_depend_on():
    from transforms.metrics.base import QAExample
    from transforms.scoring.reading.rows import content_key

    base = QAExample("the answer", ("gold a", "gold b"), "what?", ("wrong",))
    key = content_key(base)
    # Pinned: a change of recipe must bump CONTENT_KEY_VERSION (old runs stop matching).
    assert key == "3360c5f41dfd74eb011154dd2260973c"
    variants = [
        QAExample("the answer ", ("gold a", "gold b"), "what?", ("wrong",)),
        QAExample("the answer", ("gold b", "gold a"), "what?", ("wrong",)),  # order counts
        QAExample("the answer", ("gold a",), "what?", ("wrong",)),
        QAExample("the answer", ("gold a", "gold b"), None, ("wrong",)),
        QAExample("the answer", ("gold a", "gold b"), "what?", ()),
        QAExample("the answer", ("gold a gold b",), "what?", ("wrong",)),  # no joining
        QAExample("the answer", ("gold a", "gold b"), "", ("wrong",)),  # "" is not None
    ]
    assert len({key, *map(content_key, variants)}) == len(variants) + 1


@pytest.mark.parametrize(("example", "key"), [
    (QAExample("Paris", ("Paris", "paris, France"), "capital?"),
     "d28e80599ac6de02823dd8a55a72180a"),
    (QAExample('naïve “quoted” \\ "x"\n', ("é",), None), "c1524e561a3dda1f8eb241841fc8a333"),
    (QAExample("a", ("b",), "q", ("no", "nope")), "261d91791a892b620668fc5b9ae9024c"),
])
def test_content_keys_are_the_released_ones(example, key):
    """Content keys are stored in every run's outputs and matched by the next run
    (incremental re-scoring): the same key for the same content, from any version of
    the code that has the same CONTENT_KEY_VERSION. Pinned values, computed by the code
    that released version "ck1" (before the key's encoder was built once)."""
    assert CONTENT_KEY_VERSION == "ck1"
    assert content_key(example) == key


def test_content_key_without_the_c_encoder_is_the_same(monkeypatch):
    """Pythons without json's C encoder get the same keys through JSONEncoder."""
    from transforms.scoring.reading import rows

    example = QAExample('naïve “quoted” \\ "x"\n', ("é", "b"), None, ("n",))
    with_c = content_key(example)
    monkeypatch.setattr(rows, "_KEY_ENCODE", None)
    assert content_key(example) == with_c
