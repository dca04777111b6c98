"""An incremental run's batches: each batch meeting its rows' previous values (carry.py;
the tables by shard: test_previous_shards.py), and the scoring steps computing
only what is not carried (score/batches.py, score/run_model_metrics.py); the graph of
every run."""

from __future__ import annotations

import json
import math
import pickle

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.dofns import run_dofn
from tests.runners import RUNNER_ARGS
from tests.scoring import fakes
from tests.scoring.keys import keys_of
from transforms.metrics.base import QAExample
from transforms.scoring.incremental.carry import (
    CARRIED_FIELD,
    CHANGED_FIELD,
    AttachPreviousFn,
    CarrySpec,
    TableCache,
    batch_keys,
    changed_columns,
    first_of_each,
    unique_rows,
)
from transforms.scoring.incremental.previous_shards import (
    PreviousTable,
    shard_of,
)
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.reading.rows import RowSource, ScoringRow, content_key
from transforms.scoring.score.batches import ScoreRowsFn


def _row(i: int, prediction: str = "p") -> tuple[str, ScoringRow]:
    return f"f:{i}", ScoringRow(RowSource("f", i, i), QAExample(prediction, ("r",)),
                                id=f"r{i}", system="s")


class _Side(dict):
    def __getitem__(self, shard):
        return self.get(shard, [])


def test_the_cache_drops_the_least_recently_used_table_past_its_budget():
    tables = {s: [PreviousTable(keys_of(str(s)), np.zeros((1, 1)))] for s in range(3)}
    cache = TableCache(budget=2 * (16 + 8))
    for s in (0, 1, 0, 2, 0, 1):
        cache.get(s, tables, 1)
    assert cache.fetches == 4  # 0, 1, 2, then 1 again (dropped for 2)
    assert len(cache.get(7, _Side(), 1)) == 0  # a shard no previous row fell in


def test_the_cache_keeps_one_table_past_any_budget_and_counts_its_bytes():
    tables = {s: [PreviousTable(keys_of(str(s), f"{s}x"), np.zeros((2, 1)))] for s in range(3)}
    one = tables[0][0].nbytes
    cache = TableCache(budget=1)  # smaller than any table: the last one fetched stays
    cache.get(0, tables, 1)
    cache.get(0, tables, 1)
    assert cache.fetches == 1 and cache._bytes == one
    cache = TableCache(budget=one)  # room for one table
    for s in (0, 1, 0):
        cache.get(s, tables, 1)
    assert cache.fetches == 3 and cache._bytes == one
    small = {1: [PreviousTable(keys_of("s"), np.zeros((1, 1)))]}
    cache.get(1, small, 1)  # the larger table dropped: the smaller one's bytes are left
    assert cache._bytes == small[1][0].nbytes < one
    empty = cache.get(7, _Side(), 3)  # a shard no previous row fell in: the run's width
    assert empty.values.shape == (0, 3)


def _attach(rows, previous: dict[str, list[float]], spec: CarrySpec, shards: int = 2):
    keys = keys_of(*previous)
    values = np.array(list(previous.values()), dtype=float).reshape(len(previous), -1)
    side = _Side()
    for s in range(shards):
        at = shard_of(keys, shards) == s
        if at.any():
            side[s] = [PreviousTable.build([(keys[at], values[at])], len(spec.columns))]
    fn = AttachPreviousFn(spec, shards)
    fn.setup()
    [batch], _, counts = run_dofn(fn, [RowBatch(rows[0][0], rows)], tables=side)
    return batch, counts


def test_attach_marks_old_rows_their_values_and_the_first_of_each_content():
    spec = CarrySpec(("em",), ("f1",))
    rows = [_row(1, "a"), _row(2, "new"), _row(3, "a"), _row(4, "b")]
    batch, counts = _attach(rows, {"a": [1.0, 0.5], "b": [0.0, math.nan]}, spec)
    carry = pickle.loads(pickle.dumps(batch)).carry  # travels with the batch
    assert carry.old.tolist() == [True, False, True, True]
    assert carry.first.tolist() == [0, 1, 0, 3]
    assert carry.values[0].tolist() == [1.0, 0.5] and math.isnan(carry.values[1][0])
    assert carry.keys == batch_keys(RowBatch("x", rows)).tobytes()
    shards = len(set(shard_of(batch_keys(RowBatch("x", rows)), 2).tolist()))
    assert counts == {("incremental", "old_rows"): 3, ("incremental", "new_rows"): 1,
                      ("incremental", "duplicate_rows"): 1,
                      ("incremental", "table_fetches"): shards}
    assert first_of_each(keys_of("x", "y", "x", "x")).tolist() == [0, 1, 0, 0]


class _Counting(fakes.FakeMetric):
    """fake_len, noting every prediction it scores."""

    seen: list[str] = []

    def score_batch(self, examples, corpus_stats):
        _Counting.seen += [e.prediction for e in examples]
        return super().score_batch(examples, corpus_stats)


def _score(batch, metrics, spec):
    fn = ScoreRowsFn(metrics, spec)
    fn.setup()
    main, tagged, _ = run_dofn(fn, [batch], corpus_stats={"fake_count": 1})
    return [r for records in main for r in records], tagged.get("dead_letter", [])


def test_carried_metrics_score_new_contents_once_and_old_rows_get_previous_values():
    computed, carried = fakes.FakeMetric(["fake_overlap"]), _Counting(["fake_len"])
    spec = CarrySpec(("fake_len",), ("fake_overlap",))
    rows = [_row(1, "a"), _row(2, "new"), _row(3, "a"), _row(4, "new"),
            _row(5, fakes.REJECT)]
    batch, _ = _attach(rows, {"a": [7.0, 0.5]}, spec)
    _Counting.seen = []
    records, dead = _score(batch, [computed, carried], spec)
    # new contents, once each (then one by one, as a batch with a rejected row is)
    assert _Counting.seen[:2] == ["new", fakes.REJECT] and "a" not in _Counting.seen
    assert [(r["row_key"], r["fake_len"], r.get(CARRIED_FIELD), r.get(CHANGED_FIELD))
            for r in records] == [("f:1", 7.0, ("fake_len",), ("fake_overlap",)),
                                  ("f:2", 3.0, None, None),
                                  ("f:3", 7.0, ("fake_len",), ("fake_overlap",)),
                                  ("f:4", 3.0, None, None)]
    assert records[0]["content_key"] == content_key(rows[0][1].example)
    # a new row that both the recomputed and the carried metric reject: every reason
    assert [(d["row_key"], d["reason"], d["detail"]) for d in dead] == [
        ("f:5", "metric_input_error", "fake: fake metric rejects 'REJECT'; "
                                      "fake: fake metric rejects 'REJECT'")]


def test_changed_columns_compare_each_column_with_its_own_previous_value():
    spec = CarrySpec(("em",), ("f1", "rougeL", "bleu1"))
    previous = np.array([1.0, 0.5, math.nan, 0.25])  # em carried, then the compared ones
    record = {"f1": 0.5, "rougeL": math.nan, "bleu1": 0.3}
    assert changed_columns(spec, record, previous) == ("bleu1",)
    assert changed_columns(spec, {**record, "rougeL": 0.0, "bleu1": 0.25}, previous) == (
        "rougeL",)
    assert list(unique_rows(None, 3)) == [0, 1, 2]  # no carry: every row


def test_attach_counts_new_and_duplicate_rows_and_fetches_per_batch():
    spec = CarrySpec(("em",), ())
    rows = [_row(1, "a"), _row(2, "n1"), _row(3, "n2"), _row(4, "a"), _row(5, "n1"),
            _row(6, "a")]
    keys = keys_of("a")
    side = _Side()
    side[0] = [PreviousTable.build([(keys, np.ones((1, 1)))], 1)]
    fn = AttachPreviousFn(spec, 1)
    fn.setup()
    batches = [RowBatch("f", rows), RowBatch("g", rows[:2])]
    out, _, counts = run_dofn(fn, batches, tables=side)
    assert [b.carry.values.dtype for b in out] == [np.float64, np.float64]
    assert out[0].carry.first.tolist() == [0, 1, 2, 0, 1, 0]
    assert counts == {("incremental", "old_rows"): 4, ("incremental", "new_rows"): 4,
                      ("incremental", "duplicate_rows"): 3,
                      ("incremental", "table_fetches"): 1}  # the second batch: cached
    fn = AttachPreviousFn(CarrySpec(("em",), ("f1",)), 4)  # no previous row in any shard
    [batch], _, _ = run_dofn(fn, [RowBatch("f", rows)], tables=_Side())
    assert batch.carry.values.shape == (6, 2) and not batch.carry.old.any()


def test_nan_against_nan_is_not_a_change_and_a_number_against_nan_is():
    metric = fakes.FakeMetric(["fake_len"])
    spec = CarrySpec((), ("fake_len",))
    batch, _ = _attach([_row(1, "ab"), _row(2, "cd")], {"ab": [math.nan], "cd": [2.0]}, spec)
    records, _ = _score(batch, [metric], spec)
    assert [r[CHANGED_FIELD] for r in records] == [("fake_len",), ()]
    assert [r[CARRIED_FIELD] for r in records] == [(), ()]


def test_the_model_branch_asks_nothing_for_a_carried_metric_of_an_old_row():
    from tests.scoring.test_run_model_metrics import OverlapMetric
    from transforms.scoring.score.run_model_metrics import ExpandModelRequestsFn, plan_uses

    metrics = [OverlapMetric("f1"), OverlapMetric("f2")]
    spec = CarrySpec(("f2", "f2_corpus_refs"), ())
    rows = [_row(1, "old"), _row(2, "new")]
    batch, _ = _attach(rows, {"old": [0.5, 1.0]}, spec)
    _, roles = plan_uses(metrics)
    [element] = ExpandModelRequestsFn(metrics, roles, spec).process(batch)
    assert [sorted({i for i, *_ in r.requests}) for r in element.rows] == [[0], [0, 1]]
    assert [r.carried for r in element.rows] == [(1,), ()]


def test_an_old_row_whose_every_model_metric_is_carried_asks_and_folds_nothing():
    from tests.scoring.test_run_model_metrics import OverlapMetric
    from transforms.scoring.score.run_model_metrics import (
        ExpandModelRequestsFn,
        FoldModelMetricsFn,
        plan_uses,
    )

    metrics = [OverlapMetric("f1"), OverlapMetric("f2")]
    spec = CarrySpec(("f1", "f1_corpus_refs", "f2", "f2_corpus_refs"), ())
    batch, _ = _attach([_row(1, "old"), _row(2, "new")], {"old": [0.5, 1.0, 0.25, 2.0]}, spec)
    _, roles = plan_uses(metrics)
    [element] = ExpandModelRequestsFn(metrics, roles, spec).process(batch)
    old, new = element.rows
    assert (old.row_key, old.row) == batch.rows[0]
    assert (old.requests, old.rejected, old.carried) == ((), (), (0, 1))
    assert sorted({i for i, *_ in new.requests}) == [0, 1] and new.carried == ()
    result = FoldModelMetricsFn(metrics)._fold(old, [], {})
    assert (result.scores, result.reason) == ({}, None)  # no column, and no failure
    partly = CarrySpec(("f1", "f1_corpus_refs"), ())  # f2, after it, computed for it too
    batch, _ = _attach([_row(1, "old")], {"old": [0.25, 2.0]}, partly)
    [element] = ExpandModelRequestsFn(metrics, roles, partly).process(batch)
    [old] = element.rows
    outputs = [0.75] * len(old.requests)
    assert FoldModelMetricsFn(metrics)._fold(old, outputs, {"n_refs": 3}).scores == {
        "f2": 0.75, "f2_corpus_refs": 3}


GROUPINGS = ("beam:transform:group_by_key:v1",)


def _groupings(argv: list[str]) -> set[str]:
    """The grouping steps of a `qa-score` graph, by label (built, not run)."""
    from pipelines.score_predictions import absolute_paths, build_parser, configure
    from transforms.io import cli
    from transforms.scoring.score_predictions import ScorePredictions

    args = cli.parse_flags(build_parser(), argv)
    absolute_paths(args)
    pipeline = beam.Pipeline()
    _ = pipeline | "ScorePredictions" >> ScorePredictions(configure(args, "graph"))
    transforms = pipeline.to_runner_api().components.transforms.values()
    return {t.unique_name for t in transforms if t.spec.urn in GROUPINGS}


@pytest.mark.slow
def test_every_run_is_one_row_flow_with_no_grouping_of_rows(tmp_path):
    """A full run and an incremental one (em, f1): the only groupings are the reader's
    (splits, their line counts), the previous tables' (one per shard) and the outputs'
    (summary, parts): rows meet nothing by key."""
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"prediction": f"p{i}", "references": ["r"]}) + "\n"
                            for i in range(4)))
    common = ["--input", str(data), "--metrics", "em,f1"]
    from pipelines.score_predictions import main

    assert main([*common, "--output", str(tmp_path / "full"),
                 *RUNNER_ARGS["direct_in_process"]]) == 0
    full = _groupings([*common, "--output", str(tmp_path / "a")])
    incremental = _groupings([*common, "--output", str(tmp_path / "b"), "--previous_run",
                              str(tmp_path / "full")])
    rows_grouped = [g for g in full | incremental
                    if not g.split("/")[1].startswith(("ReadPredictions", "ReadPrevious",
                                                       "Summar", "Write", "Finalize"))]
    assert rows_grouped == [], rows_grouped
    assert any("/ReadPreviousScores/TablePerShard" in g for g in incremental)
    assert not any("ReadPrevious" in g for g in full)


@pytest.mark.slow
@pytest.mark.mutation
def test_an_incremental_run_shuffles_no_more_than_its_new_rows(tmp_path):
    """2,000 rows scored, then 1,900 of them again with 150 new ones: the elements that
    enter every grouping of the incremental run (Beam's element counts on the FnApiRunner)
    are a term per shard, split and batch, far fewer than the new rows; no grouping sees
    a row."""
    from apache_beam.metrics import monitoring_infos
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from pipelines.score_predictions import absolute_paths, build_parser, configure, main
    from transforms.io import cli
    from transforms.scoring.score_predictions import ScorePredictions

    rows = [{"prediction": f"p{i}", "references": ["r"]} for i in range(2000)]
    night2 = rows[:1900] + [{"prediction": f"new{i}", "references": ["r"]} for i in range(150)]
    for name, data in (("n1", rows), ("n2", night2)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    assert main(["--input", str(tmp_path / "n1.jsonl"), "--output", str(tmp_path / "full"),
                 "--metrics", "em,f1", *RUNNER_ARGS["direct_in_process"]]) == 0
    args = cli.parse_flags(build_parser(), [
        "--input", str(tmp_path / "n2.jsonl"), "--output", str(tmp_path / "inc"),
        "--metrics", "em,f1", "--previous_run", str(tmp_path / "full"),
        "--max_batch_size", "100"])
    absolute_paths(args)
    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = pipeline | ScorePredictions(configure(args, "shuffles"))
    transforms = pipeline.to_runner_api().components.transforms.values()
    assert any(t.unique_name.endswith("/AttachPreviousValues") for t in transforms)  # stable
    groupings = {pc: t.unique_name for t in transforms
                 if t.spec.urn == "beam:transform:group_by_key:v1" for pc in t.inputs.values()}
    result = pipeline.run()
    result.wait_until_finish()
    counts = {mi.labels["PCOLLECTION"]: monitoring_infos.extract_counter_value(mi)
              for mi in result.monitoring_infos()
              if mi.urn == monitoring_infos.ELEMENT_COUNT_URN}
    entering = {name: counts.get(pc, 0) for pc, name in groupings.items()}
    assert set(entering.values()) - {0} and len(entering) >= 5, entering  # they were found
    assert sum(entering.values()) <= 21 + 10, entering  # 21 batches; shards, splits, parts
    assert pq.read_table(str(tmp_path / "inc.scores.parquet")).num_rows == 2050
