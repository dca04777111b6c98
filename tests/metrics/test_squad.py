"""EM and F1 against hand-worked values of the SQuAD v1.1 script semantics."""

from __future__ import annotations

import pickle

import pytest

from transforms.metrics.base import MetricInputError, QAExample
from transforms.metrics.squad import (
    SquadMetric,
    SquadScore,
    exact_match,
    f1_score,
    normalize_answer,
    squad_score,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Cat", "cat"),
        ("  A  man, a plan!  ", "man plan"),
        ("an apple and the pear", "apple and pear"),
        ("theatre", "theatre"),          # articles only as whole words
        ("Don't", "dont"),               # ASCII punctuation removed, no space left
        ("café — ok", "café — ok"),      # non-ASCII punctuation kept
        ("", ""),
        ("the a an", ""),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    ("prediction", "reference", "em", "f1"),
    [
        ("Denver Broncos", "Denver Broncos", 1.0, 1.0),
        ("the Denver Broncos", "Denver Broncos!", 1.0, 1.0),
        ("Denver", "Denver Broncos", 0.0, 2 * 1.0 * 0.5 / 1.5),           # P 1, R 1/2
        ("Carolina Panthers", "Denver Broncos", 0.0, 0.0),
        ("x x y", "x y y", 0.0, 2 * (2 / 3) * (2 / 3) / (4 / 3)),          # multiset overlap 2
        ("", "", 1.0, 0.0),                     # script: no special case, F1 0 when empty
        ("", "Denver", 0.0, 0.0),
        ("the", "a", 1.0, 0.0),                 # both normalise to ""
    ],
)
def test_em_f1_single_reference(prediction: str, reference: str, em: float, f1: float) -> None:
    assert exact_match(prediction, reference) == em
    assert f1_score(prediction, reference) == pytest.approx(f1, abs=1e-15)


def test_articles_row_worked_by_hand() -> None:
    # "a a b" -> "b"; "a b b" -> "b b": one shared "b", P = 1, R = 1/2.
    assert f1_score("a a b", "a b b") == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("prediction", "references", "expected"),
    [
        ("Denver", ("Carolina", "Denver Broncos", "Denver"), SquadScore(1.0, 1.0)),
        ("Denver Broncos", ("Broncos", "Denver"), SquadScore(0.0, 2 / 3)),
        ("nothing", ("Denver", "Broncos"), SquadScore(0.0, 0.0)),
    ],
)
def test_max_over_references(prediction: str, references: tuple[str, ...],
                             expected: SquadScore) -> None:
    got = squad_score(prediction, references)
    assert got.em == expected.em
    assert got.f1 == pytest.approx(expected.f1)


def test_squad_score_needs_references() -> None:
    with pytest.raises(ValueError, match=r"^squad_score needs at least one reference$"):
        squad_score("x", ())


def test_signatures_are_exact() -> None:
    """A signature decides what an incremental run carries: any change to it is seen."""
    fields = "impl:squad-v1.1-script|norm:lower+punct+articles+ws|refs:max"
    assert SquadMetric().signature() == {"em": f"em|v:1|{fields}", "f1": f"f1|v:1|{fields}"}


def test_metric_columns_and_batch() -> None:
    metric = SquadMetric(["f1"])
    assert metric.columns == ("f1",)
    assert set(metric.signature()) == {"f1"}
    out = metric.score_batch([QAExample("Denver", ("Denver Broncos",)),
                              QAExample("x", ("x",))], {})
    assert out == [{"f1": pytest.approx(2 / 3)}, {"f1": 1.0}]
    assert pickle.loads(pickle.dumps(metric)).columns == ("f1",)


@pytest.mark.parametrize("columns", [[], ["em", "bleu1"], ["F1"]])
def test_metric_rejects_bad_columns(columns: list[str]) -> None:
    with pytest.raises(ValueError, match="columns"):
        SquadMetric(columns)


def test_metric_input_error_without_references() -> None:
    with pytest.raises(MetricInputError):
        SquadMetric().score_batch([QAExample("x", ())], {})


def test_punctuation_is_removed_as_the_script_removes_it():
    """The script: `''.join(ch for ch in s if ch not in set(string.punctuation))`."""
    import string

    from transforms.metrics.squad import normalize_answer

    every = "".join(chr(c) for c in range(0x20, 0x7F)) + "«»—–…¿¡“”‘’·"
    exclude = set(string.punctuation)
    script = " ".join("".join(ch for ch in every.lower() if ch not in exclude).split())
    assert normalize_answer(every) == script
    assert normalize_answer("A [b]-c\\d^e") == "bcde"


def _script_normalize(s: str) -> str:
    """The SQuAD v1.1 script's `normalize_answer`, as the lexical benchmark copies it."""
    from tests.bench.bench_lexical import _squad_normalize

    return _squad_normalize(s)


@pytest.mark.parametrize("seed", range(4))
def test_normalize_answer_equals_the_script_on_random_text(seed: int) -> None:
    """Word by word (normalize_answer's shortcut) against the script's whole-text regex:
    articles next to non-ASCII punctuation, digits, superscripts, underscores, Unicode
    and control whitespace, capitals; 3,000 texts a seed."""
    import random

    rng = random.Random(seed)
    pieces = ["a", "an", "the", "The", "A", "AN", "x", "theatre", "ant", "é", "2", "²",
              "_", "’", "“", "”", "—", "–", "«", "·", "-", "'", ".", ",", "\u00a0", "\u2009",
              "\x1c", "\t", "\n", " ", " ", " ", "ß", "İ", "Σ", "ⅷ", "٣"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 14)))
        assert normalize_answer(text) == _script_normalize(text), repr(text)


def test_normalize_answer_equals_the_script_on_evouna_answers() -> None:
    """The shortcut against the script on real LLM answers and their gold aliases."""
    from tests.bench.judge_rows import evouna_rows

    rows = evouna_rows(1500)
    texts = [r["prediction"] for r in rows] + [g for r in rows[:300] for g in r["references"]]
    assert len(texts) > 2000
    for text in texts:
        assert normalize_answer(text) == _script_normalize(text), repr(text)
