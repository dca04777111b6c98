"""Per-system summary: counts in/scored/dead-lettered and the mean of every metric.

`SummarizeScores` is one `CombineGlobally` over the scored and dead-lettered records, so it
scales with the number of systems, not rows. Sums are exact (Shewchuk partials, as
`math.fsum`), so every runner and every bundling gives the same means to the last bit.

The summary dict (written as PREFIX.summary.json):

    {"overall": BLOCK, "systems": {name: BLOCK, ...}, "without_system": BLOCK | absent}
    BLOCK = {"in", "scored", "dead_lettered", "dead_lettered_by_reason": {reason: n},
             "human_missing" (only when a human column is read), "metrics": {column:
             {"count", "mean"}}}

In an incremental run (`--previous_run`) every metric's entry also says `carried` (rows
whose value came from the previous run), `computed` (the other scored rows), `changed`
(rows the previous run scored whose recomputed value differs from it) and
`previous_mean` (the previous run's mean in the same block, null when it had none).

`human_missing` counts the scored rows without a human value (empty, "n/a", null, NaN...):
they are scored, and left out of the agreement statistics of the report.

`in == scored + dead_lettered` in every block, and `overall` is the sum of `systems` and
`without_system` (rows whose system is unknown: a null system, or a line too broken to read
one from; the block is left out when no row names a system, as `overall` says it all).
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam

from transforms.io.cli import RunAlert

_SCORED = "scored"
_DEAD = "dead"


def _add_exact(partials: list[float], x: float) -> None:
    """Adds x to Shewchuk partials in place (the algorithm behind math.fsum)."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


def _new_block() -> dict[str, Any]:
    return {"scored": 0, "human_missing": 0, "dead": {}, "sums": {}, "counts": {},
            "carried": {}, "changed": {}}


def _add_counts(into: dict[str, int], other: Mapping[str, int]) -> None:
    for key, n in other.items():
        into[key] = into.get(key, 0) + n


def _merge_block(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    into["scored"] += other["scored"]
    into["human_missing"] += other["human_missing"]
    for reason, n in other["dead"].items():
        into["dead"][reason] = into["dead"].get(reason, 0) + n
    for column, partials in other["sums"].items():
        mine = into["sums"].setdefault(column, [])
        for x in partials:
            _add_exact(mine, x)
    for field in ("counts", "carried", "changed"):
        _add_counts(into[field], other[field])


def summary_event(record: Mapping[str, Any], metric_columns: Sequence[str]) -> tuple:
    """A scored or dead-letter record reduced to what the summary needs."""
    if "reason" in record:
        return _DEAD, record.get("system"), record["reason"]
    return _SCORED, record.get("system"), (tuple(record.get(c) for c in metric_columns),
                                           record.get("human") is None,
                                           tuple(record.get("_carried", ())),
                                           tuple(record.get("_changed", ())))


class SummaryCombineFn(beam.CombineFn):
    """Combines summary events into per-system blocks (see the module docstring).

    Args:
        metric_columns: the metric columns, in output order.
        with_human: a human column is read (the blocks then say `human_missing`).
        previous_means: an incremental run's previous means (`PreviousRun.means`); the
            metric entries then say carried / computed / changed / previous_mean.
    """

    def __init__(self, metric_columns: Sequence[str], with_human: bool = False,
                 previous_means: Mapping[str, Mapping[str, float | None]] | None = None
                 ) -> None:
        self._columns = tuple(metric_columns)
        self._with_human = with_human
        self._previous_means = previous_means

    def create_accumulator(self) -> dict[str | None, dict[str, Any]]:
        return {}

    def add_input(self, accumulator: dict, event: tuple) -> dict:
        kind, system, payload = event
        block = accumulator.setdefault(system, _new_block())
        if kind == _DEAD:
            block["dead"][payload] = block["dead"].get(payload, 0) + 1
            return accumulator
        values, human_missing, carried, changed = payload
        block["scored"] += 1
        block["human_missing"] += human_missing
        _add_counts(block["carried"], dict.fromkeys(carried, 1))
        _add_counts(block["changed"], dict.fromkeys(changed, 1))
        for column, value in zip(self._columns, values, strict=True):
            if value is None or math.isnan(value):
                continue
            _add_exact(block["sums"].setdefault(column, []), value)
            block["counts"][column] = block["counts"].get(column, 0) + 1
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict]) -> dict:
        merged: dict[str | None, dict[str, Any]] = {}
        for accumulator in accumulators:
            for system, block in accumulator.items():
                _merge_block(merged.setdefault(system, _new_block()), block)
        return merged

    def extract_output(self, accumulator: dict) -> dict[str, Any]:
        return summarize_blocks(accumulator, self._columns, self._with_human,
                                self._previous_means)


class PartialsCombineFn(beam.CombineFn):
    """Combines the accumulators of a `SummaryCombineFn` (partial summaries) into its
    summary."""

    def __init__(self, fn: SummaryCombineFn) -> None:
        self._fn = fn

    def create_accumulator(self) -> dict:
        return self._fn.create_accumulator()

    def add_input(self, accumulator: dict, partial: dict) -> dict:
        return self._fn.merge_accumulators([accumulator, partial])

    def merge_accumulators(self, accumulators: Iterable[dict]) -> dict:
        return self._fn.merge_accumulators(accumulators)

    def extract_output(self, accumulator: dict) -> dict[str, Any]:
        return self._fn.extract_output(accumulator)


def _render_block(block: Mapping[str, Any], columns: Sequence[str], with_human: bool,
                  previous_means: Mapping[str, float | None] | None = None) -> dict[str, Any]:
    dead = sum(block["dead"].values())
    metrics = {}
    for column in columns:
        count = block["counts"].get(column, 0)
        mean = math.fsum(block["sums"][column]) / count if count else None
        metrics[column] = {"count": count, "mean": mean}
        if previous_means is not None:
            carried = block["carried"].get(column, 0)
            metrics[column].update(
                carried=carried, computed=block["scored"] - carried,
                changed=block["changed"].get(column, 0),
                previous_mean=previous_means.get(column))
    rendered = {"in": block["scored"] + dead, "scored": block["scored"], "dead_lettered": dead,
                "dead_lettered_by_reason": dict(sorted(block["dead"].items()))}
    if with_human:
        rendered["human_missing"] = block["human_missing"]
    return {**rendered, "metrics": metrics}


def summarize_blocks(blocks: Mapping[str | None, Mapping[str, Any]],
                     columns: Sequence[str], with_human: bool = False,
                     previous_means: Mapping[str, Mapping[str, float | None]] | None = None
                     ) -> dict[str, Any]:
    """Turns per-system accumulator blocks into the summary dict.

    Args:
        blocks: system (None: unknown) -> accumulator block.
        columns: the metric columns, in output order.
        with_human: a human column is read: every block says `human_missing`.
        previous_means: block name ("overall", "system:<name>", "without_system") ->
            column -> the previous run's mean, in an incremental run; else None.

    Returns:
        The summary dict described in the module docstring.
    """
    overall = _new_block()
    for block in blocks.values():
        _merge_block(overall, block)
    def previous(name: str) -> Mapping[str, float | None] | None:
        return None if previous_means is None else previous_means.get(name, {})

    summary: dict[str, Any] = {
        "overall": _render_block(overall, columns, with_human, previous("overall")),
        "systems": {system: _render_block(blocks[system], columns, with_human,
                                          previous(f"system:{system}"))
                    for system in sorted(s for s in blocks if s is not None)},
    }
    if None in blocks and summary["systems"]:
        summary["without_system"] = _render_block(blocks[None], columns, with_human,
                                                  previous("without_system"))
    return summary


class SummarizeScores(beam.PTransform):
    """(lists of scored records, one per batch of rows scored together; dead-letter
    records) -> one summary dict (`with_human`: a human column is read, so the blocks
    count `human_missing`)."""

    def __init__(self, metric_columns: Sequence[str], with_human: bool = False,
                 previous_means: Mapping[str, Mapping[str, float | None]] | None = None
                 ) -> None:
        super().__init__()
        self._columns = tuple(metric_columns)
        self._with_human = with_human
        self._previous_means = previous_means

    def expand(self, records) -> beam.PCollection:  # (scored lists, dead-letter records)
        fn = SummaryCombineFn(self._columns, self._with_human, self._previous_means)
        # each list is summed where it is scored, so that one small partial per batch,
        # not one element per row, meets the dead letters
        scored, dead = records
        columns = self._columns

        def partial(batch: Sequence[Mapping[str, Any]]) -> dict:
            accumulator = fn.create_accumulator()
            for record in batch:
                fn.add_input(accumulator, summary_event(record, columns))
            return accumulator

        return (
            (scored | "SumBatches" >> beam.Map(partial),
             dead | "SumDeadLetters" >> beam.Map(lambda record: partial([record])))
            | "MergePartials" >> beam.Flatten()
            | "CombineSummary" >> beam.CombineGlobally(PartialsCombineFn(fn)))


class DeadLetterAlert(RunAlert):
    """A run wrote its outputs but dead-lettered more rows than `--max_dead_letter_fraction`
    allows (the command line exits with status 3)."""


def dead_letter_alert(summary: Mapping[str, Any], max_fraction: float | None,
                      where: str = "") -> str | None:
    """The one-line alert when more than `max_fraction` of the rows read were
    dead-lettered (None when within it, or no limit). A run that read no row at all is
    alerted on too, as nothing was scored."""
    if max_fraction is None:
        return None
    overall = summary["overall"]
    rows, dead = overall["in"], overall["dead_lettered"]
    if rows == 0:
        return f"no rows were read{where}"
    if dead / rows <= max_fraction:
        return None
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(
        overall.get("dead_lettered_by_reason", {}).items(), key=lambda kv: -kv[1]))
    return (f"{dead} of {rows} rows ({dead / rows:.2%}) were dead-lettered{where}, more "
            f"than --max_dead_letter_fraction {max_fraction:g} allows ({reasons})")
