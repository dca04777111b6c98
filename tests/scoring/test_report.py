"""Tests for transforms/scoring/report/scopes.py: subsets, thresholds, agreement, bootstrap
intervals and the paired test (checked against a plain loop over explicit resamples),
the minimum n, the system level, rendering."""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from transforms.scoring.report.report_render import render_markdown, render_png
from transforms.scoring.report.report_spec import (
    Condition,
    ReportSpec,
    Subset,
    parse_subsets,
    parse_thresholds,
)
from transforms.scoring.report.scopes import (
    agreement,
    auroc,
    meta_evaluate,
    metric_order,
    scope_table,
)

COLUMNS = ["em", "f1"]


def test_parse_subsets():
    assert parse_subsets("f1>0, f1=0,em==1&f1 >= 0.5", COLUMNS) == (
        Subset("f1>0", (Condition("f1", ">", 0.0),)),
        Subset("f1=0", (Condition("f1", "=", 0.0),)),
        Subset("em==1&f1 >= 0.5", (Condition("em", "==", 1.0), Condition("f1", ">=", 0.5))))
    assert parse_subsets(None, COLUMNS) == ()
    assert parse_subsets("human<3", COLUMNS)[0].conditions == (Condition("human", "<", 3.0),)


@pytest.mark.parametrize("spec, message", [
    ("bleu>0", "available: \\['em', 'f1', 'human'\\]"),
    ("f1~0", "cannot parse"),
    ("f1>zero", "cannot parse"),
])
def test_parse_subsets_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_subsets(spec, COLUMNS)


def test_parse_thresholds():
    assert parse_thresholds(None, COLUMNS) == (0.5, {})
    assert parse_thresholds("0.3,f1=0.7", COLUMNS) == (0.3, {"f1": 0.7})
    with pytest.raises(ValueError, match="available"):
        parse_thresholds("cider=1", COLUMNS)
    with pytest.raises(ValueError, match="not a number"):
        parse_thresholds("f1=high", COLUMNS)


@pytest.mark.parametrize("labels, scores, expected", [
    ([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4], 1.0),
    ([0, 0, 1, 1], [0.4, 0.3, 0.2, 0.1], 0.0),
    ([0, 1], [0.5, 0.5], 0.5),
    ([0, 1, 0, 1], [0.1, 0.2, 0.3, 0.4], 0.75),
    ([1, 1], [0.1, 0.2], None),
])
def test_auroc_hand_worked(labels, scores, expected):
    assert auroc(np.array(labels, dtype=float), np.array(scores)) == expected


def test_auroc_equals_scikit_learn_with_and_without_ties():
    rng = np.random.default_rng(5)
    for n, digits in [(7, 0), (50, 1), (400, 2), (3000, None)]:
        labels = (rng.random(n) < 0.3).astype(float)
        labels[:2] = (0.0, 1.0)
        scores = rng.random(n) if digits is None else np.round(rng.random(n), digits)
        assert auroc(labels, scores) == pytest.approx(roc_auc_score(labels, scores),
                                                      rel=1e-12, abs=1e-15), (n, digits)


def test_the_report_does_not_import_scikit_learn():
    """Its import cost every report with binary human values 0.1-0.4 s; the statistics and
    the PNG need only numpy, scipy and matplotlib."""
    import subprocess
    import sys

    code = ("import io, sys\n"
            "from transforms.scoring.report.scopes import meta_evaluate\n"
            "from transforms.scoring.report.report_render import render_png\n"
            "from transforms.scoring.report.report_spec import ReportSpec\n"
            "points = [('ab'[i % 2], float(i % 3 == 0), (i / 40, float(i % 2)))"
            " for i in range(40)]\n"
            "scopes = meta_evaluate(points, ['x', 'y'], ReportSpec(resamples=20))\n"
            "assert scopes[0].rows[0].auroc is not None\n"
            "render_png(scopes, io.BytesIO())\n"
            "print('sklearn' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["False"]


def test_agreement_matches_scipy_and_binary_extras():
    human = np.array([0, 1, 1, 0, 1], dtype=float)
    values = np.array([0.2, 0.9, 0.6, 0.4, math.nan])
    row = agreement("f1", human, values, binary=True, threshold=0.5)
    keep = slice(0, 4)
    assert row.n == 4
    assert row.pearson == pytest.approx(stats.pearsonr(values[keep], human[keep])[0])
    assert row.kendall == pytest.approx(stats.kendalltau(values[keep], human[keep])[0])
    assert (row.accuracy, row.threshold, row.auroc) == (1.0, 0.5, 1.0)


def test_constant_values_give_nan_not_an_error():
    row = agreement("em", np.array([1.0, 2.0, 3.0]), np.zeros(3), False, 0.5)
    assert math.isnan(row.pearson) and row.accuracy is None


POINTS = [("a", 1.0, (1.0, 0.9)), ("a", 0.0, (0.0, 0.1)), ("a", 1.0, (0.0, 0.8)),
          ("b", 0.0, (1.0, 0.2)), ("b", 1.0, (1.0, 0.7)), ("b", 0.0, (0.0, 0.3)),
          ("b", None, (0.0, 0.0))]


def test_meta_evaluate_scopes_and_order():
    spec = ReportSpec(subsets=parse_subsets("f1>0.5", COLUMNS))
    scopes = meta_evaluate(POINTS, COLUMNS, spec)
    assert [s.title for s in scopes] == [
        "All rows", "Subset f1>0.5", "System a: all rows", "System a: subset f1>0.5",
        "System b: all rows", "System b: subset f1>0.5"]
    assert [s.n for s in scopes] == [6, 3, 3, 2, 3, 1]
    assert scopes[0].binary
    assert [r.metric for r in scopes[0].rows] == ["f1", "em"]
    assert abs(scopes[0].rows[0].pearson) >= abs(scopes[0].rows[1].pearson)
    # n = 6 < 30 (and two systems only: no system level): no best metric, no panel
    assert all(s.best is None and not s.drawn for s in scopes)
    assert scopes[0].headline() == "n = 6 rows < 30: no best metric named"


def test_one_system_has_no_per_system_scopes():
    scopes = meta_evaluate([(None, float(i), (float(i), 1.0)) for i in range(5)], COLUMNS,
                           ReportSpec())
    assert len(scopes) == 1 and not scopes[0].binary
    assert scopes[0].rows[0].metric == "em" and scopes[0].rows[0].pearson == pytest.approx(1)
    assert math.isnan(scopes[0].rows[1].pearson)


def test_render_markdown_and_png():
    scopes = meta_evaluate(POINTS, COLUMNS, ReportSpec(min_n=3))
    text = render_markdown(scopes, "label", "x.report.png", 1000)
    assert "| All rows | 6 rows | tied (paired bootstrap p >= 0.05): f1, em | f1 |" in text
    assert "![Pearson, Spearman and Kendall per metric](x.report.png)" in text
    assert "| accuracy | threshold | AUROC | 95% CI |" in text
    assert "1000 resamples" in text
    buffer = io.BytesIO()
    render_png(scopes, buffer, "label")
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    assert scope_table(scopes)[0]["rows"][0]["metric"] == "f1"


def _png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG, from its IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    assert data[12:16] == b"IHDR" and data.endswith(b"IEND\xaeB`\x82")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_render_markdown_without_human_values():
    scopes = meta_evaluate([("a", None, (1.0, 1.0))], COLUMNS, ReportSpec())
    assert "No scored row has a value" in render_markdown(scopes, "label", None)
    out = io.BytesIO()
    render_png(scopes, out, "label")
    width, height = _png_size(out.getvalue())
    assert width > 300 and height > 100  # a figure with its message, not an empty file


def test_render_png_draws_one_panel_row_per_scope():
    rng, human, strong = _separable(60)
    points = [(None, h, (s, h * 0.5)) for h, s in zip(human, strong)]
    scopes = meta_evaluate(points, COLUMNS, ReportSpec(resamples=50))
    one = io.BytesIO()
    render_png(scopes, one, "label")
    subset = ReportSpec(resamples=50, subsets=parse_subsets("f1>0.2", COLUMNS))
    two = io.BytesIO()
    render_png(meta_evaluate(points, COLUMNS, subset), two, "label")
    (w1, h1), (w2, h2) = _png_size(one.getvalue()), _png_size(two.getvalue())
    assert w1 == w2 and h2 > h1  # a second scope adds a row of panels


def _loop_bootstrap(human, values, resamples, seed):
    """An independent, plain implementation: explicit resampled rows, scipy / sklearn per
    resample, percentile intervals and the paired p-value of metric 0 against the others.
    The row indices are drawn as bootstrap_cells.row_weights draws them (one (B, n) integers
    call of numpy's default_rng(seed)), so both see the same resamples."""
    idx = np.random.default_rng(seed).integers(0, len(human), size=(resamples, len(human)))
    out = {k: np.full((resamples, values.shape[1]), np.nan)
           for k in ("pearson", "spearman", "kendall", "auroc")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b, rows in enumerate(idx):
            y = human[rows]
            for j in range(values.shape[1]):
                x = values[rows, j]
                if np.ptp(x) == 0 or np.ptp(y) == 0:
                    continue
                out["pearson"][b, j] = stats.pearsonr(x, y)[0]
                out["spearman"][b, j] = stats.spearmanr(x, y)[0]
                out["kendall"][b, j] = stats.kendalltau(x, y)[0]
                out["auroc"][b, j] = roc_auc_score(y, x)
    cis = {k: [tuple(np.percentile(v[~np.isnan(v[:, j]), j], [2.5, 97.5]))
               for j in range(values.shape[1])] for k, v in out.items()}
    top, other = np.abs(out["pearson"][:, 0]), np.abs(out["pearson"][:, 1])
    p = (1 + np.sum(top <= other)) / (1 + resamples)
    return cis, p


def test_intervals_and_paired_test_match_a_plain_loop():
    """A small fixed input: 40 rows, binary human, three metrics with ties. Every interval
    and the paired p-value equal those of explicit resamples computed with scipy/sklearn."""
    rng = np.random.default_rng(7)
    human = (rng.random(40) < 0.5).astype(float)
    good = np.round(human * 0.6 + rng.random(40) * 0.5, 1)  # ties on purpose
    weak = np.round(rng.random(40) + human * 0.2, 1)
    values = np.stack([good, weak, human * 0 + rng.integers(0, 3, 40)], axis=1)
    spec = ReportSpec(resamples=200, seed=3)
    scope = meta_evaluate([(None, h, tuple(v)) for h, v in zip(human, values)],
                          ["good", "weak", "noise"], spec)[0]
    cis, p = _loop_bootstrap(human, values, 200, 3)
    rows = {r.metric: r for r in scope.rows}
    for j, name in enumerate(["good", "weak", "noise"]):
        for stat in ("pearson", "spearman", "kendall", "auroc"):
            assert getattr(rows[name], f"{stat}_ci") == pytest.approx(cis[stat][j], abs=1e-9), \
                (name, stat)
    assert scope.rows[0].metric == "good"
    assert rows["weak"].p_vs_top == pytest.approx(p)
    assert rows["good"].p_vs_top is None
    # point estimates stay scipy's / sklearn's
    assert rows["good"].pearson == pytest.approx(stats.pearsonr(good, human)[0])
    assert rows["good"].auroc == pytest.approx(roc_auc_score(human, good))


def _percentile(values: list[float], q: float) -> float:
    """The q-th percentile by linear interpolation between order statistics (numpy's
    default), written out."""
    ordered = sorted(values)
    at = q / 100 * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (at - low) * (ordered[high] - ordered[low])


def test_percentile_interval_by_hand():
    samples = np.array([0.4, 0.1, math.nan, 0.3, 0.2])
    from transforms.scoring.report.bootstrap import interval

    # 2.5th percentile of 0.1..0.4: 0.1 + 0.075 * 0.1; 97.5th: 0.3 + 0.925 * 0.1
    assert interval(samples) == pytest.approx((0.1075, 0.3925))
    assert interval(samples, level=0.9) == pytest.approx((0.115, 0.385))
    assert interval(np.array([0.5, math.nan, math.nan])) is None  # most undefined
    assert interval(np.array([])) is None


def test_hand_computed_interval_on_a_tiny_input():
    """Six rows, eight resamples: each resample's Pearson r by the textbook formula from
    the drawn indices, and the report's 95% interval as the 2.5th and 97.5th percentiles
    of those eight values, interpolated by hand."""
    human = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    metric = np.array([0.0, 2.0, 1.0, 3.0, 5.0, 4.0])
    resamples = 8
    idx = np.random.default_rng(0).integers(0, 6, size=(resamples, 6))
    expected = []
    for rows in idx:
        x, y = metric[rows], human[rows]
        dx, dy = x - x.mean(), y - y.mean()
        expected.append(float((dx * dy).sum() / math.sqrt((dx * dx).sum() * (dy * dy).sum())))
    from transforms.scoring.report.bootstrap import bootstrap

    got = bootstrap(human, metric[:, None], binary=False, resamples=resamples, seed=0)
    assert got.values["pearson"][:, 0] == pytest.approx(expected)
    points = [(None, h, (m,)) for h, m in zip(human, metric)]
    (scope,) = meta_evaluate(points, ["m"], ReportSpec(resamples=resamples, seed=0))
    (row,) = scope.rows
    assert row.pearson == pytest.approx(stats.pearsonr(metric, human)[0])
    assert row.pearson_ci == pytest.approx(
        (_percentile(expected, 2.5), _percentile(expected, 97.5)))
    assert row.pearson_ci[0] < row.pearson_ci[1]


def _separable(n, seed=0):
    rng = np.random.default_rng(seed)
    human = rng.random(n)
    strong = human + rng.normal(0, 0.05, n)
    return rng, human, strong


def test_best_is_named_only_when_it_wins_the_paired_test():
    rng, human, strong = _separable(200)
    weak = human + rng.normal(0, 0.5, n := 200)
    twin = human + rng.normal(0, 0.05, n)  # as good as `strong`, with its own noise
    points = [(None, h, (s, w)) for h, s, w in zip(human, strong, weak)]
    scope = meta_evaluate(points, ["strong", "weak"], ReportSpec(resamples=300))[0]
    assert scope.best is not None and scope.best.metric == "strong"
    assert scope.headline().startswith("best: strong (r = ")
    assert scope.rows[1].p_vs_top < 0.05
    points = [(None, h, (s, w, t)) for h, s, w, t in zip(human, strong, weak, twin)]
    scope = meta_evaluate(points, ["strong", "weak", "twin"], ReportSpec(resamples=300))[0]
    assert scope.best is None
    assert set(scope.tied) == {"strong", "twin"}
    assert scope.headline().startswith("tied (paired bootstrap p >= 0.05): ")


def test_min_n_withholds_best_and_panel_and_lists_the_scope():
    _, human, strong = _separable(40)
    points = [("a" if i < 25 else "b", h, (s, 1 - s)) for i, (h, s) in enumerate(zip(human, strong))]
    scopes = meta_evaluate(points, ["x", "y"], ReportSpec(resamples=100, min_n=30))
    by_title = {s.title: s for s in scopes}
    assert by_title["All rows"].drawn and by_title["System a: all rows"].n == 25
    assert not by_title["System a: all rows"].drawn and by_title["System a: all rows"].best is None
    text = render_markdown(scopes, "label", "r.png")
    assert ("Not drawn in the figure (fewer than 30 rows): System a: all rows (n = 25); "
            "System b: all rows (n = 15).") in text
    scopes = meta_evaluate(points, ["x", "y"], ReportSpec(resamples=100, min_n=10))
    assert all(s.drawn for s in scopes)


def test_system_level_scope_with_three_systems():
    """Each system's mean metric against its mean human value; bootstrap over systems."""
    points = [("a", 0.0, (0.1, 5.0)), ("a", 1.0, (0.3, 5.0)), ("b", 2.0, (0.4, 1.0)),
              ("b", 2.0, (None, 3.0)), ("c", 4.0, (0.9, 0.0)), ("c", 3.0, (0.8, 2.0))]
    scopes = meta_evaluate(points, ["m", "k"], ReportSpec(resamples=50))
    system = next(s for s in scopes if s.level == "systems")
    assert scopes.index(system) == 1  # after "All rows", before the per-system scopes
    assert system.n == 3 and system.drawn and system.best is None  # 3 systems < 30
    means = {name: (h, dict(m)) for name, h, m in system.system_means}
    assert means["a"] == (0.5, {"m": pytest.approx(0.2), "k": 5.0})
    assert means["b"] == (2.0, {"m": 0.4, "k": 2.0})  # the missing m is left out of the mean
    assert means["c"] == (3.5, {"m": pytest.approx(0.85), "k": 1.0})
    rows = {r.metric: r for r in system.rows}
    assert rows["m"].pearson == pytest.approx(stats.pearsonr([0.2, 0.4, 0.85], [0.5, 2, 3.5])[0])
    assert rows["k"].kendall == pytest.approx(-1.0)
    assert scope_table(scopes)[1]["system_means"][0]["system"] == "a"
    assert meta_evaluate(points[:4], ["m", "k"], ReportSpec(resamples=50))[1].level == "rows"


def test_one_metric_order_and_every_drawn_scope_in_the_png(tmp_path):
    """Panels use the All rows order; a PNG with many scopes gets taller, none dropped."""
    rng, human, strong = _separable(400)
    systems = [f"s{i % 14}" for i in range(400)]
    points = [(sy, h, (s, h + rng.normal(0, 0.3), rng.random()))
              for sy, h, s in zip(systems, human, strong)]
    spec = ReportSpec(resamples=50, min_n=20)
    scopes = meta_evaluate(points, ["a", "b", "c"], spec)
    assert metric_order(scopes) == [r.metric for r in scopes[0].rows]
    drawn = [s for s in scopes if s.drawn]
    assert len(drawn) == 16  # all rows, system level, 14 systems (more than the old cap of 12)
    small, big = io.BytesIO(), io.BytesIO()
    render_png(scopes[:2], small, "label")
    render_png(scopes, big, "label")
    height = lambda png: int.from_bytes(png.getvalue()[20:24], "big")  # noqa: E731
    assert height(big) > 6 * height(small)


def test_threshold_sources():
    spec = ReportSpec(saved_thresholds=(("sas", 0.62),))
    assert (spec.threshold("sas"), spec.threshold_source("sas")) == (0.62, "checkpoint")
    assert (spec.threshold("f1"), spec.threshold_source("f1")) == (0.5, "default")
    flag = ReportSpec(default_threshold=0.4, default_given=True, saved_thresholds=(("sas", 0.62),))
    assert (flag.threshold("sas"), flag.threshold_source("sas")) == (0.4, "flag")
    one = ReportSpec(thresholds=(("sas", 0.7),), saved_thresholds=(("sas", 0.62),))
    assert (one.threshold("sas"), one.threshold_source("sas")) == (0.7, "flag")


def test_report_accuracy_uses_the_saved_threshold():
    """sas saved 0.62: at 0.62 the four rows are all right, at 0.5 one is wrong."""
    human = [1.0, 0.0, 1.0, 0.0]
    sas = [0.9, 0.55, 0.7, 0.1]
    points = [(None, h, (s,)) for h, s in zip(human, sas)]
    saved = meta_evaluate(points, ["sas"], ReportSpec(saved_thresholds=(("sas", 0.62),),
                                                     resamples=10))[0].rows[0]
    assert (saved.accuracy, saved.threshold, saved.threshold_source) == (1.0, 0.62, "checkpoint")
    plain = meta_evaluate(points, ["sas"], ReportSpec(resamples=10))[0].rows[0]
    assert (plain.accuracy, plain.threshold, plain.threshold_source) == (0.75, 0.5, "default")
    text = render_markdown(meta_evaluate(points, ["sas"], ReportSpec(
        saved_thresholds=(("sas", 0.62),), resamples=10)), "label", None)
    assert "| 1.000 | 0.6200 (checkpoint) |" in text


def test_a_kendall_interval_left_out_is_said_so(monkeypatch):
    from transforms.scoring.report import bootstrap

    monkeypatch.setattr(bootstrap, "KENDALL_MAX_GRID", 10)
    monkeypatch.setattr(bootstrap, "KENDALL_MAX_LEVELS", 2)
    monkeypatch.setattr(bootstrap, "KENDALL_LOOP_MAX_N", 20)
    _, human, strong = _separable(40)
    scopes = meta_evaluate([(None, h, (s,)) for h, s in zip(human, strong)], ["x"],
                           ReportSpec(resamples=20))
    row = scopes[0].rows[0]
    assert row.kendall_ci is None and row.pearson_ci is not None
    assert "Kendall tau intervals marked [n/a] were not computed" in render_markdown(
        scopes, "label", None)
    monkeypatch.undo()
    scopes = meta_evaluate([(None, h, (s,)) for h, s in zip(human, strong)], ["x"],
                           ReportSpec(resamples=20))
    assert "Kendall tau intervals marked" not in render_markdown(scopes, "label", None)
