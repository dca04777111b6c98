"""Meta-evaluation: how well each metric agrees with the human judgments.

Pure Python + numpy/scipy, no Beam; report_render.py draws the result
(markdown tables, PNG). Given `(system, human, metric values)` points, `meta_evaluate`
computes per metric Pearson r, Spearman rho and Kendall tau-b with two-sided p-values
(scipy), and for binary labels (every human value 0 or 1) accuracy at the metric's
threshold (score >= threshold counts as 1; see report_spec.py for where a threshold comes
from) and AUROC (the value of `sklearn.metrics.roc_auc_score`, from mid-ranks). Every
correlation and AUROC gets a 95% percentile bootstrap interval (bootstrap.py: rows
resampled `spec.resamples` times with the fixed `spec.seed`, the same resamples for every
metric of a scope).

Scopes: all rows, each user subset (`--report_subsets`), the same per system when there is
more than one, and with three or more systems a system-level scope (one point per system:
its mean human value against its mean metric value; the bootstrap resamples systems).
Within a scope metrics are sorted by |Pearson r|. The top metric is tested against each
other defined metric with a paired bootstrap (one-sided p that its |r| is larger, see
`bootstrap.paired_p_value`); it is named "best" only when every p < 0.05 and the scope has
at least `spec.min_n` rows (system level: systems); otherwise the scope reports the tied
metrics, or that n is too small.

Subsets are conditions on the metric columns (or `human`): `f1>0`, `f1=0`, `em=0&f1>0`;
several subsets are separated by commas: `--report_subsets 'f1>0,f1=0'`.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from transforms.scoring.report import bootstrap as bootstrap_lib
from transforms.scoring.report.report_spec import HUMAN, OPS, ReportSpec, Subset

ALPHA = 0.05
SYSTEM_LEVEL_MIN_SYSTEMS = 3
SYSTEM_LEVEL_TITLE = "System level"
Interval = tuple[float, float]


def fmt(value: float | None, digits: int = 3) -> str:
    """A value for the report: `digits` decimals, n/a when undefined."""
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.{digits}f}"


def fmt_ci(ci: Interval | None, digits: int = 3) -> str:
    """A 95% interval for the report, [n/a] when not computed."""
    return "[n/a]" if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


@dataclasses.dataclass(frozen=True)
class Agreement:
    """Agreement of one metric with the human values in one scope.

    `*_ci` are 95% bootstrap intervals (None: undefined in most resamples, or not
    computed); `p_vs_top` is the paired bootstrap p-value of the scope's top metric against
    this one (None for the top metric itself and undefined metrics).
    """

    metric: str
    n: int
    pearson: float
    pearson_p: float
    spearman: float
    spearman_p: float
    kendall: float
    kendall_p: float
    accuracy: float | None = None
    threshold: float | None = None
    auroc: float | None = None
    threshold_source: str | None = None
    pearson_ci: Interval | None = None
    spearman_ci: Interval | None = None
    kendall_ci: Interval | None = None
    auroc_ci: Interval | None = None
    p_vs_top: float | None = None


@dataclasses.dataclass(frozen=True)
class Scope:
    """One table of the report: a subset of rows, possibly of one system, or the system
    level (`level == "systems"`: n counts systems, `system_means` holds the points)."""

    title: str
    system: str | None
    subset: str | None
    n: int
    binary: bool
    rows: tuple[Agreement, ...]
    best: Agreement | None = None
    tied: tuple[str, ...] = ()
    min_n: int = 0
    level: str = "rows"
    system_means: tuple[tuple[str, float, tuple[tuple[str, float], ...]], ...] = ()

    @property
    def unit(self) -> str:
        return "systems" if self.level == "systems" else "rows"

    @property
    def enough(self) -> bool:
        """Whether n reaches the minimum to name a best metric."""
        return self.n >= self.min_n

    @property
    def drawn(self) -> bool:
        """Whether the PNG has a panel for this scope."""
        if self.level == "systems":
            return self.n >= SYSTEM_LEVEL_MIN_SYSTEMS
        return self.n > 0 and self.enough

    def headline(self) -> str:
        """One line: the best metric, the tied ones, or why none is named."""
        if not self.n:
            return "no rows"
        if not self.enough:
            return f"n = {self.n} {self.unit} < {self.min_n}: no best metric named"
        if self.best is not None:
            return (f"best: {self.best.metric} (r = {fmt(self.best.pearson)} "
                    f"{fmt_ci(self.best.pearson_ci)}; paired bootstrap p < {ALPHA} "
                    "against every other metric)")
        if len(self.tied) == 1:
            return f"only {self.tied[0]} is defined here (the others are constant): not ranked"
        if self.tied:
            return f"tied (paired bootstrap p >= {ALPHA}): {', '.join(self.tied)}"
        return "undefined: a constant metric or human value"


def auroc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve of binary `labels` (0/1) ranked by `scores`, ties counting
    one half (the value of `sklearn.metrics.roc_auc_score`); None without both classes.

    Computed as the Mann-Whitney count from the scores' mid-ranks: scikit-learn is then
    imported by no scoring run (0.4 s after scipy's import on its own, about 0.1 s more
    of a `qa-score` run, where Beam has imported part of it), and
    the rank sums are exact in float64 up to tens of millions of rows."""
    from scipy import stats

    labels = np.asarray(labels)
    positives = labels == 1
    n_pos = int(positives.sum())
    n_neg = len(labels) - n_pos
    if not n_pos or not n_neg:
        return None
    ranks = stats.rankdata(np.asarray(scores, dtype=float))
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _correlations(human: np.ndarray, values: np.ndarray) -> tuple[float, ...]:
    from scipy import stats

    if len(human) < 3 or np.ptp(human) == 0 or np.ptp(values) == 0:
        return (math.nan,) * 6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pearson = stats.pearsonr(values, human)
        spearman = stats.spearmanr(values, human)
        kendall = stats.kendalltau(values, human)
    return (float(pearson[0]), float(pearson[1]), float(spearman[0]), float(spearman[1]),
            float(kendall[0]), float(kendall[1]))


def agreement(metric: str, human: np.ndarray, values: np.ndarray, binary: bool,
              threshold: float, threshold_source: str | None = None) -> Agreement:
    """Correlations (and for binary labels accuracy and AUROC) of one metric; no intervals
    (`meta_evaluate` adds them)."""
    keep = ~np.isnan(values)
    human, values = human[keep], values[keep]
    extra: dict[str, Any] = {}
    if binary and len(human):
        extra = {"accuracy": float(np.mean((values >= threshold) == (human == 1))),
                 "threshold": threshold, "auroc": auroc(human, values),
                 "threshold_source": threshold_source}
    return Agreement(metric, len(human), *_correlations(human, values), **extra)


def _sort_key(row: Agreement) -> tuple[bool, float, str]:
    return (math.isnan(row.pearson), -abs(row.pearson) if not math.isnan(row.pearson) else 0.0,
            row.metric)


class _Rows(NamedTuple):
    """One scope's rows before its statistics: what `_with_statistics` needs."""

    title: str
    system: str | None
    subset: str | None
    human: np.ndarray
    values: np.ndarray
    binary: bool
    level: str = "rows"
    system_means: tuple = ()


def _with_statistics(scope: _Rows, boot: bootstrap_lib.Bootstrap, columns: Sequence[str],
                     spec: ReportSpec) -> Scope:
    """Point estimates, bootstrap intervals, the paired test and the verdict of one scope."""
    human, values, binary = scope.human, scope.values, scope.binary
    rows = [agreement(c, human, values[:, i], binary, spec.threshold(c),
                      spec.threshold_source(c)) for i, c in enumerate(columns)]
    samples = boot.values
    with_ci = []
    for i, row in enumerate(rows):
        cis = {f"{k}_ci": bootstrap_lib.interval(samples[k][:, i])
               for k in ("pearson", "spearman", "kendall")}
        if i in boot.kendall_missing:
            cis["kendall_ci"] = None
        if binary and row.auroc is not None:
            cis["auroc_ci"] = bootstrap_lib.interval(samples["auroc"][:, i])
        with_ci.append(dataclasses.replace(row, **cis))
    ordered = sorted(range(len(columns)), key=lambda i: _sort_key(with_ci[i]))
    defined = [i for i in ordered if not math.isnan(with_ci[i].pearson)]
    best, tied = None, ()
    if defined:
        top = defined[0]
        pvalues = {i: bootstrap_lib.paired_p_value(samples["pearson"][:, top],
                                                   samples["pearson"][:, i])
                   for i in defined[1:]}
        with_ci = [dataclasses.replace(r, p_vs_top=pvalues.get(i)) for i, r in enumerate(with_ci)]
        close = [i for i in defined[1:] if not pvalues[i] < ALPHA]
        if len(human) >= spec.min_n:
            if close or len(defined) == 1:
                tied = tuple(columns[i] for i in (top, *close))
            else:
                best = with_ci[top]
    return Scope(scope.title, scope.system, scope.subset, len(human), binary,
                 tuple(with_ci[i] for i in ordered), best, tied, spec.min_n, scope.level,
                 scope.system_means)


def _scope(title: str, system: str | None, subset: Subset | None, human: np.ndarray,
           values: np.ndarray, columns: Sequence[str]) -> _Rows:
    mask = np.ones(len(human), dtype=bool)
    for condition in subset.conditions if subset else ():
        column = human if condition.column == HUMAN else values[:, columns.index(condition.column)]
        mask &= OPS[condition.op](column, condition.value)
    if not mask.all():  # every scope's rows are held until the bootstrap: no copy of all
        human, values = human[mask], values[mask]
    binary = bool(len(human)) and bool(np.all((human == 0) | (human == 1)))
    return _Rows(title, system, subset.name if subset else None, human, values, binary)


def _system_level(systems: np.ndarray, names: Sequence[str], human: np.ndarray,
                  values: np.ndarray, columns: Sequence[str]) -> _Rows:
    """One point per system: mean human value and mean of each metric (NaN left out)."""
    human_means, metric_means = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a metric with no value in a system
        for name in names:
            mask = systems == name
            human_means.append(float(np.mean(human[mask])))
            metric_means.append(np.nanmean(values[mask], axis=0))
    means = np.array(metric_means, dtype=float).reshape(len(names), len(columns))
    points = tuple((name or "(no system)", h,
                    tuple((c, float(v)) for c, v in zip(columns, row, strict=True)))
                   for name, h, row in zip(names, human_means, means, strict=True))
    return _Rows(f"{SYSTEM_LEVEL_TITLE}: mean metric against mean human value", None, None,
                 np.array(human_means), means, binary=False, level="systems",
                 system_means=points)


def meta_evaluate(points: Sequence[tuple[str | None, float | None, Sequence[float | None]]],
                  columns: Sequence[str], spec: ReportSpec,
                  threads: int | None = None) -> list[Scope]:
    """Computes every scope of the report.

    Args:
        points: (system, human, metric values in `columns` order) per scored row; rows
            without a human value are skipped.
        columns: the metric columns.
        spec: subsets, thresholds, minimum n and bootstrap settings.
        threads: threads of the bootstrap (None: `bootstrap.default_threads()`); the
            values do not depend on it.

    Returns:
        The scopes: all rows, then each subset; with three or more systems the system
        level; then, with more than one system, all rows and each subset per system
        (sorted by name). Scope k's bootstrap uses seed `spec.seed + k`.
    """
    columns = list(columns)
    kept = [p for p in points if p[1] is not None]
    systems = np.array([p[0] if p[0] is not None else "" for p in kept], dtype=object)
    human = np.array([p[1] for p in kept], dtype=float)
    values = np.array([[math.nan if v is None else v for v in p[2]] for p in kept],
                      dtype=float).reshape(len(kept), len(columns))
    subsets: list[Subset | None] = [None, *spec.subsets]
    scopes = [_scope("All rows" if s is None else f"Subset {s.name}", None, s, human, values,
                     columns) for s in subsets]
    names = sorted(set(systems.tolist()))
    if len(names) >= SYSTEM_LEVEL_MIN_SYSTEMS:
        scopes.append(_system_level(systems, names, human, values, columns))
    if len(names) > 1:
        for name in names:
            mask = systems == name
            label = name or "(no system)"
            for s in subsets:
                scopes.append(_scope(
                    f"System {label}: " + ("all rows" if s is None else f"subset {s.name}"),
                    label, s, human[mask], values[mask], columns))
    boots = bootstrap_lib.bootstrap_scopes(
        [bootstrap_lib.Resampling(scope.human, scope.values, scope.binary, spec.seed + k)
         for k, scope in enumerate(scopes)], spec.resamples, threads)
    return [_with_statistics(scope, boot, columns, spec)
            for scope, boot in zip(scopes, boots, strict=True)]


def metric_order(scopes: Sequence[Scope]) -> list[str]:
    """One metric order for every panel: the first scope's (by |Pearson r| there)."""
    return [r.metric for r in scopes[0].rows] if scopes else []


def scope_table(scopes: Sequence[Scope]) -> list[dict[str, Any]]:
    """The scopes as JSON-friendly dicts (for tests and machine use)."""
    return [{"title": s.title, "system": s.system, "subset": s.subset, "n": s.n,
             "level": s.level, "binary": s.binary, "min_n": s.min_n, "drawn": s.drawn,
             "best": s.best.metric if s.best else None, "tied": list(s.tied),
             "headline": s.headline(), "rows": [dataclasses.asdict(r) for r in s.rows],
             **({"system_means": [{"system": name, "human": h, "metrics": dict(means)}
                                  for name, h, means in s.system_means]}
                if s.system_means else {})}
            for s in scopes]


def point(record: Mapping[str, Any], columns: Sequence[str]) -> tuple:
    """A scored record reduced to (system, human, metric values) for `meta_evaluate`."""
    return record.get("system"), record.get("human"), tuple(record.get(c) for c in columns)
