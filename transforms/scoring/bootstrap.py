"""Vectorised bootstrap of the report's agreement statistics (numpy only, no Beam).

A bootstrap resample draws n rows with replacement; it is represented by the count of
each row in it (a weight vector). Every resample of a scope uses the same weights for all
metrics, so metric differences are paired. Statistics are computed from weights, never
from materialised resamples:

- each metric's kept rows (metric value not NaN) are grouped into *cells*, the distinct
  (metric value, human value) pairs; a resample's cell weights are one gather + segmented
  sum of its row weights (`np.add.reduceat`), O(n) per resample;
- Pearson r: weighted moments over the cells;
- Spearman rho: Pearson r of the weighted mid-ranks (ties averaged, as scipy's
  `rankdata`), ranks from cumulative sums of the group weights;
- Kendall tau-b: pairs counted level by level over the side with fewer distinct values
  (cumulative sums over the other side), O(distinct values x levels) per resample, used
  when one side has at most `KENDALL_MAX_LEVELS` distinct values or the product of both
  sides' counts is at most `KENDALL_MAX_GRID`; otherwise explicit resamples with scipy for
  n <= `KENDALL_LOOP_MAX_N`, else no interval (stated in the report);
- AUROC (binary human values): for each positive, the weight of the negatives below it
  plus half of those tied with it (ties averaged, as `sklearn.metrics.roc_auc_score`).

With all weights 1 these give exactly scipy's / scikit-learn's values (tests/scoring/
test_bootstrap.py checks that). The resamples are processed in chunks of at most
`CHUNK_ELEMENTS` row weights, so memory stays bounded for a million rows.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
KENDALL_MAX_LEVELS = 64
KENDALL_MAX_GRID = 2_000_000
KENDALL_LOOP_MAX_N = 5000
CHUNK_ELEMENTS = 4_000_000
STATS = ("pearson", "spearman", "kendall", "auroc")


@dataclasses.dataclass(frozen=True)
class Cells:
    """One metric's kept rows grouped by distinct (metric value, human value).

    Attributes:
        order: row indices (into the scope's rows), sorted by cell.
        starts: where each cell starts in `order`.
        x, y: each cell's metric and human value.
        gx, gy: each cell's index among the distinct metric / human values (sorted).
        kx, ky: the number of distinct metric / human values.
    """

    order: np.ndarray
    starts: np.ndarray
    x: np.ndarray
    y: np.ndarray
    gx: np.ndarray
    gy: np.ndarray
    kx: int
    ky: int


def cells(values: np.ndarray, human: np.ndarray) -> Cells:
    """Groups the rows where `values` is not NaN into (value, human) cells."""
    keep = np.flatnonzero(~np.isnan(values))
    x, y = values[keep], human[keep]
    ux, gx_rows = np.unique(x, return_inverse=True)
    uy, gy_rows = np.unique(y, return_inverse=True)
    code = gx_rows.astype(np.int64) * max(len(uy), 1) + gy_rows
    order = np.argsort(code, kind="stable")
    sorted_code = code[order]
    starts = (np.flatnonzero(np.r_[True, sorted_code[1:] != sorted_code[:-1]])
              if len(sorted_code) else np.zeros(0, dtype=np.int64))
    cell_code = sorted_code[starts]
    gx, gy = cell_code // max(len(uy), 1), cell_code % max(len(uy), 1)
    return Cells(keep[order], starts, ux[gx] if len(ux) else ux, uy[gy] if len(uy) else uy,
                 gx, gy, len(ux), len(uy))


def row_weights(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    """`count` bootstrap resamples of n rows as (count, n) float64 row counts."""
    draws = rng.integers(0, n, size=(count, n))
    draws += (np.arange(count, dtype=np.int64) * n)[:, None]
    return np.bincount(draws.ravel(), minlength=count * n).reshape(count, n).astype(np.float64)


def _group_sums(weights: np.ndarray, groups: np.ndarray, k: int) -> np.ndarray:
    """(c, cells) weights -> (c, k) sums per group index (groups need not be sorted)."""
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    out = np.zeros((weights.shape[0], k))
    out[:, sorted_groups[starts]] = np.add.reduceat(weights[:, order], starts, axis=1)
    return out


def weighted_pearson(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r per resample (row of w); x and y are (cells,) or (c, cells)."""
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx = (w * x).sum(axis=1) / total
        my = (w * y).sum(axis=1) / total
        dx = x - mx[:, None]
        dy = y - my[:, None]
        sxy = (w * dx * dy).sum(axis=1)
        sxx = (w * dx * dx).sum(axis=1)
        syy = (w * dy * dy).sum(axis=1)
        r = sxy / np.sqrt(sxx * syy)
    # Relative tolerance: a constant resample leaves only rounding in sxx / syy.
    scale_x = (w * x * x).sum(axis=1) + 1e-300
    scale_y = (w * y * y).sum(axis=1) + 1e-300
    degenerate = (total < 3) | (sxx <= 1e-12 * scale_x) | (syy <= 1e-12 * scale_y)
    r[degenerate] = math.nan
    return np.clip(r, -1.0, 1.0)


def _midranks(group_weights: np.ndarray) -> np.ndarray:
    """Mid-rank of each group (1-based, ties averaged) given the weights of sorted groups."""
    cum = np.cumsum(group_weights, axis=1)
    return cum - (group_weights - 1.0) / 2.0


def weighted_spearman(w: np.ndarray, c: Cells) -> np.ndarray:
    """Spearman rho per resample: Pearson r of the weighted mid-ranks of both sides."""
    rank_x = _midranks(_group_sums(w, c.gx, c.kx))
    rank_y = _midranks(_group_sums(w, c.gy, c.ky))
    return weighted_pearson(w, rank_x[:, c.gx], rank_y[:, c.gy])


def kendall_by_levels(c: Cells) -> bool:
    """Whether `weighted_kendall` counts pairs level by level for these cells."""
    return min(c.kx, c.ky) <= KENDALL_MAX_LEVELS or c.kx * c.ky <= KENDALL_MAX_GRID


def weighted_kendall(w: np.ndarray, c: Cells) -> np.ndarray | None:
    """Kendall tau-b per resample, or None when both sides have too many distinct values."""
    if not kendall_by_levels(c):
        return None
    if c.ky <= c.kx:
        levels, level_k, other, other_k = c.gy, c.ky, c.gx, c.kx
    else:
        levels, level_k, other, other_k = c.gx, c.kx, c.gy, c.ky
    count = w.shape[0]
    # (values, resamples) layout: the cumulative sums run down contiguous rows.
    prior = np.zeros((other_k, count))
    weights = np.ascontiguousarray(w.T)
    s = np.zeros(count)
    for level in range(level_k):
        members = np.flatnonzero(levels == level)
        if not len(members):
            continue
        cum = np.cumsum(prior, axis=0)
        # below - above = (cum - prior) - (total - cum) at the members' positions
        at = other[members]
        s += (weights[members] * (2 * cum[at] - prior[at] - cum[-1:])).sum(axis=0)
        prior[at] += weights[members]
    total = w.sum(axis=1)
    pairs = total * (total - 1) / 2
    wx = _group_sums(w, c.gx, c.kx)
    wy = _group_sums(w, c.gy, c.ky)
    tied_x = (wx * (wx - 1) / 2).sum(axis=1)
    tied_y = (wy * (wy - 1) / 2).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = s / np.sqrt((pairs - tied_x) * (pairs - tied_y))
    tau[(pairs - tied_x <= 0) | (pairs - tied_y <= 0) | (total < 3)] = math.nan
    return np.clip(tau, -1.0, 1.0)


def _kendall_loop(w: np.ndarray, rows_x: np.ndarray, rows_y: np.ndarray) -> np.ndarray:
    """Kendall tau-b of explicit resamples (row counts -> repeated rows), with scipy."""
    import warnings

    from scipy.stats import kendalltau

    out = np.full(w.shape[0], math.nan)
    for b in range(w.shape[0]):
        index = np.repeat(np.arange(w.shape[1]), w[b].astype(np.int64))
        if len(index) < 3 or np.ptp(rows_x[index]) == 0 or np.ptp(rows_y[index]) == 0:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[b] = kendalltau(rows_x[index], rows_y[index])[0]
    return out


def weighted_auroc(w: np.ndarray, c: Cells) -> np.ndarray:
    """AUROC per resample for human values 0/1 (cells with y == 1 are the positives)."""
    positive = c.y == 1
    pos = np.zeros((w.shape[0], c.kx))
    neg = np.zeros((w.shape[0], c.kx))
    pos[:, c.gx[positive]] = w[:, positive]
    neg[:, c.gx[~positive]] = w[:, ~positive]
    below = np.cumsum(neg, axis=1) - neg
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (pos * (below + 0.5 * neg)).sum(axis=1) / (n_pos * n_neg)
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
              resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> Bootstrap:
    """Resamples the rows `resamples` times and recomputes every statistic of every metric.

    Args:
        human: (n,) human values.
        values: (n, m) metric values, NaN where a metric has no value (left out of that
            metric's statistics, as in the point estimates).
        binary: whether the human values are 0/1 (AUROC is computed only then).
        resamples: the number of resamples.
        seed: the generator's seed (numpy PCG64).

    Returns:
        The Bootstrap.
    """
    n, m = values.shape
    out = {k: np.full((resamples, m), math.nan) for k in STATS}
    if n == 0 or resamples <= 0:
        return Bootstrap(out, ())
    per_metric = [cells(values[:, j], human) for j in range(m)]
    missing = tuple(j for j, c in enumerate(per_metric)
                    if not kendall_by_levels(c) and len(c.order) > KENDALL_LOOP_MAX_N)
    rng = np.random.default_rng(seed)
    chunk = max(1, min(resamples, CHUNK_ELEMENTS // n))
    for start in range(0, resamples, chunk):
        count = min(chunk, resamples - start)
        rows = row_weights(rng, n, count)
        span = slice(start, start + count)
        for j, c in enumerate(per_metric):
            if not len(c.order):
                continue
            w = np.add.reduceat(rows[:, c.order], c.starts, axis=1)
            out["pearson"][span, j] = weighted_pearson(w, c.x, c.y)
            out["spearman"][span, j] = weighted_spearman(w, c)
            tau = weighted_kendall(w, c)
            if tau is not None:
                out["kendall"][span, j] = tau
            elif j not in missing:
                kept = c.order
                out["kendall"][span, j] = _kendall_loop(rows[:, kept], values[kept, j],
                                                        human[kept])
            if binary:
                out["auroc"][span, j] = weighted_auroc(w, c)
    return Bootstrap(out, missing)


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
