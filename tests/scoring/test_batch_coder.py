"""BatchCoder: batch elements encoded as Beam's default coder encodes them, and sized from
their texts without being encoded (no packing, no pickling of model inputs)."""

from __future__ import annotations

import json
import pickle
import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.coders import coders

from tests.runners import RUNNER_ARGS
from transforms.metrics.base import QAExample
from transforms.scoring.reading import row_batch
from transforms.scoring.reading.batch_coder import BatchCoder, estimated_bytes, register, typed_as
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.reading.rows import RowSource, ScoringRow
from transforms.scoring.score.batch_model_handler import BatchRequests, BatchResult, RowRequests
from transforms.scoring.score.run_model_metrics import ScoreModelBatches


def _text(rng: random.Random, words: int) -> str:
    return " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(
        rng.randint(2, 9))) for _ in range(words))


def _batch(n: int = 300) -> RowBatch:
    rng = random.Random(7)
    rows = [(f"f:{i}", ScoringRow(RowSource("preds.jsonl", i, i),
                                  QAExample(_text(rng, rng.randint(3, 60)),
                                            tuple(_text(rng, 3) for _ in range(i % 9 + 1)),
                                            question=_text(rng, 12)),
                                  id=str(i), system="s"))
            for i in range(1, n + 1)]
    return RowBatch("f:1", rows)


def _requests(batch: RowBatch) -> BatchRequests:
    return BatchRequests(batch, tuple(
        RowRequests(key, row, ((0, 0, "judge", (row.example.prediction,
                                                row.example.references[0],
                                                row.example.question)),))
        for key, row in batch.rows))


def _fresh_and_pickled_size(make) -> tuple[int, int]:
    """The estimate of a fresh element, then its pickle's size (pickling packs it)."""
    value = make()
    return estimated_bytes(value), len(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))


def test_sizing_a_batch_packs_and_pickles_nothing(monkeypatch):
    packed = []
    monkeypatch.setattr(row_batch, "pack_rows", lambda rows: packed.append(rows) or b"")
    monkeypatch.setattr(row_batch, "pack_results", lambda res: packed.append(res) or b"")
    batch = _batch()
    result = BatchResult(_requests(batch), [[0.5]] * len(batch))
    for value in (batch, result.example, result, [result.example, result.example],
                  batch.with_results([({"judge": 0.5}, None, None)] * len(batch))):
        assert estimated_bytes(value) > 0
        assert BatchCoder().get_impl().estimate_size(value) > 0
    assert packed == [] and batch.packed is None


def test_estimates_are_near_the_encoded_size():
    # unpacked: the texts' size, an upper bound of the packed (zlib) bytes (about 2x on these
    # random words; 5-7x on EVOUNA-TQ, whose gold lists repeat)
    estimate, encoded = _fresh_and_pickled_size(_batch)
    assert encoded < estimate < 4 * encoded
    # packed (read back from a runner): its packed bytes
    batch = pickle.loads(pickle.dumps(_batch()))
    assert abs(estimated_bytes(batch) - len(pickle.dumps(batch))) < 0.05 * len(pickle.dumps(batch))
    # model inputs and outputs: their texts and arrays, near their pickle
    estimate, encoded = _fresh_and_pickled_size(lambda: BatchResult(
        _requests(pickle.loads(pickle.dumps(_batch()))),
        [[np.zeros(384, np.float32)] for _ in range(300)]))
    assert 0.5 * encoded < estimate < 2 * encoded
    # sampled: a long list of unlike items is scaled from its first ones, and stays near
    rows = [{"text": "x" * (i % 50), "score": float(i)} for i in range(1000)]
    assert 0.5 < estimated_bytes(rows) / len(json.dumps(rows)) < 2


def test_the_coder_encodes_as_pickle_and_composes():
    batch = _batch(5)
    coder = BatchCoder()
    assert coder.decode(coder.encode(batch)) == batch
    assert coder.encode(batch) == pickle.dumps(batch, pickle.HIGHEST_PROTOCOL)
    impl = coder.get_impl()
    assert impl.decode(impl.encode(batch)) == batch
    listed = coders.ListCoder(coder)
    assert listed.decode(listed.encode([batch, batch])) == [batch, batch]
    assert coder == BatchCoder() and hash(coder) == hash(BatchCoder())
    assert not coder.is_deterministic()


def test_registered_classes_find_the_coder():
    assert register(RowBatch) is RowBatch
    assert isinstance(beam.coders.registry.get_coder(RowBatch), BatchCoder)
    for hint in (BatchRequests, BatchResult):
        assert isinstance(beam.coders.registry.get_coder(register(hint)), BatchCoder)


@pytest.mark.slow
def test_a_run_in_one_process_never_packs_a_batch(tmp_path, monkeypatch, cross_encoder_path):
    """Every edge a batch crosses in the fused stage has BatchCoder: the runner's size
    sampling (the first ten elements of each edge, and more) would otherwise pack them."""
    import pandas as pd

    calls = []
    real_rows, real_results = row_batch.pack_rows, row_batch.pack_results
    monkeypatch.setattr(row_batch, "pack_rows",
                        lambda rows: calls.append("rows") or real_rows(rows))
    monkeypatch.setattr(row_batch, "pack_results",
                        lambda res: calls.append("results") or real_results(res))
    from pipelines.score_predictions import run
    from tests.scoring.test_score_model_metrics import OverlapHandler, _jsonl

    rows = [{"id": str(i), "system": "s", "question": f"q{i}?", "prediction": f"a man {i}",
             "references": ["the man", f"gold {i}"]} for i in range(120)]
    prefix = str(tmp_path / "out")
    run(["--input", _jsonl(tmp_path, rows), "--output", prefix, "--metrics", "em,wes",
         "--wes_model", cross_encoder_path, "--max_batch_size", "4",
         *RUNNER_ARGS["direct_in_process"]],
        save_main_session=False, handler_factory=OverlapHandler)
    scores = pd.read_parquet(prefix + ".scores.parquet")
    assert len(scores) == 120 and scores["wes"].notna().all()  # 30 batches, all scored
    assert calls == []


def _coders(pipeline: beam.Pipeline) -> dict[str, coders.Coder]:
    """The coder a runner gets for each PCollection: '<transform label>:<output tag>'."""
    from apache_beam.runners import pipeline_context

    proto = pipeline.to_runner_api()
    context = pipeline_context.PipelineContext(proto.components)
    return {f"{t.unique_name}:{tag}": context.coders.get_by_id(
                proto.components.pcollections[pc].coder_id)
            for t in proto.components.transforms.values() if not t.subtransforms
            for tag, pc in t.outputs.items()}


@pytest.mark.parametrize("flags", [[], ["--no_pipeline_type_check"]])
def test_the_batch_edges_get_the_batch_coder(tmp_path, flags):
    from apache_beam.options.pipeline_options import PipelineOptions

    from tests.scoring.test_run_model_metrics import FakeHandler, OverlapMetric
    from transforms.scoring.reading.read import ReadPredictions
    from transforms.scoring.reading.rows import ColumnMapping

    metric, stats = OverlapMetric("f1"), {"n_refs": 1}
    p = beam.Pipeline(options=PipelineOptions(flags))  # built, not run
    read = p | "Read" >> ReadPredictions(str(tmp_path / "*.jsonl"), ColumnMapping(),
                                         batch_rows=4)
    _ = read["batches"] | "Spread" >> beam.Reshuffle() | "Scored" >> ScoreModelBatches(
        [metric], handler_factory=FakeHandler, corpus_stats=stats)
    found = _coders(p)

    def coder(prefix: str, tag: str = "None") -> coders.Coder:  # "None": the main output
        (hit,) = [c for name, c in found.items() if name.endswith(f":{tag}") and (
            name.startswith(prefix + "/") or name.startswith(prefix + ":"))]
        return hit

    batch_edges = ["Read/ReadAndValidateRows", "Scored/FoldModelMetrics"] + [
        f"Scored/{step}" for step in ("ExpandModelRequests", "RunInference/BeamML_RunInference")]
    for edge in batch_edges:
        assert isinstance(coder(edge), BatchCoder), edge
    # counts and dead letters keep Beam's own coders
    for edge, tag in (("Read/ReadAndValidateRows", "dead_letter"),
                      ("Read/ReadAndValidateRows", "stats")):
        assert not isinstance(coder(edge, tag), BatchCoder), edge
    if not flags:  # what Beam infers from the elements' type, when it checks types
        assert isinstance(coder("Spread/RemoveRandomKeys"), BatchCoder)
        windows = coder("Scored/RunInference/BatchElements")
        assert isinstance(windows, coders.ListCoder)
        assert [type(c) for c in windows._get_component_coders()] == [BatchCoder]


def test_typed_as_sets_the_element_type():
    p = beam.Pipeline()
    pcoll = p | beam.Create([1])
    assert typed_as(pcoll, RowBatch) is pcoll and pcoll.element_type is RowBatch
    assert isinstance(beam.coders.registry.get_coder(pcoll.element_type), BatchCoder)


def test_the_batch_path_under_runtime_type_checks(tmp_path):
    """Beam's run-time type checks (`--runtime_type_check`) see only the DoFns' own
    declarations: the batch types are set on the PCollections, not declared on the
    multi-output DoFns, whose dead letters and counts would then fail the check. (The
    whole `qa-score` cannot run with the flag: Beam's own `WriteToText` fails it.)"""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from tests.scoring.test_run_model_metrics import FakeHandler, OverlapMetric
    from transforms.scoring.reading.read import ReadPredictions
    from transforms.scoring.reading.rows import ColumnMapping

    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps(
        {"id": str(i), "prediction": f"a man {i}", "references": ["the man"] if i else []})
        + "\n" for i in range(9)))
    options = PipelineOptions(["--runtime_type_check", *RUNNER_ARGS["direct_in_process"]])
    with beam.Pipeline(options=options) as p:
        read = p | ReadPredictions(str(path), ColumnMapping(), batch_rows=4)
        scored = read["batches"] | ScoreModelBatches(
            [OverlapMetric("f1")], handler_factory=FakeHandler, corpus_stats={"n_refs": 1})
        # "a man i" against "the man": the fake model's token Jaccard, 1/4
        assert_that(scored | beam.FlatMap(lambda b: [r[0]["f1"] for r in b.results]),
                    equal_to([0.25] * 8), label="Scores")
        assert_that(read["dead_letter"] | beam.Map(lambda d: d["row"]), equal_to([1]),
                    label="DeadLetters")
