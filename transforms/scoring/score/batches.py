"""Scoring a `RowBatch` with the in-process (lexical) metrics, and finishing each row's
record (`ScoreRowsFn`; the step of the graph that applies it: in_process.py).

Each metric's `score_batch` runs once per batch; every row gets one answer: its scores,
or the reason it could not be scored. When `score_batch` raises `MetricInputError`, the
batch is re-scored example by example so only the failing row is lost. The batch's model
results, when the model metrics scored it first (run_model_metrics.py), are merged here
(`merge_branch_results`): a row is scored by every metric, or dead-lettered with every
reason. In an incremental run (a batch with a `Carry`, carry.py) each distinct content
is scored once, the carried metrics on new rows only, and an old row's record gets its
previous values.
"""

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import apache_beam as beam

from transforms.io.counting import CountingDoFn
from transforms.metrics.base import Metric, MetricInputError, QAExample
from transforms.scoring.incremental.carry import (
    CarrySpec,
    carried_values,
    finish_old_record,
    unique_rows,
)
from transforms.scoring.reading.row_batch import Carry, RowBatch
from transforms.scoring.reading.rows import ScoringRow, dead_letter, scored_record

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
CARRIED = "in_process_carried"  # an incremental run's carried in-process metrics
MODELS = "models"


def merge_branch_results(
    row: ScoringRow, results: Mapping[str, Sequence[ScoreResult]], branches: Sequence[str],
    key: str | None = None) -> tuple[bool, dict[str, Any]]:
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
    return True, scored_record(row, scores, key)


def _check_output(metric: Metric, results: list[dict[str, float]], n: int) -> None:
    if len(results) != n:
        raise RuntimeError(
            f"metric {metric.family} returned {len(results)} results for {n} examples")
    for result in results:
        missing = [c for c in metric.columns if c not in result]
        if missing:
            raise RuntimeError(f"metric {metric.family} returned no value for {missing}")


def _nothing_computed(model_result: tuple) -> bool:
    """Whether a row's model result holds no column (every model metric carried for it;
    a rejected row's holds None)."""
    return model_result[0] == {}


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


DEAD_LETTER = "dead_letter"
JOIN_REASONS = ("metric_input_error", "inference_failed", "missing_score")


class ScoreRowsFn(CountingDoFn):
    """Scores a `RowBatch`: yields one list per batch of its rows' final scored records
    (`rows.scored_record`), and each rejected row's dead-letter record on `dead_letter`.

    A batch that carries its rows' model results (`run_model_metrics.ScoreModelBatches`)
    has them merged with the in-process scores (`merge_branch_results`: a row is scored by
    every metric or dead-lettered with every reason). A batch with a `Carry` (an
    incremental run, `carry` the run's `CarrySpec`) is scored once per distinct content,
    the carried metrics on new rows only; an old row's record gets the previous values
    of the carried columns, `_carried` and `_changed`.
    Counts (namespace `score`): `passed`, `filtered:metric_input_error` (rows scored by
    the in-process metrics), `join/passed`, `join/filtered:<reason>` (finished records);
    distributions of batch sizes and latencies."""

    def __init__(self, metrics: Sequence[Metric], carry: CarrySpec | None = None) -> None:
        names = ["passed", "filtered:metric_input_error", ("join", "passed"),
                 *(("join", f"filtered:{r}") for r in JOIN_REASONS)]
        super().__init__(_STAGE, names)
        self._metrics = tuple(metrics)
        self._carry = carry
        self._computed = tuple(m for m in metrics if not (carry and carry.carries(m)))
        self._carried = tuple(m for m in metrics if carry and carry.carries(m))
        self._batch_size = beam.metrics.Metrics.distribution(_STAGE, "batch_size_rows")
        self._latency = beam.metrics.Metrics.distribution(_STAGE, "score_batch_micro_secs")

    def setup(self) -> None:
        for metric in self._metrics:
            metric.setup()

    def teardown(self) -> None:
        for metric in self._metrics:
            metric.teardown()

    def process(self, batch: RowBatch, corpus_stats: dict[str, Any]) -> Iterator[Any]:
        return self._score(batch, corpus_stats)

    def _score(self, batch: RowBatch, corpus_stats: dict[str, Any]) -> Iterator[Any]:
        start = time.perf_counter()
        rows, carry = batch.rows, batch.carry if self._carry is not None else None
        previous = carry.values.tolist() if carry is not None else None
        given = (self._in_process(rows, corpus_stats) if carry is None
                 else self._in_process_carrying(rows, carry, previous, corpus_stats,
                                                batch.results))
        self._latency.update(int((time.perf_counter() - start) * 1e6))
        self._batch_size.update(len(rows))
        yield from self._records(rows, given, batch.results, carry, previous)

    def _in_process(self, rows: Sequence[tuple[str, ScoringRow]], corpus_stats: dict
                    ) -> list[dict[str, list[ScoreResult]]]:
        results = score_examples(self._metrics, [row.example for _, row in rows], corpus_stats)
        if self._metrics:
            self._count_scored(results)
        return [{IN_PROCESS: [r]} for r in results]

    def _count_scored(self, results: Sequence[ScoreResult]) -> None:
        passed = sum(r.scores is not None for r in results)
        self.count("passed", passed)
        self.count("filtered:metric_input_error", len(results) - passed)

    def _in_process_carrying(self, rows: Sequence[tuple[str, ScoringRow]], carry: Carry,
                             previous: list, corpus_stats: dict,
                             batch_results: Sequence[tuple] | None
                             ) -> list[dict[str, list[ScoreResult]] | None]:
        """Each distinct content scored once: the recomputed metrics on every one, the
        carried ones on new ones; an old row's carried branch is its previous values
        (None for the row when they are its whole record: no metric recomputed in
        process, none compared, and no model column computed for it). `previous`: the
        carried values of each row (`carry.values` as a list)."""
        unique = unique_rows(carry, len(rows))
        old_rows = carry.old.tolist()
        fresh = [i for i in unique if not old_rows[i]]
        # with nothing recomputed in process an old row's in-process branch holds no score
        # (made below where it is needed): only the new rows are passed through
        needed = unique if self._computed else fresh
        computed = score_examples(self._computed, [rows[i][1].example for i in needed],
                                  corpus_stats)
        carried = score_examples(self._carried, [rows[i][1].example for i in fresh],
                                 corpus_stats)
        by_row = dict(zip(needed, computed, strict=True))
        new_by_row = dict(zip(fresh, carried, strict=True))
        if self._metrics:  # the distinct contents the in-process metrics scored
            scored = [i for i in unique if self._computed or i in new_by_row]
            failed = sum(by_row[i].scores is None or (
                i in new_by_row and new_by_row[i].scores is None) for i in scored)
            self.count("passed", len(scored) - failed)
            self.count("filtered:metric_input_error", failed)
        given: list[dict[str, list[ScoreResult]] | None] = []
        plain = not self._computed and not self._carry.compared
        for i, (first, old) in enumerate(zip(carry.first.tolist(), old_rows, strict=True)):
            if old and plain and (batch_results is None or _nothing_computed(batch_results[i])):
                given.append(None)  # its record is its previous values (`_records`)
                continue
            # no scores when nothing is computed
            branches = {IN_PROCESS: [by_row[first] if first in by_row else ScoreResult({})]}
            if old:
                branches[CARRIED] = [ScoreResult(carried_values(self._carry, previous[i]))]
            elif self._carried:
                branches[CARRIED] = [new_by_row[first]]
            given.append(branches)
        return given

    def _records(self, rows: Sequence[tuple[str, ScoringRow]],
                 given: Sequence[dict[str, list[ScoreResult]] | None],
                 model_results: Sequence[tuple] | None, carry: Carry | None,
                 previous: list | None) -> Iterator[Any]:
        """The batch's scored records as one list (none when every row was rejected);
        each rejected row's dead-letter record on `dead_letter`."""
        records = []
        for i, ((key, row), branches) in enumerate(zip(rows, given, strict=True)):
            digest = carry.keys[16 * i:16 * (i + 1)].hex() if carry is not None else None
            if branches is None:  # an old row whose record is its carried values
                record = scored_record(row, carried_values(self._carry, previous[i]), digest)
                finish_old_record(self._carry, record, previous[i])
                records.append(record)
                continue
            if model_results is not None:
                branches[MODELS] = [ScoreResult(*model_results[i])]
            names = [b for b in (IN_PROCESS, CARRIED, MODELS) if b in branches]
            ok, record = merge_branch_results(row, branches, names, digest)
            if ok:
                if carry is not None and carry.old[i]:
                    finish_old_record(self._carry, record, previous[i])
                records.append(record)
            else:
                self.count(("join", f"filtered:{record['reason']}"))
                logger.debug("row %s rejected: %s", key, record["detail"])
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, record)
        self.count(("join", "passed"), len(records))
        if records:
            yield records
