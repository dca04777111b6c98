"""Per-system summary: counts in/scored/dead-lettered and the mean of every metric.

`SummarizeScores` is one `CombineGlobally` over the scored and dead-lettered records, so it
scales with the number of systems, not rows; each batch's records are summed where they
are scored (`add_batch`, column by column). Sums are exact (every finite double is an
integer multiple of 2**-1074: a sum is one integer, `ExactSum`), so every runner and
every bundling gives the same means to the last bit, those of `math.fsum`.

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

import collections
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from transforms.io.cli import RunAlert

_SCORED = "scored"
_DEAD = "dead"


# A finite double is m * 2**e with |m| in [0.5, 1): int(m * 2**53) * 2**(e - 53), an
# integer multiple of 2**-(_SCALE) once shifted by e + _SCALE - 53 >= 1.
_SCALE = 1127


def _scaled(x: float) -> int:
    m, e = math.frexp(x)
    return int(m * (1 << 53)) << (e + _SCALE - 53)


def _new_sum() -> list:
    """An exact sum: [the finite values' sum times 2**_SCALE, the other values]."""
    return [0, []]


def _add_value(total: list, x: float) -> None:
    if math.isfinite(x):
        total[0] += _scaled(x)
    else:
        total[1].append(x)


def _add_values(total: list, values: np.ndarray) -> None:
    """Adds an array of values (no NaN), grouped by binary exponent."""
    finite = np.isfinite(values)
    if not finite.all():
        total[1].extend(values[~finite].tolist())
        values = values[finite]
    mantissas, exponents = np.frexp(values)
    mantissas = (mantissas * float(1 << 53)).astype(np.int64)
    for e in np.unique(exponents).tolist():
        at = mantissas[exponents == e]
        part = (int(at.sum()) if len(at) < 1024  # 2**53 * 1023 < 2**63
                else sum(int(x) for x in at.tolist()))
        total[0] += part << (e + _SCALE - 53)


def _merge_sum(into: list, other: list) -> None:
    into[0] += other[0]
    into[1].extend(other[1])


def _value_of(total: list) -> float:
    value = total[0] / (1 << _SCALE)  # int / int: correctly rounded, as math.fsum
    return math.fsum([value, *total[1]]) if total[1] else value


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
    for column, total in other["sums"].items():
        _merge_sum(into["sums"].setdefault(column, _new_sum()), total)
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
            _add_value(block["sums"].setdefault(column, _new_sum()), value)
            block["counts"][column] = block["counts"].get(column, 0) + 1
        return accumulator

    def add_batch(self, accumulator: dict, records: Sequence[Mapping[str, Any]]) -> dict:
        """Adds a batch of scored records, column by column."""
        by_system: dict[str | None, list] = {}
        for record in records:
            by_system.setdefault(record.get("system"), []).append(record)
        for system, rows in by_system.items():
            block = accumulator.setdefault(system, _new_block())
            block["scored"] += len(rows)
            block["human_missing"] += sum(r.get("human") is None for r in rows)
            _add_counts(block["carried"], collections.Counter(
                c for r in rows for c in r.get("_carried", ())))
            _add_counts(block["changed"], collections.Counter(
                c for r in rows for c in r.get("_changed", ())))
            for column in self._columns:
                values = np.array([r.get(column) for r in rows], dtype=np.float64)
                values = values[~np.isnan(values)]
                if len(values):
                    _add_values(block["sums"].setdefault(column, _new_sum()), values)
                    block["counts"][column] = block["counts"].get(column, 0) + len(values)
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
        mean = _value_of(block["sums"][column]) / count if count else None
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

        def dead_partial(record: Mapping[str, Any]) -> dict:
            return fn.add_input(fn.create_accumulator(), summary_event(record, columns))

        return (
            (scored | "SumBatches" >> beam.Map(
                lambda batch: fn.add_batch(fn.create_accumulator(), batch)),
             dead | "SumDeadLetters" >> beam.Map(dead_partial))
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
