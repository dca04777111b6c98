"""Incremental runs (`--previous_run PREFIX`): carry scores over from an earlier complete
run, compute only what changed, and write a complete snapshot like any run.

Every row has a content key (`rows.content_key`: a hash of the prediction, the references
in order, the question and the negative references). A metric's values are carried from
the previous run for a row whose content key the previous run scored, when the metric's
signature is unchanged (model, revision, options, implementation version) and its values
do not depend on this run's corpus (`plan_carry`); everything else is computed. Which
metrics carry is decided once, on the launcher, from the two runs' signatures; which rows
carry is decided per content key in the graph:

    rows (row_key, ScoringRow) --key by content key--+
    previous scores (content_key, {column: value}) --+--> GroupByContentKey
        -> SplitByPrevious: per content key, one representative row (the smallest row
           key), `new` (not in the previous run) or `old` (in it), the carried values of
           an old one, and the group (every row with that content, the previous values)
    branches: the recomputed metrics on new + old rows, the carried ones on new rows
        only (their old rows get the previous values instead)
    JoinIncremental: one CoGroupByKey by content key; each group's result fans out to
        every row of the group (duplicate rows are scored once), with which columns were
        carried and which recomputed ones changed, for summary.json.

Rows absent from the input are absent from the snapshot: the previous run is only read.
"""

import dataclasses
import json
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from transforms.io.counting import STATS_TAG, CountingDoFn
from transforms.metrics.base import Metric
from transforms.scoring.join import DEAD_LETTER
from transforms.scoring.parquet_parts import ParquetSource, ReadParquetBatches
from transforms.scoring.previous_run import PreviousRun
from transforms.scoring.rows import CONTENT_KEY_VERSION, content_key, dead_letter
from transforms.scoring.score import ScoreResult, merge_branch_results

logger = logging.getLogger(__name__)

_STAGE = "incremental"
GROUPS = "groups"
_ROWS = "rows"
_PREVIOUS = "previous"
NEW, OLD = "new", "old"
CARRIED_FIELD = "_carried"  # scored records: the columns carried (not written)
CHANGED_FIELD = "_changed"  # scored records: recomputed columns whose value changed


@dataclasses.dataclass(frozen=True)
class CarryPlan:
    """Which metrics an incremental run carries over, and why the others are computed.

    Attributes:
        carried: the metrics whose values are carried for rows the previous run scored.
        computed: the other metrics, computed on every row.
        reasons: metric column -> why it is computed (for summary.json).
        compared: the computed columns the previous run has too (their changes counted).
    """

    carried: tuple[Metric, ...]
    computed: tuple[Metric, ...]
    reasons: dict[str, str]
    compared: tuple[str, ...]

    @property
    def carried_columns(self) -> tuple[str, ...]:
        return tuple(c for m in self.carried for c in m.columns)

    def describe(self, previous: PreviousRun) -> dict[str, Any]:
        """The `incremental` block of summary.json."""
        return {"previous_run": previous.prefix,
                "previous_run_id": previous.summary.get("run_id"),
                "previous_finished_at": previous.summary.get("finished_at"),
                "carried_metrics": list(self.carried_columns),
                "computed_metrics": dict(self.reasons)}


FROZEN_STATISTICS = "|stats:file:"  # in the signature of a metric scored against a file


def depends_on_run_corpus(metric: Metric, signatures: Mapping[str, str]) -> bool:
    """Whether a metric's values depend on the corpus scored with it (CIDEr-D document
    frequencies, BERTScore idf): the same row scored in another corpus can differ. Not
    so when its statistics come from a file (`--corpus_statistics`): its signature then
    names the file's hash, and equal signatures mean equal statistics."""
    return bool(metric.corpus_statistics()) and not all(
        FROZEN_STATISTICS in signatures[c] for c in metric.columns)


def plan_carry(metrics: Sequence[Metric], signatures: Mapping[str, str],
               previous: PreviousRun) -> CarryPlan:
    """Decides, per metric, whether its values can be carried from `previous`: every
    column of the metric has the same signature there, the previous run has content keys
    of this recipe, and the metric does not depend on the run's corpus.

    A metric computes all its columns at once (em and f1 are one SQuAD pass), so a
    metric with one column new or changed is computed whole; each column's reason says
    why, true for that column: its own ("not in the previous run", "signature changed"),
    or, for a column unchanged itself, that it is computed with the ones that are not
    (its recomputed values are compared with the previous ones: `changed`)."""
    carried, computed, reasons = [], [], {}
    for metric in metrics:
        why = None
        if not previous.content_keys:
            why = ("the previous run has no content keys of recipe "
                   f"{CONTENT_KEY_VERSION} (written by an older version)")
        elif depends_on_run_corpus(metric, signatures):
            why = ("corpus-level: its values depend on this run's corpus statistics, "
                   "recomputed on every run (--corpus_statistics freezes them)")
        if why:
            computed.append(metric)
            reasons.update({c: why for c in metric.columns})
            continue
        own = {}
        for column in metric.columns:
            before = previous.signatures.get(column)
            if before is None:
                own[column] = "not in the previous run"
            elif before != signatures[column]:
                own[column] = f"signature changed (was {before})"
        if not own:
            carried.append(metric)
            continue
        computed.append(metric)
        others = ", ".join(own)
        for column in metric.columns:
            reasons[column] = own.get(column) or (
                f"unchanged, but computed with {others} (one {metric.family} pass "
                "computes all its columns; the values are compared with the previous "
                "run's)")
    compared = tuple(c for m in computed for c in m.columns if c in previous.signatures)
    return CarryPlan(tuple(carried), tuple(computed), reasons, compared)


def _values(record: Mapping[str, Any], columns: Sequence[str]) -> dict[str, float]:
    # A NaN is written as null; carried back as NaN, as the metric gave it.
    return {c: math.nan if record.get(c) is None else float(record[c]) for c in columns}


def _keyed_previous(record: Mapping[str, Any], columns: Sequence[str], source: ParquetSource
                    ) -> tuple[str, dict[str, float]]:
    key = record.get("content_key")
    if not isinstance(key, str):
        raise source.fail(f"a row without a content key (row_key {record.get('row_key')!r})")
    try:
        return key, _values(record, columns)
    except (KeyError, TypeError, ValueError) as e:
        raise source.fail(f"row_key {record.get('row_key')!r} has no number for one of "
                          f"{list(columns)}", e) from e


def _parse_previous_line(line: str, source: ParquetSource) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as e:
        raise source.fail(f"a line is not JSON ({line[:60]!r}...)", e) from e
    if not isinstance(record, dict):
        raise source.fail(f"a line is not a JSON object ({line[:60]!r})")
    return record


def _batch_records(batch: Any) -> list[dict[str, Any]]:
    return batch.to_pylist()


def _first(values: Iterable[Any]) -> Any:
    return next(iter(values))


class ReadPreviousScores(beam.PTransform):
    """The previous run's scores -> `(content_key, {column: value})`, one per content key
    (duplicate rows of the previous run have equal values)."""

    def __init__(self, previous: PreviousRun, columns: Sequence[str]) -> None:
        super().__init__()
        self._previous = previous
        self._columns = tuple(columns)

    def expand(self, p: beam.pvalue.PBegin) -> beam.PCollection:
        source = self._previous.source()
        if self._previous.output_format == "parquet":
            records = (p
                       | "ReadPreviousParquet" >> ReadParquetBatches(
                           source, columns=["row_key", "content_key", *self._columns])
                       | "PreviousRecords" >> beam.FlatMap(_batch_records))
        else:
            records = (p | "ReadPreviousJsonLines" >> beam.io.ReadFromText(
                            source.path, compression_type="uncompressed")
                       | "ParsePreviousJson" >> beam.Map(_parse_previous_line, source))
        return (records
                | "KeyByContent" >> beam.Map(_keyed_previous, self._columns, source)
                | "OnePerContentKey" >> beam.CombinePerKey(_first))


class SplitByPreviousFn(CountingDoFn):
    """`(content_key, {rows: [...], previous: [...]})` -> main: the group
    `(content_key, (rows, previous values or None))`; `new` / `old`: the representative
    `(content_key, row)`; `carried`: `(content_key, {column: previous value})` of an old
    one for the carried columns. Counts (namespace `incremental`): `new_contents`,
    `old_contents`, `duplicate_rows` (rows beyond the first of a content key)."""

    def __init__(self, carried_columns: Sequence[str]) -> None:
        super().__init__(_STAGE, ["new_contents", "old_contents", "duplicate_rows"])
        self._carried = tuple(carried_columns)

    def process(self, element: tuple[str, Mapping[str, Iterable[Any]]]) -> Iterator[Any]:
        key, grouped = element
        rows = sorted(grouped[_ROWS], key=lambda row: (row.source.file, row.source.row))
        if rows:  # else scored last time, absent now: absent from the snapshot
            yield from self._split(key, rows, next(iter(grouped[_PREVIOUS]), None))

    def _split(self, key: str, rows: list, previous: dict | None) -> Iterator[Any]:
        self.count("duplicate_rows", len(rows) - 1)
        yield (key, (rows, previous))
        if previous is None:
            self.count("new_contents")
            yield beam.pvalue.TaggedOutput(NEW, (key, rows[0]))
        else:
            self.count("old_contents")
            yield beam.pvalue.TaggedOutput(OLD, (key, rows[0]))
            yield beam.pvalue.TaggedOutput("carried", (key, {
                c: previous[c] for c in self._carried}))


class SplitByPrevious(beam.PTransform):
    """(rows `(row_key, ScoringRow)`, previous `(content_key, values)`) -> a dict of
    `groups`, `new`, `old`, `carried` (see `SplitByPreviousFn`)."""

    def __init__(self, carried_columns: Sequence[str]) -> None:
        super().__init__()
        self._fn = SplitByPreviousFn(carried_columns)

    def expand(self, inputs):  # (rows, previous) -> {groups, new, old, carried}
        rows, previous = inputs
        by_content = rows | "KeyRowsByContent" >> beam.Map(
            lambda keyed: (content_key(keyed[1].example), keyed[1]))
        split = ({_ROWS: by_content, _PREVIOUS: previous}
                 | "GroupByContentKey" >> beam.CoGroupByKey()
                 | "SplitNewAndOld" >> beam.ParDo(self._fn).with_outputs(
                     NEW, OLD, "carried", STATS_TAG, main=GROUPS))
        return {GROUPS: split[GROUPS], NEW: split[NEW], OLD: split[OLD],
                "carried": split.carried}


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


class MergeIncrementalFn(CountingDoFn):
    """`(content_key, {groups: [(rows, previous)], branch: [ScoreResult], ...})` -> one
    scored record (or dead letter) per row of the group, as `JoinScores` does for one row,
    with `_carried` (the carried columns, for an old content) and `_changed` (recomputed
    columns whose value differs from the previous run's; NaN equals NaN)."""

    def __init__(self, branches: Sequence[str], carried_columns: Sequence[str],
                 compared_columns: Sequence[str]) -> None:
        super().__init__(_STAGE, ["passed", "orphan_score"])
        self._branches = tuple(branches)
        self._carried = tuple(carried_columns)
        self._compared = tuple(compared_columns)

    def process(self, element: tuple[str, Mapping[str, Iterable[Any]]]) -> Iterator[Any]:
        key, grouped = element
        groups = list(grouped[GROUPS])
        # A branch fed every row (not one per content) gives equal results for a
        # content's rows: one is kept.
        results = {b: list(grouped[b])[:1] for b in self._branches}
        if len(groups) == 1:
            yield from self._merge(groups[0], results)
            return
        self.count("orphan_score")  # a pipeline bug, not bad input: said loudly
        logger.error("content key %s has %d row groups", key, len(groups))
        for rows, _ in groups:
            for row in rows:
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter(
                    row.source, "missing_score", f"content key {key} grouped "
                    f"{len(groups)} times", row.id, row.system))

    def _merge(self, group: tuple, results: Mapping[str, list]) -> Iterator[Any]:
        rows, previous = group
        for row in rows:
            ok, record = merge_branch_results(row, results, self._branches)
            if not ok:
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, record)
                continue
            self.count("passed")
            if previous is not None:
                record[CARRIED_FIELD] = self._carried
                record[CHANGED_FIELD] = tuple(
                    c for c in self._compared if not _same(record[c], previous[c]))
            yield record


class JoinIncremental(beam.PTransform):
    """Joins `{groups: ..., branch: (content_key, ScoreResult), ...}` by content key;
    returns `scored` and `dead_letter` like `JoinScores`."""

    def __init__(self, carried_columns: Sequence[str], compared_columns: Sequence[str]):
        super().__init__()
        self._carried = tuple(carried_columns)
        self._compared = tuple(compared_columns)

    def expand(self, inputs):  # {groups, branch: ...} -> {scored, dead_letter}
        branches = tuple(sorted(name for name in inputs if name != GROUPS))
        merged = (dict(inputs)
                  | "GroupByContentKey" >> beam.CoGroupByKey()
                  | "MergeAndFanOut" >> beam.ParDo(MergeIncrementalFn(
                      branches, self._carried, self._compared)).with_outputs(
                      DEAD_LETTER, STATS_TAG, main="scored"))
        return {"scored": merged.scored, "dead_letter": merged[DEAD_LETTER]}


def carried_result(keyed: tuple[str, Mapping[str, float]], columns: Sequence[str]
                   ) -> tuple[str, ScoreResult]:
    """`(content_key, carried values)` -> `(content_key, ScoreResult)` of some columns, as
    the branch that would have computed them gives it."""
    key, values = keyed
    return key, ScoreResult({c: values[c] for c in columns})
