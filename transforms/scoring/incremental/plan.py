"""Incremental runs (`--previous_run PREFIX`): carry scores over from an earlier complete
run, compute only what changed, and write a complete snapshot like any run.

Every row has a content key (`rows.content_key`: a hash of the prediction, the references
in order, the question and the negative references). A metric's values are carried from
the previous run for a row whose content key the previous run scored, when the metric's
signature is unchanged (model, revision, options, implementation version) and its values
do not depend on this run's corpus (`plan_carry`); everything else is computed. Which
metrics carry is decided once, on the launcher, from the two runs' signatures
(`CarryPlan`); which rows carry is decided batch by batch in the one row flow every run
has:

    previous scores file -> ReadPreviousShards (previous_shards.py): one table of
        content keys and values per shard of content key
    RowBatches -> AttachPrevious (carry.py): each batch looks its rows' keys up in the
        tables of their shards (a side input); `old` rows (the previous run scored their
        content) and their previous values travel with the batch
    -> the model metrics and the in-process ones, as in a full run: the recomputed
        metrics on each distinct content of the batch, the carried ones on new rows
        only; an old row's record gets the previous values, with which columns were
        carried and which recomputed ones changed (for summary.json)

Rows absent from the input are absent from the snapshot: the previous run is only read.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.metrics.base import Metric
from transforms.scoring.incremental.carry import CarrySpec
from transforms.scoring.incremental.previous_run import PreviousRun
from transforms.scoring.reading.rows import CONTENT_KEY_VERSION


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

    def spec(self) -> CarrySpec:
        """What the scoring steps need of the plan (carry.py)."""
        return CarrySpec(self.carried_columns, self.compared)

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
