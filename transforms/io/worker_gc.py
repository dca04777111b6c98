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
    """Raises the collector's thresholds to `THRESHOLDS`, once per process. Leaves a
    collector that is switched off, or already set at least as high, as it is."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    current = gc.get_threshold()
    if gc.isenabled() and current[0] and current[0] < THRESHOLDS[0]:
        gc.set_threshold(*(max(c, t) for c, t in zip(current, THRESHOLDS)))
