"""Counting every exit branch twice: as Beam counters and as data.

Beam counters show progress in the runner's UI, but their values are not available to
the pipeline itself (and are only best-effort on some runners). The counts that a run
reports in its own outputs (`stats.json`, the dataset card) therefore travel as data: a
`CountingDoFn` also tallies each bundle's counts and emits them, in `finish_bundle`, to a
`stats` output of `((namespace, name), n)` pairs that `SumStats` adds up.
"""

import time
from collections.abc import Iterable, Mapping, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

# s3_fixes: Beam's S3 client corrected wherever the project's DoFns run, also in worker
# processes that get no --beam_plugins (Dask's); beam_signatures: each function's
# signature worked out once; beam_option_views: each pipeline-option view made once.
# Beam has imported what they patch.
from transforms.io import (
    beam_option_views,  # noqa: F401 - applied on import
    beam_signatures,  # noqa: F401 - applied on import
    progress,
    s3_fixes,  # noqa: F401 - applied on import
)
from transforms.io.worker_gc import tune_gc

STATS_TAG = "stats"
# How often, at most, a DoFn's counts reach the progress tally (progress.py) mid-bundle.
REPORT_EVERY_S = 0.2

StatKey = tuple[str, str]

_GLOBAL_WINDOWS = (GlobalWindow(),)


def in_global_window(value) -> WindowedValue:
    """`value` in the global window, for output from `finish_bundle`. Same as
    `GlobalWindows.windowed_value`, which builds a new `GlobalWindow` (and parses its
    timestamp from a proto) on every call: too slow for one call per title."""
    return WindowedValue(value, MIN_TIMESTAMP, _GLOBAL_WINDOWS)


class CountingDoFn(beam.DoFn):
    """A DoFn whose counts go to Beam counters and to the `stats` tagged output.

    Its first bundle in a process sets the garbage collector for throughput
    (`worker_gc.tune_gc`). Subclasses call `self.count(name, n)`; `name` must be one of
    the names declared at construction (counters are created once, here): a name in
    `namespace`, or a whole `(namespace, name)` key for a count that belongs to another
    stage's namespace.
    Subclasses that override `start_bundle` or `finish_bundle` must call (and, for
    `finish_bundle`, yield from) this class's, the latter after their own last counts.
    """

    def __init__(self, namespace: str, names: Sequence[str | StatKey]):
        self._namespace = namespace
        self._keys: dict[str | StatKey, StatKey] = {
            name: name if isinstance(name, tuple) else (namespace, name) for name in names}
        self._counters = {name: Metrics.counter(*key) for name, key in self._keys.items()}
        self._progress_keys = {name: "/".join(key) for name, key in self._keys.items()}
        self._bundle_counts: dict[str | StatKey, int] = {}
        self._unreported: dict[str | StatKey, int] = {}  # counts not yet in the progress tally
        self._report_at = 0.0  # time.monotonic() after which count() reports them

    def stat_keys(self) -> list[StatKey]:
        """Every (namespace, name) this DoFn can count, for zero-filled reports."""
        return list(self._keys.values())

    def start_bundle(self):
        tune_gc()  # once per process: the collector set for throughput (worker_gc.py)
        self._bundle_counts = {}

    def count(self, name: str | StatKey, n: int = 1) -> None:
        # Tallied per bundle; Beam counters are incremented once per bundle, as the
        # per-element increment costs more than the filters it counts. The progress
        # tally (progress lines of local runs) gets the counts at most every
        # `REPORT_EVERY_S` and at the end of each bundle: its lock, taken per count,
        # cost a mining run more than some of the stages it counted.
        counts, unreported = self._bundle_counts, self._unreported
        counts[name] = counts.get(name, 0) + n
        unreported[name] = unreported.get(name, 0) + n
        if time.monotonic() >= self._report_at:
            self._report()

    def count_all(self, counts: Mapping[str | StatKey, int]) -> None:
        """`count(name, n)` for each (name, n) of `counts`, the clock read once."""
        bundle, unreported = self._bundle_counts, self._unreported
        for name, n in counts.items():
            bundle[name] = bundle.get(name, 0) + n
            unreported[name] = unreported.get(name, 0) + n
        if time.monotonic() >= self._report_at:
            self._report()

    def _report(self) -> None:
        unreported, self._unreported = self._unreported, {}
        for name, n in unreported.items():
            progress.add(self._progress_keys[name], n)
        self._report_at = time.monotonic() + REPORT_EVERY_S

    def finish_bundle(self):
        self._report()
        for name, n in self._bundle_counts.items():
            if not n:
                continue
            self._counters[name].inc(n)
            yield beam.pvalue.TaggedOutput(STATS_TAG, in_global_window((self._keys[name], n)))
        self._bundle_counts = {}
        progress.flush()


class HoldingDoFn(CountingDoFn):
    """A `CountingDoFn` that holds what it emits across a bundle's elements in
    `self._pending` (a dict), `self._held` of them, and emits them as `_drain` turns them
    into elements: from `process` through `_emit_when_full` once `max_pending` are held,
    and at the bundle's end (in the global window), before the counts. Subclasses add
    to `_pending` and `_held` and define `_drain(pending, held)`.

    Args:
        namespace, names: see `CountingDoFn`.
        max_pending: what is held before it is emitted (the subclass's unit).
    """

    def __init__(self, namespace: str, names: Sequence[str | StatKey], max_pending: int):
        super().__init__(namespace, names)
        if max_pending < 1:
            raise ValueError(f"max_pending must be positive, got {max_pending}")
        self._max_pending = max_pending
        self._pending: dict = {}
        self._held = 0

    def start_bundle(self):
        super().start_bundle()
        self._pending, self._held = {}, 0

    def _drain(self, pending: dict, held: int) -> Iterable:
        raise NotImplementedError

    def _hold_grouped(self, pairs: Iterable[tuple]) -> None:
        """Holds each (key, value) of `pairs` in `_pending` as {key: [values]}, one held
        per value."""
        pending, held = self._pending, 0
        for key, value in pairs:
            values = pending.get(key)
            if values is None:
                pending[key] = [value]
            else:
                values.append(value)
            held += 1
        self._held += held

    def _flush(self) -> Iterable:
        pending, held = self._pending, self._held
        self._pending, self._held = {}, 0
        return self._drain(pending, held) if held else ()

    def _emit_when_full(self) -> Iterable:
        return self._flush() if self._held >= self._max_pending else ()

    def finish_bundle(self):
        for item in self._flush():
            yield in_global_window(item)
        yield from super().finish_bundle()


class CountedParDo(beam.PTransform):
    """A `CountingDoFn` as a stage: input -> {main: its main output, "stats": its counts}.

    Args:
        fn: the CountingDoFn.
        step: the label of its ParDo.
        main: the key of its main output.
    """

    def __init__(self, fn: CountingDoFn, step: str, main: str):
        super().__init__()
        self._fn = fn
        self._step = step
        self._main = main

    def stat_keys(self) -> list[StatKey]:
        return self._fn.stat_keys()

    def expand(self, pcoll):
        outputs = pcoll | self._step >> beam.ParDo(self._fn).with_outputs(
            STATS_TAG, main=self._main)
        return {self._main: outputs[self._main], "stats": outputs[STATS_TAG]}


class SumStats(beam.PTransform):
    """`((namespace, name), n)` pairs -> one `{"namespace/name": total}` dict.

    Args:
        keys: every (namespace, name) that may be counted (the `stat_keys()` of the
            pipeline's counting DoFns and composites): each appears in the dict, 0 when
            nothing counted it. Filled in here rather than by a `Create` of zeros per
            transform, each of which was a stage of its own.
    """

    def __init__(self, keys: Iterable[StatKey] = ()):
        super().__init__()
        self._keys = tuple(keys)

    def expand(self, stats):
        zeros = dict.fromkeys(self._keys, 0)
        return (
            stats
            | "SumPerKey" >> beam.CombinePerKey(sum)
            | "CollectStats" >> beam.combiners.ToDict()
            | "KeyByPath" >> beam.Map(
                lambda d: {f"{ns}/{name}": n for (ns, name), n in {**zeros, **d}.items()})
        )
