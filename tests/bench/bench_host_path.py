"""The judge's host path against another commit's, side by side.

    python -m tests.bench.bench_host_path [--baseline e9ad7f4] [--rows 100000]
        [--rounds 4] [--out bench_out]

`qa-score --metrics judge` in process with the zero-cost model (tests/bench/zero_model.py:
the host side of the model branch alone) on `--rows` new EVOUNA-TQ answers without their
human labels, with this checkout and with a checkout of `--baseline` (a git worktree in a
temporary folder, the same interpreter). The two runs of a round run at the same time, each
pinned to a core of its own (`taskset`; the cores swapped each round), so that both meet
the same state of the machine: the 2-core machine's speed drifts by up to twice between
runs a minute apart, and runs one after the other gave ratios from 1.34 to 1.84 for the
same two commits. Without `taskset` or a second core the runs alternate.

Each run's rate is rows per second through the model branch after start-up
(progress_span.steady_span). Goal: the median ratio at least 1.5x the code before the one
row flow (e9ad7f4, the default baseline). Results on stdout and in
`<out>/host_path.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.bench.bench_rescoring import REPO, checkout, remove_checkout
from tests.bench.progress_span import steady_span

GOAL = 1.5


def _command(code: Path, data: str, judge: Path, out: Path, core: int | None) -> list[str]:
    pin = ["taskset", "-c", str(core)] if core is not None else []
    return [*pin, sys.executable, "-m", "tests.bench.zero_model", f"--input={data}",
            f"--output={out}", "--metrics=judge", f"--judge_model={judge}", "--overwrite",
            "--runner=FnApiRunner", "--direct_running_mode=in_memory", "--progress_interval=1"]


def _rate(log: Path) -> float:
    span = steady_span(log.read_text(encoding="utf-8").splitlines())
    if span is None:
        raise RuntimeError(f"no rows through the model branch in {log}:\n"
                           f"{log.read_text(encoding='utf-8')[-3000:]}")
    return span[0]


def round_rates(sides: dict[str, Path], data: str, judge: Path, tmp: Path,
                cores: list[int] | None) -> dict[str, float]:
    """One run of each side, side by side on `cores` (one each) or one after the other;
    each side's rate after start-up."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    running = {}
    for i, (side, code) in enumerate(sides.items()):
        log = tmp / f"{side}.log"
        command = _command(code, data, judge, tmp / side, cores[i] if cores else None)
        with open(log, "w", encoding="utf-8") as f:
            child = subprocess.Popen(command, cwd=code, env={**env, "PYTHONPATH": str(code)},
                                     stdout=f, stderr=subprocess.STDOUT)
            if not cores:
                child.wait()
        running[side] = (child, log)
    rates = {}
    for side, (child, log) in running.items():
        if child.wait() != 0:
            raise RuntimeError(f"{side} failed:\n{log.read_text(encoding='utf-8')[-3000:]}")
        rates[side] = _rate(log)
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="e9ad7f4", help="the git ref to measure beside")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", default="bench_out")
    args = parser.parse_args(argv)
    from tests.bench.judge_rows import evouna_rows, judge_checkpoint, write_jsonl
    from transforms.models import loading

    os.makedirs(args.out, exist_ok=True)
    side_by_side = (shutil.which("taskset") is not None and len(os.sched_getaffinity(0)) >= 2)
    usable = sorted(os.sched_getaffinity(0))[:2]
    tmp = Path(tempfile.mkdtemp(prefix="bench_host_path_"))
    results: dict = {"machine": f"{platform.node()} ({os.cpu_count()} cores)",
                     "rows": args.rows, "baseline": args.baseline,
                     "side_by_side": side_by_side, "rounds": []}
    try:
        sides = {"this": REPO, args.baseline: checkout(args.baseline, tmp / "baseline")}
        judge = judge_checkpoint(loading.packaged_model_path(), tmp / "judge")
        rows = [{k: v for k, v in r.items() if k != "human"}
                for r in evouna_rows(args.rows, unique=True)]
        data = write_jsonl(rows, tmp / "rows.jsonl")
        for i in range(args.rounds):
            cores = (usable if i % 2 == 0 else usable[::-1]) if side_by_side else None
            rates = round_rates(sides, data, judge, tmp, cores)
            ratio = rates["this"] / rates[args.baseline]
            results["rounds"].append({**rates, "ratio": ratio, "cores": cores})
            print(f"  round {i + 1}: this {rates['this']:,.0f}, {args.baseline} "
                  f"{rates[args.baseline]:,.0f} rows/s after start-up: {ratio:.3f}x"
                  + (f" (cores {cores})" if cores else " (one after the other)"), flush=True)
    finally:
        remove_checkout(tmp / "baseline")
        shutil.rmtree(tmp, ignore_errors=True)
    median = statistics.median(r["ratio"] for r in results["rounds"])
    results["median_ratio"] = median
    Path(args.out, "host_path.json").write_text(json.dumps(results, indent=2))
    print(f"median {median:.3f}x {args.baseline} (goal at least {GOAL}x)", flush=True)
    return 0 if median >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
