"""Meta-evaluation: how well each metric agrees with the human judgments.

Pure Python + numpy/scipy/matplotlib, no Beam. Given `(system, human, metric values)`
points, `meta_evaluate` computes per metric Pearson r, Spearman rho and Kendall tau-b with
two-sided p-values (scipy), and for binary labels (every human value 0 or 1) accuracy at a
stated threshold (score >= threshold counts as 1) and AUROC (rank formula, ties averaged).
Scopes: all rows, each user subset (`--report_subsets`), and the same per system when
there is more than one. Within a scope metrics are sorted by |Pearson r|, best first, so
the top line of every table and the top bar of every panel is the best metric.

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

from transforms.scoring.report_spec import HUMAN, OPS, ReportSpec, Subset

MAX_PLOT_PANELS = 12


@dataclasses.dataclass(frozen=True)
class Agreement:
    """Agreement of one metric with the human values in one scope."""

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


@dataclasses.dataclass(frozen=True)
class Scope:
    """One table of the report: a subset of rows, possibly of one system."""

    title: str
    system: str | None
    subset: str | None
    n: int
    binary: bool
    rows: tuple[Agreement, ...]

    @property
    def best(self) -> Agreement | None:
        return self.rows[0] if self.rows and not math.isnan(self.rows[0].pearson) else None


def auroc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve of binary `labels` (0/1) ranked by `scores`; ties averaged."""
    from scipy.stats import rankdata

    positives = labels == 1
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(scores)
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
              threshold: float) -> Agreement:
    """Correlations (and for binary labels accuracy and AUROC) of one metric."""
    keep = ~np.isnan(values)
    human, values = human[keep], values[keep]
    extra: dict[str, Any] = {}
    if binary and len(human):
        extra = {"accuracy": float(np.mean((values >= threshold) == (human == 1))),
                 "threshold": threshold, "auroc": auroc(human, values)}
    return Agreement(metric, len(human), *_correlations(human, values), **extra)


def _sort_key(row: Agreement) -> tuple[bool, float, str]:
    return (math.isnan(row.pearson), -abs(row.pearson) if not math.isnan(row.pearson) else 0.0,
            row.metric)


def _scope(title: str, system: str | None, subset: Subset | None, human: np.ndarray,
           values: np.ndarray, columns: Sequence[str], spec: ReportSpec) -> Scope:
    mask = np.ones(len(human), dtype=bool)
    for condition in subset.conditions if subset else ():
        column = human if condition.column == HUMAN else values[:, columns.index(condition.column)]
        mask &= OPS[condition.op](column, condition.value)
    human, values = human[mask], values[mask]
    binary = bool(len(human)) and bool(np.all((human == 0) | (human == 1)))
    rows = [agreement(c, human, values[:, i], binary, spec.threshold(c))
            for i, c in enumerate(columns)]
    return Scope(title, system, subset.name if subset else None, len(human), binary,
                 tuple(sorted(rows, key=_sort_key)))


def meta_evaluate(points: Sequence[tuple[str | None, float | None, Sequence[float | None]]],
                  columns: Sequence[str], spec: ReportSpec) -> list[Scope]:
    """Computes every scope of the report.

    Args:
        points: (system, human, metric values in `columns` order) per scored row; rows
            without a human value are skipped.
        columns: the metric columns.
        spec: subsets and thresholds.

    Returns:
        The scopes: all rows, then each subset; then, with more than one system, the same
        per system (sorted by name).
    """
    columns = list(columns)
    kept = [p for p in points if p[1] is not None]
    systems = np.array([p[0] if p[0] is not None else "" for p in kept], dtype=object)
    human = np.array([p[1] for p in kept], dtype=float)
    values = np.array([[math.nan if v is None else v for v in p[2]] for p in kept],
                      dtype=float).reshape(len(kept), len(columns))
    subsets: list[Subset | None] = [None, *spec.subsets]
    scopes = [_scope("All rows" if s is None else f"Subset {s.name}", None, s, human, values,
                     columns, spec) for s in subsets]
    names = sorted(set(systems.tolist()))
    if len(names) > 1:
        for name in names:
            mask = systems == name
            label = name or "(no system)"
            scopes.extend(
                _scope(f"System {label}: " + ("all rows" if s is None else f"subset {s.name}"),
                       label, s, human[mask], values[mask], columns, spec) for s in subsets)
    return scopes


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


def render_markdown(scopes: Sequence[Scope], human_column: str, image_name: str | None) -> str:
    """The report as markdown: a headline per scope, then one table per scope.

    Args:
        scopes: from `meta_evaluate`.
        human_column: the input column holding the human judgments.
        image_name: the PNG's file name, linked at the top (None: no link).

    Returns:
        The markdown text.
    """
    lines = ["# Agreement of metrics with human judgments", ""]
    if not scopes or scopes[0].n == 0:
        lines.append(f"No scored row has a value in the human column `{human_column}`.")
        return "\n".join(lines) + "\n"
    notes = [f"Human column: `{human_column}`. Metrics are sorted by |Pearson r|, best first;",
             "p-values are two-sided (scipy.stats pearsonr, spearmanr, kendalltau tau-b);",
             "n/a means undefined (fewer than 3 rows, or a constant metric or human value).",
             ""]
    if any(s.binary for s in scopes):
        notes += ["Binary labels: accuracy counts a row as 1 when its score >= the threshold",
                  "shown; AUROC ranks the rows by score (ties averaged).", ""]
    lines += notes
    lines += ["| scope | n | best metric | Pearson r |", "|---|---:|---|---:|"]
    for scope in scopes:
        best = scope.best
        lines.append(f"| {scope.title} | {scope.n} | {best.metric if best else 'n/a'} | "
                     f"{_fmt(best.pearson) if best else 'n/a'} |")
    lines.append("")
    if image_name:
        lines += [f"![Pearson, Spearman and Kendall per metric]({image_name})", ""]
    for scope in scopes:
        lines += [f"## {scope.title} (n = {scope.n})", ""]
        header = "| rank | metric | n | Pearson r | p | Spearman rho | p | Kendall tau | p |"
        rule = "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        if scope.binary:
            header += " accuracy | threshold | AUROC |"
            rule += "---:|---:|---:|"
        lines += [header, rule]
        for rank, row in enumerate(scope.rows, start=1):
            line = (f"| {rank} | {row.metric} | {row.n} | {_fmt(row.pearson)} | "
                    f"{_fmt_p(row.pearson_p)} | {_fmt(row.spearman)} | {_fmt_p(row.spearman_p)}"
                    f" | {_fmt(row.kendall)} | {_fmt_p(row.kendall_p)} |")
            if scope.binary:
                line += f" {_fmt(row.accuracy)} | {_fmt(row.threshold, 2)} | {_fmt(row.auroc)} |"
            lines.append(line)
        lines.append("")
    return "\n".join(lines)


def render_png(scopes: Sequence[Scope], fobj: IO[bytes]) -> None:
    """Draws one horizontal bar panel per scope (at most MAX_PLOT_PANELS) into `fobj`.

    Bars are Pearson, Spearman and Kendall per metric; the best metric (by |Pearson r|) is on
    top and named in the panel title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [s for s in scopes if s.n][:MAX_PLOT_PANELS]
    n_panels = max(1, len(shown))
    n_metrics = max((len(s.rows) for s in shown), default=1)
    cols = min(n_panels, 2)
    nrows = math.ceil(n_panels / cols)
    fig, axes = plt.subplots(nrows, cols, squeeze=False,
                             figsize=(6.5 * cols, (1.2 + 0.45 * n_metrics) * nrows))
    kinds = (("pearson", "Pearson r", "#1f77b4"), ("spearman", "Spearman rho", "#ff7f0e"),
             ("kendall", "Kendall tau", "#2ca02c"))
    for ax, scope in zip(axes.flat, shown, strict=False):
        y = np.arange(len(scope.rows))[::-1]
        for k, (attr, label, color) in enumerate(kinds):
            vals = [np.nan_to_num(getattr(r, attr)) for r in scope.rows]
            ax.barh(y + (1 - k) * 0.27, vals, height=0.27, label=label, color=color)
        for yi, row in zip(y, scope.rows, strict=True):
            ax.text(0.99, yi + 0.27, f"r = {_fmt(row.pearson)}", ha="right", va="center", fontsize=8,
                    transform=ax.get_yaxis_transform())
        ax.set_yticks(y, [r.metric for r in scope.rows])
        ax.axvline(0, color="black", linewidth=0.6)
        lowest = [min(r.pearson, r.spearman, r.kendall) for r in scope.rows
                  if not math.isnan(r.pearson)]
        ax.set_xlim(min([-0.1, *lowest]) - 0.05, 1.0)
        best = scope.best
        headline = (f"best: {best.metric} (r = {best.pearson:.3f})" if best
                    else "undefined: a constant metric or human value")
        ax.set_title(f"{scope.title} (n = {scope.n})\n{headline}", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    if shown:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=3, fontsize=9, frameon=False)
    else:
        axes.flat[0].text(0.5, 0.5, "no scored row has a human value", ha="center")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    fig.savefig(fobj, format="png", dpi=110)
    plt.close(fig)


def scope_table(scopes: Sequence[Scope]) -> list[dict[str, Any]]:
    """The scopes as JSON-friendly dicts (for tests and machine use)."""
    return [{"title": s.title, "system": s.system, "subset": s.subset, "n": s.n,
             "binary": s.binary, "rows": [dataclasses.asdict(r) for r in s.rows]}
            for s in scopes]


def point(record: Mapping[str, Any], columns: Sequence[str]) -> tuple:
    """A scored record reduced to (system, human, metric values) for `meta_evaluate`."""
    return record.get("system"), record.get("human"), tuple(record.get(c) for c in columns)
