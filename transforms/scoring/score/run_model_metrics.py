"""Model-backed metrics through `RunInference`, on batches of rows.

    # RowBatches in, the same batches out with each row's model scores (or why it has
    # none) attached, for ScoreBatches to finish
    scored = batches | ScoreModelBatches([BERTScoreMetric(layer=4), SASMetric(model=...)])

Exactly one result per input row, the scoring pipeline's branch contract
(`ModelScoreResult` is transforms/scoring's `ScoreResult`): the columns of every metric,
or `scores=None` with the reasons ("<family>: <why>", joined by "; ") when any metric could
not score the row (bad input, a failed inference batch, a fold error), and the kind
`inference_failed` when a batch failed, else `metric_input_error`.

The graph, one fused stage with no shuffle: `ExpandModelRequests` turns each `RowBatch`
into `BatchRequests`: per row its key, the row and every model input its metrics ask for
(in an incremental run, none for the carried metrics of a row the previous run scored) (metric index, slot, use tag, input; one tag per
distinct `ModelUse`, so metrics with equal uses share a model). One
`RunInference(BatchModelHandler(MultiUseModelHandler))` (batch_model_handler.py) merges
such elements up to `--model_batch_size` model inputs (the window in which inputs are
de-duplicated and grouped by length), runs every model (each part of a window goes to its
use's handler; a part that fails is retried input by input, and an input that still fails
gets an `InferenceFailure`; multi_use.py) and hands each row its outputs (a `BatchResult`
per element); each metric then folds them, with the corpus statistics as a side input.
Windows that fail as a whole come back as rows whose every input failed
(`BatchModelHandler` catches it). The edges are typed with these classes, so a runner
sizes their elements without encoding them (batch_coder.py).

Why batches of rows as elements: a row per element cost a Python object and a few Beam
calls per row on the way to the model, which set the pace on a GPU; and an earlier graph
that batched the inputs themselves and joined their outputs back to the rows shuffled
every token embedding (18 KB per input for BERTScore) and, on the multi-process
DirectRunner, hit a Beam fault that loses large chunks of data between workers and the
runner (docs/repro/multiprocess_cogroupbykey.py). With rows kept in their batches,
outputs never leave the stage that computed them, and the batch goes on to the in-process
metrics with its model scores, with no join by row key.
"""

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.ml.inference.base import ModelHandler, RunInference

from transforms.inference.handlers import build_handler
from transforms.inference.multi_use import NAMESPACE, InferenceFailure, MultiUseModelHandler
from transforms.io import progress
from transforms.io.counting import STATS_TAG, CountingDoFn
from transforms.metrics.base import MetricInputError
from transforms.metrics.corpus import unique_statistics
from transforms.metrics.model_base import ModelMetric
from transforms.models.uses import ModelUse
from transforms.scoring.incremental.carry import CarrySpec
from transforms.scoring.reading.batch_coder import typed_as
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.score.batch_model_handler import (
    BatchModelHandler,
    BatchRequests,
    BatchResult,
    RowRequests,
)
from transforms.scoring.score.batches import ScoreResult as ModelScoreResult
from transforms.scoring.statistics.global_statistics import ComputeCorpusStatistics, example_of

# Rows into and out of the model branch, for the progress lines of local runs only.
PROGRESS_ROWS_IN = f"{NAMESPACE}/rows_in"
PROGRESS_ROWS_DONE = f"{NAMESPACE}/rows_done"


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


class ExpandModelRequestsFn(CountingDoFn):
    """A batch of rows -> `BatchRequests` with every model input of every row.

    A metric that rejects a row's example adds no inputs, only its reason. Counts
    (namespace `NAMESPACE`): `requests`, `filtered:input_error`.
    """

    def __init__(self, metrics: Sequence[ModelMetric], roles: Sequence[Mapping[str, str]],
                 carry: CarrySpec | None = None):
        super().__init__(NAMESPACE, ["requests", "filtered:input_error"])
        self._metrics = tuple(metrics)
        self._roles = tuple(roles)
        self._carried = tuple(i for i, m in enumerate(metrics)
                              if carry is not None and carry.carries(m))

    def process(self, batch: RowBatch):
        old = (batch.carry.old.tolist() if batch.carry is not None and self._carried
               else [False] * len(batch))
        rows = tuple(self._row(row_key, value, self._carried if is_old else ())
                     for (row_key, value), is_old in zip(batch.rows, old, strict=True))
        self.count("requests", sum(len(row.requests) for row in rows))
        progress.add(PROGRESS_ROWS_IN, len(rows))
        yield BatchRequests(batch, rows)

    def _row(self, row_key: Hashable, value: Any, carried: tuple[int, ...]) -> RowRequests:
        if len(carried) == len(self._metrics):  # every metric carried: nothing to ask
            return RowRequests(row_key, value, (), (), carried)
        example = example_of(value)
        requests, rejected = [], []
        for index, metric in enumerate(self._metrics):
            if index in carried:
                continue
            try:
                asked = metric.requests(example)
            except MetricInputError as e:
                self.count("filtered:input_error")
                rejected.append((index, str(e)))
                continue
            tags = self._roles[index]
            requests += [(index, slot, tags[role], model_input)
                         for slot, (role, model_input) in enumerate(asked)]
        return RowRequests(row_key, value, tuple(requests), tuple(rejected), carried)


class FoldModelMetricsFn(CountingDoFn):
    """BatchResult(BatchRequests, outputs per row) -> the `RowBatch` again with `results`
    (a `ModelScoreResult` per row).

    A row's result holds the metric columns, or the reasons the row cannot be scored (an
    input a metric rejects, an input the model failed on). Counts (namespace
    `NAMESPACE`): `passed`, `filtered:rejected`, `filtered:inference_failed` (per metric
    whose inputs failed)."""

    def __init__(self, metrics: Sequence[ModelMetric]):
        super().__init__(NAMESPACE, ["passed", "filtered:rejected", "filtered:inference_failed"])
        self._metrics = tuple(metrics)

    def process(self, result: BatchResult, corpus_stats: Mapping[str, Any] | None = None):
        element, values = result.example, result.inference
        if len(values) != len(element.rows):  # BatchModelHandler's contract; a bug if broken
            raise RuntimeError(f"{len(values)} output lists for {len(element.rows)} rows")
        results = [self._fold(row, outputs, corpus_stats or {})
                   for row, outputs in zip(element.rows, values)]
        # `passed` is counted once per batch: a count per row cost more than its fold's
        # bookkeeping (a lock and a clock read for the progress tally)
        self.count("passed", sum(r.scores is not None for r in results))
        progress.add(PROGRESS_ROWS_DONE, len(results))
        yield element.batch.with_results(results)

    def _fold(self, row: RowRequests, values: Sequence[Any],
              corpus_stats: Mapping[str, Any]) -> ModelScoreResult:
        if len(values) != len(row.requests):  # BatchModelHandler's contract; a bug if broken
            raise RuntimeError(f"row {row.row_key!r}: {len(values)} model outputs for "
                               f"{len(row.requests)} requests")
        if len(row.carried) == len(self._metrics):  # every metric carried: no column
            return ModelScoreResult({})
        example = example_of(row.row)
        outputs: dict[int, list[Any]] = {}
        failed: dict[int, str] = {}
        for (index, _slot, _tag, _input), value in zip(row.requests, values):
            if isinstance(value, InferenceFailure):
                failed.setdefault(index, f"inference failed: {value.reason}")
            outputs.setdefault(index, []).append(value)  # requests are in slot order
        rejected = dict(row.rejected)
        columns: dict[str, float] = {}
        reasons: list[str] = []
        for index, metric in enumerate(self._metrics):
            if index in row.carried:
                continue
            if index in rejected:
                reasons.append(f"{metric.family}: {rejected[index]}")
            elif index in failed:
                self.count("filtered:inference_failed")
                reasons.append(f"{metric.family}: {failed[index]}")
            else:
                try:
                    columns.update(metric.fold(example, outputs.get(index, []), corpus_stats))
                except MetricInputError as e:
                    reasons.append(f"{metric.family}: {e}")
        if reasons:
            self.count("filtered:rejected")
            kind = "inference_failed" if failed else "metric_input_error"
            return ModelScoreResult(None, "; ".join(reasons), kind)
        return ModelScoreResult(columns)


class ScoreModelBatches(beam.PTransform):
    """`RowBatch`es -> the same batches with `results`: each row's model scores, or why it
    has none (see the module docstring and `FoldModelMetricsFn`).

    Args:
        metrics: the model metrics (built, hence validated, on the launcher).
        corpus_stats: the {key: value} corpus statistics, as a singleton PCollection or an
            `AsSingleton` side input; None = computed here from the batches when a metric
            needs them.
        handler_factory: (ModelUse, **handler_kwargs) -> ModelHandler (tests inject fakes).
        handler_kwargs: batching/sharing options for the default factory.
        carry: an incremental run's `CarrySpec`: the carried metrics are not computed for
            the rows the previous run scored.

    Raises:
        ValueError: no metrics, or two metrics of the same family.
    """

    def __init__(self, metrics: Sequence[ModelMetric], *, corpus_stats: Any = None,
                 handler_factory: Callable[..., ModelHandler] | None = None,
                 handler_kwargs: Mapping[str, Any] | None = None,
                 carry: CarrySpec | None = None) -> None:
        super().__init__()
        families = [m.family for m in metrics]
        if not metrics or len(set(families)) != len(families):
            raise ValueError(f"model metrics need distinct metric families, got {families}")
        self._metrics = tuple(metrics)
        self._corpus_stats = corpus_stats
        self._factory = handler_factory or build_handler
        self._handler_kwargs = dict(handler_kwargs or {})
        self._carry = carry
        self._uses, self._roles = plan_uses(self._metrics)
        self.models: MultiUseModelHandler | None = None  # the graph's handler, once expanded

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        # The edges typed with the batch classes: a runner sizes their elements without
        # encoding them (transforms/scoring/reading/batch_coder.py)
        requests = typed_as((batches | "ExpandModelRequests" >> beam.ParDo(
            ExpandModelRequestsFn(self._metrics, self._roles, self._carry)).with_outputs(
                STATS_TAG, main="requests")).requests, BatchRequests)
        self.models = MultiUseModelHandler(
            {tag: self._factory(use, **self._handler_kwargs) for tag, use in self._uses.items()})
        handler = BatchModelHandler(self.models)
        # No `with_exception_handling` and its Flatten of good and failed batches: the
        # FnApiRunner materialises such a Flatten, which pickled every window's inputs and
        # cut the stage in two; a window that fails as a whole is caught by the handler.
        results = typed_as(requests | "RunInference" >> RunInference(handler), BatchResult)
        scores = (results | "FoldModelMetrics" >> beam.ParDo(
            FoldModelMetricsFn(self._metrics),
            corpus_stats=self._stats_side_input(batches)).with_outputs(
                STATS_TAG, main="scores")).scores
        return typed_as(scores, RowBatch)

    def _stats_side_input(self, batches: beam.PCollection) -> Any:
        if not unique_statistics(self._metrics):
            return None  # no side input: nothing to wait for, nothing to break fusion
        if isinstance(self._corpus_stats, beam.PCollection):
            return beam.pvalue.AsSingleton(self._corpus_stats)
        if self._corpus_stats is not None:
            return self._corpus_stats
        stats = batches | "ComputeCorpusStatistics" >> ComputeCorpusStatistics(self._metrics)
        return beam.pvalue.AsSingleton(stats)
