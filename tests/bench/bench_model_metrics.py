"""Model-metric benchmark: the cross-encoder handler through Beam beside a plain loop.

    python -m tests.bench.bench_model_metrics [--min_pairs 20000] [--out bench_out]
        [--device auto] [--repeats 2] [--plain_batch_size 64]

Pairs: every (a, b) pair of distinct texts within a row of the real judgment files
(AVSD answer + 6 references, NarrativeQA answer + 2, SemEval answer + 1, SQuAD-SAS answer
pairs), plus each AVSD/NarrativeQA answer against the next row's references; exact
duplicates dropped, shuffled with a fixed seed, at least `--min_pairs` kept.
Model: the packaged all-MiniLM-L6-v2 with a seeded one-logit head, saved as a checkpoint
and loaded by path (the shape of a SAS/WES cross-encoder; weights do not change speed).

In one run, for two inputs, `unique` (N distinct pairs) and `repeated` (N pairs drawn
from N/4 distinct ones, each 4 times, shuffled):
  plain          a batched forward loop in input order (tokenise `--plain_batch_size`
                 pairs, pad to the longest, forward, sigmoid), model load included;
  plain_sorted   the same loop over the pairs sorted by length (the best a plain loop
                 can do with global knowledge of the input);
  pipeline       `RunInference(KeyedModelHandler(CrossEncoderModelHandler))` on the
                 FnApiRunner (in-process), graph construction and model load included;
                 its scores are checked against the plain loop's;
  qa_score       the whole scoring pipeline, `qa-score --metrics sas --sas_model CKPT`,
                 on the pairs written as JSONL rows (prediction a, reference b):
                 reading, validation, RunInference, the join by row key and the
                 Parquet/summary writes included; scores checked the same way.
Each is run `--repeats` times, interleaved; the best wall time counts (the machine is
shared), CPU seconds of this process are kept beside it. With torch's default two threads
on two busy cores, wall and CPU times both swing with other load (threads spin at
barriers); `--torch_threads 1` gives steady figures (CPU time = wall time). Results: a
table on stdout and `<out>/model_metrics.json`. On a GPU machine, `--device cuda`
(bfloat16) for both, and a larger `--max_batch_tokens` (e.g. 32768).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import apache_beam as beam
import numpy as np
import pandas as pd
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that

from tests.bench.bench_data import JUDGMENTS, SAS_SQUAD, data_dir, require
from tests.models.checkpoints import save_cross_encoder
from transforms.inference import handlers
from transforms.models import loading, predictors, torch_models

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "bench_model_metrics"
TOLERANCE = 1e-4


def judgment_pairs() -> list[tuple[str, str]]:
    """Distinct (a, b) text pairs from the real judgment files, in first-seen order."""
    data = data_dir()
    require(*(data / p for p in JUDGMENTS))
    pairs: list[tuple[str, str]] = []
    for name, refs in (("avsd_all.csv", 6), ("nrqa_mhpgm.csv", 2), ("semeval_mhpgm.csv", 1)):
        frame = pd.read_csv(data / "judgments" / "kpqa" / name)
        columns = ["answer"] + [f"reference{j}" for j in range(1, refs + 1)]
        if name.startswith("semeval"):  # its human score sits in reference2
            columns = ["answer", "reference1"]
        rows = [[str(t) for t in r] for r in frame[columns].itertuples(index=False)]
        for i, texts in enumerate(rows):
            pairs += itertools.combinations(texts, 2)
            if not name.startswith("semeval"):
                pairs += [(texts[0], ref) for ref in rows[(i + 1) % len(rows)][1:]]
    sas = pd.read_csv(data / SAS_SQUAD)
    pairs += [(str(a), str(b)) for a, b in zip(sas["answer1"], sas["answer2"])]
    return list(dict.fromkeys(p for p in pairs if p[0] != p[1]))


def make_inputs(min_pairs: int, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    pairs = judgment_pairs()
    if len(pairs) < min_pairs:
        raise SystemExit(f"only {len(pairs)} distinct pairs in the judgment files")
    rng = random.Random(seed)
    rng.shuffle(pairs)
    unique = pairs[:min_pairs]
    repeated = [p for p in unique[: min_pairs // 4] for _ in range(4)]
    rng.shuffle(repeated)
    return {"unique": unique, "repeated": repeated}


def plain_loop(checkpoint: str, pairs: list[tuple[str, str]], batch_size: int,
               device: str, sort: bool) -> tuple[np.ndarray, dict[str, int]]:
    """The baseline: load, then tokenise / pad / forward / sigmoid batch by batch."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    dev = torch_models.resolve_device(device)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(
        checkpoint, dtype=torch_models.resolve_dtype("auto", dev)).eval().to(dev)
    order = list(range(len(pairs)))
    if sort:
        lengths = [len(x) for x in tokenizer([a for a, _ in pairs], [b for _, b in pairs],
                                             truncation=True)["input_ids"]]
        order.sort(key=lambda i: -lengths[i])
    scores = np.zeros(len(pairs), dtype=np.float32)
    padded = 0
    for start in range(0, len(order), batch_size):
        idx = order[start: start + batch_size]
        batch = tokenizer([pairs[i][0] for i in idx], [pairs[i][1] for i in idx],
                          padding=True, truncation=True, max_length=512,
                          return_tensors="pt").to(dev)
        padded += batch["input_ids"].numel()
        with torch.inference_mode():
            logits = model(**batch).logits[:, 0].float()
        scores[idx] = torch.sigmoid(logits).cpu().numpy()
    return scores, {"forward_passes": -(-len(pairs) // batch_size), "padded_tokens": padded}


class _CheckScores:
    """assert_that matcher: pipeline scores vs the plain loop's; writes the max difference."""

    def __init__(self, expected: np.ndarray, report: str):
        self._expected, self._report = expected, report

    def __call__(self, actual):
        got = np.zeros_like(self._expected)
        seen = 0
        for index, score in actual:
            got[index] = score
            seen += 1
        diff = float(np.abs(got - self._expected).max())
        Path(self._report).write_text(json.dumps({"seen": seen, "max_abs_diff": diff}))
        if seen != len(self._expected) or diff > TOLERANCE:
            raise AssertionError(f"pipeline scores differ: {seen} rows, max diff {diff}")


def _score_of(keyed):
    return keyed[0], keyed[1].inference


def pipeline_run(checkpoint: str, pairs: list[tuple[str, str]], expected: np.ndarray,
                 device: str, handler_kwargs: dict) -> tuple[float, dict[str, int]]:
    """RunInference on the in-process FnApiRunner; returns (max |diff|, counters)."""
    handler = handlers.CrossEncoderModelHandler(
        checkpoint, spec_kwargs={"device": device}, metrics_namespace=NAMESPACE,
        **handler_kwargs)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        report = f.name
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    pipeline = beam.Pipeline(options=options)
    scores = (pipeline
              | "CreatePairs" >> beam.Create(list(enumerate(pairs)))
              | "ScorePairs" >> RunInference(KeyedModelHandler(handler))
              | "KeepScores" >> beam.Map(_score_of))
    assert_that(scores, _CheckScores(expected, report))
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(
        MetricsFilter().with_namespace(NAMESPACE))["counters"]}
    checked = json.loads(Path(report).read_text())
    os.unlink(report)
    return checked["max_abs_diff"], counters


def qa_score_run(checkpoint: str, pairs: list[tuple[str, str]], expected: np.ndarray,
                 device: str, handler_kwargs: dict, tmp: str) -> tuple[float, dict[str, int]]:
    """The whole scoring pipeline (`qa-score --metrics sas`) on the pairs as JSONL rows
    (prediction a, one reference b), in-process FnApiRunner; returns (max |diff|, {})."""
    from pipelines import score_predictions

    folder = Path(tempfile.mkdtemp(dir=tmp))
    rows = folder / "pairs.jsonl"
    with open(rows, "w", encoding="utf-8") as f:
        for i, (a, b) in enumerate(pairs):
            f.write(json.dumps({"id": str(i), "prediction": a, "references": [b]}) + "\n")
    score_predictions.run([
        f"--input={rows}", f"--output={folder / 'out'}", "--metrics=sas",
        f"--sas_model={checkpoint}", f"--device={device}",
        f"--model_batch_size={handler_kwargs['max_batch_size']}",
        f"--max_batch_tokens={handler_kwargs['max_batch_tokens']}",
        "--runner=FnApiRunner", "--direct_running_mode=in_memory"], save_main_session=False)
    scores = pd.read_parquet(folder / "out.scores.parquet", columns=["id", "sas"])
    got = np.zeros_like(expected)
    got[scores["id"].astype(int).to_numpy()] = scores["sas"].to_numpy()
    if len(scores) != len(pairs):
        raise AssertionError(f"qa-score scored {len(scores)} of {len(pairs)} rows")
    return float(np.abs(got - expected).max()), {}


def _progress(variant: str, method: str, n: int, wall: float, cpu: float) -> None:
    print(f"  {variant:10} {method:13} {n / wall:7.0f} pairs/s  {n / cpu:7.0f} pairs/cpu-s  "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)


def _timed(fn, *args):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min_pairs", type=int, default=20_000)
    parser.add_argument("--out", default=str(REPO / "bench_out"))
    parser.add_argument("--device", default="auto", choices=loading.DEVICES)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--plain_batch_size", type=int, default=64)
    parser.add_argument("--max_batch_size", type=int, default=predictors.DEFAULT_MAX_BATCH_ROWS)
    parser.add_argument("--max_batch_tokens", type=int,
                        default=predictors.DEFAULT_MAX_BATCH_TOKENS)
    parser.add_argument("--torch_threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's own choice)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    inputs = make_inputs(args.min_pairs)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    handler_kwargs = {"max_batch_size": args.max_batch_size,
                      "max_batch_tokens": args.max_batch_tokens}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = save_cross_encoder(Path(tmp) / "cross_encoder")
        for variant, pairs in inputs.items():
            times: dict[str, list[tuple[float, float]]] = {
                "plain": [], "plain_sorted": [], "pipeline": [], "qa_score": []}
            stats: dict[str, dict] = {}
            for _ in range(args.repeats):
                for method in ("plain", "plain_sorted"):
                    (scores, st), wall, cpu = _timed(
                        plain_loop, checkpoint, pairs, args.plain_batch_size, args.device,
                        method == "plain_sorted")
                    times[method].append((wall, cpu))
                    stats[method] = st
                    _progress(variant, method, len(pairs), wall, cpu)
                    if method == "plain":
                        expected = scores
                (diff, counters), wall, cpu = _timed(
                    pipeline_run, checkpoint, pairs, expected, args.device, handler_kwargs)
                times["pipeline"].append((wall, cpu))
                _progress(variant, "pipeline", len(pairs), wall, cpu)
                stats["pipeline"] = {**counters, "max_abs_diff_vs_plain": diff}
                (diff, _), wall, cpu = _timed(
                    qa_score_run, checkpoint, pairs, expected, args.device, handler_kwargs,
                    tmp)
                times["qa_score"].append((wall, cpu))
                _progress(variant, "qa_score", len(pairs), wall, cpu)
                if diff > TOLERANCE:
                    raise AssertionError(f"qa-score scores differ from the plain loop: {diff}")
                stats["qa_score"] = {"max_abs_diff_vs_plain": diff}
            for method, runs in times.items():
                wall = min(w for w, _ in runs)
                cpu = min(c for _, c in runs)
                rows.append({"variant": variant, "method": method, "pairs": len(pairs),
                             "distinct_pairs": len(set(pairs)), "wall_s": runs,
                             "best_wall_s": wall, "best_cpu_s": cpu,
                             "pairs_per_s": len(pairs) / wall,
                             "pairs_per_cpu_s": len(pairs) / cpu, **stats[method]})
    for row in rows:
        plain = next(r for r in rows if r["variant"] == row["variant"] and r["method"] == "plain")
        row["speed_vs_plain"] = row["pairs_per_s"] / plain["pairs_per_s"]
        row["cpu_speed_vs_plain"] = row["pairs_per_cpu_s"] / plain["pairs_per_cpu_s"]
    print(f"{'variant':10} {'method':13} {'pairs':>6} {'pairs/s':>8} {'x plain':>8} "
          f"{'pairs/cpu-s':>11} {'x plain':>8} {'passes':>7} {'padded tok':>11}")
    for r in rows:
        print(f"{r['variant']:10} {r['method']:13} {r['pairs']:6d} {r['pairs_per_s']:8.0f} "
              f"{r['speed_vs_plain']:8.2f} {r['pairs_per_cpu_s']:11.0f} "
              f"{r['cpu_speed_vs_plain']:8.2f} {r.get('forward_passes', 0):7d} "
              f"{r.get('padded_tokens', 0):11d}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "beam": beam.__version__,
                    "python": platform.python_version(),
                    "device": str(torch_models.resolve_device(args.device)),
                    "load_average_at_end": os.getloadavg()},
        "args": vars(args), "results": rows,
    }
    (out / "model_metrics.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {out / 'model_metrics.json'}")
    goal = all(r["speed_vs_plain"] >= 0.9 for r in rows
               if r["method"] in ("pipeline", "qa_score") and r["variant"] == "unique")
    return 0 if goal else 1


if __name__ == "__main__":
    sys.exit(main())
