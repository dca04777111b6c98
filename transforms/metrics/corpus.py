"""Scoring a corpus in plain Python: corpus statistics, then batches (no Beam).

`score_corpus` is what the scoring pipeline computes, without a runner: the corpus-level
statistics the metrics declare (CIDEr-D document frequencies, BERTScore idf) over every
example first, then each metric on batches of examples, model metrics with one local
predictor per distinct `ModelUse` (shared by the metrics that use it). Tests, benchmarks
and notebooks use it (sacrebleu's `corpus_score` is the model); the pipeline reaches the
same values (the runner-equality tests compare them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from transforms.metrics.base import CorpusStatistic, Metric, MetricInputError, QAExample, TextMetric
from transforms.metrics.model_base import ModelMetric, PredictFn
from transforms.models.uses import ModelUse

DEFAULT_BATCH_SIZE = 512


def unique_statistics(metrics: Sequence[Metric]) -> tuple[CorpusStatistic, ...]:
    """The corpus statistics the metrics need, one per key.

    Raises:
        ValueError: two statistics of different types share a key.
    """
    by_key: dict[str, CorpusStatistic] = {}
    for metric in metrics:
        for stat in metric.corpus_statistics():
            seen = by_key.setdefault(stat.key, stat)
            if type(seen) is not type(stat):
                raise ValueError(
                    f"corpus statistic key {stat.key!r} is claimed by {type(seen).__name__} "
                    f"and {type(stat).__name__}")
    return tuple(by_key.values())


def compute_statistics(metrics: Sequence[Metric],
                       examples: Iterable[QAExample]) -> dict[str, Any]:
    """`{statistic key: value}` of every statistic the metrics need, over the examples."""
    stats = unique_statistics(metrics)
    accumulators = [s.create() for s in stats]
    for example in examples:
        accumulators = [s.add(a, example) for s, a in zip(stats, accumulators, strict=True)]
    return {s.key: s.extract(a) for s, a in zip(stats, accumulators, strict=True)}


def local_predictor(use: ModelUse) -> PredictFn:
    """A predict function for `use`, loaded in this process (transforms/models)."""
    from transforms.models.predictors import load_predictor

    predictor = load_predictor(use)

    def predict(inputs: Sequence[Any]) -> list[Any]:
        outputs, _ = predictor.predict(list(inputs))
        return outputs

    return predict


def score_corpus(metrics: Sequence[Metric], examples: Sequence[QAExample], *,
                 corpus_stats: Mapping[str, Any] | None = None,
                 predictor: Callable[[ModelUse], PredictFn] = local_predictor,
                 batch_size: int = DEFAULT_BATCH_SIZE) -> list[dict[str, float]]:
    """Every metric's columns for every example, in order.

    Args:
        metrics: built metrics (text and model metrics alike).
        examples: the corpus.
        corpus_stats: statistics to score against (e.g. frozen ones); None computes them
            over `examples`, as a pipeline run does.
        predictor: gives the predict function of a `ModelUse` (called once per distinct
            use); the default loads the model here.
        batch_size: examples per `score_batch` / predict call.

    Returns:
        One `{column: value}` per example.

    Raises:
        MetricInputError: an example a metric cannot score, named by its index.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    stats = dict(corpus_stats) if corpus_stats is not None else compute_statistics(
        metrics, examples)
    predictors: dict[str, PredictFn] = {}
    out: list[dict[str, float]] = [{} for _ in examples]
    for metric in metrics:
        score = _scorer(metric, stats, predictor, predictors)
        try:
            for start in range(0, len(examples), batch_size):
                batch = examples[start:start + batch_size]
                try:
                    results = score(batch)
                except MetricInputError:
                    _raise_for_first_failing(metric, batch, start, score)
                    raise
                for values, result in zip(out[start:start + batch_size], results, strict=True):
                    values.update({c: float(result[c]) for c in metric.columns})
        finally:
            metric.teardown()
    return out


def _scorer(metric: Metric, stats: Mapping[str, Any], predictor: Callable[[ModelUse], PredictFn],
            predictors: dict[str, PredictFn]
            ) -> Callable[[Sequence[QAExample]], list[dict[str, float]]]:
    """`batch -> results` for one metric, set up (model predictors shared by use key)."""
    if isinstance(metric, ModelMetric):
        roles = {}
        for role, use in metric.model_uses().items():
            if use.key() not in predictors:
                predictors[use.key()] = predictor(use)
            roles[role] = predictors[use.key()]
        return lambda batch: metric.score_outputs(batch, roles, stats)
    if isinstance(metric, TextMetric):
        metric.setup()
        return lambda batch: metric.score_batch(batch, dict(stats))
    raise TypeError(f"{type(metric).__name__} is neither a TextMetric nor a ModelMetric")


def _raise_for_first_failing(metric: Metric, batch: Sequence[QAExample], start: int,
                             score: Callable[[Sequence[QAExample]], Any]) -> None:
    """Raises a batch's MetricInputError again, naming the first failing example."""
    for i, example in enumerate(batch):
        try:
            score([example])
        except MetricInputError as err:
            raise MetricInputError(f"example {start + i}: {metric.family}: {err}") from err
