"""Vectorised bootstrap of the report's agreement statistics (numpy only, no Beam).

A bootstrap resample draws n rows with replacement; it is represented by the count of
each row in it (a weight vector). Every resample of a scope uses the same weights for all
metrics, so metric differences are paired. Statistics are computed from weights, never
from materialised resamples:

- each metric's kept rows (metric value not NaN) are grouped into *cells*, the distinct
  (metric value, human value) pairs; a resample's cell weights are one gather + segmented
  sum of its row weights (`np.add.reduceat`), O(n) per resample (bootstrap_cells.py);
- Pearson r: weighted moments over the cells;
- Spearman rho: Pearson r of the weighted mid-ranks (ties averaged, as scipy's
  `rankdata`), ranks from cumulative sums of the group weights;
- Kendall tau-b: pairs counted level by level over the side with fewer distinct values
  (cumulative sums over the other side), O(distinct values x levels) per resample, used
  when one side has at most `KENDALL_MAX_LEVELS` distinct values or the product of both
  sides' counts is at most `KENDALL_MAX_GRID`; otherwise explicit resamples with scipy for
  n <= `KENDALL_LOOP_MAX_N`, else no interval (stated in the report);
- AUROC (binary human values): for each positive, the weight of the negatives below it
  plus half of those tied with it (ties averaged, as `sklearn.metrics.roc_auc_score`);
  with binary human values Kendall's pair count follows from it (`kendall_from_auroc`).

With all weights 1 these give exactly scipy's / scikit-learn's values (tests/scoring/
test_bootstrap.py checks that). The resamples are processed in chunks of at most
`CHUNK_ELEMENTS` row weights, so memory stays bounded for a million rows; the chunks'
statistics are computed on up to `MAX_THREADS` threads (`bootstrap_scopes`), the resamples
drawn in one thread per scope's generator, so the values do not depend on the threads.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from transforms.scoring.report.bootstrap_cells import (
    KENDALL_MAX_LEVELS,
    Cells,
    cell_weights,
    cells,
    group_x,
    group_y,
    row_weights,
)

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
KENDALL_MAX_GRID = 2_000_000
KENDALL_LOOP_MAX_N = 5000
CHUNK_ELEMENTS = 4_000_000
MAX_THREADS = 4
STATS = ("pearson", "spearman", "kendall", "auroc")


def _total(a: np.ndarray) -> np.ndarray:
    """Column sums of (rows, resamples) counts, or of halves of counts' products: one
    matrix-vector product, about ten times faster than `sum(axis=0)` on the tall arrays
    here (measured: 1.3 ms against 14.7 ms for 1,000,000 x 4). The values are multiples
    of 1/2 whose sums stay below 2^52 (they grow as the scope's rows squared: below about
    90 million rows), so every order of adding them gives exactly the same sum; beyond,
    the sums are as accurate, only their last bits may differ from numpy's order."""
    return np.ones(len(a)) @ a


def _cumsum(weights: np.ndarray) -> np.ndarray:
    """Cumulative sums down the rows of (rows, resamples) counts (whole numbers: the
    weights here are always resampled row counts), computed in int32 (a
    resample's counts add up to its scope's rows, below 2^31; `bootstrap_scopes` checks)
    and exact: two to four times faster than numpy's float64 cumsum across a tall array
    (measured: 22 ms against 52 ms for 200,000 x 20)."""
    return np.cumsum(weights, axis=0, dtype=np.int32).astype(np.float64)


def _r(n: np.ndarray, sx: np.ndarray, sy: np.ndarray, sxx: np.ndarray, syy: np.ndarray,
       sxy: np.ndarray) -> np.ndarray:
    """Pearson r from weighted sums; NaN for fewer than 3 rows or a constant side."""
    with np.errstate(invalid="ignore", divide="ignore"):
        vx = sxx - sx * sx / n
        vy = syy - sy * sy / n
        r = (sxy - sx * sy / n) / np.sqrt(vx * vy)
    # Relative tolerance: a constant resample leaves only rounding in vx / vy.
    degenerate = (n < 3) | (vx <= 1e-10 * (sxx + 1e-300)) | (vy <= 1e-10 * (syy + 1e-300))
    r[degenerate] = math.nan
    return np.clip(r, -1.0, 1.0)


def weighted_pearson(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r per resample (column of w) of the cells' values x, y: one matrix product
    of the weights with [1, x, y, x^2, y^2, xy] (x, y centred on their cell means)."""
    x = x - x.mean()
    y = y - y.mean()
    sums = np.stack([np.ones_like(x), x, y, x * x, y * y, x * y]) @ w
    return _r(*sums)


def _midranks(group_weights: np.ndarray) -> np.ndarray:
    """Mid-rank of each group (1-based, ties averaged) given the weights of sorted groups."""
    return _cumsum(group_weights) - (group_weights - 1.0) / 2.0


def weighted_spearman(w: np.ndarray, c: Cells, wx: np.ndarray, wy: np.ndarray
                      ) -> np.ndarray:
    """Spearman rho per resample: Pearson r of the weighted mid-ranks of both sides (`wx`,
    `wy`: `group_x`, `group_y` of `w`). The sum of the ranks is N(N+1)/2 on both sides;
    only the cross term needs the cells."""
    rank_x, rank_y = _midranks(wx), _midranks(wy)
    n = _total(wx)
    total = n * (n + 1) / 2
    cross = (group_x(w * rank_y[c.gy], c) * rank_x).sum(axis=0)
    return _r(n, total, total, (wx * rank_x * rank_x).sum(axis=0),
              (wy * rank_y * rank_y).sum(axis=0), cross)


def kendall_by_levels(c: Cells) -> bool:
    """Whether `weighted_kendall` counts pairs level by level for these cells."""
    return min(c.kx, c.ky) <= KENDALL_MAX_LEVELS or c.kx * c.ky <= KENDALL_MAX_GRID


def weighted_kendall(w: np.ndarray, c: Cells, wx: np.ndarray, wy: np.ndarray
                     ) -> np.ndarray | None:
    """Kendall tau-b per resample (`wx`, `wy`: `group_x`, `group_y` of `w`), or None when
    both sides have too many distinct values."""
    if not kendall_by_levels(c):
        return None
    if c.ky <= c.kx:
        levels, level_k, other, other_k = c.gy, c.ky, c.gx, c.kx
    else:
        levels, level_k, other, other_k = c.gx, c.kx, c.gy, c.ky
    count = w.shape[1]
    prior = np.zeros((other_k, count))
    s = np.zeros(count)
    for level in range(level_k):  # every level holds a cell: they are the distinct values
        members = np.flatnonzero(levels == level)
        at = other[members]  # distinct: one cell per (level, other value)
        cum = _cumsum(prior)
        # below - above = (cum - prior) - (total - cum) at the members' positions
        s += _total(w[members] * (2 * cum[at] - prior[at] - cum[-1:]))
        prior[at] += w[members]
    return _tau_b(s, wx, wy)


def kendall_from_auroc(auc: np.ndarray, wx: np.ndarray, wy: np.ndarray) -> np.ndarray:
    """Kendall tau-b for human values 0/1 from the AUROC: the pair count S (concordant
    minus discordant) is n_pos * n_neg * (2 AUROC - 1), ties in the metric counting 0 in
    S and 1/2 in the AUROC."""
    n_neg, n_pos = wy[0], wy[1]
    return _tau_b(n_pos * n_neg * (2 * auc - 1), wx, wy)


def _tau_b(s: np.ndarray, wx: np.ndarray, wy: np.ndarray) -> np.ndarray:
    total = _total(wx)
    pairs = total * (total - 1) / 2
    untied_x = pairs - _total(wx * (wx - 1) / 2)
    untied_y = pairs - _total(wy * (wy - 1) / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = s / np.sqrt(untied_x * untied_y)
    tau[(untied_x <= 0) | (untied_y <= 0) | (total < 3)] = math.nan
    return np.clip(tau, -1.0, 1.0)


def _kendall_loop(rows: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall tau-b of explicit resamples ((n, resamples) row counts -> repeated rows),
    with scipy."""
    import warnings

    from scipy.stats import kendalltau

    out = np.full(rows.shape[1], math.nan)
    for b in range(rows.shape[1]):
        index = np.repeat(np.arange(rows.shape[0]), rows[:, b].astype(np.int64))
        if len(index) < 3 or np.ptp(x[index]) == 0 or np.ptp(y[index]) == 0:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[b] = kendalltau(x[index], y[index])[0]
    return out


def weighted_auroc(w: np.ndarray, c: Cells, wx: np.ndarray) -> np.ndarray:
    """AUROC per resample for human values 0/1 (cells with y == 1 are the positives; `wx`:
    `group_x` of `w`)."""
    neg = group_x(w * (c.y != 1)[:, None], c)
    pos = wx - neg
    below = _cumsum(neg) - neg
    n_pos, n_neg = _total(pos), _total(neg)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = _total(pos * (below + 0.5 * neg)) / (n_pos * n_neg)
    auc[(n_pos == 0) | (n_neg == 0)] = math.nan
    return auc


@dataclasses.dataclass(frozen=True)
class Bootstrap:
    """Per statistic, a (resamples, metrics) array of resampled values (NaN: undefined).

    `kendall_missing` lists the metric indices without a Kendall bootstrap (too many
    distinct values on both sides for `kendall_by_levels` and more than
    KENDALL_LOOP_MAX_N rows).
    """

    values: dict[str, np.ndarray]
    kendall_missing: tuple[int, ...]


def bootstrap(human: np.ndarray, values: np.ndarray, binary: bool,
              resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
              threads: int | None = None) -> Bootstrap:
    """Resamples the rows `resamples` times and recomputes every statistic of every metric.

    Args:
        human: (n,) human values.
        values: (n, m) metric values, NaN where a metric has no value (left out of that
            metric's statistics, as in the point estimates).
        binary: whether the human values are 0/1 (AUROC is computed only then).
        resamples: the number of resamples.
        seed: the generator's seed (numpy PCG64).
        threads: threads computing chunks at once (None: `default_threads()`); the
            values do not depend on it.

    Returns:
        The Bootstrap.
    """
    return bootstrap_scopes([Resampling(human, values, binary, seed)], resamples, threads)[0]


class Resampling(NamedTuple):
    """One scope's inputs to `bootstrap_scopes` (see `bootstrap` for the fields)."""

    human: np.ndarray
    values: np.ndarray
    binary: bool
    seed: int


def default_threads() -> int:
    """Threads for the resamples' chunks: the cores this process may use, at most
    MAX_THREADS (each chunk in flight holds up to CHUNK_ELEMENTS row weights and a few
    arrays of its size, so memory grows with the threads)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cores))


def bootstrap_scopes(scopes: Sequence[Resampling], resamples: int = DEFAULT_RESAMPLES,
                     threads: int | None = None) -> list[Bootstrap]:
    """`bootstrap` of several scopes, their chunks computed on `threads` threads at once.

    Each scope draws its resamples from its own generator in the calling thread, chunk
    after chunk, exactly as one thread would, so the values are the same for any number
    of threads; the threads compute the statistics of the drawn chunks (numpy releases
    the GIL in its array loops). At most `threads` chunks are held at once, the one being
    drawn included (measured at 200,000 rows: about 180 MiB each). The Kendall loop with
    scipy (small scopes only) runs in the calling thread: it silences scipy's warnings
    with `warnings.catch_warnings`, which is not safe to enter from several threads at
    once. The BLAS limit is entered once here, around the pool: OpenBLAS built with
    pthreads (numpy's wheels) holds it for the process; a build whose limit is per thread
    would only run the small products with more threads (the values are the same).
    """
    threads = default_threads() if threads is None else max(1, threads)
    if any(len(scope.human) >= 2**31 for scope in scopes):
        raise ValueError("a report scope of 2^31 rows or more: its resampled counts "
                         "would not fit the int32 cumulative sums")
    results = []
    with _one_blas_thread(), concurrent.futures.ThreadPoolExecutor(
            threads, thread_name_prefix="bootstrap") as pool:
        in_flight: collections.deque = collections.deque()
        for scope in scopes:  # cells made as a scope starts (the last one's chunks may hold its)
            state = _State.of(scope, resamples)
            results.append(Bootstrap(state.out, state.missing))
            for start in range(0, resamples if state.n else 0, state.chunk):
                count = min(state.chunk, resamples - start)
                rows = row_weights(state.rng, state.n, count)
                span = slice(start, start + count)
                if threads == 1 or state.loops:
                    state.chunk_statistics(span, rows)
                    continue
                in_flight.append(pool.submit(state.chunk_statistics, span, rows))
                while len(in_flight) >= threads:
                    in_flight.popleft().result()
        for future in in_flight:
            future.result()
    return results


def _one_blas_thread() -> Any:
    """The products here are small (6 x cells x resamples) and memory-bound: BLAS threads
    only contend, badly so on a shared machine (measured: 0.9 s instead of 9 ms)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


@dataclasses.dataclass
class _State:
    """One scope's resampling: its cells, its generator and the arrays it fills."""

    scope: Resampling
    per_metric: list[Cells]
    missing: tuple[int, ...]
    looped: tuple[int, ...]  # the metrics whose Kendall is the loop with scipy
    rng: np.random.Generator
    chunk: int
    out: dict[str, np.ndarray]

    @classmethod
    def of(cls, scope: Resampling, resamples: int) -> _State:
        n, m = scope.values.shape
        out = {k: np.full((resamples, m), math.nan) for k in STATS}
        per_metric = [cells(scope.values[:, j], scope.human) for j in range(m)] if n else []
        missing = tuple(j for j, c in enumerate(per_metric)
                        if not kendall_by_levels(c) and len(c.order) > KENDALL_LOOP_MAX_N)
        # (two human values, binary or not, are always counted by levels)
        looped = tuple(j for j, c in enumerate(per_metric)
                       if len(c.order) and not kendall_by_levels(c) and j not in missing)
        return cls(scope, per_metric, missing, looped, np.random.default_rng(scope.seed),
                   max(1, min(resamples, CHUNK_ELEMENTS // max(n, 1))), out)

    @property
    def n(self) -> int:
        return len(self.scope.human)

    @property
    def loops(self) -> bool:
        """Whether some metric's chunks run the scipy loop (kept in the calling thread)."""
        return bool(self.looped)

    def chunk_statistics(self, span: slice, rows: np.ndarray) -> None:
        """Every statistic of every metric for the resamples `span` ((n, count) row
        counts), written into `out` (each chunk its own rows of it)."""
        out, human, values = self.out, self.scope.human, self.scope.values
        for j, c in enumerate(self.per_metric):
            if not len(c.order):
                continue
            w = cell_weights(rows, c)
            wx, wy = group_x(w, c), group_y(w, c)
            out["pearson"][span, j] = weighted_pearson(w, c.x, c.y)
            out["spearman"][span, j] = weighted_spearman(w, c, wx, wy)
            if self.scope.binary and c.ky == 2:  # both classes: Kendall from the AUROC's count
                auc = weighted_auroc(w, c, wx)
                out["auroc"][span, j] = auc
                out["kendall"][span, j] = kendall_from_auroc(np.nan_to_num(auc), wx, wy)
                continue
            tau = weighted_kendall(w, c, wx, wy)
            if tau is not None:
                out["kendall"][span, j] = tau
            elif j in self.looped:
                out["kendall"][span, j] = _kendall_loop(rows[c.order], values[c.order, j],
                                                        human[c.order])
            # a binary scope's metric whose kept rows hold one class has no AUROC: NaN


def interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of the defined resampled values; None when fewer than half
    of the resamples give a value (e.g. a metric constant in most resamples)."""
    defined = samples[~np.isnan(samples)]
    if not len(samples) or len(defined) < len(samples) / 2:
        return None
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(defined, [tail, 100 - tail])
    return float(low), float(high)


def paired_p_value(top: np.ndarray, other: np.ndarray) -> float:
    """One-sided paired bootstrap p-value that `top` beats `other` on |statistic|.

    p = (1 + resamples where |top| <= |other|) / (1 + resamples where both are defined);
    the +1 keeps p above 0 with a finite number of resamples.
    """
    both = ~np.isnan(top) & ~np.isnan(other)
    if not both.any():
        return math.nan
    losses = int((np.abs(top[both]) <= np.abs(other[both])).sum())
    return (1 + losses) / (1 + int(both.sum()))
