"""`RunModelMetrics`: model-backed metrics on keyed rows through `RunInference`.

    rows: PCollection[(row_key, QAExample or any value with an `.example`)]
    results = rows | RunModelMetrics([BERTScoreMetric(layer=4), SASMetric(model=...)])
    # -> PCollection[(row_key, ModelScoreResult(scores={column: value} or None, reason))]

Exactly one result per input row, the scoring pipeline's branch contract
(`ModelScoreResult` is transforms/scoring's `ScoreResult`): the columns of every metric,
or `scores=None` with the reasons ("<family>: <why>", joined by "; ") when any metric could
not score the row (bad input, a failed inference batch, a fold error), and the kind
`inference_failed` when a batch failed, else `metric_input_error`.

The graph, one fused stage with no shuffle: `ExpandModelRequests` turns each row into a
`RowRequests` (its key, the row and every model input its metrics ask for: metric index,
slot, use tag, input; one tag per distinct `ModelUse`, so metrics with equal uses share a
model); one `RunInference(RowModelHandler(MultiUseModelHandler))` batches rows weighted
by their number of inputs, runs every model (each part of a batch goes to its use's
handler; a part that fails is retried input by input, and an input that still fails
gets an `InferenceFailure`) and hands each row its outputs; each metric then folds them,
with the corpus statistics as a side input. Batches that fail as a whole come back as
rows whose every input failed.

Why rows and not single inputs as elements: an earlier graph batched the inputs
themselves and joined their outputs back to the rows with a `CoGroupByKey`. That
shuffled every token embedding (18 KB per input for BERTScore) and, on the multi-process
DirectRunner, hit a Beam fault that loses large chunks of data between workers and the
runner (docs/repro/multiprocess_cogroupbykey.py). With rows as elements, outputs never
leave the stage that computed them.
"""

import dataclasses
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.ml.inference.base import (
    ModelHandler,
    PredictionResult,
    RunInference,
)

from transforms.io import progress
from transforms.io.counting import STATS_TAG, CountingDoFn
from transforms.metrics.base import MetricInputError
from transforms.metrics.corpus import unique_statistics
from transforms.metrics.model_base import ModelMetric
from transforms.models.uses import ModelUse
from transforms.scoring.handlers import build_handler
from transforms.scoring.score import ComputeCorpusStatistics, example_of
from transforms.scoring.score import ScoreResult as ModelScoreResult

logger = logging.getLogger(__name__)

NAMESPACE = "qa_eval_model_metrics"
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


@dataclasses.dataclass(frozen=True)
class RowRequests:
    """One row's model inputs, the element `RunInference` batches.

    Attributes:
        row_key: the row's key.
        row: the row (a `QAExample`, or a value with an `.example`).
        requests: (metric index, slot, use tag, model input) for every model input the
            row's metrics ask for, in metric and slot order.
        rejected: (metric index, reason) for every metric that cannot score the row.
    """

    row_key: Hashable
    row: Any
    requests: tuple[tuple[int, int, str, Any], ...]
    rejected: tuple[tuple[int, str], ...] = ()


def request_count(row: RowRequests) -> int:
    """A row's weight for `BatchElements`: its number of model inputs (at least 1), so
    that batch sizes stay counted in model inputs. (A row heavier than the batch target
    makes `BatchElements` emit an empty batch first; `RowModelHandler` accepts those.)"""
    return max(1, len(row.requests))


class ExpandModelRequestsFn(CountingDoFn):
    """(row_key, row) -> RowRequests with every model input of the row.

    A metric that rejects the row's example adds no inputs, only its reason. Counts
    (namespace `NAMESPACE`): `requests`, `filtered:input_error`.
    """

    def __init__(self, metrics: Sequence[ModelMetric], roles: Sequence[Mapping[str, str]]):
        super().__init__(NAMESPACE, ["requests", "filtered:input_error"])
        self._metrics = tuple(metrics)
        self._roles = tuple(roles)

    def process(self, element: tuple[Hashable, Any]):
        row_key, value = element
        example = example_of(value)
        requests, rejected = [], []
        for index, metric in enumerate(self._metrics):
            try:
                asked = metric.requests(example)
            except MetricInputError as e:
                self.count("filtered:input_error")
                rejected.append((index, str(e)))
                continue
            requests += [(index, slot, self._roles[index][role], model_input)
                         for slot, (role, model_input) in enumerate(asked)]
        self.count("requests", len(requests))
        progress.add(PROGRESS_ROWS_IN)
        yield RowRequests(row_key, value, tuple(requests), tuple(rejected))


class InferenceFailure(NamedTuple):
    """The output of an input the model failed on (in place of a model output)."""

    reason: str


class Models(dict):
    """The loaded models by use tag (a dict subclass: Beam's shared cache holds weak
    references, which a plain dict does not support)."""


class MultiUseModelHandler(ModelHandler):
    """One `ModelHandler` over several uses: elements are `(use tag, model input)`.

    Every model of a `RunModelMetrics` runs inside one `RunInference` (one batching step,
    one DoFn holding every model of the process). A batch is split by use tag and each
    part goes to its own handler. When a part fails, its inputs are retried one by one,
    so one bad input costs one `InferenceFailure`, not its whole batch.

    Args:
        handlers: use tag -> the handler of that use.
    """

    def __init__(self, handlers: Mapping[str, ModelHandler]) -> None:
        if not handlers:
            raise ValueError("MultiUseModelHandler needs at least one handler")
        self._handlers = dict(handlers)
        batching = [h.batch_elements_kwargs() for h in self._handlers.values()]
        sizes = {}
        for key, pick in (("min_batch_size", min), ("max_batch_size", max)):
            values = [b[key] for b in batching if b.get(key) is not None]
            if values:
                sizes[key] = pick(values)
        shared = [h for h in self._handlers.values() if h.share_model_across_processes()]
        copies = [h.model_copies() for h in shared if h.model_copies() is not None]
        super().__init__(**sizes, large_model=bool(shared),
                         model_copies=max(copies) if copies else None)
        self._failures = beam.metrics.Metrics.counter(NAMESPACE, "inference_failures")
        self._retries = beam.metrics.Metrics.counter(NAMESPACE, "failed_parts_retried")

    def load_model(self) -> Models:
        return Models({tag: handler.load_model() for tag, handler in self._handlers.items()})

    def run_inference(self, batch: Sequence[tuple[str, Any]], model: Mapping[str, Any],
                      inference_args: dict[str, Any] | None = None) -> list[PredictionResult]:
        positions: dict[str, list[int]] = {}
        for i, (tag, _) in enumerate(batch):
            positions.setdefault(tag, []).append(i)
        results: list[Any] = [None] * len(batch)
        for tag, where in positions.items():
            inputs = [batch[i][1] for i in where]
            values = self._run_part(tag, inputs, model[tag])
            for i, value in zip(where, values):
                results[i] = PredictionResult(batch[i], value, tag)
        return results

    def _run_part(self, tag: str, inputs: list[Any], model: Any) -> list[Any]:
        handler = self._handlers[tag]
        try:
            return _inferences(handler.run_inference(inputs, model), len(inputs))
        except Exception as e:  # noqa: BLE001 - isolated below, input by input
            if len(inputs) > 1:
                logger.warning("a batch of %d inputs for %s failed (%s: %s); retrying them "
                               "one by one", len(inputs), handler, type(e).__name__, e)
                self._retries.inc()
            else:
                self._failures.inc()
                return [InferenceFailure(f"{type(e).__name__}: {e}")]
        values = []
        for x in inputs:
            try:
                values += _inferences(handler.run_inference([x], model), 1)
            except Exception as e:  # noqa: BLE001 - one input's failure is data, reported
                self._failures.inc()
                values.append(InferenceFailure(f"{type(e).__name__}: {e}"))
        return values

    def get_num_bytes(self, batch: Sequence[tuple[str, Any]]) -> int:
        return sum(self._handlers[tag].get_num_bytes([x]) for tag, x in batch)

    def get_metrics_namespace(self) -> str:
        return NAMESPACE

    def validate_inference_args(self, inference_args: dict[str, Any] | None) -> None:
        if inference_args:
            raise ValueError(f"model metrics take no inference_args, got {inference_args}")

    def __repr__(self) -> str:
        return f"MultiUseModelHandler({self._handlers})"


class RowModelHandler(ModelHandler):
    """Batches whole rows (`RowRequests`) for a `MultiUseModelHandler`.

    A batch of rows is flattened into its model inputs, run by the multi-use handler
    (which splits them by model, computes identical inputs once and isolates failing
    inputs) and cut back into one list of outputs per row, in the row's request order.
    `BatchElements` weighs each row by its number of inputs, so `max_batch_size` still
    counts model inputs. Keeping a row's outputs with the row means the fold step runs
    in the same stage, with no shuffle of token embeddings and no join.
    """

    def __init__(self, inner: MultiUseModelHandler) -> None:
        super().__init__(**inner.batch_elements_kwargs(), element_size_fn=request_count)
        self._inner = inner

    def share_model_across_processes(self) -> bool:
        return self._inner.share_model_across_processes()

    def model_copies(self) -> int:
        return self._inner.model_copies()

    def load_model(self) -> Models:
        return self._inner.load_model()

    @staticmethod
    def _inputs(batch: Sequence[RowRequests]) -> list[tuple[str, Any]]:
        return [(tag, model_input) for row in batch for _i, _s, tag, model_input in row.requests]

    def run_inference(self, batch: Sequence[RowRequests], model: Mapping[str, Any],
                      inference_args: dict[str, Any] | None = None) -> list[PredictionResult]:
        flat = self._inputs(batch)
        values = [r.inference for r in self._inner.run_inference(flat, model)] if flat else []
        if len(values) != len(flat):
            raise RuntimeError(f"{len(values)} model outputs for {len(flat)} inputs")
        results, at = [], 0
        for row in batch:
            results.append(PredictionResult(row, values[at:at + len(row.requests)]))
            at += len(row.requests)
        return results

    def get_num_bytes(self, batch: Sequence[RowRequests]) -> int:
        flat = self._inputs(batch)
        return self._inner.get_num_bytes(flat) if flat else 0

    def get_metrics_namespace(self) -> str:
        return NAMESPACE

    def validate_inference_args(self, inference_args: dict[str, Any] | None) -> None:
        self._inner.validate_inference_args(inference_args)

    def __repr__(self) -> str:
        return f"RowModelHandler({self._inner!r})"


def _inferences(results: Iterable[PredictionResult], expected: int) -> list[Any]:
    values = [r.inference for r in results]
    if len(values) != expected:
        raise RuntimeError(f"the handler returned {len(values)} results for {expected} inputs")
    return values


class FoldModelMetricsFn(CountingDoFn):
    """PredictionResult(RowRequests, outputs) -> (row_key, ModelScoreResult).

    One result per row: the metric columns, or the reasons the row cannot be scored (an
    input a metric rejects, an input the model failed on). Counts (namespace
    `NAMESPACE`): `passed`, `filtered:rejected`, `filtered:inference_failed` (per metric
    whose inputs failed)."""

    def __init__(self, metrics: Sequence[ModelMetric]):
        super().__init__(NAMESPACE, ["passed", "filtered:rejected", "filtered:inference_failed"])
        self._metrics = tuple(metrics)

    def process(self, result: PredictionResult, corpus_stats: Mapping[str, Any] | None = None):
        row, values = result.example, result.inference
        row_key = row.row_key
        progress.add(PROGRESS_ROWS_DONE)
        if len(values) != len(row.requests):  # RowModelHandler's contract; a bug if broken
            raise RuntimeError(f"row {row_key!r}: {len(values)} model outputs for "
                               f"{len(row.requests)} requests")
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
            if index in rejected:
                reasons.append(f"{metric.family}: {rejected[index]}")
            elif index in failed:
                self.count("filtered:inference_failed")
                reasons.append(f"{metric.family}: {failed[index]}")
            else:
                try:
                    columns.update(metric.fold(example, outputs.get(index, []),
                                               corpus_stats or {}))
                except MetricInputError as e:
                    reasons.append(f"{metric.family}: {e}")
        if reasons:
            self.count("filtered:rejected")
            kind = "inference_failed" if failed else "metric_input_error"
            yield row_key, ModelScoreResult(None, "; ".join(reasons), kind)
        else:
            self.count("passed")
            yield row_key, ModelScoreResult(columns)


def _failed_batch_rows(bad: Any):
    """A batch `RunInference` could not run at all -> its rows, every input failed."""
    batch, error = bad
    reason = error[1] if isinstance(error, tuple) and len(error) > 1 else error
    for row in batch:
        yield PredictionResult(row, [InferenceFailure(str(reason))] * len(row.requests))


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
        requests = (rows | "ExpandModelRequests" >> beam.ParDo(
            ExpandModelRequestsFn(self._metrics, self._roles)).with_outputs(
                STATS_TAG, main="requests")).requests
        handler = RowModelHandler(MultiUseModelHandler(
            {tag: self._factory(use, **self._handler_kwargs) for tag, use in self._uses.items()}))
        results, failed = requests | "RunInference" >> RunInference(
            handler).with_exception_handling()
        failed_rows = failed.failed_inferences | "FailedBatchRows" >> beam.FlatMap(
            _failed_batch_rows)
        return ((results, failed_rows) | "AllRowOutputs" >> beam.Flatten()
                | "FoldModelMetrics" >> beam.ParDo(
                    FoldModelMetricsFn(self._metrics),
                    corpus_stats=self._stats_side_input(rows)).with_outputs(
                        STATS_TAG, main="scores")).scores

    def _stats_side_input(self, rows: beam.PCollection) -> Any:
        if isinstance(self._corpus_stats, beam.PCollection):
            return beam.pvalue.AsSingleton(self._corpus_stats)
        if self._corpus_stats is not None:
            return self._corpus_stats
        if not unique_statistics(self._metrics):
            return None
        stats = rows | "ComputeCorpusStatistics" >> ComputeCorpusStatistics(self._metrics)
        return beam.pvalue.AsSingleton(stats)
