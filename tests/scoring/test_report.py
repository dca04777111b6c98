"""Tests for transforms/scoring/report.py: subsets, thresholds, agreement, rendering."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from scipy import stats

from transforms.scoring.report import (
    agreement,
    auroc,
    meta_evaluate,
    render_markdown,
    render_png,
    scope_table,
)
from transforms.scoring.report_spec import (
    Condition,
    ReportSpec,
    Subset,
    parse_subsets,
    parse_thresholds,
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
    assert scopes[0].best.metric == "f1"
    assert abs(scopes[0].rows[0].pearson) >= abs(scopes[0].rows[1].pearson)


def test_one_system_has_no_per_system_scopes():
    scopes = meta_evaluate([(None, float(i), (float(i), 1.0)) for i in range(5)], COLUMNS,
                           ReportSpec())
    assert len(scopes) == 1 and not scopes[0].binary
    assert scopes[0].rows[0].metric == "em" and scopes[0].rows[0].pearson == pytest.approx(1)
    assert math.isnan(scopes[0].rows[1].pearson)


def test_render_markdown_and_png():
    scopes = meta_evaluate(POINTS, COLUMNS, ReportSpec())
    text = render_markdown(scopes, "label", "x.report.png")
    assert "| All rows | 6 | f1 |" in text
    assert "![Pearson, Spearman and Kendall per metric](x.report.png)" in text
    assert "| accuracy | threshold | AUROC |" in text
    buffer = io.BytesIO()
    render_png(scopes, buffer)
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    assert scope_table(scopes)[0]["rows"][0]["metric"] == "f1"


def test_render_markdown_without_human_values():
    scopes = meta_evaluate([("a", None, (1.0, 1.0))], COLUMNS, ReportSpec())
    assert "No scored row has a value" in render_markdown(scopes, "label", None)
    render_png(scopes, io.BytesIO())
