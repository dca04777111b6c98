"""Tests for transforms/scoring/join.py: merging scoring branches by row key."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.metrics.base import QAExample
from transforms.scoring.join import ROWS, JoinScores
from transforms.scoring.rows import RowSource, ScoringRow, content_key
from transforms.scoring.score import ScoreResult, merge_branch_results

ROW = ScoringRow(RowSource("f", 1, 1), QAExample("p", ("r",)), id="a", system="s", human=1.0)


def test_merge_all_branches_scored():
    ok, record = merge_branch_results(
        ROW, {"lex": [ScoreResult({"em": 1.0})], "model": [ScoreResult({"sas": 0.5})]},
        ["lex", "model"])
    assert ok
    assert record == {"row_key": "f:1", "content_key": content_key(ROW.example), "file": "f",
                      "row": 1, "id": "a", "system": "s", "human": 1.0, "em": 1.0, "sas": 0.5}


@pytest.mark.parametrize("results, reason", [
    ({"lex": [ScoreResult(None, "squad: bad")], "model": [ScoreResult({"sas": 1.0})]},
     "metric_input_error"),
    ({"lex": [ScoreResult({"em": 1.0})], "model": []}, "missing_score"),
])
def test_merge_dead_letters_when_a_branch_fails(results, reason):
    ok, record = merge_branch_results(ROW, results, ["lex", "model"])
    assert not ok
    assert (record["reason"], record["row_key"], record["system"]) == (reason, "f:1", "s")


@pytest.mark.slow
def test_join_scores_pipeline():
    other = ScoringRow(RowSource("f", 2, 2), QAExample("q", ("r",)))
    pipeline = test_pipeline.TestPipeline()
    rows = pipeline | "Rows" >> beam.Create([("f:1", ROW), ("f:2", other)])
    lex = pipeline | "Lex" >> beam.Create([("f:1", ScoreResult({"em": 1.0})),
                                           ("f:2", ScoreResult(None, "squad: no"))])
    joined = {ROWS: rows, "lex": lex} | JoinScores()
    assert_that(joined["scored"] | "Keys" >> beam.Map(lambda r: (r["row_key"], r["em"])),
                equal_to([("f:1", 1.0)]), label="scored")
    assert_that(joined["dead_letter"] | "Reasons" >> beam.Map(
        lambda d: (d["row_key"], d["reason"], d["detail"])),
        equal_to([("f:2", "metric_input_error", "squad: no")]), label="dead")
    pipeline.run()


def test_join_scores_needs_rows_and_a_branch():
    pipeline = test_pipeline.TestPipeline()
    rows = pipeline | beam.Create([("f:1", ROW)])
    with pytest.raises(ValueError, match="at least one scoring branch"):
        _ = {ROWS: rows} | JoinScores()
