"""Meta-evaluation: how well each metric agrees with the human judgments.

Pure Python + numpy/scipy/scikit-learn/matplotlib, no Beam. Given `(system, human, metric
values)` points, `meta_evaluate` computes per metric Pearson r, Spearman rho and Kendall
tau-b with two-sided p-values (scipy), and for binary labels (every human value 0 or 1)
accuracy at the metric's threshold (score >= threshold counts as 1; see report_spec.py for
where a threshold comes from) and AUROC (`sklearn.metrics.roc_auc_score`). Every
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
from typing import IO, Any

import numpy as np

from transforms.scoring import bootstrap as bootstrap_lib
from transforms.scoring.report_spec import HUMAN, OPS, ReportSpec, Subset

ALPHA = 0.05
SYSTEM_LEVEL_MIN_SYSTEMS = 3
SYSTEM_LEVEL_TITLE = "System level"
Interval = tuple[float, float]


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
            return (f"best: {self.best.metric} (r = {_fmt(self.best.pearson)} "
                    f"{_fmt_ci(self.best.pearson_ci)}; paired bootstrap p < {ALPHA} "
                    "against every other metric)")
        if len(self.tied) == 1:
            return f"only {self.tied[0]} is defined here (the others are constant): not ranked"
        if self.tied:
            return f"tied (paired bootstrap p >= {ALPHA}): {', '.join(self.tied)}"
        return "undefined: a constant metric or human value"


def auroc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve of binary `labels` (0/1) ranked by `scores`
    (`sklearn.metrics.roc_auc_score`, ties averaged); None without both classes."""
    from sklearn.metrics import roc_auc_score

    labels = np.asarray(labels)
    positives = labels == 1
    if positives.all() or not positives.any():
        return None
    return float(roc_auc_score(positives, np.asarray(scores, dtype=float)))


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


def _with_statistics(title: str, system: str | None, subset: str | None, human: np.ndarray,
                     values: np.ndarray, columns: Sequence[str], spec: ReportSpec,
                     binary: bool, level: str = "rows", seed_offset: int = 0,
                     system_means: tuple = ()) -> Scope:
    """Point estimates, bootstrap intervals, the paired test and the verdict of one scope."""
    rows = [agreement(c, human, values[:, i], binary, spec.threshold(c),
                      spec.threshold_source(c)) for i, c in enumerate(columns)]
    boot = bootstrap_lib.bootstrap(human, values, binary, spec.resamples,
                                   spec.seed + seed_offset)
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
    return Scope(title, system, subset, len(human), binary,
                 tuple(with_ci[i] for i in ordered), best, tied, spec.min_n, level,
                 system_means)


def _scope(title: str, system: str | None, subset: Subset | None, human: np.ndarray,
           values: np.ndarray, columns: Sequence[str], spec: ReportSpec,
           seed_offset: int) -> Scope:
    mask = np.ones(len(human), dtype=bool)
    for condition in subset.conditions if subset else ():
        column = human if condition.column == HUMAN else values[:, columns.index(condition.column)]
        mask &= OPS[condition.op](column, condition.value)
    human, values = human[mask], values[mask]
    binary = bool(len(human)) and bool(np.all((human == 0) | (human == 1)))
    return _with_statistics(title, system, subset.name if subset else None, human, values,
                            columns, spec, binary, seed_offset=seed_offset)


def _system_level(systems: np.ndarray, names: Sequence[str], human: np.ndarray,
                  values: np.ndarray, columns: Sequence[str], spec: ReportSpec,
                  seed_offset: int) -> Scope:
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
    return _with_statistics(f"{SYSTEM_LEVEL_TITLE}: mean metric against mean human value",
                            None, None,
                            np.array(human_means), means, columns,
                            spec, binary=False, level="systems", seed_offset=seed_offset,
                            system_means=points)


def meta_evaluate(points: Sequence[tuple[str | None, float | None, Sequence[float | None]]],
                  columns: Sequence[str], spec: ReportSpec) -> list[Scope]:
    """Computes every scope of the report.

    Args:
        points: (system, human, metric values in `columns` order) per scored row; rows
            without a human value are skipped.
        columns: the metric columns.
        spec: subsets, thresholds, minimum n and bootstrap settings.

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
                     columns, spec, k) for k, s in enumerate(subsets)]
    names = sorted(set(systems.tolist()))
    if len(names) >= SYSTEM_LEVEL_MIN_SYSTEMS:
        scopes.append(_system_level(systems, names, human, values, columns, spec, len(scopes)))
    if len(names) > 1:
        for name in names:
            mask = systems == name
            label = name or "(no system)"
            for s in subsets:
                scopes.append(_scope(
                    f"System {label}: " + ("all rows" if s is None else f"subset {s.name}"),
                    label, s, human[mask], values[mask], columns, spec, len(scopes)))
    return scopes


def metric_order(scopes: Sequence[Scope]) -> list[str]:
    """One metric order for every panel: the first scope's (by |Pearson r| there)."""
    return [r.metric for r in scopes[0].rows] if scopes else []


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _fmt_p(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value == 0.0:
        return "<1e-300"  # underflow: scipy returns exactly 0
    return f"{value:.2e}" if value < 1e-3 else f"{value:.3f}"


def _fmt_ci(ci: Interval | None, digits: int = 3) -> str:
    return "[n/a]" if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _fmt_p_test(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.3f}"


def render_markdown(scopes: Sequence[Scope], human_column: str, image_name: str | None,
                    resamples: int | None = None) -> str:
    """The report as markdown: a headline per scope, then one table per scope.

    Args:
        scopes: from `meta_evaluate`.
        human_column: the input column holding the human judgments.
        image_name: the PNG's file name, linked at the top (None: no link).
        resamples: the bootstrap resamples, stated in the notes (None: not stated).

    Returns:
        The markdown text.
    """
    lines = ["# Agreement of metrics with human judgments", ""]
    if not scopes or scopes[0].n == 0:
        lines.append(f"No scored row has a value in the human column `{human_column}`.")
        return "\n".join(lines) + "\n"
    min_n = scopes[0].min_n
    how_many = f"{resamples} " if resamples else ""
    notes = [f"Human column: `{human_column}`. Metrics are sorted by |Pearson r|, best first;",
             "p-values are two-sided (scipy.stats pearsonr, spearmanr, kendalltau tau-b);",
             "n/a means undefined (fewer than 3 rows, or a constant metric or human value).",
             f"Brackets: 95% percentile bootstrap intervals ({how_many}resamples of the rows, "
             "fixed seed; the system level resamples systems).",
             "`p vs top`: paired bootstrap, one-sided, that the top metric's |r| exceeds this",
             f"metric's. A best metric is named only when every such p < {ALPHA} and the scope",
             f"has at least {min_n} rows (system level: {min_n} systems); otherwise the",
             "metrics within reach of the top one are listed as tied.", ""]
    if any(r.kendall_ci is None and r.pearson_ci is not None and not math.isnan(r.kendall)
           for s in scopes for r in s.rows):
        notes += ["Kendall tau intervals marked [n/a] were not computed: the metric and the "
                  f"human values both have more than {bootstrap_lib.KENDALL_MAX_LEVELS}",
                  f"distinct values and there are more than {bootstrap_lib.KENDALL_LOOP_MAX_N:,} "
                  "rows (see docs/decisions.md).", ""]
    if any(s.binary for s in scopes):
        notes += ["Binary labels: accuracy counts a row as 1 when its score >= the threshold",
                  "shown (its source: `flag` --accuracy_threshold, `checkpoint` the model's",
                  "saved decision threshold, `default` 0.5); AUROC ranks the rows by score",
                  "(sklearn roc_auc_score, ties averaged).", ""]
    lines += notes
    lines += ["| scope | n | verdict | top metric | Pearson r [95% CI] |",
              "|---|---:|---|---|---|"]
    for scope in scopes:
        top = scope.rows[0] if scope.rows and not math.isnan(scope.rows[0].pearson) else None
        lines.append(f"| {scope.title} | {scope.n} {scope.unit} | {scope.headline()} | "
                     f"{top.metric if top else 'n/a'} | "
                     f"{_fmt(top.pearson) + ' ' + _fmt_ci(top.pearson_ci) if top else 'n/a'} |")
    lines.append("")
    skipped = [s for s in scopes if s.n and not s.drawn]
    if image_name:
        lines += [f"![Pearson, Spearman and Kendall per metric]({image_name})", ""]
    if skipped:
        lines += [f"Not drawn in the figure (fewer than {min_n} rows): " + "; ".join(
            f"{s.title} (n = {s.n})" for s in skipped) + ".", ""]
    for scope in scopes:
        lines += [f"## {scope.title} (n = {scope.n} {scope.unit})", "", scope.headline(), ""]
        header = ("| rank | metric | n | Pearson r | 95% CI | p | Spearman rho | 95% CI | p | "
                  "Kendall tau | 95% CI | p | p vs top |")
        rule = "|---:|---|---:|---:|---|---:|---:|---|---:|---:|---|---:|---:|"
        if scope.binary:
            header += " accuracy | threshold | AUROC | 95% CI |"
            rule += "---:|---:|---:|---|"
        lines += [header, rule]
        for rank, row in enumerate(scope.rows, start=1):
            line = (f"| {rank} | {row.metric} | {row.n} | {_fmt(row.pearson)} | "
                    f"{_fmt_ci(row.pearson_ci)} | {_fmt_p(row.pearson_p)} | "
                    f"{_fmt(row.spearman)} | {_fmt_ci(row.spearman_ci)} | "
                    f"{_fmt_p(row.spearman_p)} | {_fmt(row.kendall)} | "
                    f"{_fmt_ci(row.kendall_ci)} | {_fmt_p(row.kendall_p)} | "
                    f"{_fmt_p_test(row.p_vs_top)} |")
            if scope.binary:
                source = f" ({row.threshold_source})" if row.threshold_source else ""
                line += (f" {_fmt(row.accuracy)} | {_fmt(row.threshold, 4)}{source} | "
                         f"{_fmt(row.auroc)} | {_fmt_ci(row.auroc_ci) if row.auroc is not None else ''} |")
            lines.append(line)
        lines.append("")
    return "\n".join(lines)


_KINDS = (("pearson", "Pearson r", "#1f77b4"), ("spearman", "Spearman rho", "#ff7f0e"),
          ("kendall", "Kendall tau", "#2ca02c"))
MAX_PNG_PIXELS = 60000  # matplotlib refuses images beyond 2**16 pixels a side


def _error(value: float, ci: Interval | None) -> tuple[float, float]:
    if ci is None or math.isnan(value):
        return 0.0, 0.0
    return max(value - ci[0], 0.0), max(ci[1] - value, 0.0)


def _bars(ax: Any, rows: Sequence[Agreement | None], kinds: Sequence[tuple[str, str, str]],
          names: Sequence[str]) -> None:
    y = np.arange(len(names))[::-1]
    height = 0.8 / len(kinds)
    for k, (attr, label, color) in enumerate(kinds):
        vals = [getattr(r, attr) if r is not None and getattr(r, attr) is not None else math.nan
                for r in rows]
        errs = np.array([_error(v, getattr(r, f"{attr}_ci") if r is not None else None)
                         for v, r in zip(vals, rows, strict=True)]).T.reshape(2, len(rows))
        offset = (len(kinds) - 1) / 2 - k
        ax.barh(y + offset * height, np.nan_to_num(vals), height=height, label=label,
                color=color, xerr=errs, error_kw={"elinewidth": 0.8, "capsize": 2,
                                                  "ecolor": "#333333"})
    ax.set_yticks(y, names)
    ax.grid(axis="x", alpha=0.3)


def _correlation_panel(ax: Any, scope: Scope, order: Sequence[str], human_column: str) -> None:
    by_metric = {r.metric: r for r in scope.rows}
    rows = [by_metric.get(m) for m in order]
    _bars(ax, rows, _KINDS, order)
    for y, row in zip(np.arange(len(order))[::-1], rows, strict=True):
        if row is None or math.isnan(row.pearson):
            ax.text(0.02, y, "n/a (constant metric or human value)", va="center", fontsize=7,
                    color="#555555", transform=ax.get_yaxis_transform())
    ax.axvline(0, color="black", linewidth=0.6)
    lows = [min(r.pearson_ci[0] if r.pearson_ci else r.pearson, r.spearman, r.kendall)
            for r in scope.rows if not math.isnan(r.pearson)]
    ax.set_xlim(min([-0.1, *lows]) - 0.05, 1.05)
    ax.set_xlabel(f"correlation with human `{human_column}` over {scope.unit} (Pearson r, "
                  "Spearman rho, Kendall tau; bars: 95% bootstrap CI)", fontsize=8)
    ax.set_title(f"{scope.title} (n = {scope.n} {scope.unit})\n{_wrap(scope.headline())}",
                 fontsize=9)


def _auroc_panel(ax: Any, scope: Scope, order: Sequence[str], human_column: str) -> None:
    by_metric = {r.metric: r for r in scope.rows}
    _bars(ax, [by_metric.get(m) for m in order], (("auroc", "AUROC", "#9467bd"),), order)
    ax.axvline(0.5, color="black", linewidth=0.6, linestyle="--")
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel(f"AUROC for human `{human_column}` = 1 (bars: 95% bootstrap CI; dashed: "
                  "chance)", fontsize=8)
    ax.set_title(f"{scope.title}: AUROC", fontsize=9)


def _system_panel(ax: Any, scope: Scope, order: Sequence[str], human_column: str) -> None:
    """Each system's mean human value (x) against its mean metric value (y), per metric
    min-max scaled over the systems so that metrics of different ranges share the axis."""
    human = np.array([p[1] for p in scope.system_means])
    per_system = [dict(p[2]) for p in scope.system_means]
    columns = [m for m in order if m in per_system[0]]
    cmap = _cmap(len(columns))
    for k, metric in enumerate(columns):
        vals = np.array([means[metric] for means in per_system])
        span = np.nanmax(vals) - np.nanmin(vals) if np.isfinite(vals).any() else 0.0
        scaled = (vals - np.nanmin(vals)) / span if span > 0 else np.full_like(vals, 0.5)
        by_human = np.argsort(human, kind="stable")
        ax.plot(human[by_human], scaled[by_human], marker="o", linewidth=0.8, alpha=0.8,
                color=cmap(k), label=metric)
    names = [p[0] for p in scope.system_means]
    for rank, i in enumerate(np.argsort(human, kind="stable")):
        # staggered in height, so that systems with close human means stay readable
        ax.annotate(names[i], (human[i], 1.04 + 0.09 * (rank % 3)), fontsize=7, ha="center",
                    va="bottom", annotation_clip=False)
        ax.axvline(human[i], color="#999999", linewidth=0.4, linestyle=":")
    ax.set_ylim(-0.05, 1.35)
    ax.set_xlabel(f"system mean of human `{human_column}`", fontsize=8)
    ax.set_ylabel("system mean metric (min-max scaled per metric)", fontsize=8)
    ax.set_title(f"{SYSTEM_LEVEL_TITLE}: each system's means", fontsize=9)
    ax.legend(fontsize=7, loc="best", ncol=2)
    ax.grid(alpha=0.3)


def _cmap(n: int) -> Any:
    import matplotlib

    return matplotlib.colormaps["tab10" if n <= 10 else "tab20"]


def _wrap(text: str, width: int = 90) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def render_png(scopes: Sequence[Scope], fobj: IO[bytes], human_column: str = HUMAN) -> None:
    """Draws every scope that has enough rows (`Scope.drawn`) into one tall PNG.

    One row of panels per scope, all with the metric order of `metric_order`: correlation
    bars (Pearson, Spearman, Kendall with 95% bootstrap error bars); beside them, for binary
    labels, AUROC bars, and for the system level each system's means. Scopes not drawn
    (fewer than the minimum n) are listed at the bottom.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [s for s in scopes if s.drawn]
    skipped = [s for s in scopes if s.n and not s.drawn]
    order = metric_order(scopes)
    n_metrics = max(len(order), 1)
    second = any(s.binary or s.level == "systems" for s in shown)
    cols = 2 if second else 1
    n_rows = max(1, len(shown))
    row_height = 1.6 + 0.42 * n_metrics
    footer = 0.5 if skipped else 0.0
    height = row_height * n_rows + 0.5 + footer
    width = 7.0 * cols
    dpi = min(110, int(MAX_PNG_PIXELS / height))
    fig = plt.figure(figsize=(width, height))
    grid = fig.add_gridspec(n_rows, cols)
    first = None
    for r, scope in enumerate(shown):
        beside = scope.binary or scope.level == "systems"
        ax = fig.add_subplot(grid[r, 0] if beside else grid[r, :])
        first = first or ax
        _correlation_panel(ax, scope, order, human_column)
        if scope.binary:
            _auroc_panel(fig.add_subplot(grid[r, 1]), scope, order, human_column)
        elif scope.level == "systems":
            _system_panel(fig.add_subplot(grid[r, 1]), scope, order, human_column)
    if first is not None:
        handles, labels = first.get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=3, fontsize=9, frameon=False)
    else:
        ax = fig.add_subplot(grid[0, :])
        ax.axis("off")
        ax.text(0.5, 0.5, "no scope has enough rows to draw" if scopes and scopes[0].n
                else "no scored row has a human value", ha="center")
    if skipped:
        text = "Not drawn (n below the minimum): " + "; ".join(
            f"{s.title} (n = {s.n})" for s in skipped)
        fig.text(0.01, 0.01, _wrap(text, 40 * cols + 30), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, footer / height, 1, 1 - 0.4 / height))
    fig.savefig(fobj, format="png", dpi=dpi)
    plt.close(fig)


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
