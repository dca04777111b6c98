"""The one row flow's batches: the same scores, dead letters and summary whatever the
batch size and the n-gram shards, and its pieces: part files merged into one, model
results merged into records, and the check that no row was lost between stages."""

from __future__ import annotations

import json

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.runners import RUNNER_ARGS
from transforms.metrics.registry import build_metrics
from transforms.scoring.outputs.summary import SummarizeScores
from transforms.scoring.outputs.write import (
    WriteScorePartsFn,
    WriteSummaryFn,
    merge_parts,
    scores_schema,
)
from transforms.scoring.reading.read import ReadPredictions
from transforms.scoring.reading.rows import ColumnMapping
from transforms.scoring.score.in_process import ScoreBatches
from transforms.scoring.statistics.global_statistics import ComputeCorpusStatistics

LINES = [json.dumps({"id": f"r{i}", "system": f"s{i % 3}",
                     "prediction": f"the answer {i % 7} is here",
                     "references": [f"the answer {i % 5} is there", f"answer {i % 3}"]})
         for i in range(30)]
LINES[4] = '{"id": "broken", '  # dead-lettered by the reader
LINES[11] = json.dumps({"id": "r11", "prediction": "x", "references": ["\u3000"]})  # empty

METRICS = ["em", "f1", "bleu4", "cider"]


def _records(records):
    return sorted((r["row_key"], r["id"], round(r["cider"], 12), r["f1"], r["bleu4"])
                  for r in records)


def _scored(pipeline, path, mapping, metrics, stats, batch_rows, shards, label):
    read = pipeline | f"Read{label}" >> ReadPredictions(str(path), mapping,
                                                        batch_rows=batch_rows)
    scored = read["batches"] | f"Score{label}" >> ScoreBatches(metrics, stats, shards=shards)
    return read, scored


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["direct_in_process", "direct_multi_processing"])
def test_batches_of_any_size_score_and_summarise_alike(tmp_path, runner):
    path = tmp_path / "preds.jsonl"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    mapping = ColumnMapping(id="id", system="system")
    metrics = build_metrics(METRICS, {})
    columns = [c for m in metrics for c in m.columns]
    with test_pipeline.TestPipeline(argv=RUNNER_ARGS[runner]) as pipeline:
        whole = pipeline | "Whole" >> ReadPredictions(str(path), mapping, batch_rows=64)
        stats = beam.pvalue.AsSingleton(
            whole["batches"] | "Stats" >> ComputeCorpusStatistics(metrics))
        outs = [_scored(pipeline, path, mapping, metrics, stats, rows, shards, label)
                for rows, shards, label in ((64, 3, "One"), (4, 5, "Four"))]
        lists, summaries = [], []
        for (_, scored), label in zip(outs, ("One", "Four")):
            flat = scored["scored"] | f"Flat{label}" >> beam.FlatMap(lambda batch: batch)
            lists.append(flat | f"List{label}" >> beam.combiners.ToList()
                         | f"Sort{label}" >> beam.Map(_records))
            summaries.append((scored["scored"], scored["dead_letter"])
                             | f"Summary{label}" >> SummarizeScores(columns))
        both = ((lists[0] | "K1" >> beam.Map(lambda r: ("scores", r)),
                 lists[1] | "K2" >> beam.Map(lambda r: ("scores", r)),
                 summaries[0] | "S1" >> beam.Map(lambda r: ("summary", r)),
                 summaries[1] | "S2" >> beam.Map(lambda r: ("summary", r)))
                | beam.Flatten() | beam.GroupByKey()
                | beam.MapTuple(lambda what, got: (what, len(got), got[0] == got[1])))
        assert_that(both, equal_to([("scores", 2, True), ("summary", 2, True)]))
        n = lists[1] | "Count" >> beam.Map(len)
        assert_that(n, equal_to([28]), label="rows")
        read_dead = outs[1][0]["dead_letter"] | "Reasons" >> beam.Map(
            lambda d: (d["row"], d["reason"]))
        assert_that(read_dead, equal_to([(5, "malformed_json"), (12, "empty_references")]),
                    label="read")
        assert_that(outs[1][1]["dead_letter"], equal_to([]), label="scored")


def test_parts_are_merged_into_one_file_of_every_row(tmp_path):
    schema = scores_schema(["em"], False, {"em": "em|v:1"})
    temp = str(tmp_path / "run.scores.parquet.tmp-x")
    parts = []
    for first in (0, 3):
        fn = WriteScorePartsFn(temp, "parquet", schema, ["em"], False, ())
        fn.start_bundle()
        fn.process([{"row_key": f"f:{i}", "row": i, "em": float(i)} for i in range(first,
                                                                                   first + 3)])
        parts += [w.value for w in fn.finish_bundle()]
    assert len(parts) == 2 and all(p.startswith(temp + ".part-") for p in parts)
    assert merge_parts(parts, temp, "parquet", schema) == temp
    table = pq.read_table(temp)
    assert sorted(table.column("em").to_pylist()) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert table.schema.metadata == schema.metadata
    assert not list(tmp_path.glob("*.part-*"))  # parts removed
    empty = str(tmp_path / "empty.parquet")
    merge_parts([], empty, "parquet", schema)
    assert pq.read_table(empty).num_rows == 0
    fn = WriteScorePartsFn(str(tmp_path / "j"), "jsonl", None, ["em"], False, ())
    fn.start_bundle()
    fn.process([{"row_key": "f:1", "row": 1, "em": float("nan")}])
    (part,) = [w.value for w in fn.finish_bundle()]
    merge_parts([part], str(tmp_path / "j.jsonl"), "jsonl", None)
    assert json.loads((tmp_path / "j.jsonl").read_text())["em"] is None
    fn = WriteScorePartsFn(temp, "parquet", schema, ["em"], False, ())
    fn.start_bundle()
    fn.process([{"row_key": "f:7", "row": 7, "em": 0.5}])
    (part,) = [w.value for w in fn.finish_bundle()]
    one = str(tmp_path / "one.parquet")
    assert merge_parts([part], one, "parquet", schema) == one  # the one part is the file
    assert pq.read_table(one).to_pylist()[0]["em"] == 0.5
    assert pq.read_schema(one).metadata == schema.metadata
    assert not list(tmp_path.glob("*.part-*"))


def test_a_summary_that_misses_rows_read_fails_the_run(tmp_path):
    fn = WriteSummaryFn(str(tmp_path / "s.json"), {})
    summary = {"overall": {"in": 3, "scored": 2, "dead_lettered": 1}}
    assert list(fn.process(summary, rows_read=3)) == [str(tmp_path / "s.json")]
    with pytest.raises(RuntimeError, match="4 rows were read but 3 reached the outputs"):
        list(fn.process(summary, rows_read=4))


def test_model_results_carried_by_a_batch_are_merged_into_its_records():
    """In the one row flow, a batch comes to the in-process metrics with its rows' model
    results (packed with it when it crosses a stage); each row ends scored by every metric
    or dead-lettered with every reason, the first one's kind, as the join merged them."""
    import pickle

    from tests.scoring.fakes import REJECT, FakeMetric
    from transforms.metrics.base import QAExample
    from transforms.scoring.reading.row_batch import RowBatch
    from transforms.scoring.reading.rows import RowSource, ScoringRow
    from transforms.scoring.score.batches import ScoreResult, ScoreRowsFn

    predictions = ["a b", REJECT, "x", REJECT]
    rows = [(f"f:{i}", ScoringRow(RowSource("f", i, i), QAExample(p, ("a b",)), f"r{i}", "s"))
            for i, p in enumerate(predictions, 1)]
    failed = ScoreResult(None, "judge: inference failed: boom", "inference_failed")
    model = [ScoreResult({"judge": 0.25}), ScoreResult({"judge": 0.5}), failed, failed]
    batch = pickle.loads(pickle.dumps(RowBatch("f:1", rows).with_results(model)))
    assert batch.results[0] == (({"judge": 0.25}, None, "metric_input_error"))

    def score(metrics):
        fn = ScoreRowsFn(metrics)
        fn.setup()
        fn.start_bundle()
        out = list(fn.process(batch, {"fake_count": 4}))
        records = [o for o in out if isinstance(o, list)]
        dead = [o.value for o in out if isinstance(o, beam.pvalue.TaggedOutput)
                and o.tag == "dead_letter"]
        return [r for batch_records in records for r in batch_records], dead

    records, dead = score([FakeMetric(("fake_len",))])
    assert [(r["id"], r["fake_len"], r["judge"]) for r in records] == [("r1", 3.0, 0.25)]
    assert [(d["id"], d["reason"]) for d in dead] == [
        ("r2", "metric_input_error"), ("r3", "inference_failed"), ("r4", "metric_input_error")]
    assert dead[2]["detail"] == ("fake: fake metric rejects 'REJECT'; "
                                 "judge: inference failed: boom")
    records, dead = score([])  # model metrics alone: their results are the records
    assert [(r["id"], r["judge"]) for r in records] == [("r1", 0.25), ("r2", 0.5)]
    assert "fake_len" not in records[0] and [d["id"] for d in dead] == ["r3", "r4"]
