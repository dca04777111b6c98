"""Scoring rows with in-process (lexical) metrics.

`ComputeCorpusStatistics` (global_statistics.py) runs the `CorpusStatistic`s the metrics
declare whose size is bounded by the vocabulary (BERTScore's idf) as one `CombineGlobally`
and yields a single `{key: value}` dict, taken as an `AsSingleton` side input. CIDEr-D's
document frequencies grow with the corpus: `ScoreBatches` computes and serves them per
n-gram shard (`corpus_stats.ShardedCiderStatistics`), so each batch gets the frequencies
of its own n-grams only. `ScoreBatches` scores `RowBatch`es: each metric's `score_batch`
once per batch; `ScoreMetrics` batches keyed rows first. Every row given gets one answer:
its scores, or the reason it could not be scored. When `score_batch` raises
`MetricInputError`, the batch is re-scored example by example so only the failing row is
lost. In a keyed graph the answer is `(row_key, ScoreResult)`, the shape every scoring
branch emits, model-backed ones included, so `join.JoinScores` can merge branches by row
key; in the batched path it is the row's final record (or dead letter), one list of
records per batch.
"""

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import apache_beam as beam

from transforms.io.counting import STATS_TAG, CountingDoFn
from transforms.metrics.base import CorpusStatistic, Metric, MetricInputError, QAExample
from transforms.metrics.corpus import unique_statistics
from transforms.scoring.corpus_stats import (
    DOCS,
    MIN_SHARDS,
    ROWS,
    TEXT_DF,
    ShardedCiderStatistics,
    batch_corpora,
    is_distributed,
)
from transforms.scoring.reference_batches import BatchByReferences
from transforms.scoring.row_batch import RowBatch
from transforms.scoring.rows import ScoringRow, dead_letter, scored_record

logger = logging.getLogger(__name__)

_STAGE = "score"


class ScoreResult(NamedTuple):
    """What a scoring branch says about one row: scores, or why there are none.

    `kind` is the dead-letter reason code of a row without scores: `metric_input_error`
    (a metric cannot score this input; the default) or `inference_failed` (the model
    batch holding the row failed).
    """

    scores: dict[str, float] | None
    reason: str | None = None
    kind: str = "metric_input_error"


IN_PROCESS = "in_process"
MODELS = "models"


def merge_branch_results(
    row: ScoringRow, results: Mapping[str, Sequence[ScoreResult]], branches: Sequence[str]
) -> tuple[bool, dict[str, Any]]:
    """Merges what each scoring branch said about one row.

    Args:
        row: the validated row.
        results: branch name -> the ScoreResults it gave for this row.
        branches: every branch name, in order; a branch without a result counts as a
            failure. The first problem's kind is the dead letter's reason; every
            problem's text is in its detail.

    Returns:
        (True, scored record) or (False, dead-letter record).
    """
    scores: dict[str, float] = {}
    problems: list[tuple[str, str]] = []
    for branch in branches:
        branch_results = list(results.get(branch, ()))
        if len(branch_results) != 1:
            problems.append(("missing_score",
                             f"branch {branch} gave {len(branch_results)} results"))
            continue
        result = branch_results[0]
        if result.scores is None:
            problems.append((result.kind, result.reason or branch))
        else:
            scores.update(result.scores)
    if problems:
        reason = problems[0][0]
        detail = "; ".join(d for _, d in problems)
        return False, dead_letter(row.source, reason, detail, row.id, row.system)
    return True, scored_record(row, scores)


def _check_output(metric: Metric, results: list[dict[str, float]], n: int) -> None:
    if len(results) != n:
        raise RuntimeError(
            f"metric {metric.family} returned {len(results)} results for {n} examples")
    for result in results:
        missing = [c for c in metric.columns if c not in result]
        if missing:
            raise RuntimeError(f"metric {metric.family} returned no value for {missing}")


def score_examples(metrics: Sequence[Metric], examples: Sequence[QAExample],
                   corpus_stats: dict[str, Any]) -> list[ScoreResult]:
    """Scores a batch with every metric, isolating examples a metric rejects.

    Args:
        metrics: the metrics, set up.
        examples: the batch.
        corpus_stats: `{statistic key: value}` from `ComputeCorpusStatistics`.

    Returns:
        One ScoreResult per example, in order; a rejected example has `scores=None` and
        a reason "<family>: <message>" from the first metric that rejected it.
    """
    scores: list[dict[str, float]] = [{} for _ in examples]
    reasons: list[str | None] = [None] * len(examples)
    for metric in metrics:
        alive = [i for i, reason in enumerate(reasons) if reason is None]
        if not alive:
            break
        batch = [examples[i] for i in alive]
        try:
            results = metric.score_batch(batch, corpus_stats)
            _check_output(metric, results, len(batch))
        except MetricInputError:
            logger.info("metric %s rejected a batch of %d; re-scoring one by one",
                        metric.family, len(batch))
            results = []
            for i in alive:
                try:
                    single = metric.score_batch([examples[i]], corpus_stats)
                    _check_output(metric, single, 1)
                    results.append(single[0])
                except MetricInputError as e:
                    reasons[i] = f"{metric.family}: {e}"
                    results.append({})
        for i, result in zip(alive, results, strict=True):
            if reasons[i] is None:
                scores[i].update({c: float(result[c]) for c in metric.columns})
    return [ScoreResult(None, reason) if reason is not None else ScoreResult(s)
            for s, reason in zip(scores, reasons, strict=True)]


RESULTS = "results"
RECORDS = "records"
DEAD_LETTER = "dead_letter"


JOIN_REASONS = ("metric_input_error", "inference_failed", "missing_score")


class ScoreRowsFn(CountingDoFn):
    """Scores a batch of `(row_key, ScoringRow)` (a list or a `RowBatch`).

    `emit` = `results`: yields `(row_key, ScoreResult)` per row, for `join.JoinScores`.
    `emit` = `records`: yields one list per batch of its rows' final scored records
    (`rows.scored_record`), and each rejected row's dead-letter record on `dead_letter`:
    the rest of the scoring of a run in one flow, with no join. A `RowBatch` that carries
    its rows' model results (`run_model_metrics.ScoreModelBatches`) has them merged here
    with the in-process scores, as the join would merge the two branches
    (`merge_branch_results`: a row is scored by every metric or dead-lettered). It then
    also counts what the join would (`join/passed`, `join/filtered:<reason>`).
    Counts (namespace `score`, when there are in-process metrics): `passed`,
    `filtered:metric_input_error`; distributions of batch sizes and latencies."""

    def __init__(self, metrics: Sequence[Metric], emit: str = RESULTS) -> None:
        if emit not in (RESULTS, RECORDS):
            raise ValueError(f"emit must be {RESULTS!r} or {RECORDS!r}, got {emit!r}")
        names = ["passed", "filtered:metric_input_error"]
        if emit == RECORDS:
            names += [("join", "passed"), *(("join", f"filtered:{r}") for r in JOIN_REASONS)]
        super().__init__(_STAGE, names)
        self._metrics = tuple(metrics)
        self._emit = emit
        self._batch_size = beam.metrics.Metrics.distribution(_STAGE, "batch_size_rows")
        self._latency = beam.metrics.Metrics.distribution(_STAGE, "score_batch_micro_secs")

    def setup(self) -> None:
        for metric in self._metrics:
            metric.setup()

    def teardown(self) -> None:
        for metric in self._metrics:
            metric.teardown()

    def process(self, batch: Any, corpus_stats: dict[str, Any]) -> Iterator[Any]:
        if isinstance(batch, RowBatch):
            return self._score(batch.rows, corpus_stats, batch.results)
        return self._score(batch, corpus_stats)

    def _score(self, batch: Sequence[tuple[str, ScoringRow]], corpus_stats: dict[str, Any],
               model_results: Sequence[tuple] | None = None) -> Iterator[Any]:
        start = time.perf_counter()
        results = score_examples(self._metrics, [row.example for _, row in batch],
                                 corpus_stats)
        self._latency.update(int((time.perf_counter() - start) * 1e6))
        self._batch_size.update(len(batch))
        if self._emit == RECORDS:
            yield from self._records(batch, results, model_results)
            return
        for (key, _), result in zip(batch, results, strict=True):
            if result.scores is None:
                self.count("filtered:metric_input_error")
                logger.debug("row %s rejected: %s", key, result.reason)
            else:
                self.count("passed")
            yield key, result

    def _records(self, batch: Sequence[tuple[str, ScoringRow]],
                 results: Sequence[ScoreResult],
                 model_results: Sequence[tuple] | None) -> Iterator[Any]:
        """The batch's scored records as one list (none when every row was rejected);
        each rejected row's dead-letter record on `dead_letter`."""
        branches = [IN_PROCESS] * bool(self._metrics) + [MODELS] * (model_results is not None)
        models = model_results if model_results is not None else [None] * len(batch)
        records = []
        for (key, row), result, model in zip(batch, results, models, strict=True):
            if self._metrics:
                self.count("passed" if result.scores is not None
                           else "filtered:metric_input_error")
            given = {IN_PROCESS: [result]}
            if model is not None:
                given[MODELS] = [ScoreResult(*model)]
            ok, record = merge_branch_results(row, given, branches or [IN_PROCESS])
            if ok:
                records.append(record)
            else:
                self.count(("join", f"filtered:{record['reason']}"))
                logger.debug("row %s rejected: %s", key, record["detail"])
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, record)
        self.count(("join", "passed"), len(records))
        if records:
            yield records


class ScoreBatchesWithFrequenciesFn(ScoreRowsFn):
    """`(batch id, {rows: [RowBatch], answers: [(statistic, shard, {corpus key: dfs})]})`
    -> what `ScoreRowsFn` yields, CIDEr-D scored against the batch's own frequencies
    (`corpus_stats.batch_corpora`) and the corpus sizes (`docs` side input)."""

    def __init__(self, metrics: Sequence[Metric], statistics: Sequence[CorpusStatistic],
                 shards: int, emit: str = RESULTS) -> None:
        super().__init__(metrics, emit)
        self._statistics = tuple(statistics)
        self._shards = shards

    def process(self, element: tuple[str, dict[str, Iterable[Any]]],
                corpus_stats: dict[str, Any], docs: dict[tuple[int, int], int]
                ) -> Iterator[Any]:
        _, grouped = element
        for batch in grouped[ROWS]:  # one batch per id
            examples = [row.example for _, row in batch.rows]
            stats = {**corpus_stats, **batch_corpora(self._statistics, examples,
                                                     grouped["answers"], docs, self._shards)}
            yield from self._score(batch.rows, stats, batch.results)


class ScoreBatches(beam.PTransform):
    """`RowBatch`es -> the scores of their rows, for in-process metrics.

    With CIDEr-D among the metrics, batches are joined with their n-grams' document
    frequencies first (`corpus_stats.ShardedCiderStatistics`); without, they are spread
    over the workers (`Reshuffle`) and scored.

    Args:
        metrics: metrics built (and validated) on the launcher.
        corpus_stats: the `AsSingleton` side input from `ComputeCorpusStatistics`.
        shards: n-gram shards of the document frequencies (`corpus_stats.shards_for_input`).
        frozen: None, or `{docs, df}` PCollections of saved statistics
            (`statistics_file.ReadCorpusStatistics`) to score against instead of the run's.
        statistics_sink: None, or a PTransform applied to the `{docs, text_df}`
            PCollections of the run's statistics (`statistics_file.WriteCorpusStatistics`).
        emit: `results` -> `(row_key, ScoreResult)`; `records` -> {`scored`: lists of
            scored records, one per batch, `dead_letter`: dead-letter records}
            (`ScoreRowsFn`).
    """

    def __init__(self, metrics: Sequence[Metric], corpus_stats: Any,
                 shards: int = MIN_SHARDS, frozen: dict[str, beam.PCollection] | None = None,
                 statistics_sink: beam.PTransform | None = None, emit: str = RESULTS,
                 spread: bool = True) -> None:
        super().__init__()
        self._metrics = tuple(metrics)
        self._corpus_stats = corpus_stats
        self._shards = shards
        self._frozen = frozen
        self._sink = statistics_sink
        self._emit = emit
        self._spread = spread

    def _outputs(self, scored):
        if self._emit == RESULTS:
            return scored.scores
        return {"scored": scored.scores, DEAD_LETTER: scored[DEAD_LETTER]}

    def expand(self, batches: beam.PCollection) -> Any:
        distributed = [s for s in unique_statistics(self._metrics) if is_distributed(s)]
        if not distributed:
            if self._spread:
                batches = batches | "SpreadBatchesOverWorkers" >> beam.Reshuffle()
            return self._outputs(
                batches | "ScoreBatches" >> beam.ParDo(
                    ScoreRowsFn(self._metrics, self._emit), self._corpus_stats)
                .with_outputs(STATS_TAG, DEAD_LETTER, main="scores"))
        stats = batches | "ShardedCiderStatistics" >> ShardedCiderStatistics(
            distributed, self._shards, self._frozen, text_frequencies=self._sink is not None)
        if self._sink is not None:
            _ = {DOCS: stats[DOCS], TEXT_DF: stats[TEXT_DF]} | "SaveStatistics" >> self._sink
        return self._outputs(
            {ROWS: stats[ROWS], "answers": stats["answers"]}
            | "GroupFrequenciesByBatch" >> beam.CoGroupByKey()
            | "ScoreBatches" >> beam.ParDo(
                ScoreBatchesWithFrequenciesFn(self._metrics, distributed, self._shards,
                                              self._emit),
                self._corpus_stats, beam.pvalue.AsDict(stats[DOCS]))
            .with_outputs(STATS_TAG, DEAD_LETTER, main="scores"))


class ScoreMetrics(beam.PTransform):
    """`(row_key, ScoringRow)` -> `(row_key, ScoreResult)` for in-process metrics.

    `ScoreRowsFn`'s counts go to Beam counters; its stats output is not kept, as every
    row's result reaches `JoinScores`, which counts them (and summary.json from them).
    Rows are batched (`BatchElements`; with CIDEr-D among the metrics, rows with equal
    references together, `reference_batches.BatchByReferences`) and scored by `ScoreBatches`.

    Args:
        metrics: metrics built (and validated) on the launcher.
        corpus_stats: the `AsSingleton` side input from `ComputeCorpusStatistics`.
        max_batch_size: upper bound for `BatchElements`.
        shards, frozen, statistics_sink: see `ScoreBatches`.
    """

    def __init__(self, metrics: Sequence[Metric], corpus_stats: Any,
                 max_batch_size: int = 512, shards: int = MIN_SHARDS,
                 frozen: dict[str, beam.PCollection] | None = None,
                 statistics_sink: beam.PTransform | None = None) -> None:
        super().__init__()
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self._metrics = tuple(metrics)
        self._corpus_stats = corpus_stats
        self._max_batch_size = max_batch_size
        self._shards = shards
        self._frozen = frozen
        self._sink = statistics_sink

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        distributed = [s for s in unique_statistics(self._metrics) if is_distributed(s)]
        if not distributed:
            batches = rows | "BatchRows" >> beam.BatchElements(
                min_batch_size=1, max_batch_size=self._max_batch_size)
        else:
            # rows with equal references batched together: their n-grams are counted and
            # requested once per batch; about 8 groups per shard
            batches = rows | "BatchRowsByReferences" >> BatchByReferences(
                self._max_batch_size, self._shards * 8)
        return batches | "ScoreRowBatches" >> ScoreBatches(
            self._metrics, self._corpus_stats, self._shards, self._frozen, self._sink,
            spread=False)
