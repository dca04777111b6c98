"""Tests for transforms/scoring/report/bootstrap.py and bootstrap_cells.py: the weighted
statistics equal scipy's and scikit-learn's on the resampled rows (all-ones weights: the
point estimates; random weights: explicit resamples), ties and missing values included."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from transforms.scoring.report import bootstrap as bs
from transforms.scoring.report import bootstrap_cells as bc


def _reference(x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = {"pearson": stats.pearsonr(x, y)[0], "spearman": stats.spearmanr(x, y)[0],
               "kendall": stats.kendalltau(x, y)[0]}
    if set(np.unique(y)) == {0.0, 1.0}:
        out["auroc"] = roc_auc_score(y, x)
    return out


def _groups(w, c):
    """`group_x`, `group_y` of cell weights: what the statistics take beside them."""
    return bc.group_x(w, c), bc.group_y(w, c)


def _weighted(counts, c, x, y):
    """The module's statistics for one resample given as (n, 1) row counts."""
    w = bc.cell_weights(counts, c)
    out = {"pearson": bs.weighted_pearson(w, c.x, c.y)[0],
           "spearman": bs.weighted_spearman(w, c, *_groups(w, c))[0]}
    tau = bs.weighted_kendall(w, c, *_groups(w, c))
    out["kendall"] = (tau[0] if tau is not None
                      else bs._kendall_loop(counts[c.order], x[c.order], y[c.order])[0])
    if set(np.unique(c.y)) == {0.0, 1.0}:
        out["auroc"] = bs.weighted_auroc(w, c, bc.group_x(w, c))[0]
    return out


@pytest.mark.parametrize("case", range(40))
def test_weighted_statistics_equal_scipy_on_explicit_resamples(case):
    rng = np.random.default_rng(case)
    n = int(rng.integers(8, 80))
    human = (rng.integers(0, 2, n).astype(float) if case % 2
             else rng.integers(0, 5, n) / 4 if case % 3 else rng.random(n))
    x = np.round(rng.random(n), 1) if case % 4 else rng.random(n) + human
    x[rng.random(n) < 0.1] = np.nan
    c = bc.cells(x, human)
    ones = np.ones((n, 1))
    keep = ~np.isnan(x)
    assert _weighted(ones, c, x, human) == pytest.approx(_reference(x[keep], human[keep]),
                                                         nan_ok=True)
    rows = rng.integers(0, n, n)
    counts = np.bincount(rows, minlength=n).astype(float)[:, None]
    kept = rows[keep[rows]]
    assert _weighted(counts, c, x, human) == pytest.approx(_reference(x[kept], human[kept]),
                                                           nan_ok=True)


def test_kendall_by_levels_and_its_fallbacks(monkeypatch):
    rng = np.random.default_rng(0)
    x, y = rng.random(300), rng.random(300)  # 300 x 300 distinct values
    assert bs.kendall_by_levels(bc.cells(x, y))
    monkeypatch.setattr(bs, "KENDALL_MAX_GRID", 1000)
    assert not bs.kendall_by_levels(bc.cells(x, y))
    loop = bs.bootstrap(y, x[:, None], False, resamples=20, seed=1)
    assert loop.kendall_missing == () and not np.isnan(loop.values["kendall"]).any()
    monkeypatch.setattr(bs, "KENDALL_LOOP_MAX_N", 100)
    missing = bs.bootstrap(y, x[:, None], False, resamples=20, seed=1)
    assert missing.kendall_missing == (0,) and np.isnan(missing.values["kendall"]).all()
    monkeypatch.undo()
    levels = bs.bootstrap(y, x[:, None], False, resamples=20, seed=1)
    assert levels.values["kendall"] == pytest.approx(loop.values["kendall"])


def test_chunks_do_not_change_the_resamples(monkeypatch):
    rng = np.random.default_rng(2)
    human = rng.integers(0, 2, 50).astype(float)
    values = np.stack([human + rng.random(50), rng.random(50)], axis=1)
    whole = bs.bootstrap(human, values, True, resamples=30, seed=4)
    monkeypatch.setattr(bs, "CHUNK_ELEMENTS", 50 * 7)  # 7 resamples per chunk
    chunked = bs.bootstrap(human, values, True, resamples=30, seed=4)
    for k in bs.STATS:
        assert chunked.values[k] == pytest.approx(whole.values[k], nan_ok=True)


def test_interval_and_paired_p_value():
    assert bs.interval(np.arange(101, dtype=float)) == pytest.approx((2.5, 97.5))
    assert bs.interval(np.array([np.nan, np.nan, 1.0])) is None
    top, other = np.array([0.9, 0.8, 0.5, np.nan]), np.array([0.1, -0.85, 0.6, 0.2])
    # defined pairs: 3; |top| <= |other| in two of them -> (1 + 2) / (1 + 3)
    assert bs.paired_p_value(top, other) == pytest.approx(0.75)
    assert np.isnan(bs.paired_p_value(np.full(2, np.nan), np.ones(2)))


@pytest.mark.parametrize("top, other, p", [
    # |top| <= |other| is a loss for top, a tie included: ties at 0.5, 0.3 (signs differ)
    # and 0.7, a win at 0.2 > 0.1 -> (1 + 3) / (1 + 4)
    ([0.5, -0.3, 0.2, 0.7], [0.5, 0.3, 0.1, -0.7], 0.8),
    ([0.5, 0.4, np.nan], [0.5, 0.1, 0.2], 2 / 3),  # one tie, one win of 2 defined
    ([0.9, 0.8], [0.1, 0.2], 1 / 3),  # no tie: wins only
])
def test_paired_p_value_counts_a_tie_as_a_loss(top, other, p):
    assert bs.paired_p_value(np.array(top), np.array(other)) == pytest.approx(p)


def test_two_identical_metrics_are_not_significantly_different():
    resampled = np.random.default_rng(3).uniform(-1, 1, 999)
    assert bs.paired_p_value(resampled, resampled.copy()) == 1.0


def test_kendall_from_auroc_equals_the_level_count():
    rng = np.random.default_rng(5)
    human = rng.integers(0, 2, 60).astype(float)
    x = np.round(rng.random(60) + human * 0.3, 1)  # ties within and across classes
    c = bc.cells(x, human)
    counts = np.stack([np.bincount(rng.integers(0, 60, 60), minlength=60)
                       for _ in range(5)], axis=1).astype(float)
    w = bc.cell_weights(counts, c)
    wx, wy = bc.group_x(w, c), bc.group_y(w, c)
    via_auroc = bs.kendall_from_auroc(bs.weighted_auroc(w, c, wx), wx, wy)
    assert via_auroc == pytest.approx(bs.weighted_kendall(w, c, wx, wy))
    assert via_auroc[0] == pytest.approx(stats.kendalltau(
        np.repeat(x, counts[:, 0].astype(int)), np.repeat(human, counts[:, 0].astype(int)))[0])


def _scopes(rng: np.random.Generator) -> list[bs.Resampling]:
    """Scopes of each kind: binary human values, graded ones, one whose Kendall needs the
    loop with scipy (many distinct values on both sides), an empty one."""
    binary = rng.integers(0, 2, 120).astype(float)
    graded = rng.integers(0, 5, 90).astype(float)
    many = rng.random(100)  # more distinct values than KENDALL_MAX_LEVELS on both sides
    return [bs.Resampling(binary, np.stack([binary + rng.random(120),
                                            np.round(rng.random(120), 1)], axis=1), True, 0),
            bs.Resampling(graded, np.stack([graded + rng.random(90),
                                            np.full(90, np.nan)], axis=1), False, 1),
            bs.Resampling(many, (many + rng.random(100))[:, None], False, 2),
            bs.Resampling(np.zeros(0), np.zeros((0, 2)), False, 3)]


def test_threads_do_not_change_the_values(monkeypatch):
    monkeypatch.setattr(bs, "KENDALL_MAX_GRID", 100)  # the third scope loops with scipy
    monkeypatch.setattr(bs, "CHUNK_ELEMENTS", 120 * 7)  # several chunks per scope
    scopes = _scopes(np.random.default_rng(6))
    one = bs.bootstrap_scopes(scopes, resamples=40, threads=1)
    three = bs.bootstrap_scopes(scopes, resamples=40, threads=3)
    alone = [bs.bootstrap(s.human, s.values, s.binary, resamples=40, seed=s.seed, threads=2)
             for s in scopes]
    for a, b, c in zip(one, three, alone, strict=True):
        assert a.kendall_missing == b.kendall_missing == c.kendall_missing
        for k in bs.STATS:
            np.testing.assert_array_equal(a.values[k], b.values[k])
            np.testing.assert_array_equal(a.values[k], c.values[k])
    assert not np.isnan(one[2].values["kendall"]).all()  # the loop ran
    assert np.isnan(one[3].values["pearson"]).all()


def test_chunks_run_on_the_threads_and_at_most_threads_are_held(monkeypatch):
    import threading

    monkeypatch.setattr(bs, "KENDALL_MAX_GRID", 100)
    monkeypatch.setattr(bs, "CHUNK_ELEMENTS", 120 * 5)
    lock = threading.Lock()
    held, most, where, drawers = [0], [0], [], set()
    draw, compute = bs.row_weights, bs._State.chunk_statistics

    def drawn(*args):
        with lock:
            held[0] += 1
            most[0] = max(most[0], held[0])
            drawers.add(threading.current_thread().name)
        return draw(*args)

    def computed(self, span, rows):
        import time

        time.sleep(0.01)  # long enough for the calling thread to run ahead if it could
        compute(self, span, rows)
        with lock:
            held[0] -= 1
            where.append((self.scope.seed, threading.current_thread().name))

    monkeypatch.setattr(bs, "row_weights", drawn)
    monkeypatch.setattr(bs._State, "chunk_statistics", computed)
    bs.bootstrap_scopes(_scopes(np.random.default_rng(7)), resamples=40, threads=3)
    assert most[0] == 3
    names = {seed: {name.startswith("bootstrap") for s, name in where if s == seed}
             for seed in (0, 1, 2)}
    assert names == {0: {True}, 1: {True}, 2: {False}}  # the scipy loop: the caller's thread
    assert drawers == {threading.current_thread().name}  # every draw in the calling thread


def test_an_error_in_the_last_chunks_reaches_the_caller(monkeypatch):
    compute = bs._State.chunk_statistics

    def failing(self, span, rows):
        if span.stop == 40 and self.scope.seed == 1:  # the last chunk of the last scope
            raise RuntimeError("chunk failed")
        compute(self, span, rows)

    monkeypatch.setattr(bs, "CHUNK_ELEMENTS", 120 * 5)
    monkeypatch.setattr(bs._State, "chunk_statistics", failing)
    with pytest.raises(RuntimeError, match="chunk failed"):
        bs.bootstrap_scopes(_scopes(np.random.default_rng(8))[:2], resamples=40, threads=3)


def test_the_exact_shortcuts_equal_numpys_sums_past_int16(monkeypatch):
    """The int32 cumulative sums and the matrix-vector column sums give numpy's own
    float64 values bit for bit, on a scope whose counts add up past 2^15."""
    rng = np.random.default_rng(9)
    n = 40_000
    quality = rng.random(n)
    scopes = [bs.Resampling((quality + rng.normal(0, .2, n) > .5).astype(float),
                            np.stack([quality + rng.random(n), np.round(quality, 2)], axis=1),
                            True, 0),
              bs.Resampling(np.round(quality * 4), (quality + rng.random(n))[:, None],
                            False, 1)]
    fast = bs.bootstrap_scopes(scopes, resamples=3, threads=1)
    monkeypatch.setattr(bs, "_cumsum", lambda w: np.cumsum(w, axis=0))
    monkeypatch.setattr(bs, "_total", lambda a: a.sum(axis=0))
    plain = bs.bootstrap_scopes(scopes, resamples=3, threads=1)
    for a, b in zip(fast, plain, strict=True):
        for k in bs.STATS:
            np.testing.assert_array_equal(a.values[k], b.values[k])


def test_a_scope_past_int32_counts_is_refused():
    class Huge:
        def __len__(self):
            return 2**31

    with pytest.raises(ValueError, match=r"^a report scope of 2\^31 rows or more: its "
                                         r"resampled counts would not fit the int32 "
                                         r"cumulative sums$"):
        bs.bootstrap_scopes([bs.Resampling(Huge(), np.zeros((0, 1)), False, 0)])


def test_the_kendall_loop_leaves_out_resamples_too_small_or_constant():
    """Explicit resamples (one per column of row counts), worked by hand: a resample of
    fewer than 3 rows or with one side constant has no tau; the next ones still do."""
    x = np.array([0.0, 1.0, 0.5, 0.2, 0.0])
    y = np.array([1.0, 0.0, 0.5, 3.0, 2.0])
    rows = np.array([[1, 3, 0, 1, 1, 0],
                     [1, 0, 1, 1, 0, 0],
                     [1, 0, 1, 0, 0, 1],
                     [0, 0, 1, 0, 0, 1],
                     [0, 0, 0, 0, 2, 1]], dtype=float)
    tau = bs._kendall_loop(rows, x, y)
    assert tau.dtype == np.float64
    # rows 0-2: x and y both span exactly 1, every pair discordant; row 0 three times:
    # constant; rows 1-3: every pair discordant; rows 0, 1: two rows; rows 0, 4, 4: x
    # constant; rows 2-4: one concordant pair of three, (1 - 2) / 3
    np.testing.assert_array_equal(np.isnan(tau), [False, True, False, True, True, False])
    assert tau[[0, 2, 5]] == pytest.approx([-1.0, -1.0, -1 / 3])


def test_row_weights_count_the_draws_of_the_generator():
    """Column b counts the rows of `integers(0, n)`'s b-th draw of n rows (row 0 included)."""
    draws = np.random.default_rng(11).integers(0, 3, size=(4, 3))
    expected = np.stack([np.bincount(d, minlength=3) for d in draws], axis=1)
    weights = bc.row_weights(np.random.default_rng(11), 3, 4)
    assert weights.dtype == np.float64
    np.testing.assert_array_equal(weights, expected)
    assert weights[0].sum() > 0


def test_an_interval_needs_half_of_the_resamples_defined():
    # two of four defined: enough; percentiles 2.5 and 97.5 of [1, 3]
    assert bs.interval(np.array([np.nan, 1.0, np.nan, 3.0])) == pytest.approx((1.05, 2.95))
    assert bs.interval(np.array([np.nan, 1.0, np.nan, np.nan])) is None


def test_default_threads_where_the_affinity_is_unknown(monkeypatch):
    monkeypatch.setattr(bs.os, "sched_getaffinity", lambda pid: {0})
    assert bs.default_threads() == 1
    monkeypatch.delattr(bs.os, "sched_getaffinity")
    for cpus, threads in ((8, 4), (3, 3), (None, 1)):
        monkeypatch.setattr(bs.os, "cpu_count", lambda cpus=cpus: cpus)
        assert bs.default_threads() == threads


def test_blas_runs_on_one_thread_inside_the_limit():
    from threadpoolctl import threadpool_info

    with bs._one_blas_thread():
        blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    assert blas and set(blas) == {1}


def test_every_resampled_statistic_equals_scipy_on_the_drawn_rows():
    """`bootstrap`'s values, resample by resample, against scipy and scikit-learn on the
    rows each resample drew (`row_weights` from a generator seeded alike): a metric with
    no value first, then metrics with ties, on binary human values (AUROC, Kendall from
    it) and on graded ones (no AUROC)."""
    rng = np.random.default_rng(12)
    n, resamples = 40, 6
    binary = rng.integers(0, 2, n).astype(float)
    graded = rng.integers(0, 4, n).astype(float)
    for human, is_binary in ((binary, True), (graded, False)):
        values = np.stack([np.full(n, np.nan), np.round(rng.random(n) + human / 3, 1),
                           rng.random(n)], axis=1)
        values[rng.random(n) < 0.1, 1] = np.nan
        got = bs.bootstrap(human, values, is_binary, resamples=resamples, seed=5, threads=1)
        counts = bc.row_weights(np.random.default_rng(5), n, resamples).astype(int)
        assert np.isnan(got.values["pearson"][:, 0]).all()
        for b in range(resamples):
            rows = np.repeat(np.arange(n), counts[:, b])
            for j in (1, 2):
                kept = rows[~np.isnan(values[rows, j])]
                expected = _reference(values[kept, j], human[kept])
                for k in ("pearson", "spearman", "kendall"):
                    assert got.values[k][b, j] == pytest.approx(expected[k]), (k, b, j)
                if is_binary:
                    assert got.values["auroc"][b, j] == pytest.approx(expected["auroc"])
                else:
                    assert np.isnan(got.values["auroc"][b, j])


def test_one_thread_computes_every_chunk_in_the_calling_thread(monkeypatch):
    import threading

    monkeypatch.setattr(bs, "CHUNK_ELEMENTS", 120 * 5)
    where = set()
    compute = bs._State.chunk_statistics

    def computed(self, span, rows):
        where.add(threading.current_thread().name)
        compute(self, span, rows)

    monkeypatch.setattr(bs._State, "chunk_statistics", computed)
    bs.bootstrap_scopes(_scopes(np.random.default_rng(7))[:2], resamples=20, threads=1)
    assert where == {threading.current_thread().name}


def test_the_kendall_loop_is_kept_up_to_its_row_bound(monkeypatch):
    rng = np.random.default_rng(0)
    x, y = rng.random(300), rng.random(300)
    monkeypatch.setattr(bs, "KENDALL_MAX_GRID", 1000)
    monkeypatch.setattr(bs, "KENDALL_LOOP_MAX_N", 300)  # 300 rows: not more than the bound
    assert bs.bootstrap(y, x[:, None], False, resamples=2, seed=1).kendall_missing == ()
