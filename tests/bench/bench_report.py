"""Time and memory of the report's statistics (point estimates + bootstrap) at scale.

    python -m tests.bench.bench_report [--rows 100000] [--resamples 1000] [--metrics 8]
        [--out bench_out]

Synthetic scored rows (seeded): four systems; metrics of the shapes the product writes:
continuous scores (bertscore/sas-like, all values distinct), a 0/1 metric (em-like) and
one rounded to 0.01 (f1-like); the human column either binary (0/1, with AUROC) or graded
on five levels (Likert-like). For each human kind it times `meta_evaluate` over all its
scopes (all rows, the system level, the four systems) on the bootstrap's default threads
and on one thread (the values are the same), and reports, next to them, the baseline
measured in the same run: the plain approach of explicit resamples with scipy /
scikit-learn per resample and metric (timed on `--baseline-resamples` resamples of one
metric and scaled to the same work). Peak memory: tracemalloc's peak (numpy's arrays
included) during `meta_evaluate`; both timings run under tracemalloc (so that
the figures compare across runs), after a warm-up on 200 rows, one thread first. Prints a table and writes `<out>/report.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc
import warnings

import numpy as np
from scipy import stats
from sklearn.metrics import roc_auc_score

from transforms.scoring.report.bootstrap import default_threads
from transforms.scoring.report.report_spec import ReportSpec
from transforms.scoring.report.scopes import meta_evaluate


def make_rows(n: int, n_metrics: int, binary: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    quality = rng.random(n)
    human = (quality + rng.normal(0, 0.2, n) > 0.5).astype(float) if binary else np.clip(
        np.round(quality * 4 + rng.normal(0, 0.7, n)), 0, 4)
    columns, values = [], []
    for j in range(n_metrics):
        if j == 0:
            columns.append("em_like")
            values.append((quality + rng.normal(0, 0.3, n) > 0.8).astype(float))
        elif j == 1:
            columns.append("f1_like")
            values.append(np.round(np.clip(quality + rng.normal(0, 0.3, n), 0, 1), 2))
        else:
            columns.append(f"model_{j}")
            values.append(quality + rng.normal(0, 0.2 + 0.1 * j, n))
    systems = np.array(["fid", "gpt35", "chatgpt", "gpt4"])[rng.integers(0, 4, n)]
    matrix = np.stack(values, axis=1)
    points = [(s, h, tuple(v)) for s, h, v in zip(systems, human, matrix.tolist())]
    return points, columns, human, matrix


def baseline_seconds_per_resample(human, values, binary, resamples, seed=0) -> float:
    """Explicit resamples of one metric: scipy's three correlations (+ sklearn's AUROC)."""
    rng = np.random.default_rng(seed)
    n = len(human)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(resamples):
            rows = rng.integers(0, n, n)
            x, y = values[rows], human[rows]
            stats.pearsonr(x, y)
            stats.spearmanr(x, y)
            stats.kendalltau(x, y)
            if binary:
                roc_auc_score(y, x)
    return (time.perf_counter() - started) / resamples


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--metrics", type=int, default=8)
    parser.add_argument("--baseline-resamples", type=int, default=5)
    parser.add_argument("--out", default="bench_out")
    args = parser.parse_args(argv)
    results = []
    print(f"rows={args.rows:,} metrics={args.metrics} resamples={args.resamples}")
    threads = default_threads()
    print(f"| human | scopes | ours, {threads} threads: s | peak MiB | ours, 1 thread: s | "
          "peak MiB | Kendall CIs | baseline (scaled): s |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for binary in (True, False):
        points, columns, human, matrix = make_rows(args.rows, args.metrics, binary)
        spec = ReportSpec(resamples=args.resamples)
        meta_evaluate(points[:200], columns, spec, threads=threads)  # imports, pool: warm
        timed = {}
        for n_threads in sorted({1, threads}):  # one thread first: no first-use cost to it
            tracemalloc.start()
            started = time.perf_counter()
            scopes = meta_evaluate(points, columns, spec, threads=n_threads)
            timed[n_threads] = (time.perf_counter() - started,
                                tracemalloc.get_traced_memory()[1] / 2**20)
            tracemalloc.stop()
        (seconds, peak), (one_seconds, one_peak) = timed[threads], timed[1]
        per = baseline_seconds_per_resample(human, matrix[:, -1], binary,
                                            args.baseline_resamples)
        # the same work: every scope's rows (all rows + each system = 2 n), every metric
        baseline = per * args.resamples * args.metrics * 2
        kendall = sum(r.kendall_ci is not None for s in scopes for r in s.rows)
        total = sum(len(s.rows) for s in scopes)
        print(f"| {'binary' if binary else '5 levels'} | {len(scopes)} | {seconds:.1f} | "
              f"{peak:.0f} | {one_seconds:.1f} | {one_peak:.0f} | {kendall}/{total} | "
              f"{baseline:.0f} |", flush=True)
        results.append({"human": "binary" if binary else "5 levels", "rows": args.rows,
                        "metrics": args.metrics, "resamples": args.resamples,
                        "scopes": len(scopes), "threads": threads, "seconds": seconds,
                        "peak_mib": peak, "one_thread_seconds": one_seconds,
                        "one_thread_peak_mib": one_peak,
                        "kendall_intervals": [kendall, total], "baseline_seconds": baseline})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
