"""The bootstrap's cells and resample weights (numpy only, no Beam).

A metric's kept rows (metric value not NaN) are grouped into cells, the distinct (metric
value, human value) pairs (`cells`); a resample is drawn as a count per row
(`row_weights`), and its row counts are summed per cell (`cell_weights`) and per
distinct metric or human value (`group_x`, `group_y`): the weights every statistic of
bootstrap.py is computed from.
"""

from __future__ import annotations

import dataclasses

import numpy as np

KENDALL_MAX_LEVELS = 64

@dataclasses.dataclass(frozen=True)
class Cells:
    """One metric's kept rows grouped by distinct (metric value, human value).

    Attributes:
        order: row indices (into the scope's rows), sorted by cell.
        starts: where each cell starts in `order`.
        x, y: each cell's metric and human value.
        gx, gy: each cell's index among the distinct metric / human values (sorted).
        kx, ky: the number of distinct metric / human values.
        x_starts: where each metric value's cells start (cells are sorted by gx, gy).
        by_y, y_starts: the cells sorted by gy, and where each human value's cells start.
    """

    order: np.ndarray
    starts: np.ndarray
    x: np.ndarray
    y: np.ndarray
    gx: np.ndarray
    gy: np.ndarray
    kx: int
    ky: int
    x_starts: np.ndarray
    by_y: np.ndarray
    y_starts: np.ndarray


def cells(values: np.ndarray, human: np.ndarray) -> Cells:
    """Groups the rows where `values` is not NaN into (value, human) cells."""
    keep = np.flatnonzero(~np.isnan(values))
    x, y = values[keep], human[keep]
    ux, gx_rows = np.unique(x, return_inverse=True)
    uy, gy_rows = np.unique(y, return_inverse=True)
    code = gx_rows.astype(np.int64) * max(len(uy), 1) + gy_rows
    order = np.argsort(code)  # any order within a cell: its weights are whole counts
    sorted_code = code[order]
    starts = (np.flatnonzero(np.r_[True, sorted_code[1:] != sorted_code[:-1]])
              if len(sorted_code) else np.zeros(0, dtype=np.int64))
    cell_code = sorted_code[starts]
    gx, gy = cell_code // max(len(uy), 1), cell_code % max(len(uy), 1)
    by_y = np.argsort(gy)
    return Cells(keep[order], starts, ux[gx], uy[gy], gx, gy, len(ux), len(uy),
                 _run_starts(gx), by_y, _run_starts(gy[by_y]))


def _run_starts(sorted_values: np.ndarray) -> np.ndarray:
    if not len(sorted_values):
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])


def row_weights(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    """`count` bootstrap resamples of n rows as (n, count) float64 row counts (column b is
    resample b; its rows are `rng.integers(n, size=(count, n))[b]`)."""
    draws = rng.integers(n, size=(count, n))
    draws *= count
    draws += np.arange(count)[:, None]
    return np.bincount(draws.ravel(), minlength=count * n).reshape(n, count).astype(np.float64)


def cell_weights(rows: np.ndarray, c: Cells) -> np.ndarray:
    """(n, resamples) row counts -> (cells, resamples) cell weights."""
    if len(c.starts) == len(c.order):  # every cell one row (continuous values): a gather
        return rows[c.order]
    return np.add.reduceat(rows[c.order], c.starts)


def group_x(w: np.ndarray, c: Cells) -> np.ndarray:
    """(cells, resamples) -> (kx, resamples) weight of each distinct metric value."""
    if c.kx == len(c.gx):  # one cell per metric value: nothing to add up
        return w
    return np.add.reduceat(w, c.x_starts)


def group_y(w: np.ndarray, c: Cells) -> np.ndarray:
    """(cells, resamples) -> (ky, resamples) weight of each distinct human value."""
    if c.ky == len(c.gy):
        return w[c.by_y]
    if c.ky <= KENDALL_MAX_LEVELS:  # few values: one masked sum each beats a gather
        return np.stack([(c.gy == level) @ w for level in range(c.ky)])
    return np.add.reduceat(w[c.by_y], c.y_starts)
