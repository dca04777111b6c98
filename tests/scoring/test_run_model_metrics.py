"""The model branch (`ScoreModelBatches`) wired with a fake handler, and one small
end-to-end run on the real packaged MiniLM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam
import pytest
from apache_beam import Create
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.ml.inference.base import ModelHandler, PredictionResult
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.dofns import run_dofn
from transforms.metrics.base import CorpusStatistic, MetricInputError, QAExample
from transforms.metrics.bertscore import BERTScoreMetric
from transforms.metrics.corpus import score_corpus
from transforms.metrics.model_base import ModelMetric, ModelRequest
from transforms.metrics.model_metrics import BiEncoderMetric
from transforms.models import loading
from transforms.models.uses import ModelUse
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.reading.rows import RowSource, ScoringRow
from transforms.scoring.score.batch_model_handler import BatchModelHandler, request_count
from transforms.scoring.score.run_model_metrics import (
    NAMESPACE,
    ModelScoreResult,
    ScoreModelBatches,
    plan_uses,
)
from transforms.scoring.statistics.global_statistics import CorpusStatisticsCombineFn, example_of

SPEC = loading.ModelSpec.of(None)
PAIR_USE = ModelUse("sequence_score", SPEC, activation="sigmoid", segments=2)
TEXT_USE = ModelUse("sentence_embedding", SPEC, layer=6)


class CountReferences(CorpusStatistic):
    key = "n_refs"

    def create(self):
        return 0

    def add(self, accumulator, example):
        return accumulator + len(example.references)

    def merge(self, accumulators):
        return sum(accumulators)

    def extract(self, accumulator):
        return accumulator


class OverlapMetric(ModelMetric):
    """Max over references of a fake pair score; a second column uses a corpus statistic."""

    def __init__(self, family: str, use: ModelUse = PAIR_USE):
        self.family = family
        self.columns = (family, f"{family}_corpus_refs")
        self._use = use

    def model_uses(self) -> Mapping[str, ModelUse]:
        return {"pairs": self._use}

    def corpus_statistics(self):
        return (CountReferences(),)

    def signature(self):
        return {c: c for c in self.columns}

    def requests(self, example: QAExample) -> list[ModelRequest]:
        if not example.references:
            raise MetricInputError("no references")
        return [ModelRequest("pairs", (example.prediction, r)) for r in example.references]

    def fold(self, example, outputs: Sequence[Any], corpus_stats):
        if example.prediction == "unfoldable":
            raise MetricInputError("cannot fold")
        return {self.family: max(outputs), f"{self.family}_corpus_refs": corpus_stats["n_refs"]}


class FakeModel:
    def score(self, pair):
        if "BOOM" in pair[0]:
            raise RuntimeError("the model exploded")
        a, b = set(pair[0].split()), set(pair[1].split())
        return len(a & b) / max(len(a | b), 1)


class FakeHandler(ModelHandler):
    built = []

    def __init__(self, use, **kwargs):
        super().__init__(min_batch_size=1, max_batch_size=2)
        FakeHandler.built.append(use.key())

    def load_model(self):
        return FakeModel()

    def run_inference(self, batch, model, inference_args=None):
        return [PredictionResult(x, model.score(x)) for x in batch]


ROWS = [
    (1, QAExample("a man", ("the man", "a man here"))),
    (2, QAExample("yes", ("no",))),
    (3, QAExample("nothing", ())),
    (4, QAExample("BOOM x", ("x",))),
    (5, QAExample("unfoldable", ("unfoldable",))),
]


def batch_of(rows: Sequence[tuple[int, QAExample]]) -> RowBatch:
    """A `RowBatch` of (number, example) rows: row keys "f:<number>"."""
    return RowBatch(f"f:{rows[0][0]}", [(f"f:{i}", ScoringRow(RowSource("f", i), example))
                                        for i, example in rows])


def results_of(batch: RowBatch) -> list[tuple[int, ModelScoreResult]]:
    """A scored batch's results keyed by row number."""
    return [(int(key.split(":")[1]), ModelScoreResult(*result))
            for (key, _), result in zip(batch.rows, batch.results, strict=True)]


def test_plan_uses_shares_equal_uses():
    uses, roles = plan_uses([OverlapMetric("f1"), OverlapMetric("f2"),
                             OverlapMetric("f3", TEXT_USE)])
    assert list(uses) == ["use0", "use1"]
    assert roles == [{"pairs": "use0"}, {"pairs": "use0"}, {"pairs": "use1"}]


def test_corpus_statistics_fn_combines():
    fn = CorpusStatisticsCombineFn([CountReferences()])
    a = fn.add_input(fn.create_accumulator(), ROWS[0][1])
    b = fn.add_input(fn.create_accumulator(), ROWS[1][1])
    assert fn.extract_output(fn.merge_accumulators([a, b])) == {"n_refs": 3}


def test_one_result_per_row_with_reasons_and_counters():
    FakeHandler.built.clear()
    metrics = [OverlapMetric("f1"), OverlapMetric("f2")]
    pipeline = test_pipeline.TestPipeline()
    batches = [batch_of(ROWS[:1]), batch_of(ROWS[1:2]), batch_of(ROWS[2:4]),
               batch_of(ROWS[4:])]
    results = (pipeline | Create(batches)
               | ScoreModelBatches(metrics, handler_factory=FakeHandler)
               | beam.FlatMap(results_of) | beam.MapTuple(_short))
    n_refs = 5  # 2 + 1 + 0 + 1 + 1
    assert_that(results, equal_to([
        (1, ModelScoreResult({"f1": 2 / 3, "f1_corpus_refs": n_refs,
                              "f2": 2 / 3, "f2_corpus_refs": n_refs})),
        (2, ModelScoreResult({"f1": 0.0, "f1_corpus_refs": n_refs,
                              "f2": 0.0, "f2_corpus_refs": n_refs})),
        (3, ModelScoreResult(None, "f1: no references; f2: no references")),
        (4, ModelScoreResult(None, "f1: inference failed; f2: inference failed",
                             "inference_failed")),
        (5, ModelScoreResult(None, "f1: cannot fold; f2: cannot fold")),
    ]))
    run = pipeline.run()
    run.wait_until_finish()
    assert FakeHandler.built == [PAIR_USE.key()]  # one RunInference for both metrics
    counters = {c.key.metric.name: c.committed for c in run.metrics().query(
        MetricsFilter().with_namespace(NAMESPACE))["counters"]}
    # RunInference's own num_inferences counts its elements: the four batches of rows.
    # Row 4's two inputs (the same pair, asked by f1 and by f2) are one row's, so they are
    # in one window: its part fails once, is retried input by input (one retried part),
    # and each input gets its own failure.
    assert counters == {"requests": 10, "filtered:input_error": 2, "filtered:rejected": 3,
                        "filtered:inference_failed": 2, "passed": 2,
                        "inference_failures": 2, "failed_parts_retried": 1,
                        "num_inferences": 4}


def _short(key, result):
    """Cuts a failed batch's reason down to its kind (the exception text varies)."""
    if result.reason is None:
        return key, result
    reasons = "; ".join(r.split(" failed:")[0] + " failed" if "inference failed" in r else r
                        for r in result.reason.split("; "))
    return key, ModelScoreResult(None, reasons, result.kind)


class ReversedOverlap(OverlapMetric):
    """The fake pair score with the reference first (so "BOOM" in a prediction does not
    fail it); rejects a one-word prediction, and cannot fold a row with no overlap."""

    def requests(self, example: QAExample) -> list[ModelRequest]:
        if len(example.prediction.split()) < 2:
            raise MetricInputError("one word")
        return [ModelRequest("pairs", (r, example.prediction)) for r in example.references]

    def fold(self, example, outputs: Sequence[Any], corpus_stats):
        if max(outputs) == 0:
            raise MetricInputError("no overlap")
        return super().fold(example, outputs, corpus_stats)


def test_a_row_that_one_metric_fails_is_dead_lettered_though_the_other_scores_it():
    """Each row below but the first is scored by one metric and failed by the other (at
    expansion, in the model, at the fold): it gets no scores, only the failing metric's
    reason, and the kind of that failure."""
    from transforms.inference.multi_use import MultiUseModelHandler
    from transforms.scoring.score.run_model_metrics import ExpandModelRequestsFn, FoldModelMetricsFn

    metrics = [OverlapMetric("f1"), ReversedOverlap("r2")]
    rows = [(1, QAExample("a man", ("the man", "a man here"))),
            (2, QAExample("yes", ("no",))),  # f1: 0.0; r2 rejects it
            (3, QAExample("BOOM x", ("x",))),  # f1's input fails; r2: 1/2
            (4, QAExample("an apple", ("no pear",)))]  # f1: 0.0; r2 cannot fold it
    uses, roles = plan_uses(metrics)
    handler = BatchModelHandler(MultiUseModelHandler({t: FakeHandler(u) for t, u in uses.items()}))
    [element] = ExpandModelRequestsFn(metrics, roles).process(batch_of(rows))
    inferred = handler.run_inference([element], handler.load_model())
    [scored], _, counts = run_dofn(FoldModelMetricsFn(metrics), inferred,
                                   corpus_stats={"n_refs": 5})
    assert results_of(scored) == [
        (1, ModelScoreResult({"f1": 2 / 3, "f1_corpus_refs": 5,
                              "r2": 2 / 3, "r2_corpus_refs": 5})),
        (2, ModelScoreResult(None, "r2: one word", "metric_input_error")),
        (3, ModelScoreResult(None, "f1: inference failed: RuntimeError: the model exploded",
                             "inference_failed")),
        (4, ModelScoreResult(None, "r2: no overlap", "metric_input_error")),
    ]
    assert counts == {(NAMESPACE, "passed"): 1, (NAMESPACE, "filtered:rejected"): 3,
                      (NAMESPACE, "filtered:inference_failed"): 1}


def test_rows_may_carry_their_example_in_an_attribute():
    class Row:
        def __init__(self, example):
            self.example = example

    assert example_of(Row(ROWS[0][1])) is ROWS[0][1]
    assert example_of(ROWS[0][1]) is ROWS[0][1]


@pytest.mark.slow
def test_real_minilm_end_to_end_matches_score_corpus():
    metrics = [BERTScoreMetric(layer=4, idf=True), BiEncoderMetric()]
    examples = [QAExample("it is a man in the video", ("its man in the video", "a woman")),
                QAExample("he looks young", ("he is in his early 20s .",)),
                QAExample("yes", ("yes", "yes , it is"))]
    expected = dict(enumerate(score_corpus(metrics, examples, batch_size=1)))

    def close(actual):
        got = dict(actual)
        assert sorted(got) == sorted(expected)
        for row_key, result in got.items():
            assert result.reason is None
            assert result.scores == pytest.approx(expected[row_key], abs=1e-5)

    with test_pipeline.TestPipeline() as pipeline:
        results = (pipeline | Create([batch_of(list(enumerate(examples)))])
                   | ScoreModelBatches(metrics) | beam.FlatMap(results_of)
                   | beam.MapTuple(lambda i, result: (i, result)))
        assert_that(results, close)


def test_distinct_families_required():
    with pytest.raises(ValueError, match="distinct metric families"):
        ScoreModelBatches([OverlapMetric("f"), OverlapMetric("f")])
    with pytest.raises(ValueError, match="distinct metric families"):
        ScoreModelBatches([])


def test_batch_handler_cuts_outputs_back_per_row_and_accepts_empty_batches():
    from transforms.inference.multi_use import InferenceFailure, MultiUseModelHandler
    from transforms.scoring.score.run_model_metrics import ExpandModelRequestsFn

    metrics = [OverlapMetric("f1"), OverlapMetric("f2", TEXT_USE)]
    uses, roles = plan_uses(metrics)
    handler = BatchModelHandler(MultiUseModelHandler({t: FakeHandler(u) for t, u in uses.items()}))
    kwargs = handler.batch_elements_kwargs()
    assert kwargs["max_batch_size"] == 2 and kwargs["element_size_fn"] is request_count
    expand = ExpandModelRequestsFn(metrics, roles)
    batches = [batch_of(ROWS[:2]), batch_of(ROWS[2:])]
    elements = [e for batch in batches for e in expand.process(batch)]
    assert [[len(r.requests) for r in e.rows] for e in elements] == [[4, 2], [0, 2, 2]]
    assert [request_count(e) for e in elements] == [6, 4]
    assert elements[0].rows[0].requests[2] == (1, 0, "use1", ("a man", "the man"))
    assert elements[1].batch is batches[1]  # the batch travels with its requests
    results = handler.run_inference(elements, handler.load_model())
    assert [r.example for r in results] == elements
    first, second = results[0].inference, results[1].inference
    assert first[0] == [1 / 3, 2 / 3, 1 / 3, 2 / 3] and len(first[1]) == 2
    assert second[0] == [] and all(isinstance(v, InferenceFailure) for v in second[1])
    # BatchElements emits an empty batch before an element heavier than its target.
    assert handler.run_inference([], handler.load_model()) == []
    assert request_count(next(expand.process(batch_of([ROWS[2]])))) == 1  # no inputs: 1


def test_fold_checks_the_outputs_and_reports_rejections():
    from transforms.scoring.score.batch_model_handler import BatchRequests, BatchResult, RowRequests
    from transforms.scoring.score.run_model_metrics import FoldModelMetricsFn

    fold = FoldModelMetricsFn([OverlapMetric("f1")])
    row = RowRequests("f:1", ROWS[0][1], ((0, 0, "use0", ("a man", "the man")),))
    element = BatchRequests(batch_of(ROWS[:1]), (row,))
    with pytest.raises(RuntimeError, match="0 model outputs for 1 requests"):
        list(fold.process(BatchResult(element, [[]])))
    with pytest.raises(RuntimeError, match="0 output lists for 1 rows"):
        list(fold.process(BatchResult(element, [])))
    # A metric that rejected the row at expansion reports its reason, without outputs.
    rejected = RowRequests("f:3", ROWS[2][1], (), ((0, "no references"),))
    [scored] = fold.process(BatchResult(BatchRequests(batch_of([ROWS[2]]), (rejected,)), [[]]))
    assert results_of(scored) == [
        (3, ModelScoreResult(None, "f1: no references", "metric_input_error"))]


def test_the_branch_has_no_shuffle():
    """Outputs stay in the stage that computed them: no GroupByKey between the rows and
    their scores (token embeddings are never shuffled; see the module docstring)."""
    pipeline = beam.Pipeline()
    stats = pipeline | "Stats" >> Create([{"n_refs": 5}])
    _ = (pipeline | Create([batch_of(ROWS)])
         | "Branch" >> ScoreModelBatches([OverlapMetric("f1")], corpus_stats=stats,
                                         handler_factory=FakeHandler))
    transforms = pipeline.to_runner_api().components.transforms.values()
    inside = [t for t in transforms if t.unique_name.startswith("Branch/")]
    assert inside and not [t.unique_name for t in inside
                           if t.spec.urn == "beam:transform:group_by_key:v1"]


def test_the_branch_is_one_fused_stage_on_the_fnapirunner():
    """From the rows to the folded scores, one stage: the FnApiRunner materialises a
    Flatten of RunInference's good and failed outputs, which would pickle every window's
    inputs and split the branch in two (docs/decisions.md, "The model branch is one fused
    stage"). (Statistics
    computed from the same rows would be a side input the fold must wait for; here they
    are given.)"""
    from apache_beam.runners.portability.fn_api_runner import translations

    pipeline = beam.Pipeline()
    _ = (pipeline | Create([batch_of(ROWS)])
         | "Branch" >> ScoreModelBatches([OverlapMetric("f1")], corpus_stats={"n_refs": 5},
                                         handler_factory=FakeHandler)
         | "After" >> beam.Map(lambda kv: kv))
    _, stages = translations.create_and_optimize_stages(
        pipeline.to_runner_api(), phases=[
            translations.annotate_downstream_side_inputs, translations.fix_side_input_pcoll_coders,
            translations.lift_combiners, translations.expand_sdf, translations.expand_gbk,
            translations.sink_flattens, translations.greedily_fuse],
        known_runner_urns=frozenset())
    names = [[t.unique_name for t in stage.transforms] for stage in stages]
    [stage] = [n for n in names if any(t.startswith("Branch/ExpandModelRequests") for t in n)]
    assert any(t.startswith("Branch/FoldModelMetrics") for t in stage), names
    assert "After" in stage and not any("Flatten" in t for t in stage)
