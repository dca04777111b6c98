"""contains / token_recall / token_precision against hand-worked tables."""

from __future__ import annotations

import pickle

import pytest

from transforms.metrics import registry
from transforms.metrics.base import MetricInputError, QAExample
from transforms.metrics.overlap import (
    OverlapMetric,
    OverlapScore,
    contains,
    overlap_score,
    token_precision,
    token_recall,
)


@pytest.mark.parametrize(
    ("prediction", "reference", "word", "char"),
    [
        # Normalisation: case, punctuation and articles go before matching.
        ("It was created by Ross Bagdasarian, aka DAVID SEVILLE.", "David Seville", 1.0, 1.0),
        ("The answer is: the Beatles!", "Beatles", 1.0, 1.0),
        ("Answer: U.S.A.", "usa", 1.0, 1.0),
        ("He was born in 1879.", "1879", 1.0, 1.0),
        # Word boundaries: a reference inside a longer word matches only by characters.
        ("a party at noon", "art", 0.0, 1.0),
        ("Parisian cafes", "Paris", 0.0, 1.0),
        ("Mark McGwire broke Roger Maris's record", "Roger Maris", 0.0, 1.0),
        # Non-ASCII punctuation survives normalisation but still bounds a word.
        ("songs from the musical “Hair”", "hair", 1.0, 1.0),
        ("dentistry", "dentist", 0.0, 1.0),
        # The order of tokens matters: containment is of the whole reference.
        ("Seville David", "David Seville", 0.0, 0.0),
        ("", "Paris", 0.0, 0.0),
        # A reference that normalises to nothing matches only an empty prediction.
        ("the", "The", 1.0, 1.0),
        ("Paris", "The", 0.0, 0.0),
        ("", "", 1.0, 1.0),
    ],
)
def test_contains(prediction: str, reference: str, word: float, char: float) -> None:
    assert contains(prediction, reference) == char
    assert contains(prediction, reference, boundary="word") == word
    assert contains(prediction, reference, boundary="char") == char


@pytest.mark.parametrize(
    ("prediction", "reference", "recall", "precision"),
    [
        # 2 of the reference's 2 tokens; 2 of the prediction's 7 ("the" and "a" go).
        ("The man behind it was David Seville, a singer", "David Seville", 1.0, 2 / 7),
        ("David", "David Seville", 0.5, 1.0),
        # Multisets: "new" twice in the reference needs two in the prediction.
        ("new york", "new new york", 2 / 3, 1.0),
        ("new new york city", "new new york", 1.0, 3 / 4),
        ("The the THE", "the", 0.0, 0.0),       # both normalise to nothing
        ("", "Paris", 0.0, 0.0),
        ("Paris", "", 0.0, 0.0),
        ("London", "Paris", 0.0, 0.0),
    ],
)
def test_token_recall_and_precision(prediction: str, reference: str, recall: float,
                                    precision: float) -> None:
    assert token_recall(prediction, reference) == pytest.approx(recall)
    assert token_precision(prediction, reference) == pytest.approx(precision)


def test_overlap_score_takes_each_maximum_over_references_separately() -> None:
    prediction = "Bagdasarian created them in 1958"
    # "Ross Bagdasarian": recall 1/2; "Bagdasarian": contained, recall 1, precision 1/5;
    # "created them in 1958 and 1959": precision 4/5 (recall 4/6).
    score = overlap_score(prediction, ["Ross Bagdasarian", "Bagdasarian",
                                       "created them in 1958 and 1959"])
    assert score == OverlapScore(contains=1.0, token_recall=1.0,
                                 token_precision=pytest.approx(4 / 5))
    assert overlap_score(prediction, ["Ross Bagdasarian"]) == OverlapScore(0.0, 0.5, 0.2)


@pytest.mark.parametrize("bad", [[], ()])
def test_overlap_score_needs_references(bad) -> None:
    with pytest.raises(ValueError, match="at least one reference"):
        overlap_score("x", bad)


def test_metric_columns_signature_and_batch() -> None:
    metric = OverlapMetric(columns=("token_recall", "contains"))
    assert metric.columns == ("contains", "token_recall")
    sig = metric.signature()
    assert "match:char" in sig["contains"] and "refs:max" in sig["contains"]
    assert "count:multiset" in sig["token_recall"]
    assert OverlapMetric(boundary="word").signature()["contains"] != sig["contains"]
    examples = [QAExample("Ross Bagdasarian, aka David Seville", ("David Seville", "Ross")),
                QAExample("Alvin", ("Simon",))]
    assert metric.score_batch(examples, {}) == [
        {"contains": 1.0, "token_recall": 1.0}, {"contains": 0.0, "token_recall": 0.0}]
    with pytest.raises(MetricInputError):
        metric.score_batch([QAExample("x", ())], {})
    assert pickle.loads(pickle.dumps(metric)).signature() == sig


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"columns": ()}, "non-empty subset"),
    ({"columns": ("contain",)}, "non-empty subset"),
    ({"boundary": "token"}, "boundary must be one of"),
])
def test_metric_rejects_bad_configuration(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        OverlapMetric(**kwargs)


def test_registry_builds_the_family_with_its_option() -> None:
    (metric,) = registry.build_metrics(["token_precision", "contains"],
                                       {"overlap": {"boundary": "word"}})
    assert isinstance(metric, OverlapMetric)
    assert metric.columns == ("contains", "token_precision")
    assert metric.boundary == "word"
    with pytest.raises(ValueError, match="unknown options"):
        registry.build_metrics(["contains"], {"overlap": {"boundaries": "char"}})


NORM = "norm:squad-v1.1(lower+punct+articles+ws)"


@pytest.mark.parametrize("boundary", ["char", "word"])
def test_signatures_are_exact(boundary: str) -> None:
    """A signature decides what an incremental run carries: any change to it is seen."""
    assert OverlapMetric(boundary=boundary).signature() == {
        "contains": f"contains|v:1|{NORM}|match:{boundary}|refs:max",
        "token_recall": f"token_recall|v:1|{NORM}|count:multiset|refs:max",
        "token_precision": f"token_precision|v:1|{NORM}|count:multiset|refs:max"}


def test_the_boundary_reaches_every_reference_and_the_batch() -> None:
    # "Paris" is inside "Parisian" (characters) but not a word of it.
    for boundary, expected in (("char", 1.0), ("word", 0.0)):
        assert overlap_score("Parisian cafes", ["London", "Paris"], boundary).contains == expected
        metric = OverlapMetric(columns=("contains",), boundary=boundary)
        assert metric.score_batch([QAExample("Parisian cafes", ("Paris",))], {}) == [
            {"contains": expected}]


def test_overlap_score_error_messages() -> None:
    with pytest.raises(ValueError, match=r"^overlap_score needs at least one reference$"):
        overlap_score("x", [])
    with pytest.raises(ValueError, match=r"^boundary must be one of \('char', 'word'\), "
                                         r"got 'token'$"):
        overlap_score("x", ["x"], boundary="token")
