"""Tests for transforms/scoring/score/batches.py (batching, fallback on MetricInputError) and
global_statistics.py (stats)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.scoring.fakes import REJECT, CountExamples, FakeMetric
from transforms.metrics.base import QAExample
from transforms.metrics.corpus import unique_statistics
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.reading.rows import RowSource, ScoringRow
from transforms.scoring.score.batches import ScoreResult, score_examples
from transforms.scoring.score.in_process import ScoreBatches
from transforms.scoring.statistics.global_statistics import (
    ComputeCorpusStatistics,
    CorpusStatisticsCombineFn,
)


def _metric(columns=("fake_len", "fake_corpus")) -> FakeMetric:
    metric = FakeMetric(columns)
    metric.setup()
    return metric


def test_score_examples_isolates_the_rejected_example():
    examples = [QAExample("ab", ("ab",)), QAExample(REJECT, ("x",)), QAExample("c", ("c",))]
    results = score_examples([_metric()], examples, {"fake_count": 3})
    assert results == [ScoreResult({"fake_len": 2.0, "fake_corpus": 3.0}),
                       ScoreResult(None, "fake: fake metric rejects 'REJECT'"),
                       ScoreResult({"fake_len": 1.0, "fake_corpus": 3.0})]


def test_score_examples_merges_families_and_skips_rejected_rows():
    first, second = _metric(("fake_len",)), _metric(("fake_overlap",))
    second.family = "other"
    results = score_examples([first, second], [QAExample("a b", ("a",))], {})
    assert results == [ScoreResult({"fake_len": 3.0, "fake_overlap": 0.5})]


def test_score_examples_refuses_a_metric_that_drops_columns():
    class Broken(FakeMetric):
        def score_batch(self, examples, corpus_stats):
            return [{} for _ in examples]

    with pytest.raises(RuntimeError, match="no value"):
        score_examples([Broken(("fake_len",))], [QAExample("a", ("a",))], {})


def test_unique_statistics_dedups_by_key_and_rejects_clashes():
    assert len(unique_statistics([_metric(), _metric()])) == 1

    class Clash(CountExamples):
        pass

    other = _metric()
    other.corpus_statistics = lambda: (Clash(),)
    with pytest.raises(ValueError, match="claimed by"):
        unique_statistics([_metric(), other])


def test_corpus_statistics_combine_fn_merges():
    fn = CorpusStatisticsCombineFn([CountExamples()])
    a = fn.add_input(fn.create_accumulator(), QAExample("a", ("a",)))
    b = fn.add_input(fn.add_input(fn.create_accumulator(), QAExample("b", ("b",))),
                     QAExample("c", ("c",)))
    assert fn.extract_output(fn.merge_accumulators([a, b])) == {"fake_count": 3}


def _row(i: int, prediction: str) -> tuple[str, ScoringRow]:
    source = RowSource("f", i)
    return source.key, ScoringRow(source, QAExample(prediction, ("ref",)))


def test_score_batches_uses_the_corpus_side_input():
    rows = [_row(1, "abc"), _row(2, REJECT), _row(3, "de")]
    metrics = [FakeMetric(("fake_len", "fake_corpus"))]
    pipeline = test_pipeline.TestPipeline()
    batches = pipeline | beam.Create([RowBatch("f:1", rows[:2]), RowBatch("f:3", rows[2:])])
    stats = batches | ComputeCorpusStatistics(metrics)
    scored = batches | ScoreBatches(metrics, beam.pvalue.AsSingleton(stats))
    assert_that(scored["scored"] | "Flat" >> beam.FlatMap(
        lambda records: [(r["row_key"], r["fake_len"], r["fake_corpus"]) for r in records]),
        equal_to([("f:1", 3.0, 3.0), ("f:3", 2.0, 3.0)]), label="scored")
    assert_that(scored["dead_letter"] | "Dead" >> beam.Map(lambda d: (d["row_key"], d["detail"])),
                equal_to([("f:2", "fake: fake metric rejects 'REJECT'")]), label="dead")
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed
                for c in result.metrics().query(MetricsFilter().with_namespace("score"))[
                    "counters"]}
    assert counters == {"passed": 2, "filtered:metric_input_error": 1}


def test_no_statistics_gives_an_empty_dict():
    pipeline = test_pipeline.TestPipeline()
    stats = (pipeline | beam.Create([_row(1, "a")])
             | ComputeCorpusStatistics([_metric(("fake_len",))][:0]))
    assert_that(stats, equal_to([{}]))
    pipeline.run()
