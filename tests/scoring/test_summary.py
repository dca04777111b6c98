"""Tests for transforms/scoring/outputs/summary.py: counts that add up, exact means."""

from __future__ import annotations

import math
import random

import apache_beam as beam
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.scoring.outputs.summary import SummarizeScores, SummaryCombineFn, summary_event

COLUMNS = ("em", "f1")


def _scored(system, em, f1):
    return {"row_key": "k", "system": system, "em": em, "f1": f1}


def _dead(system, reason):
    return {"row_key": "k", "system": system, "reason": reason}


RECORDS = [_scored("a", 1.0, 1.0), _scored("a", 0.0, 0.5), _scored("b", 0.0, float("nan")),
           _dead("a", "empty_prediction"), _dead(None, "malformed_json"),
           _dead(None, "malformed_json")]


def _summarize(records, chunks=1):
    fn = SummaryCombineFn(COLUMNS)
    accumulators = []
    for i in range(chunks):
        acc = fn.create_accumulator()
        for record in records[i::chunks]:
            acc = fn.add_input(acc, summary_event(record, COLUMNS))
        accumulators.append(acc)
    return fn.extract_output(fn.merge_accumulators(accumulators))


def test_summary_blocks_add_up():
    summary = _summarize(RECORDS)
    assert summary["overall"] == {
        "in": 6, "scored": 3, "dead_lettered": 3,
        "dead_lettered_by_reason": {"empty_prediction": 1, "malformed_json": 2},
        "metrics": {"em": {"count": 3, "mean": 1 / 3}, "f1": {"count": 2, "mean": 0.75}}}
    assert summary["systems"]["a"]["in"] == 3
    assert summary["systems"]["a"]["metrics"]["f1"] == {"count": 2, "mean": 0.75}
    assert summary["systems"]["b"]["metrics"]["f1"] == {"count": 0, "mean": None}
    assert summary["without_system"]["dead_lettered"] == 2
    total = sum(b["in"] for b in summary["systems"].values()) + summary["without_system"]["in"]
    assert total == summary["overall"]["in"]


def test_no_system_column_gives_overall_only():
    summary = _summarize([_scored(None, 1.0, 1.0)])
    assert summary["systems"] == {} and "without_system" not in summary


def test_means_are_exact_whatever_the_merge_order():
    rng = random.Random(0)
    values = [rng.uniform(0, 1) * 10 ** rng.randint(-8, 8) for _ in range(500)]
    records = [_scored("a", v, v) for v in values]
    expected = math.fsum(values) / len(values)
    for chunks in (1, 3, 7):
        assert _summarize(records, chunks)["overall"]["metrics"]["em"]["mean"] == expected


def test_a_batch_sums_as_its_records_one_by_one_to_the_last_bit():
    rng = random.Random(1)
    values = ([rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(3000)]
              + [5e-324, -5e-324, 2.2250738585072014e-308, 1e308, -1e308, 0.0, -0.0,
                 float("nan")])
    records = [{**_scored(rng.choice("ab"), v, rng.random()), "_carried": ("em",) * (i % 2)}
               for i, v in enumerate(values)]
    fn = SummaryCombineFn(COLUMNS)
    batched = [fn.add_batch(fn.create_accumulator(), records[i:i + 700])
               for i in range(0, len(records), 700)]
    by_batch = fn.extract_output(fn.merge_accumulators(batched))
    assert by_batch == _summarize(records, 3)
    finite = [v for v in values if v == v]
    assert by_batch["overall"]["metrics"]["em"] == {
        "count": len(finite), "mean": math.fsum(finite) / len(finite)}
    infinite = fn.add_batch(fn.create_accumulator(), [_scored("a", float("inf"), 0.0),
                                                       _scored("a", 1.0, 0.0)])
    assert fn.extract_output(infinite)["overall"]["metrics"]["em"]["mean"] == float("inf")


def test_summarize_scores_pipeline():
    pipeline = test_pipeline.TestPipeline()
    scored = pipeline | "Scored" >> beam.Create([RECORDS[:2], RECORDS[2:3]])
    dead = pipeline | "Dead" >> beam.Create(RECORDS[3:])
    counts = ((scored, dead) | SummarizeScores(COLUMNS)
              | beam.Map(lambda s: (s["overall"]["in"], s["overall"]["scored"])))
    assert_that(counts, equal_to([(6, 3)]))
    pipeline.run()


def test_scored_rows_without_a_human_value_are_counted_when_there_is_a_human_column():
    records = [{**_scored("a", 1.0, 1.0), "human": 1.0}, {**_scored("a", 0.0, 0.0), "human": None},
               {**_scored("b", 1.0, 1.0), "human": None}, _dead("b", "non_numeric_human")]
    fn = SummaryCombineFn(COLUMNS, with_human=True)
    acc = fn.create_accumulator()
    for record in records:
        acc = fn.add_input(acc, summary_event(record, COLUMNS))
    summary = fn.extract_output(acc)
    assert summary["overall"]["human_missing"] == 2
    assert {s: b["human_missing"] for s, b in summary["systems"].items()} == {"a": 1, "b": 1}
    assert list(summary["overall"]) == ["in", "scored", "dead_lettered",
                                        "dead_lettered_by_reason", "human_missing", "metrics"]
    assert "human_missing" not in _summarize(records)["overall"]  # no human column
