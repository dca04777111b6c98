"""CIDEr-D against hand-worked values, and its corpus statistic."""

from __future__ import annotations

import math
import pickle

import pytest

from transforms.metrics.base import MetricInputError, QAExample
from transforms.metrics.cider import CiderDocumentFrequency, CiderMetric


def score(examples: list[QAExample], **options) -> list[float]:
    metric = CiderMetric(**options)
    (stat,) = metric.corpus_statistics()
    acc = stat.create()
    for ex in examples:
        acc = stat.add(acc, ex)
    stats = {stat.key: stat.extract(stat.merge([acc]))}
    return [row["cider"] for row in metric.score_batch(examples, stats)]


@pytest.mark.parametrize(
    ("examples", "expected"),
    [
        # idf = log(2) for every n-gram; orders 1 and 2 have cosine 1, orders 3 and 4 are
        # empty (0); no length difference: (1 + 1 + 0 + 0) / 4 * 10.
        ([QAExample("a b", ("a b",)), QAExample("c", ("d",))], [5.0, 0.0]),
        # "c" never occurs in a reference: idf log(2) as well. Order 1: 2/sqrt(6);
        # order 2: 1/sqrt(2); bigram "lengths" 2 vs 1: penalty exp(-1/72).
        ([QAExample("a b c", ("a b",)), QAExample("z", ("q",))],
         [(2 / math.sqrt(6) + 1 / math.sqrt(2)) / 4 * 10 * math.exp(-1 / 72), 0.0]),
        # One document: idf = log(1) - log(1) = 0, so everything scores 0 (coco behaviour).
        ([QAExample("a b", ("a b",))], [0.0]),
        # Empty prediction and empty reference.
        ([QAExample("", ("a",)), QAExample("a", ("",))], [0.0, 0.0]),
    ],
)
def test_values(examples: list[QAExample], expected: list[float]) -> None:
    assert score(examples) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_per_position_and_pooled_document_frequencies() -> None:
    examples = [QAExample("a", ("a", "b")), QAExample("b", ("c", "a"))]
    # per position: "a" is in 1 of the 2 first references -> idf log 2, cosine 1: 10/4
    assert score(examples) == pytest.approx([2.5, 0.0])
    # pooled: "a" is in both documents -> idf 0 -> 0
    assert score(examples, df_mode="pooled") == pytest.approx([0.0, 0.0])


def test_merge_equals_sequential_add() -> None:
    examples = [QAExample("x", (f"w{i} shared", f"v{i % 3}")) for i in range(10)]
    stat = CiderDocumentFrequency()
    whole = stat.create()
    for ex in examples:
        whole = stat.add(whole, ex)
    parts = [stat.create(), stat.create()]
    for i, ex in enumerate(examples):
        parts[i % 2] = stat.add(parts[i % 2], ex)
    merged = stat.extract(stat.merge(parts))
    assert merged == stat.extract(whole)
    assert merged[0].size == 10 and merged[1].size == 10
    assert merged[0].log_df["shared"] == pytest.approx(math.log(10))
    assert pickle.loads(pickle.dumps(merged)) == merged


def test_missing_statistics() -> None:
    metric = CiderMetric()
    with pytest.raises(ValueError, match="corpus_stats"):
        metric.score_batch([QAExample("a", ("a",))], {})
    stat = metric.corpus_statistics()[0]
    acc = stat.add(stat.create(), QAExample("a", ("a",)))
    stats = {stat.key: stat.extract(acc)}
    with pytest.raises(MetricInputError, match="position"):
        metric.score_batch([QAExample("a", ("a", "b"))], stats)


def test_options_and_signature() -> None:
    metric = CiderMetric(df_mode="pooled", sigma=6)
    assert "df:pooled" in metric.signature()["cider"]
    assert metric.corpus_statistics()[0].key == "cider_df:pooled"
    with pytest.raises(ValueError, match="df_mode"):
        CiderMetric(df_mode="corpus")
    with pytest.raises(ValueError, match="sigma"):
        CiderMetric(sigma=True)
