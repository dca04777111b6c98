"""ROUGE-L (beta 1.2) against hand-worked coco-caption values."""

from __future__ import annotations

import pytest

from transforms.metrics.base import QAExample
from transforms.metrics.rouge import RougeMetric, lcs_length, rouge_l, rouge_l_max

B2 = 1.2**2


def f(p: float, r: float) -> float:
    return (1 + B2) * p * r / (r + B2 * p)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("a b c b d a b", "b d c a b a", 4),   # the textbook example (BCBA)
        ("a b c", "a b c", 3),
        ("a b c", "d e f", 0),
        ("", "a", 0),
        ("x y x y x", "y x", 2),
    ],
)
def test_lcs(a: str, b: str, expected: int) -> None:
    assert lcs_length(a.split(), b.split()) == expected
    assert lcs_length(b.split(), a.split()) == expected


@pytest.mark.parametrize(
    ("candidate", "reference", "expected"),
    [
        ("a b c", "a b c", 1.0),
        ("a b c", "d e f", 0.0),
        ("a b c d", "a c", f(2 / 4, 2 / 2)),     # P 1/2, R 1: 1.22/1.72
        ("a c", "a b c d", f(2 / 2, 2 / 4)),
        ("", "a", 0.0),
        ("", "", 1.0),                           # coco: "".split(" ") == [""], LCS 1
    ],
)
def test_rouge_l(candidate: str, reference: str, expected: float) -> None:
    assert rouge_l(candidate, reference).fmeasure == pytest.approx(expected, rel=1e-15)


def test_value_worked_by_hand() -> None:
    assert rouge_l("a b c d", "a c").fmeasure == pytest.approx(1.22 / 1.72)


def test_several_references_take_the_best_f() -> None:
    assert rouge_l_max("a b c d", ["x", "a c", "a b"]) == pytest.approx(f(0.5, 1.0))
    with pytest.raises(ValueError):
        rouge_l_max("a", [])


def test_metric() -> None:
    metric = RougeMetric(beta=1.2)
    out = metric.score_batch([QAExample("A man, in the video.", ("the man in the video",))], {})
    assert out == [{"rougeL": pytest.approx(f(4 / 5, 4 / 5))}]  # "a man in the video"
    assert "beta:1.2" in metric.signature()["rougeL"]
