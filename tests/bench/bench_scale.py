"""Scale benchmark: the scoring pipeline on generated rows against a plain
Python loop over the same metric functions, same rows, same run.

    python -m tests.bench.bench_scale [--rows 1000000] [--modes in_memory,multi_processing]
        [--shape short|long]

Rows: tests/bench/scale_data.py (fixed seed, web2 words drawn Zipf, five systems; `short`:
two references of 6-14 words, `long`: one to four of 2-59 words, longer answers), written
as one JSONL file. Every measurement runs in its own process under the
memory watchdog (tests/bench/watchdog.py, killed above --max_gb):

- `loop`: reads the JSONL with json.loads, computes the corpus statistics the metrics
  declare (CIDEr-D's document frequencies, the whole table in one dict) and calls each
  metric's `score_batch` in batches of 512: the metric functions with no Beam;
- `beam:<mode>`: pipelines/score_predictions.py on the FnApiRunner, `in_memory` or
  `multi_processing` with 2 workers.

CPU seconds are the process's and its (waited-for) children's user + system time; peak
RSS is the process tree's. Two bounds are checked and printed: every pipeline
run at most `--max_peak_gb` (4) resident and at least half the loop's rows per CPU-second.

The largest elements are measured outside the runs, with the pipeline's own code on the
same rows (`element_sizes`): the reader's row batches, `CiderBatchFn`'s requests and
partial frequencies, each n-gram shard's table once summed (`SumDocumentFrequencies`),
encoded with Beam's coder; the single table of the old design (one `AsSingleton` dict of
every n-gram with df >= 2) is shown encoded next to them.
Prints a table and writes bench_out/scale-SHAPE.json.
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


def element_sizes(path: str, shards: int, batch_rows: int = 512) -> dict[str, float]:
    """The largest encoded element of each kind, in MB, as the pipeline forms them from
    the rows at `path` (module doc), and the whole table as one element."""
    from apache_beam.coders import registry

    from transforms.metrics.cider import CiderMetric
    from transforms.scoring.reading.row_batch import RowBatch
    from transforms.scoring.reading.row_validation import to_scoring_row
    from transforms.scoring.reading.rows import ColumnMapping, RowSource
    from transforms.scoring.statistics.corpus_stats import (
        DF,
        REQUESTS,
        CiderBatchFn,
        SumDocumentFrequencies,
    )

    coder = registry.get_coder(object)
    (stat,) = CiderMetric().corpus_statistics()
    fn, combine = CiderBatchFn([stat], shards), SumDocumentFrequencies()
    tables: dict = {}
    largest = {"row_batch": 0, "request": 0, "partial_frequencies": 0}
    mapping = ColumnMapping(id="id", system="system")

    def flush(rows: list) -> None:
        batch = RowBatch(rows[0][0], rows)
        largest["row_batch"] = max(largest["row_batch"], len(coder.encode(batch)))
        for out in fn.process(batch):
            if out.tag == REQUESTS:
                largest["request"] = max(largest["request"], len(coder.encode(out.value)))
            elif out.tag == DF:
                key, part = out.value
                largest["partial_frequencies"] = max(largest["partial_frequencies"],
                                                     len(coder.encode(out.value)))
                tables[key] = combine.add_input(
                    tables.get(key) or combine.create_accumulator(), part)

    rows: list = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            source = RowSource(path, number, number)
            rows.append((source.key, to_scoring_row(json.loads(line), mapping, source)))
            if len(rows) == batch_rows:
                flush(rows)
                rows = []
    if rows:
        flush(rows)
    extracted = {key: combine.extract_output(acc) for key, acc in tables.items()}
    largest["frequency_shard"] = max(len(coder.encode((k, t))) for k, t in extracted.items())
    whole: dict = {}
    for (_, corpus, _), (hashes, dfs) in extracted.items():
        whole.setdefault(corpus, {}).update(zip(hashes.tolist(), dfs.tolist()))
    # the old single table held the n-grams themselves: about 19 bytes of text each
    # instead of an 8-byte hash; encoded here with hashes, so this understates it
    largest["whole_table_as_one_element"] = len(coder.encode(whole))
    largest["ngrams_with_df_2"] = sum(len(t) for t in whole.values())
    return {k: v / 1e6 if k != "ngrams_with_df_2" else v for k, v in largest.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--metrics", default=METRICS)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--shape", default="short", choices=("short", "long"),
                        help="the generated rows' shape (tests/bench/scale_data.py)")
    parser.add_argument("--max_gb", type=float, default=6.0,
                        help="kill a measurement above this resident memory")
    parser.add_argument("--max_peak_gb", type=float, default=4.0,
                        help="the bound on a pipeline run's peak resident memory")
    parser.add_argument("--min_vs_loop", type=float, default=0.5,
                        help="the bound on rows per CPU-second against the loop")
    parser.add_argument("--loop", help=argparse.SUPPRESS)  # internal: run the baseline
    args = parser.parse_args(argv)
    if args.loop:
        start = resource.getrusage(resource.RUSAGE_SELF)
        n = plain_loop(args.loop, args.metrics)
        end = resource.getrusage(resource.RUSAGE_SELF)
        print(f"loop rows {n} cpu {end.ru_utime - start.ru_utime:.1f}", file=sys.stderr)
        return 0
    from tests.bench.scale_data import write_jsonl
    from transforms.scoring.statistics.corpus_stats import shards_for_input

    os.makedirs(BENCH_OUT, exist_ok=True)
    results: dict = {"rows": args.rows, "metrics": args.metrics, "shape": args.shape,
                     "machine": "2-core CPU dev machine, shared with other jobs"}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "rows.jsonl")
        t = time.perf_counter()
        size = write_jsonl(data, args.rows, shape=args.shape)
        results["input_mb"] = size / 1e6
        print(f"generated {args.rows:,} rows ({size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t:.0f} s", flush=True)
        runs = {"loop": [sys.executable, "-m", "tests.bench.bench_scale", "--loop", data,
                         "--metrics", args.metrics]}
        for mode in [m for m in args.modes.split(",") if m]:
            runs[f"beam:{mode}"] = [
                sys.executable, "-m", "pipelines.score_predictions", "--input", data,
                "--output", os.path.join(tmp, mode), "--metrics", args.metrics,
                "--id_column", "id", "--system_column", "system", *MODES[mode]]
        for name, command in runs.items():
            print(f"--- {name}", flush=True)
            results[name] = _measure(command, args.max_gb, env)
            results[name]["rows_per_cpu_s"] = args.rows / max(results[name]["cpu_s"], 1e-9)
            print(json.dumps(results[name]), flush=True)
        if "cider" in args.metrics.split(","):
            shards = shards_for_input([data])
            t = time.perf_counter()
            results["df_shards"] = shards
            results["largest_elements_mb"] = element_sizes(data, shards)
            print(f"element sizes measured in {time.perf_counter() - t:.0f} s", flush=True)
    loop = results["loop"]["rows_per_cpu_s"]
    print(f"\n{args.rows:,} rows ({args.shape}), metrics {args.metrics}")
    print(f"{'run':<22}{'wall s':>9}{'CPU s':>9}{'rows/CPU-s':>12}{'vs loop':>9}{'peak GB':>9}")
    failed = False
    for name in runs:
        r = results[name]
        ratio = r["rows_per_cpu_s"] / loop
        r["vs_loop"] = ratio
        bounds = ""
        if name != "loop":
            r["within_bounds"] = (r["peak_rss_gb"] <= args.max_peak_gb
                                  and ratio >= args.min_vs_loop and r["rc"] == 0)
            bounds = "  within bounds" if r["within_bounds"] else "  OUT OF BOUNDS"
        print(f"{name:<22}{r['wall_s']:>9.0f}{r['cpu_s']:>9.0f}{r['rows_per_cpu_s']:>12.0f}"
              f"{ratio:>9.2f}{r['peak_rss_gb']:>9.2f}{'  KILLED' if r['killed'] else ''}"
              f"{'' if r['rc'] == 0 else '  rc=' + str(r['rc'])}{bounds}")
        failed |= r["rc"] != 0
    print(f"bounds: peak RSS <= {args.max_peak_gb} GB, rows per CPU-second >= "
          f"{args.min_vs_loop} x the loop's")
    sizes = results.get("largest_elements_mb")
    if sizes:
        print(f"largest elements ({results['df_shards']} n-gram shards), MB: "
              + ", ".join(f"{k} {v:.2f}" for k, v in sizes.items()
                          if k != "ngrams_with_df_2")
              + f"; {sizes['ngrams_with_df_2']:,} n-grams with df >= 2")
    with open(os.path.join(BENCH_OUT, f"scale-{args.shape}.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
