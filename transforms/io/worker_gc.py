"""The garbage collector of a process that runs our DoFns, set for throughput.

CPython collects its young generation every 700 container allocations by default, and
every tenth of those collections the middle one. A scoring worker allocates a handful of
containers per text of every row (parsed JSON, references, requests, records), and runs
about a tenth faster with the thresholds below (`qa-score --metrics judge`, 40,000 EVOUNA
rows in process: 16.4-18.2 s with the defaults, 14.7-14.8 s with these;
docs/decisions.md). Raising the thresholds only delays the collection of reference
cycles, which these stages do not make in numbers.
"""

from __future__ import annotations

import gc

# Container allocations between young collections; then collections between older ones.
THRESHOLDS = (100_000, 20, 100)

_tuned = False


def tune_gc() -> None:
    """Raises the collector's thresholds to `THRESHOLDS`, once per process. Leaves
    thresholds already at least as high, or a first threshold of 0 (no automatic
    collection), as they are, and never switches the collector on or off: one that is
    off keeps off, with the thresholds it will have when it is on again (the command
    line's in-process run switches it off until its first rows are read, after its
    first bundle has started: `progress.pause_collector_until_rows`)."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    current = gc.get_threshold()
    if current[0] and current[0] < THRESHOLDS[0]:
        gc.set_threshold(*(max(c, t) for c, t in zip(current, THRESHOLDS)))
