"""transforms/scoring/score/run_model_metrics.py without a pipeline: a `RowBatch` through the
expansion, the handler (batch_model_handler.py) and the fold (the scoring pipeline's
path), the progress tally of both ends, a window whose outputs do not match its inputs, a
metric that asks for no model input."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tests.dofns import run_dofn
from tests.scoring.test_run_model_metrics import FakeHandler, OverlapMetric
from transforms.inference.multi_use import MultiUseModelHandler
from transforms.io import progress
from transforms.metrics.base import QAExample
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.reading.rows import RowSource, ScoringRow
from transforms.scoring.score import batch_model_handler as bmh
from transforms.scoring.score import run_model_metrics as rmm
from transforms.scoring.score.batch_model_handler import BatchModelHandler
from transforms.scoring.score.run_model_metrics import (
    ExpandModelRequestsFn,
    FoldModelMetricsFn,
    ModelScoreResult,
    plan_uses,
)


def _row(i: int, prediction: str, references: tuple[str, ...]) -> tuple[str, ScoringRow]:
    return f"f:{i}", ScoringRow(RowSource("preds.jsonl", i, i),
                                QAExample(prediction, references), id=str(i), system="s")


def _tally(key: str) -> int:
    return progress._TALLY.snapshot().get(key, 0)


def test_a_row_batch_comes_back_with_one_result_per_row_and_is_tallied():
    metrics = [OverlapMetric("f1")]
    uses, roles = plan_uses(metrics)
    handler = BatchModelHandler(MultiUseModelHandler({t: FakeHandler(u) for t, u in uses.items()}))
    batch = RowBatch("f:1", [_row(1, "a man", ("the man", "a man here")),
                             _row(2, "nothing", ())])
    rows_in, rows_done = _tally(rmm.PROGRESS_ROWS_IN), _tally(rmm.PROGRESS_ROWS_DONE)
    [element], _, _ = run_dofn(ExpandModelRequestsFn(metrics, roles), [batch])
    assert [r.row_key for r in element.rows] == ["f:1", "f:2"]  # the batch's own rows
    assert _tally(rmm.PROGRESS_ROWS_IN) == rows_in + 2
    inferred = handler.run_inference([element], handler.load_model())
    [scored], _, _ = run_dofn(FoldModelMetricsFn(metrics), inferred,
                              corpus_stats={"n_refs": 2})
    assert isinstance(scored, RowBatch) and scored.batch_id == "f:1"
    # "a man" against "the man" (1 of 3 words) and "a man here" (2 of 3): the max
    assert scored.results == [tuple(ModelScoreResult({"f1": 2 / 3, "f1_corpus_refs": 2})),
                              tuple(ModelScoreResult(None, "f1: no references",
                                                     "metric_input_error"))]
    assert _tally(rmm.PROGRESS_ROWS_DONE) == rows_done + 2


class _ShortInner:
    """A multi-use handler that returns one output fewer than it was given inputs."""

    def batch_elements_kwargs(self) -> dict[str, Any]:
        return {}

    def load_model(self) -> dict[str, Any]:
        return {}

    def inferences(self, flat: Sequence[Any], model: Any) -> list[float]:
        return [0.5] * (len(flat) - 1)


def test_a_window_with_too_few_outputs_fails_as_a_whole(caplog):
    metrics = [OverlapMetric("f1")]
    _, roles = plan_uses(metrics)
    [element] = ExpandModelRequestsFn(metrics, roles).process(
        RowBatch("f:1", [_row(1, "a man", ("the man", "a man here"))]))
    handler = BatchModelHandler(_ShortInner())
    with caplog.at_level(logging.WARNING, logger=bmh.__name__):
        [result] = handler.run_inference([element], {})
    why = "RuntimeError: 1 model outputs for 2 inputs"
    assert [[f.reason for f in outputs] for outputs in result.inference] == [[why, why]]
    assert [r.getMessage() for r in caplog.records] == [
        f"a window of 2 model inputs failed as a whole: {why}"]
    [folded] = FoldModelMetricsFn(metrics).process(result, {"n_refs": 2})
    assert folded.results == [tuple(ModelScoreResult(None, f"f1: inference failed: {why}",
                                                     "inference_failed"))]


class _NoInputs(OverlapMetric):
    """Asks the model nothing; its column is the number of outputs it is handed."""

    def requests(self, example):
        return []

    def fold(self, example, outputs, corpus_stats):
        return {self.family: len(outputs)}


def test_a_metric_that_asks_no_input_folds_an_empty_list():
    metrics = [OverlapMetric("f1"), _NoInputs("none")]
    uses, roles = plan_uses(metrics)
    handler = BatchModelHandler(MultiUseModelHandler({t: FakeHandler(u) for t, u in uses.items()}))
    [element] = ExpandModelRequestsFn(metrics, roles).process(
        RowBatch("f:1", [_row(1, "yes", ("yes",))]))
    [folded] = FoldModelMetricsFn(metrics).process(
        handler.run_inference([element], handler.load_model())[0], {"n_refs": 1})
    assert folded.results == [
        tuple(ModelScoreResult({"f1": 1.0, "f1_corpus_refs": 1, "none": 0}))]


class _SizedInner(_ShortInner):
    def get_num_bytes(self, sample: Sequence[Any]) -> int:
        return sum(len(x) for _tag, x in sample)


def test_a_windows_size_is_scaled_from_its_first_64_inputs():
    """64 one-character inputs, then one of 100: the sample stops before it, and its size
    (64) is scaled to the window's 65 inputs."""
    rows = tuple(bmh.RowRequests(i, None, ((0, 0, "use0", "a" if i < 64 else "b" * 100),))
                 for i in range(65))
    handler = BatchModelHandler(_SizedInner())
    assert handler.get_num_bytes([bmh.BatchRequests(None, rows)]) == 65
    assert handler.get_num_bytes([bmh.BatchRequests(None, ())]) == 0


def test_the_steps_and_options_of_the_branch():
    import apache_beam as beam

    from tests.dofns import step_labels

    seen = []

    def factory(use, **kwargs):
        seen.append(kwargs)
        return FakeHandler(use)

    pipeline = beam.Pipeline()
    branch = rmm.ScoreModelBatches([OverlapMetric("f1")], handler_factory=factory,
                                   handler_kwargs={"window": 7})
    _ = pipeline | beam.Create([]) | "Branch" >> branch
    assert seen == [{"window": 7}]
    labels = step_labels(pipeline)
    # corpus statistics computed from the batches themselves, when none are given
    assert {"Branch/ExpandModelRequests", "Branch/RunInference", "Branch/FoldModelMetrics",
            "Branch/ComputeCorpusStatistics"} <= labels


def test_a_carried_metric_asks_nothing_and_the_metrics_after_it_still_ask():
    metrics = [OverlapMetric("f1"), OverlapMetric("sas")]
    _, roles = plan_uses(metrics)
    fn = ExpandModelRequestsFn(metrics, roles)
    _, value = _row(1, "a man", ("the man", "a man here"))
    row = fn._row("f:1", value, carried=(0,))
    assert row.carried == (0,)
    assert {index for index, *_ in row.requests} == {1}  # metric 0 carried, 1 asked
    assert len(row.requests) == 2  # one input per reference
    fresh = fn._row("f:1", value, carried=())
    assert [index for index, *_ in fresh.requests] == [0, 0, 1, 1]
