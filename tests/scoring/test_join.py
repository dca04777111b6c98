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
@pytest.mark.mutation
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
    with pytest.raises(ValueError, match=r"^JoinScores needs at least one scoring branch$"):
        _ = {ROWS: rows} | JoinScores()


OTHER = ScoringRow(RowSource("f", 2, 3), QAExample("q", ("r",)), id="b", system="t")


def _dead(row, reason, detail):
    return {"file": row.source.file, "row": row.source.row, "line": row.source.line,
            "row_key": row.source.key, "id": row.id, "system": row.system,
            "reason": reason, "detail": detail}


@pytest.mark.parametrize("results, reason, detail", [
    # a branch absent from the results counts as giving none; every problem is named,
    # in branch order, the first one's reason kept
    ({"model": [ScoreResult({"sas": 1.0})]}, "missing_score", "branch lex gave 0 results"),
    ({"lex": [ScoreResult({"em": 1.0}), ScoreResult({"em": 1.0})], "model": [
        ScoreResult(None, "sas: too long", "inference_failed")]},
     "missing_score", "branch lex gave 2 results; sas: too long"),
    ({"lex": [ScoreResult(None, "squad: bad")],
      "model": [ScoreResult(None, None, "inference_failed")]},
     "metric_input_error", "squad: bad; model"),  # no reason: the branch is named
    ({"lex": [ScoreResult({"em": 1.0})], "model": [ScoreResult(None, "x", "inference_failed")]},
     "inference_failed", "x"),
])
def test_merge_names_every_failing_branch(results, reason, detail):
    assert merge_branch_results(ROW, results, ["lex", "model"]) == (
        False, _dead(ROW, reason, detail))


def test_merge_scores_fn_scores_dead_letters_and_counts():
    from tests.dofns import run_dofn
    from transforms.scoring.join import DEAD_LETTER, MergeScoresFn

    fn = MergeScoresFn(["lex", "model"])
    assert fn.stat_keys() == [("join", "passed"), ("join", "filtered:metric_input_error"),
                              ("join", "filtered:inference_failed"),
                              ("join", "filtered:missing_score"),
                              ("join", "filtered:orphan_score")]
    main, tagged, counts = run_dofn(fn, [
        ("f:1", {ROWS: [ROW], "lex": [ScoreResult({"em": 1.0})],
                 "model": [ScoreResult({"sas": 0.5})]}),
        ("f:2", {ROWS: [OTHER], "lex": [ScoreResult(None, "squad: no")], "model": []}),
    ])
    assert main == [merge_branch_results(
        ROW, {"lex": [ScoreResult({"em": 1.0})], "model": [ScoreResult({"sas": 0.5})]},
        ["lex", "model"])[1]]
    assert tagged == {DEAD_LETTER: [_dead(OTHER, "metric_input_error",
                                          "squad: no; branch model gave 0 results")]}
    assert counts == {("join", "passed"): 1, ("join", "filtered:metric_input_error"): 1}


@pytest.mark.parametrize("rows", [[], [ROW, ROW]])
def test_merge_scores_fn_drops_scores_of_a_missing_or_repeated_row(rows, caplog):
    from tests.dofns import run_dofn
    from transforms.scoring.join import DEAD_LETTER, MergeScoresFn

    main, tagged, counts = run_dofn(MergeScoresFn(["lex"]), [
        ("f:1", {ROWS: rows, "lex": [ScoreResult({"em": 1.0})]})])
    assert main == []
    assert tagged.get(DEAD_LETTER, []) == [
        _dead(ROW, "missing_score", f"row key f:1 seen {len(rows)} times")] * len(rows)
    assert counts == {("join", "filtered:orphan_score"): 1}
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"row key f:1 has {len(rows)} rows; its scores are dropped"]


def test_join_scores_needs_rows():
    pipeline = test_pipeline.TestPipeline()
    lex = pipeline | beam.Create([("f:1", ScoreResult({"em": 1.0}))])
    with pytest.raises(ValueError, match=r"JoinScores needs a 'rows' input, got \['lex'\]"):
        _ = {"lex": lex} | JoinScores()


def test_join_scores_step_names():
    """Step names are an interface (the runner's UI, counters by step, Dataflow --update)."""
    from tests.dofns import step_labels

    pipeline = test_pipeline.TestPipeline()
    rows = pipeline | "Rows" >> beam.Create([("f:1", ROW)])
    lex = pipeline | "Lex" >> beam.Create([("f:1", ScoreResult({"em": 1.0}))])
    joined = {ROWS: rows, "lex": lex} | "Join" >> JoinScores()
    assert set(joined) == {"scored", "dead_letter"}
    assert {label for label in step_labels(pipeline) if label.startswith("Join")
            and label.count("/") <= 1} == {"Join", "Join/GroupByRowKey",
                                           "Join/MergeBranchScores"}
