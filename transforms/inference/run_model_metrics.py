"""`RunModelMetrics`: model-backed metrics on keyed rows through `RunInference`.

    rows: PCollection[(row_key, QAExample or any value with an `.example`)]
    results = rows | RunModelMetrics([BERTScoreMetric(layer=4), SASMetric(model=...)])
    # -> PCollection[(row_key, ModelScoreResult(scores={column: value} or None, reason))]

Exactly one result per input row, the scoring pipeline's branch contract
(`ModelScoreResult` is transforms/scoring's `ScoreResult`): the columns of every metric,
or `scores=None` with the reasons ("<family>: <why>", joined by "; ") when any metric could
not score the row (bad input, a failed inference batch, a fold error), and the kind
`inference_failed` when a batch failed, else `metric_input_error`.

The graph: `ExpandModelRequests` turns each (row, metric) into keyed model inputs
((row_key, metric index, slot), input), one tagged output per distinct `ModelUse` (so
metrics with equal uses share one `RunInference` and one model); each use runs
`RunInference(KeyedModelHandler(handler)).with_exception_handling()`; outputs and failed
batches are keyed back by row, joined with the rows (`CoGroupByKey`) and folded by each
metric with the corpus statistics as a side input.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.ml.inference.base import KeyedModelHandler, ModelHandler, RunInference

from transforms.inference.handlers import build_handler
from transforms.metrics.base import MetricInputError
from transforms.metrics.model_base import ModelMetric, ModelUse
from transforms.scoring.score import ComputeCorpusStatistics, example_of, unique_statistics
from transforms.scoring.score import ScoreResult as ModelScoreResult

logger = logging.getLogger(__name__)

NAMESPACE = "qa_eval_model_metrics"


def plan_uses(metrics: Sequence[ModelMetric]) -> tuple[dict[str, ModelUse], list[dict[str, str]]]:
    """Distinct uses by tag ("use0", ...) and, per metric, its role -> tag."""
    tags: dict[str, str] = {}
    uses: dict[str, ModelUse] = {}
    roles: list[dict[str, str]] = []
    for metric in metrics:
        mapping = {}
        for role, use in metric.model_uses().items():
            if use.key() not in tags:
                tags[use.key()] = f"use{len(tags)}"
                uses[tags[use.key()]] = use
            mapping[role] = tags[use.key()]
        roles.append(mapping)
    return uses, roles


class ExpandModelRequestsFn(beam.DoFn):
    """(row_key, row) -> tagged ((row_key, metric index, slot), model input) per use.

    A metric that rejects the row's example emits nothing here; the fold step asks it
    again and reports the reason.
    """

    def __init__(self, metrics: Sequence[ModelMetric], roles: Sequence[Mapping[str, str]]):
        self._metrics = tuple(metrics)
        self._roles = tuple(roles)
        self._requests = beam.metrics.Metrics.counter(NAMESPACE, "requests")
        self._bad_input = beam.metrics.Metrics.counter(NAMESPACE, "filtered:input_error")

    def process(self, element: tuple[Hashable, Any]):
        row_key, value = element
        example = example_of(value)
        for index, metric in enumerate(self._metrics):
            try:
                requests = metric.requests(example)
            except MetricInputError:
                self._bad_input.inc()
                continue
            self._requests.inc(len(requests))
            for slot, (role, model_input) in enumerate(requests):
                yield beam.pvalue.TaggedOutput(
                    self._roles[index][role], ((row_key, index, slot), model_input))


class FoldModelMetricsFn(beam.DoFn):
    """(row_key, {rows, outputs, failures}) -> (row_key, ModelScoreResult), one per row."""

    def __init__(self, metrics: Sequence[ModelMetric]):
        self._metrics = tuple(metrics)
        self._passed = beam.metrics.Metrics.counter(NAMESPACE, "passed")
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, "filtered:rejected")
        self._failed = beam.metrics.Metrics.counter(NAMESPACE, "filtered:inference_failed")

    def process(self, element, corpus_stats: Mapping[str, Any] | None = None):
        row_key, groups = element
        rows = list(groups["rows"])
        if len(rows) != 1:
            logger.error("row key %s has %d rows; its model outputs are dropped",
                         row_key, len(rows))
            return
        example = example_of(rows[0])
        outputs: dict[int, dict[int, Any]] = {}
        for index, slot, value in groups["outputs"]:
            outputs.setdefault(index, {})[slot] = value
        failed = dict(groups["failures"])
        columns: dict[str, float] = {}
        reasons: list[str] = []
        for index, metric in enumerate(self._metrics):
            try:
                expected = len(metric.requests(example))
                if index in failed:
                    self._failed.inc()
                    reasons.append(f"{metric.family}: {failed[index]}")
                    continue
                got = outputs.get(index, {})
                if len(got) != expected:
                    raise RuntimeError(f"{metric.family}: {len(got)} model outputs for "
                                       f"{expected} requests on row {row_key}")
                columns.update(metric.fold(example, [got[s] for s in range(expected)],
                                           corpus_stats or {}))
            except MetricInputError as e:
                reasons.append(f"{metric.family}: {e}")
        if reasons:
            self._rejected.inc()
            kind = "inference_failed" if failed else "metric_input_error"
            yield row_key, ModelScoreResult(None, "; ".join(reasons), kind)
        else:
            self._passed.inc()
            yield row_key, ModelScoreResult(columns)


def _failed_batch_rows(bad: Any):
    batch, error = bad
    reason = error[1] if isinstance(error, tuple) and len(error) > 1 else error
    seen = set()
    for (row_key, index, _slot), _input in batch:
        if (row_key, index) not in seen:
            seen.add((row_key, index))
            yield row_key, (index, f"inference failed: {reason}")


def _to_row(keyed: Any) -> tuple[Hashable, tuple[int, int, Any]]:
    (row_id, index, slot), result = keyed
    return row_id, (index, slot, result.inference)


class RunModelMetrics(beam.PTransform):
    """Scores keyed rows with model metrics (see the module docstring).

    Args:
        metrics: the model metrics (built, hence validated, on the launcher).
        corpus_stats: the {key: value} corpus statistics, as a singleton PCollection or an
            `AsSingleton` side input; None = computed here when a metric needs them.
        handler_factory: (ModelUse, **handler_kwargs) -> ModelHandler (tests inject fakes).
        handler_kwargs: batching/sharing options for the default factory.

    Raises:
        ValueError: no metrics, or two metrics of the same family.
    """

    def __init__(self, metrics: Sequence[ModelMetric], *, corpus_stats: Any = None,
                 handler_factory: Callable[..., ModelHandler] | None = None,
                 handler_kwargs: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        families = [m.family for m in metrics]
        if not metrics or len(set(families)) != len(families):
            raise ValueError(f"RunModelMetrics needs distinct metric families, got {families}")
        self._metrics = tuple(metrics)
        self._corpus_stats = corpus_stats
        self._factory = handler_factory or build_handler
        self._handler_kwargs = dict(handler_kwargs or {})
        self._uses, self._roles = plan_uses(self._metrics)

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        requests = rows | "ExpandModelRequests" >> beam.ParDo(
            ExpandModelRequestsFn(self._metrics, self._roles)).with_outputs(*self._uses)
        outputs, failures = [], []
        for tag, use in self._uses.items():
            handler = KeyedModelHandler(self._factory(use, **self._handler_kwargs))
            label = f"{use.task}[{tag}]"
            results, failed = requests[tag] | f"RunInference {label}" >> RunInference(
                handler).with_exception_handling()
            outputs.append(results | f"KeyOutputsByRow {label}" >> beam.Map(_to_row))
            failures.append(failed.failed_inferences | f"KeyFailedBatchesByRow {label}" >>
                            beam.FlatMap(_failed_batch_rows))
        grouped = {
            "rows": rows,
            "outputs": outputs | "FlattenModelOutputs" >> beam.Flatten(),
            "failures": failures | "FlattenFailedBatches" >> beam.Flatten(),
        } | "JoinOutputsWithRows" >> beam.CoGroupByKey()
        return grouped | "FoldModelMetrics" >> beam.ParDo(
            FoldModelMetricsFn(self._metrics), corpus_stats=self._stats_side_input(rows))

    def _stats_side_input(self, rows: beam.PCollection) -> Any:
        if isinstance(self._corpus_stats, beam.PCollection):
            return beam.pvalue.AsSingleton(self._corpus_stats)
        if self._corpus_stats is not None:
            return self._corpus_stats
        if not unique_statistics(self._metrics):
            return None
        stats = rows | "ComputeCorpusStatistics" >> ComputeCorpusStatistics(self._metrics)
        return beam.pvalue.AsSingleton(stats)
