"""`make bench`: runs every benchmark in turn; each prints its table and writes JSON to
bench_out/. Figures are recorded in docs/benchmarks.md.

    python -m tests.bench.run_all [--only mining,lexical,model_metrics,report,scale,
        rescoring,model_host,host_path,model_server,gpu]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

BENCHMARKS = {
    "mining": "tests.bench.bench_mining",
    "lexical": "tests.bench.bench_lexical",
    "model_metrics": "tests.bench.bench_model_metrics",
    "report": "tests.bench.bench_report",
    "scale": "tests.bench.bench_scale",
    "rescoring": "tests.bench.bench_rescoring",
    "model_host": "tests.bench.bench_model_host",  # the CPU proxy of GPU scoring
    "host_path": "tests.bench.bench_host_path",  # the judge's host path, side by side
    "model_server": "tests.bench.bench_model_server",  # where a shared model lives
    "gpu": "tests.bench.bench_gpu",  # skipped (exit 0) without CUDA
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(BENCHMARKS),
                        help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmarks {unknown}; available: {', '.join(BENCHMARKS)}")
    failed = []
    for name in names:
        started = time.perf_counter()
        print(f"=== benchmark {name} ===", flush=True)
        module = importlib.import_module(BENCHMARKS[name])
        if module.main([]) != 0:
            failed.append(name)
        print(f"=== {name}: {time.perf_counter() - started:.0f} s ===", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
