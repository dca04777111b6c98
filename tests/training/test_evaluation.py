"""Dev metrics: hand-worked values and the reference implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import roc_auc_score

from transforms.training.evaluation import (
    auroc,
    binary_metrics,
    graded_metrics,
    improved,
    is_binary,
    keyphrase_metrics,
)


@pytest.mark.parametrize("labels, scores, expected", [
    ([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9], 1.0),
    ([0, 0, 1, 1], [0.9, 0.8, 0.2, 0.1], 0.0),
    ([0, 1], [0.5, 0.5], 0.5),
    ([0, 1, 1], [0.4, 0.4, 0.6], 0.75),
    ([1, 1], [0.1, 0.2], math.nan),
])
def test_auroc_table(labels, scores, expected):
    value = auroc(np.array(labels), np.array(scores))
    assert (math.isnan(value) and math.isnan(expected)) or value == pytest.approx(expected)


def test_auroc_and_correlations_match_references():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 300)
    scores = np.round(rng.random(300) + 0.3 * labels, 2)  # rounded: ties
    assert auroc(labels, scores) == pytest.approx(roc_auc_score(labels, scores))
    graded = rng.random(300)
    got = graded_metrics(graded, scores)
    assert got["pearson"] == pytest.approx(pearsonr(graded, scores)[0])
    assert got["spearman"] == pytest.approx(spearmanr(graded, scores)[0])


def test_binary_metrics_and_constant_inputs():
    assert binary_metrics(np.array([0, 1, 1]), np.array([0.2, 0.7, 0.4])) == pytest.approx(
        {"accuracy": 2 / 3, "auroc": 1.0})
    assert all(math.isnan(v) for v in graded_metrics(np.array([1.0, 2.0]),
                                                     np.array([0.5, 0.5])).values())
    assert is_binary([0.0, 1.0, 1.0]) and not is_binary([0.0, 0.4])


def test_keyphrase_metrics_hand_worked():
    gold = [[False, True, True, False, True], [True, False]]
    pred = [[False, True, False, False, True], [False, True]]
    got = keyphrase_metrics(gold, pred)
    # tokens: tp 2 (positions 1 and 4), fp 1, fn 2 -> P 2/3, R 2/4
    assert got["token_precision"] == pytest.approx(2 / 3)
    assert got["token_recall"] == pytest.approx(0.5)
    assert got["token_f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    # spans: gold {(1,3), (4,5)}, {(0,1)}; predicted {(1,2), (4,5)}, {(1,2)} -> 1 exact of 3/3
    assert got["span_precision"] == pytest.approx(1 / 3)
    assert got["span_recall"] == pytest.approx(1 / 3)
    assert keyphrase_metrics([], [])["token_f1"] == 0.0
    with pytest.raises(ValueError):
        keyphrase_metrics([[True]], [[True, False]])


def test_improved():
    assert improved("auroc", 0.7, None) and improved("auroc", 0.7, 0.6)
    assert not improved("auroc", 0.6, 0.6) and not improved("auroc", math.nan, 0.1)
    assert improved("loss", 0.3, 0.4) and not improved("loss", 0.5, 0.4)


@pytest.mark.parametrize(("labels", "scores", "objective", "threshold", "value"), [
    # Separable: the midpoint between the classes.
    ([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4], "accuracy", 0.25, 1.0),
    # 0.15 and 0.35 both give 3/4: the one nearer 0.5 wins.
    ([0, 1, 0, 1], [0.1, 0.2, 0.3, 0.4], "accuracy", 0.35, 0.75),
    # One class only: every row predicted 1 (just below the lowest score).
    ([1, 1, 1], [0.1, 0.2, 0.3], "accuracy", 0.1 - 1e-6, 1.0),
    # Tied scores stay together: 0.6 holds one 0 and one 1.
    ([0, 0, 1, 1, 1], [0.2, 0.6, 0.6, 0.9, 0.9], "accuracy", 0.4, 0.8),
    # F1 prefers predicting the positives generously: 2*3/(3+4) at 0.4 vs 2*2/(3+2) at 0.75.
    ([0, 0, 1, 1, 1], [0.2, 0.6, 0.6, 0.9, 0.9], "f1", 0.4, 6 / 7),
])
def test_choose_threshold(labels, scores, objective, threshold, value):
    from transforms.training.evaluation import choose_threshold, value_at

    choice = choose_threshold(labels, scores, objective)
    assert choice.threshold == pytest.approx(threshold)
    assert choice.value == pytest.approx(value)
    assert value_at(objective, labels, scores, choice.threshold) == pytest.approx(value)


def test_choose_threshold_rejects_bad_input():
    from transforms.training.evaluation import choose_threshold

    with pytest.raises(ValueError, match="objective must be one of"):
        choose_threshold([0, 1], [0.1, 0.2], "auroc")
    with pytest.raises(ValueError, match="as many labels as scores"):
        choose_threshold([0, 1], [0.1])
    with pytest.raises(ValueError, match="at least one"):
        choose_threshold([], [])
