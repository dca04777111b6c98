"""Dev and test metrics of the training runs (pure functions on numpy arrays).

- Binary targets: accuracy at 0.5 and AUROC of the sigmoid scores; a decision threshold
  chosen on dev (`choose_threshold`), saved with the checkpoint.
- Graded targets: Pearson and Spearman correlation of scores and targets.
- Keyphrases: over the labelled word positions (the first word-piece of each answer
  word), token-level precision/recall/F1 of the keyphrase class, and exact-span F1 over
  maximal runs of keyphrase words (what seqeval reports for the KPQA release's K/O tags,
  the number behind the paper's 55.8).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

# Higher is better for every metric except these.
LOWER_IS_BETTER = frozenset({"loss"})


def is_binary(labels: Sequence[float]) -> bool:
    """Whether every target is exactly 0 or 1."""
    return all(x in (0.0, 1.0) for x in labels)


def auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (`sklearn.metrics.roc_auc_score`, ties count one half);
    NaN without both classes (scikit-learn would raise)."""
    labels = np.asarray(labels, dtype=bool)
    if labels.all() or not labels.any():
        return math.nan
    from sklearn.metrics import roc_auc_score
    return float(roc_auc_score(labels, np.asarray(scores, dtype=float)))


def binary_metrics(labels: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """accuracy (score >= 0.5 means 1) and auroc."""
    labels = np.asarray(labels)
    predicted = np.asarray(scores) >= 0.5
    return {"accuracy": float(np.mean(predicted == (labels >= 0.5))),
            "auroc": auroc(labels >= 0.5, scores)}


THRESHOLD_OBJECTIVES = ("accuracy", "f1")


class ThresholdChoice(NamedTuple):
    """A decision threshold (score >= threshold means 1) and what it reaches where chosen."""

    threshold: float
    objective: str
    value: float


def choose_threshold(labels: np.ndarray, scores: np.ndarray,
                     objective: str = "accuracy") -> ThresholdChoice:
    """The threshold that maximises accuracy (or F1 of class 1) on (labels, scores).

    Candidates are the midpoints between consecutive distinct scores and one point past
    each end, so the choice depends only on the order of the scores; among equally good
    candidates the one nearest 0.5 wins (the usual default when nothing else tells).

    Args:
        labels: 0/1 targets.
        scores: the metric's scores, higher meaning 1.
        objective: "accuracy" or "f1".

    Returns:
        The ThresholdChoice.

    Raises:
        ValueError: an unknown objective, no rows, or labels and scores of different lengths.
    """
    if objective not in THRESHOLD_OBJECTIVES:
        raise ValueError(f"objective must be one of {THRESHOLD_OBJECTIVES}, got {objective!r}")
    labels = np.asarray(labels, dtype=float) >= 0.5
    scores = np.asarray(scores, dtype=float)
    if len(labels) != len(scores) or not len(labels):
        raise ValueError(f"need as many labels as scores, at least one; got {len(labels)} "
                         f"and {len(scores)}")
    distinct = np.unique(scores)
    candidates = np.concatenate([[distinct[0] - 1e-6], (distinct[:-1] + distinct[1:]) / 2,
                                 [distinct[-1] + 1e-6]])
    # For each candidate t: rows with score >= t are predicted 1. With the scores sorted,
    # those are a suffix, so the counts come from cumulative sums.
    order = np.argsort(scores, kind="stable")
    sorted_scores, sorted_labels = scores[order], labels[order]
    first_at_or_above = np.searchsorted(sorted_scores, candidates, side="left")
    positives_below = np.concatenate([[0], np.cumsum(sorted_labels)])[first_at_or_above]
    n, n_pos = len(labels), int(labels.sum())
    tp = n_pos - positives_below
    predicted_pos = n - first_at_or_above
    if objective == "accuracy":
        tn = (first_at_or_above - positives_below)
        values = (tp + tn) / n
    else:
        denominator = predicted_pos + n_pos
        values = np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)
    best = values.max()
    ties = np.flatnonzero(values >= best - 1e-12)
    pick = ties[np.argmin(np.abs(candidates[ties] - 0.5))]
    return ThresholdChoice(float(candidates[pick]), objective, float(values[pick]))


def accuracy_at(labels: np.ndarray, scores: np.ndarray, threshold: float) -> float:
    """Accuracy when score >= threshold means 1."""
    labels = np.asarray(labels, dtype=float) >= 0.5
    return float(np.mean((np.asarray(scores, dtype=float) >= threshold) == labels))


def value_at(objective: str, labels: np.ndarray, scores: np.ndarray, threshold: float) -> float:
    """Accuracy, or F1 of class 1, when score >= threshold means 1."""
    if objective == "accuracy":
        return accuracy_at(labels, scores, threshold)
    if objective != "f1":
        raise ValueError(f"objective must be one of {THRESHOLD_OBJECTIVES}, got {objective!r}")
    labels = np.asarray(labels, dtype=float) >= 0.5
    predicted = np.asarray(scores, dtype=float) >= threshold
    tp = int((labels & predicted).sum())
    denominator = int(labels.sum()) + int(predicted.sum())
    return 2 * tp / denominator if denominator else 0.0


def graded_metrics(labels: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """pearson and spearman; NaN when either side is constant."""
    labels, scores = np.asarray(labels, dtype=float), np.asarray(scores, dtype=float)
    if len(labels) < 2 or np.ptp(labels) == 0 or np.ptp(scores) == 0:
        return {"pearson": math.nan, "spearman": math.nan}
    from scipy.stats import pearsonr, spearmanr
    return {"pearson": float(pearsonr(labels, scores)[0]),
            "spearman": float(spearmanr(labels, scores)[0])}


def _runs(flags: Sequence[bool]) -> set[tuple[int, int]]:
    runs, start = set(), None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            runs.add((start, i))
            start = None
    return runs


def keyphrase_metrics(gold: Sequence[Sequence[bool]],
                      predicted: Sequence[Sequence[bool]]) -> dict[str, float]:
    """Token-level and exact-span P/R/F1 of the keyphrase class.

    Args:
        gold: per example, per labelled word, whether it is a keyphrase word.
        predicted: the same positions as predicted.

    Returns:
        token_precision, token_recall, token_f1, span_precision, span_recall, span_f1.
    """
    tp = fp = fn = 0
    span_tp = span_pred = span_gold = 0
    for g, p in zip(gold, predicted):
        if len(g) != len(p):
            raise ValueError(f"gold has {len(g)} positions, prediction {len(p)}")
        g_arr, p_arr = np.asarray(g, dtype=bool), np.asarray(p, dtype=bool)
        tp += int((g_arr & p_arr).sum())
        fp += int((~g_arr & p_arr).sum())
        fn += int((g_arr & ~p_arr).sum())
        g_runs, p_runs = _runs(g), _runs(p)
        span_tp += len(g_runs & p_runs)
        span_pred += len(p_runs)
        span_gold += len(g_runs)
    out = {}
    for prefix, hit, n_pred, n_gold in (("token", tp, tp + fp, tp + fn),
                                        ("span", span_tp, span_pred, span_gold)):
        precision = hit / n_pred if n_pred else 0.0
        recall = hit / n_gold if n_gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out.update({f"{prefix}_precision": precision, f"{prefix}_recall": recall,
                    f"{prefix}_f1": f1})
    return out


def improved(metric: str, value: float, best: float | None) -> bool:
    """Whether `value` beats `best` for `metric` (NaN never does; anything beats None)."""
    if value is None or math.isnan(value):
        return False
    if best is None or math.isnan(best):
        return True
    return value < best if metric in LOWER_IS_BETTER else value > best
