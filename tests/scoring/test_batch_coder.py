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
from transforms.scoring import row_batch
from transforms.scoring.batch_coder import BatchCoder, estimated_bytes, register
from transforms.scoring.row_batch import RowBatch
from transforms.scoring.rows import RowSource, ScoringRow
from transforms.scoring.run_model_metrics import BatchRequests, BatchResult, RowRequests


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
