"""BLEU-1..4 against hand-worked coco-caption per-sentence values."""

from __future__ import annotations

import math

import pytest

from transforms.metrics.base import MetricInputError, QAExample
from transforms.metrics.bleu import (
    BleuMetric,
    BleuStats,
    bleu_from_stats,
    bleu_stats,
    sentence_bleu,
)

T, S = 1e-15, 1e-9  # coco's "tiny" and "small"


def coco_bleu(correct, guess, testlen, reflen):
    """coco's formula, written out by hand for the expected values."""
    out, acc = [], 1.0
    for k in range(4):
        acc *= (correct[k] + T) / (guess[k] + S)
        out.append(acc ** (1 / (k + 1)))
    ratio = (testlen + T) / (reflen + S)
    return [v * math.exp(1 - 1 / ratio) if ratio < 1 else v for v in out]


@pytest.mark.parametrize(
    ("prediction", "reference", "stats"),
    [
        ("a b c d", "a b c d", BleuStats((4, 3, 2, 1), (4, 3, 2, 1), 4, 4)),
        ("a b", "c d", BleuStats((0, 0, 0, 0), (2, 1, 0, 0), 2, 2)),
        ("the the the", "the cat", BleuStats((1, 0, 0, 0), (3, 2, 1, 0), 3, 2)),  # clipped
        ("a b", "a b c d", BleuStats((2, 1, 0, 0), (2, 1, 0, 0), 2, 4)),
        ("", "a b", BleuStats((0, 0, 0, 0), (0, 0, 0, 0), 0, 2)),
        ("a", "", BleuStats((0, 0, 0, 0), (1, 0, 0, 0), 1, 0)),
    ],
)
def test_stats(prediction: str, reference: str, stats: BleuStats) -> None:
    assert bleu_stats(prediction, reference) == stats


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("a b c d", "a b c d", [1.0, 1.0, 1.0, 1.0]),                  # identical
        # no overlap: (1e-15 / 2)^1, (5e-16 * 1e-15)^(1/2), (5e-31 * 1e-6)^(1/3), ...^(1/4)
        ("a b", "c d", [5e-16, 5e-31 ** 0.5, 5e-37 ** (1 / 3), 5e-43 ** 0.25]),
        ("the the the", "the cat", [1 / 3, None, None, None]),       # clipped unigram
        ("a b", "a b c d", [math.exp(-1)] * 1 + [None] * 3),         # brevity penalty e^-1
        ("", "a b", [0.0, 0.0, 0.0, 0.0]),                           # empty prediction
        ("", "", [0.0, 0.0, 0.0, 0.0]),                # ratio 1e-15/1e-9 < 1: BP exp(1-1e6)
    ],
)
def test_values(prediction: str, reference: str, expected: list) -> None:
    got = bleu_from_stats(bleu_stats(prediction, reference))
    s = bleu_stats(prediction, reference)
    assert list(got) == coco_bleu(s.correct, s.guess, s.testlen, s.reflen)
    for g, e in zip(got, expected, strict=True):
        if e is not None:
            assert g == pytest.approx(e, rel=1e-6, abs=0.0)


def test_several_references_each_order_takes_its_own_maximum() -> None:
    refs = ("x a b y", "a b c")
    got = sentence_bleu("a b c", refs)
    each = [bleu_from_stats(bleu_stats("a b c", r)) for r in refs]
    assert list(got) == [max(e[k] for e in each) for k in range(4)]
    assert got[0] == pytest.approx(1.0)


def test_sentence_bleu_needs_references() -> None:
    with pytest.raises(ValueError):
        sentence_bleu("a", [])


def test_metric_tokenizes_and_selects_columns() -> None:
    metric = BleuMetric(["bleu4", "bleu1"])
    assert metric.columns == ("bleu1", "bleu4")
    out = metric.score_batch([QAExample("The cat, sat.", ("the cat sat",))], {})
    assert out[0]["bleu1"] == pytest.approx(1.0) and set(out[0]) == {"bleu1", "bleu4"}
    assert "tok:coco-ptb" in metric.signature()["bleu4"]


def test_metric_rejects_rows_without_references() -> None:
    with pytest.raises(MetricInputError):
        BleuMetric().score_batch([QAExample("a", ())], {})
