"""Dev and test metrics of the training runs (pure functions on numpy arrays).

- Binary targets: accuracy at 0.5 and AUROC of the sigmoid scores.
- Graded targets: Pearson and Spearman correlation of scores and targets.
- Keyphrases: over the labelled word positions (the first word-piece of each answer
  word), token-level precision/recall/F1 of the keyphrase class, and exact-span F1 over
  maximal runs of keyphrase words (what seqeval reports for the KPQA release's K/O tags,
  the number behind the paper's 55.8).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Higher is better for every metric except these.
LOWER_IS_BETTER = frozenset({"loss"})


def is_binary(labels: Sequence[float]) -> bool:
    """Whether every target is exactly 0 or 1."""
    return all(x in (0.0, 1.0) for x in labels)


def auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half); NaN without both classes."""
    labels = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if not n_pos or not n_neg:
        return math.nan
    from scipy.stats import rankdata
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def binary_metrics(labels: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """accuracy (score >= 0.5 means 1) and auroc."""
    labels = np.asarray(labels)
    predicted = np.asarray(scores) >= 0.5
    return {"accuracy": float(np.mean(predicted == (labels >= 0.5))),
            "auroc": auroc(labels >= 0.5, scores)}


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
