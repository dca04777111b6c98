"""Edge cases of transforms/scoring/report/bootstrap.py and bootstrap_cells.py: the degenerate
guards of Pearson r and Kendall tau-b at their bounds, the clip to [-1, 1], tiny and
offset values, `group_y`'s segmented sums past KENDALL_MAX_LEVELS human values, cells and
AUROC of one class, and `chunk_statistics`' branches (binary or not, both classes or one)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from tests.scoring.test_bootstrap import _groups
from transforms.scoring.report import bootstrap as bs
from transforms.scoring.report import bootstrap_cells as bc


def _pearson(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    return bs.weighted_pearson(np.ones((len(x), 1)), x, y)[0]


def test_pearson_needs_three_rows_and_three_are_enough():
    assert np.isnan(_pearson([0.0, 1.0], [0.0, 2.0]))
    # 3 rows: x centred -1, 0, 1; y centred -5/3, -2/3, 7/3: r = 4 / sqrt(2 * 26/3)
    assert _pearson([0.0, 1.0, 2.0], [0.0, 1.0, 4.0]) == pytest.approx(
        4 / np.sqrt(2 * 26 / 3))
    assert _pearson([0.0, 1.0, 2.0], [0.0, 1.0, 4.0]) == pytest.approx(
        stats.pearsonr([0.0, 1.0, 2.0], [0.0, 1.0, 4.0])[0])


@pytest.mark.parametrize("scale", [1e-6, 1e-3])
def test_pearson_of_tiny_values_is_defined(scale):
    """A small spread is not a constant side: the tolerance is relative to the sums of
    squares, so r is scale-free (here the r of the same rows in units)."""
    x, y = np.array([0.0, 1.0, 3.0, 4.0]), np.array([1.0, 0.0, 4.0, 2.0])
    expected = stats.pearsonr(x, y)[0]
    assert _pearson(x * scale, y) == pytest.approx(expected)
    assert _pearson(x, y * scale) == pytest.approx(expected)
    assert _pearson(x * scale, y * scale) == pytest.approx(expected)


def test_pearson_of_values_far_from_zero_is_centred_first():
    """Values around 10^6 with a spread of 1: uncentred sums would leave the variance to
    rounding (below 1e-10 of the sum of squares); centred, r is scipy's."""
    rng = np.random.default_rng(13)
    x, y = rng.random(30), rng.random(30)
    expected = stats.pearsonr(x, y)[0]
    assert _pearson(x + 1e6, y) == pytest.approx(expected, rel=1e-6)
    assert _pearson(x, y + 1e6) == pytest.approx(expected, rel=1e-6)


def test_r_is_undefined_when_one_side_varies_by_rounding_only():
    """n = 3 rows whose x sums are 3 and 3 + 1e-12 (variance 1e-12, under 1e-10 of the sum
    of squares: a constant side up to rounding); y varies (variance 2)."""
    one = np.ones(1)
    flat = (one * 3, one * (3 + 1e-12))
    spread = (one * 0, one * 2)
    assert np.isnan(bs._r(one * 3, flat[0], spread[0], flat[1], spread[1], one))
    assert np.isnan(bs._r(one * 3, spread[0], flat[0], spread[1], flat[1], one))
    # a variance exactly at the tolerance counts as constant too
    edge = 1.0000000001e-310
    assert edge == 1e-10 * (edge + 1e-300)
    assert np.isnan(bs._r(one * 3, one * 0, one * 0, one * edge, one * 2, one * 0))
    assert np.isnan(bs._r(one * 3, one * 0, one * 0, one * 2, one * edge, one * 0))


def test_r_and_tau_are_clipped_to_one():
    """Rounding can put the quotient a hair past +-1: the values are clipped."""
    ones = np.ones(2)
    sxy = np.array([2 + 1e-9, -2 - 1e-9])  # |sxy| just above sqrt(vx * vy) = 2
    np.testing.assert_array_equal(
        bs._r(ones * 4, ones * 0, ones * 0, ones * 2, ones * 2, sxy), [1.0, -1.0])
    wx = np.ones((3, 2))  # 3 rows of distinct values: 3 untied pairs on each side
    np.testing.assert_array_equal(bs._tau_b(np.array([3 + 1e-9, -3 - 1e-9]), wx, wx),
                                  [1.0, -1.0])


def test_kendall_needs_three_rows_and_three_are_enough():
    x, y = np.array([0.0, 2.0, 1.0]), np.array([0.0, 1.0, 2.0])
    c = bc.cells(x, y)
    # pairs: (0, 1) concordant, (0, 2) concordant, (1, 2) discordant: (2 - 1) / 3
    ones = np.ones((3, 1))
    assert bs.weighted_kendall(ones, c, *_groups(ones, c))[0] == pytest.approx(1 / 3)
    assert stats.kendalltau(x, y)[0] == pytest.approx(1 / 3)
    two = np.array([[1.0], [1.0], [0.0]])  # rows 0 and 1 only
    assert np.isnan(bs.weighted_kendall(two, c, *_groups(two, c))[0])


@pytest.mark.parametrize("human", [[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
def test_auroc_with_a_single_positive_or_negative(human):
    x = np.array([0.4, 0.1, 0.4, 0.9])
    c = bc.cells(x, np.array(human))
    w = bc.cell_weights(np.ones((4, 1)), c)
    assert bs.weighted_auroc(w, c, bc.group_x(w, c))[0] == pytest.approx(
        roc_auc_score(human, x))


def test_cells_of_one_human_value_and_of_no_kept_row():
    c = bc.cells(np.array([0.3, 0.1, 0.2, 0.1]), np.ones(4))
    np.testing.assert_array_equal(c.gx, [0, 1, 2])
    np.testing.assert_array_equal(c.gy, [0, 0, 0])
    np.testing.assert_array_equal(c.x, [0.1, 0.2, 0.3])
    np.testing.assert_array_equal(c.starts, [0, 2, 3])
    empty = bc.cells(np.full(3, np.nan), np.arange(3.0))
    for starts in (empty.starts, empty.x_starts, empty.y_starts):
        assert starts.shape == (0,) and starts.dtype == np.int64


def test_group_y_past_the_masked_sums_adds_up_each_human_value():
    """More than KENDALL_MAX_LEVELS human values with ties (more cells than values): the
    segmented sums over the cells sorted by human value."""
    rng = np.random.default_rng(14)
    human = np.arange(200) % 70 / 7  # 70 values
    x = np.round(rng.random(200), 1)
    c = bc.cells(x, human)
    assert c.ky == 70 and len(c.gy) > c.ky
    counts = np.stack([np.bincount(rng.integers(0, 200, 200), minlength=200)
                       for _ in range(3)], axis=1).astype(float)
    got = bc.group_y(bc.cell_weights(counts, c), c)
    expected = np.stack([counts[human == v].sum(axis=0) for v in np.unique(human)])
    np.testing.assert_array_equal(got, expected)
    w = bc.cell_weights(counts, c)
    tau = bs.weighted_kendall(w, c, *_groups(w, c))
    rows = np.repeat(np.arange(200), counts[:, 0].astype(int))
    assert tau[0] == pytest.approx(stats.kendalltau(x[rows], human[rows])[0])


def test_kendall_by_levels_at_its_bounds(monkeypatch):
    rng = np.random.default_rng(15)
    x = rng.random(300)
    monkeypatch.setattr(bs, "KENDALL_MAX_GRID", 1000)
    assert bs.kendall_by_levels(bc.cells(x, np.arange(300) % 64))  # 64 levels: by levels
    assert not bs.kendall_by_levels(bc.cells(x, np.arange(300) % 65))
    monkeypatch.setattr(bs, "KENDALL_MAX_GRID", 300 * 300)  # 300 x 300: at the bound
    assert bs.kendall_by_levels(bc.cells(x, rng.random(300)))


def _drawn(human, values, binary, resamples=6, seed=3):
    """`bootstrap`'s values and, per resample, scipy's / scikit-learn's on its rows."""
    got = bs.bootstrap(human, values[:, None], binary, resamples=resamples, seed=seed,
                       threads=1)
    counts = bc.row_weights(np.random.default_rng(seed), len(human), resamples)
    expected = []
    for b in range(resamples):
        rows = np.repeat(np.arange(len(human)), counts[:, b].astype(int))
        rows = rows[~np.isnan(values[rows])]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected.append((stats.pearsonr(values[rows], human[rows])[0],
                             stats.spearmanr(values[rows], human[rows])[0],
                             stats.kendalltau(values[rows], human[rows])[0]))
    return got, np.array(expected)


def test_a_binary_scope_whose_kept_rows_hold_one_class():
    """The metric has values only where the human value is 1: no AUROC (one class), and
    no correlation (a constant side), in every resample."""
    human = np.array([0.0, 1.0] * 10)
    values = np.where(human == 1, np.arange(20.0), np.nan)
    got, _ = _drawn(human, values, True)
    for k in bs.STATS:
        assert np.isnan(got.values[k]).all(), k


def test_a_graded_scope_with_two_human_values_has_no_auroc():
    """Two human values, 0 and 0.5, on a scope that is not binary: Kendall from the pair
    counts (not from an AUROC), and no AUROC."""
    rng = np.random.default_rng(16)
    human = rng.integers(0, 2, 30) / 2
    values = np.round(rng.random(30) + human, 1)
    got, expected = _drawn(human, values, False)
    assert np.isnan(got.values["auroc"]).all()
    np.testing.assert_allclose(got.values["kendall"][:, 0], expected[:, 2])
    np.testing.assert_allclose(got.values["spearman"][:, 0], expected[:, 1])
    got01, _ = _drawn(human * 2, values, False)  # 0 / 1, but not declared binary
    assert np.isnan(got01.values["auroc"]).all()
    np.testing.assert_allclose(got01.values["kendall"][:, 0], expected[:, 2])


def test_degenerate_resamples_are_nan_without_a_warning():
    """Resamples of one human class, of one metric value or of under three rows have no
    correlation or AUROC: NaN, and no NumPy warning reaches the user."""
    human = np.array([0.0, 0.0, 0.0, 0.0, 1.0])
    values = np.stack([np.full(5, 0.5), np.array([0.1, 0.2, 0.3, 0.4, 0.9])], axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = bs.bootstrap(human, values, binary=True, resamples=200, seed=3, threads=1)
        few = bs.bootstrap(human[:2], values[:2], binary=True, resamples=20, seed=3,
                           threads=1)
    constant = result.values["auroc"][:, 0]  # one metric value: every pair a tie
    assert set(constant[~np.isnan(constant)].tolist()) == {0.5}
    for name in ("pearson", "spearman", "kendall", "auroc"):
        if name != "auroc":
            assert np.isnan(result.values[name][:, 0]).all()
        assert np.isnan(result.values[name][:, 1]).any()  # resamples of one class
        assert not np.isnan(result.values[name][:, 1]).all()
        assert np.isnan(few.values[name]).all()


def test_threads_given_are_the_threads_used(monkeypatch):
    """`threads=1` computes every chunk in the calling thread; more threads use the pool
    (the values are the same either way)."""
    import threading

    monkeypatch.setattr(bs, "CHUNK_ELEMENTS", 40)  # chunks of 2 resamples of 20 rows
    monkeypatch.setattr(bs, "default_threads", lambda: 4)
    seen = []
    real = bs._State.chunk_statistics
    monkeypatch.setattr(bs._State, "chunk_statistics", lambda self, span, rows: (
        seen.append(threading.current_thread().name), real(self, span, rows))[1])
    rng = np.random.default_rng(2)
    human, values = rng.random(20), rng.random((20, 1))
    one = bs.bootstrap(human, values, binary=False, resamples=20, threads=1)
    assert len(seen) == 10 and set(seen) == {threading.current_thread().name}
    seen.clear()
    many = bs.bootstrap(human, values, binary=False, resamples=20, threads=3)
    assert len(seen) == 10 and any(name.startswith("bootstrap") for name in seen)
    for name in bs.STATS:
        np.testing.assert_array_equal(one.values[name], many.values[name])
