"""The meta-evaluation report rendered: markdown tables and one PNG of bar panels.

`report.meta_evaluate` computes the scopes; this module only draws them. The markdown
has a headline per scope, notes on how every figure was computed, then one table per
scope; the PNG has a row of panels per scope that has enough rows (`Scope.drawn`).
matplotlib is imported inside `render_png`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import IO, Any

import numpy as np

from transforms.scoring.report import bootstrap as bootstrap_lib
from transforms.scoring.report.report_spec import HUMAN
from transforms.scoring.report.scopes import (
    ALPHA,
    SYSTEM_LEVEL_TITLE,
    Agreement,
    Interval,
    Scope,
    fmt,
    fmt_ci,
    metric_order,
)


def _fmt_p(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value == 0.0:
        return "<1e-300"  # underflow: scipy returns exactly 0
    return f"{value:.2e}" if value < 1e-3 else f"{value:.3f}"


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
                     f"{fmt(top.pearson) + ' ' + fmt_ci(top.pearson_ci) if top else 'n/a'} |")
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
            line = (f"| {rank} | {row.metric} | {row.n} | {fmt(row.pearson)} | "
                    f"{fmt_ci(row.pearson_ci)} | {_fmt_p(row.pearson_p)} | "
                    f"{fmt(row.spearman)} | {fmt_ci(row.spearman_ci)} | "
                    f"{_fmt_p(row.spearman_p)} | {fmt(row.kendall)} | "
                    f"{fmt_ci(row.kendall_ci)} | {_fmt_p(row.kendall_p)} | "
                    f"{_fmt_p_test(row.p_vs_top)} |")
            if scope.binary:
                source = f" ({row.threshold_source})" if row.threshold_source else ""
                line += (f" {fmt(row.accuracy)} | {fmt(row.threshold, 4)}{source} | "
                         f"{fmt(row.auroc)} | {fmt_ci(row.auroc_ci) if row.auroc is not None else ''} |")
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
