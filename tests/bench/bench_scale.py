"""Scale benchmark (issue 14): the scoring pipeline on generated rows against a plain
Python loop over the same metric functions, same rows, same run.

    python -m tests.bench.bench_scale [--rows 1000000] [--modes in_memory,multi_processing]

Rows: tests/bench/scale_data.py (fixed seed, web2 words drawn Zipf, two references, five
systems), written as one JSONL file. Every measurement runs in its own process under the
memory watchdog (tests/bench/watchdog.py, killed above --max_gb):

- `loop`: reads the JSONL with json.loads, computes the corpus statistics the metrics
  declare (CIDEr-D's document frequencies, the whole table in one dict) and calls each
  metric's `score_batch` in batches of 512: the metric functions with no Beam;
- `beam:<mode>`: pipelines/score_predictions.py on the FnApiRunner, `in_memory` or
  `multi_processing` with 2 workers, with --save_corpus_statistics.

CPU seconds are the process's and its (waited-for) children's user + system time.
The largest statistics element is the largest CIDEr-D frequency shard the run produced,
encoded with Beam's coder (read back from the saved statistics); the single table of the
old design (one `AsSingleton` dict) is shown encoded next to it.
Prints a table and writes bench_out/scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

BENCH_OUT = "bench_out"
METRICS = "em,f1,rougeL,bleu1,bleu4,cider"
MODES = {
    "in_memory": ["--runner=FnApiRunner", "--direct_running_mode=in_memory"],
    "multi_processing": ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
                         "--direct_num_workers=2"],
}


def plain_loop(path: str, metrics: str) -> int:
    """The baseline: every metric function over every row, no Beam. Returns rows scored."""
    from transforms.metrics.base import QAExample
    from transforms.metrics.corpus import unique_statistics
    from transforms.metrics.registry import build_metrics

    built = build_metrics(metrics.split(","), {})
    for metric in built:
        metric.setup()
    examples = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            examples.append(QAExample(row["prediction"], tuple(row["references"])))
    stats = {}
    for stat in unique_statistics(built):
        acc = stat.create()
        for ex in examples:
            acc = stat.add(acc, ex)
        stats[stat.key] = stat.extract(acc)
    checksum = 0.0
    for start in range(0, len(examples), 512):
        batch = examples[start: start + 512]
        for metric in built:
            for result in metric.score_batch(batch, stats):
                checksum += sum(result.values())
    print(f"loop checksum {checksum:.6f}", file=sys.stderr)
    return len(examples)


def _measure(command: list[str], max_gb: float, env: dict[str, str]) -> dict:
    """Runs a command under the watchdog; wall, CPU seconds (with children), peak RSS."""
    from tests.bench.watchdog import Watchdog

    started = time.perf_counter()
    child = subprocess.Popen(command, env=env)
    dog = Watchdog(child.pid, int(max_gb * (1 << 30))).start()
    _, status, usage = os.wait4(child.pid, 0)
    dog.stop()
    child.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": time.perf_counter() - started,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_gb": dog.peak / (1 << 30), "killed": dog.killed,
            "rc": child.returncode}


def largest_shard_mb(statistics_path: str, shards: int) -> tuple[float, float]:
    """(largest shard element, whole table as one element), encoded, in MB."""
    import pyarrow.parquet as pq
    from apache_beam.coders import registry

    from transforms.scoring.corpus_stats import ngram_shard, text_gram

    coder = registry.get_coder(object)
    tables: dict = {}
    whole: dict = {}
    columns = pq.read_table(statistics_path).to_pydict()
    for corpus, ngram, df in zip(columns["corpus"], columns["ngram"], columns["df"],
                                 strict=True):
        if ngram is None:
            continue
        gram = text_gram(ngram)
        tables.setdefault((0, corpus, ngram_shard(gram, shards)), {})[gram] = df
        whole.setdefault(corpus, {})[gram] = df
    largest = max((len(coder.encode((k, t))) for k, t in tables.items()), default=0)
    return largest / 1e6, len(coder.encode(whole)) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--metrics", default=METRICS)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--max_gb", type=float, default=6.0,
                        help="kill a measurement above this resident memory")
    parser.add_argument("--loop", help=argparse.SUPPRESS)  # internal: run the baseline
    args = parser.parse_args(argv)
    if args.loop:
        start = resource.getrusage(resource.RUSAGE_SELF)
        n = plain_loop(args.loop, args.metrics)
        end = resource.getrusage(resource.RUSAGE_SELF)
        print(f"loop rows {n} cpu {end.ru_utime - start.ru_utime:.1f}", file=sys.stderr)
        return 0
    from tests.bench.scale_data import write_jsonl
    from transforms.scoring.corpus_stats import shards_for_input

    os.makedirs(BENCH_OUT, exist_ok=True)
    results: dict = {"rows": args.rows, "metrics": args.metrics,
                     "machine": "2-core CPU dev machine, shared with other jobs"}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "rows.jsonl")
        t = time.perf_counter()
        size = write_jsonl(data, args.rows)
        results["input_mb"] = size / 1e6
        print(f"generated {args.rows:,} rows ({size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t:.0f} s", flush=True)
        runs = {"loop": [sys.executable, "-m", "tests.bench.bench_scale", "--loop", data,
                         "--metrics", args.metrics]}
        for mode in [m for m in args.modes.split(",") if m]:
            runs[f"beam:{mode}"] = [
                sys.executable, "-m", "pipelines.score_predictions", "--input", data,
                "--output", os.path.join(tmp, mode), "--metrics", args.metrics,
                "--save_corpus_statistics", os.path.join(tmp, f"{mode}.stats.parquet"),
                *MODES[mode]]
        for name, command in runs.items():
            print(f"--- {name}", flush=True)
            results[name] = _measure(command, args.max_gb, env)
            results[name]["rows_per_cpu_s"] = args.rows / max(results[name]["cpu_s"], 1e-9)
            print(json.dumps(results[name]), flush=True)
        saved = [os.path.join(tmp, f"{m}.stats.parquet") for m in MODES
                 if os.path.exists(os.path.join(tmp, f"{m}.stats.parquet"))]
        if saved:
            shards = shards_for_input([data])
            largest, whole = largest_shard_mb(saved[0], shards)
            results.update(df_shards=shards, largest_statistics_element_mb=largest,
                           whole_table_as_one_element_mb=whole)
    loop = results["loop"]["rows_per_cpu_s"]
    print(f"\n{args.rows:,} rows, metrics {args.metrics}")
    print(f"{'run':<22}{'wall s':>9}{'CPU s':>9}{'rows/CPU-s':>12}{'vs loop':>9}{'peak GB':>9}")
    failed = False
    for name in runs:
        r = results[name]
        ratio = r["rows_per_cpu_s"] / loop
        r["vs_loop"] = ratio
        print(f"{name:<22}{r['wall_s']:>9.0f}{r['cpu_s']:>9.0f}{r['rows_per_cpu_s']:>12.0f}"
              f"{ratio:>9.2f}{r['peak_rss_gb']:>9.2f}{'  KILLED' if r['killed'] else ''}"
              f"{'' if r['rc'] == 0 else '  rc=' + str(r['rc'])}")
        failed |= r["rc"] != 0
    if "largest_statistics_element_mb" in results:
        print(f"largest statistics element: {results['largest_statistics_element_mb']:.2f} MB "
              f"({results['df_shards']} shards); the whole table as one element: "
              f"{results['whole_table_as_one_element_mb']:.1f} MB")
    with open(os.path.join(BENCH_OUT, "scale.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
