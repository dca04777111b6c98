"""GPU benchmark: the same rows through qa-score, score_corpus, the forward pass alone and
the tokenizer alone, for judge, sas, bertscore and the three together.

    python -m tests.bench.bench_gpu [--rows 200000] [--mixed_rows 50000]
        [--base_model DIR] [--evouna TQ.json] [--workers 8] [--out bench_out]
        [--baseline_checkout DIR] [--baseline_rows 10000] [--only judge,sas,...] [--repeated]
        [--mp_model_batch_size N] [--mp_copies N] [--mp_first_batch_size N] [--rows_dir DIR]
    python -m tests.bench.bench_gpu decisions --judge DIR --cpu_scores FILE [--evouna ...]
    python -m tests.bench.bench_gpu cpu_scores --judge DIR --out FILE [--evouna ...]

Without CUDA it says so and exits 0 (`make bench` runs it everywhere). Rows: EVOUNA-TQ's
judged answers repeated to `--rows` (judge) or `--mixed_rows` (sas, bertscore and the
three together: those score every gold, 14 a row on average), each repeat's answers new
texts (" (copy N)" appended), as in a corpus of model outputs: with `--repeated` they are
the same texts, and rows past the first 9,690 come from the predictor's cache (an upper
bound for new answers). Models: `--base_model`
(default: the packaged MiniLM; on a bare GPU machine the random-weight MiniLM of
../shared/tools/gpu, the same cost per token) with seeded heads: a judge (three token
types, the marked layout), a sas cross-encoder, and the encoder itself for bertscore.

Per metric set, in one run on one device:
  qa_score      `qa-score` in process (FnApiRunner): rows/s overall and after start-up
                (from the progress lines: rows through the model branch per second from
                the first line that saw a row read to the first that saw them all), the
                GPU's busy share (nvidia-smi's utilization, sampled every 200 ms) over
                the run and over that span, and peak GPU memory;
  qa_score_mp   the same with `--direct_num_workers N --direct_running_mode
                multi_processing --share_model_across_processes` (one model on the GPU,
                N processes preparing its inputs);
  score_corpus  `metrics.corpus.score_corpus` on the same rows (judge and the three);
  forward       the judge's forward passes alone, on pre-tokenized inputs grouped by
                length as the handler groups them (the ceiling);
  tokenizer     the fast tokenizer alone on the judge's segments (public batch call).
With `--baseline_checkout DIR` (a checkout of an earlier commit), its `qa-score` runs the
judge and the three on `--baseline_rows` rows on the same device, for the before/after.
`decisions` scores EVOUNA-TQ with a trained judge on the GPU (bfloat16) and compares its
decisions at the checkpoint's threshold with the CPU's (float32) scores saved by
`cpu_scores`. Results: a table on stdout and `<out>/gpu.json`, written after each step.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from tests.bench.progress_span import progress_figures

REPO = Path(__file__).resolve().parents[2]
MODEL_FLAGS = ["--max_batch_tokens=65536", "--model_batch_size=16384", "--max_batch_size=2048"]


class GpuSampler:
    """nvidia-smi's GPU utilization and memory, sampled every `period_ms` in a thread."""

    def __init__(self, period_ms: int = 200) -> None:
        self._samples: list[tuple[float, float, float]] = []
        self._proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
             "--format=csv,noheader,nounits", f"-lms={period_ms}"],
            stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                util, mem = (float(x) for x in line.split(",")[:2])
            except ValueError:
                continue
            self._samples.append((time.monotonic(), time.time(), util, mem))

    def window(self, start: float, end: float) -> dict:
        """The busy share and peak memory between two `time.monotonic()` readings."""
        inside = [(u, m) for t, _, u, m in self._samples if start <= t <= end]
        if not inside:
            return {"gpu_busy": None, "gpu_mem_max_mb": None}
        return {"gpu_busy": sum(u for u, _ in inside) / len(inside) / 100,
                "gpu_mem_max_mb": max(m for _, m in inside), "samples": len(inside)}

    def busy_between(self, start: float, end: float) -> float | None:
        """The busy share between two wall-clock times (`time.time()`: a log's clock)."""
        inside = [u for _, t, u, _ in self._samples if start <= t <= end]
        return sum(inside) / len(inside) / 100 if inside else None

    def stop(self) -> None:
        self._proc.terminate()


class Bench:
    def __init__(self, out: Path, sampler: GpuSampler | None) -> None:
        self.out, self.sampler, self.results = out, sampler, {}
        out.mkdir(parents=True, exist_ok=True)

    def record(self, name: str, rows: int, start: float, end: float, **extra) -> dict:
        wall = end - start
        entry = {"rows": rows, "wall_s": round(wall, 2), "rows_per_s": round(rows / wall, 1),
                 **extra}
        if self.sampler is not None:
            entry.update(self.sampler.window(start, end))
        self.results[name] = entry
        print(f"{name:34} {rows:8d} rows {wall:8.1f} s {rows / wall:9.0f} rows/s  "
              + " ".join(f"{k}={v}" for k, v in extra.items()
                         if k in ("steady_rows_per_s", "real_token_share", "steady_gpu_busy",
                                  "first_done_s"))
              + (f"  busy {entry['gpu_busy']:.0%}" if entry.get("gpu_busy") is not None
                 else ""), flush=True)
        self.save()
        return entry

    def save(self) -> None:
        (self.out / "gpu.json").write_text(json.dumps(self.results, indent=1))


def qa_score(bench: Bench, name: str, rows_path: str, n: int, metrics: str,
             models: dict[str, str], tmp: str, extra: list[str] = (),
             timeout_s: float | None = None, checkout: Path = REPO) -> dict:
    """One `qa-score` run in its own process (so peak GPU memory and start-up are its
    own); progress lines every second give the steady rate."""
    flags = [f"--{family}_model={models[family]}" for family in metrics.split(",")
             if family in ("sas", "judge")]
    if "bertscore" in metrics.split(","):
        flags.append(f"--bertscore_model={models['bertscore']}")
    out = Path(tmp) / name / "run"
    cmd = [sys.executable, "-m", "pipelines.score_predictions", f"--input={rows_path}",
           f"--output={out}", f"--metrics={metrics}", "--runner=FnApiRunner",
           "--progress_interval=1", "--overwrite", *flags, *extra]
    env = {**os.environ, "PYTHONPATH": f"{checkout}:{os.environ.get('PYTHONPATH', '')}"}
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        lines = (e.stderr or b"").decode(errors="replace").splitlines()
        figures, _ = progress_figures(lines)
        print(f"{name}: stopped after {timeout_s} s; {figures['steady_rows_per_s']} rows/s "
              "so far", flush=True)
        bench.results[name] = {"timed_out_s": timeout_s, **figures, "last_lines": lines[-3:]}
        bench.save()
        return {}
    end = time.monotonic()
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        bench.results[name] = {"failed": done.stderr[-2000:]}
        bench.save()
        return {}
    lines = done.stderr.splitlines()
    logs = bench.out / "logs"
    logs.mkdir(exist_ok=True)
    (logs / (re.sub(r"[^\w.-]+", "_", name) + ".log")).write_text(done.stderr[-200_000:])
    # the launcher's plan: whether the workers score what they read (no reshuffle)
    plan = [x.split(": ", 1)[-1] for x in lines if " splits (JSONL in ranges of " in x][-1:]
    steady, span = progress_figures(lines)
    if span and bench.sampler is not None:  # the GPU's busy share while rows flowed
        steady["steady_gpu_busy"] = bench.sampler.busy_between(span[1], span[2])
    return bench.record(name, n, start, end, **steady,
                        last_lines=[x for x in lines if "done in" in x][-1:], plan=plan,
                        flags=list(extra))


def forward_only(bench: Bench, judge: str, rows: list[dict]) -> None:
    """The judge's forward passes on pre-tokenized, length-grouped inputs, and the bare
    tokenizer, on the same rows."""
    import torch

    from transforms.metrics.base import QAExample
    from transforms.metrics.judge import JudgeMetric
    from transforms.models import batching, predictors

    metric = JudgeMetric(model=judge)
    use = metric.model_uses()["cross_encoder"]
    predictor = predictors.load_predictor(use, max_batch_tokens=65536, max_batch_rows=16384)
    inputs = [metric.requests(QAExample(r["prediction"], tuple(r["references"]),
                                        r["question"]))[0].input for r in rows]
    tokenizer = predictor.tokenizer
    start = time.monotonic()
    for at in range(0, len(inputs), 2048):
        tokenizer([s for x in inputs[at:at + 2048] for s in x], add_special_tokens=False)
    bench.record("judge/tokenizer", len(inputs), start, time.monotonic())
    start = time.monotonic()
    tokens = predictor.encode(inputs)
    bench.record("judge/encode (segment memo)", len(inputs), start, time.monotonic())
    passes, real, padded = [], 0, 0
    for at in range(0, len(inputs), 16384):  # the qa-score window
        window = np.arange(at, min(at + 16384, len(inputs)))
        for plan in batching.plan_batches(tokens.lengths[window], 16384, 65536):
            passes.append(batching.pad_tokens(tokens, window[plan], predictor.pad_id))
            real += int(tokens.lengths[window[plan]].sum())
            padded += passes[-1].input_ids.size
    model, cuda = predictor.model, torch.cuda.is_available()
    model.run(passes[:4])  # warm-up
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.monotonic()
    model.run(passes)
    if cuda:
        torch.cuda.synchronize()
    bench.record("judge/forward", len(inputs), start, time.monotonic(),
                 real_token_share=round(real / padded, 3), passes=len(passes),
                 peak_alloc_mb=torch.cuda.max_memory_allocated() / 2**20 if cuda else None)
    # the same passes again: every shape seen once, so what the first run paid for new
    # shapes (kernel choice, allocator growth) is told apart from the passes themselves
    start = time.monotonic()
    model.run(passes)
    if cuda:
        torch.cuda.synchronize()
    bench.record("judge/forward (shapes seen)", len(inputs), start, time.monotonic())
    if cuda:  # where a pass's time goes: the host's calls and the device's kernels
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model.run(passes[:8])
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        table += "\n" + prof.key_averages().table(sort_by="cuda_time_total", row_limit=15)
        (bench.out / "forward_profile.txt").write_text(table)


def corpus(bench: Bench, name: str, metrics: list, rows: list[dict]) -> None:
    from transforms.metrics.base import QAExample
    from transforms.metrics.corpus import score_corpus

    examples = [QAExample(r["prediction"], tuple(r["references"]), r["question"])
                for r in rows]
    start = time.monotonic()
    score_corpus(metrics, examples, batch_size=2048)
    bench.record(name, len(examples), start, time.monotonic())


def make_models(base: str, tmp: str) -> dict[str, str]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from tests.bench.judge_rows import judge_checkpoint

    sas = Path(tmp) / "sas"
    torch.manual_seed(1)
    AutoModelForSequenceClassification.from_pretrained(base, num_labels=1).save_pretrained(sas)
    AutoTokenizer.from_pretrained(base).save_pretrained(sas)
    return {"judge": judge_checkpoint(base, Path(tmp) / "judge"), "sas": str(sas),
            "bertscore": base}


def run_all(args) -> int:
    import torch

    on_gpu = torch.cuda.is_available()
    if not on_gpu and not args.allow_cpu:
        print("bench_gpu: no CUDA device here; skipped (run it on a GPU machine)")
        return 0
    from tests.bench.judge_rows import evouna_rows, write_jsonl
    from transforms.metrics.bertscore import BERTScoreMetric
    from transforms.metrics.judge import JudgeMetric
    from transforms.metrics.model_metrics import SASMetric
    from transforms.models import loading, torch_models

    began = time.monotonic()
    only = set(args.only.split(",")) if args.only else None
    sampler = GpuSampler() if on_gpu else None
    bench = Bench(Path(args.out), sampler)
    bench.results["device"] = torch.cuda.get_device_name(0) if on_gpu else "cpu (a dry run)"
    bench.results["cudnn_attention"] = torch_models.CUDNN_ATTENTION  # QA_CUDNN_ATTENTION=1: on
    print(f"device: {bench.results['device']}, {os.cpu_count()} CPUs", flush=True)
    base = args.base_model or loading.packaged_model_path()

    def want(step: str) -> bool:
        if only is not None and step not in only:
            return False
        if time.monotonic() - began > args.deadline_s:
            print(f"skipped {step}: past --deadline_s", flush=True)
            return False
        return True

    with tempfile.TemporaryDirectory() as tmp:
        models = make_models(base, tmp)
        bench.results["repeated"] = args.repeated
        # the rows' files, kept in --rows_dir for the next invocation; the rows themselves
        # are made (seconds for a million) where a file is missing or a step reads them
        folder = Path(args.rows_dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        kind = (f"{Path(args.evouna).stem}_{'repeated' if args.repeated else 'new'}"
                + ("_human" if args.with_human else ""))
        big, mixed, small = (str(folder / f"rows_{n}_{kind}.jsonl")
                             for n in (args.rows, args.mixed_rows, args.baseline_rows))
        rows: list[dict] = []
        if (only is None or only & {"forward", "corpus"}
                or not all(map(os.path.exists, (big, mixed, small)))):
            most = max(args.rows, args.mixed_rows, args.baseline_rows)  # each file its count
            rows = evouna_rows(most, args.evouna, unique=not args.repeated)
            if not args.with_human:  # a corpus of LLM answers to judge has no human labels
                rows = [{k: v for k, v in r.items() if k != "human"} for r in rows]
            for path, n in ((big, args.rows), (mixed, args.mixed_rows),
                            (small, args.baseline_rows)):
                if not os.path.exists(path):
                    write_jsonl(rows[:n], path + ".tmp")
                    os.replace(path + ".tmp", path)
        mp = [f"--direct_num_workers={args.workers}",
              "--direct_running_mode=multi_processing", "--share_model_across_processes"]
        if args.mp_model_batch_size:  # after MODEL_FLAGS' own: the last one counts
            mp.append(f"--model_batch_size={args.mp_model_batch_size}")
        if args.mp_copies:
            mp.append(f"--model_copies={args.mp_copies}")
        if args.mp_first_batch_size:
            mp.append(f"--model_first_batch_size={args.mp_first_batch_size}")
        run = lambda name, path, n, metrics, extra=(), **kw: qa_score(  # noqa: E731
            bench, name, path, n, metrics, models, tmp, extra, args.step_timeout, **kw)
        baseline = Path(args.baseline_checkout).resolve() if args.baseline_checkout else None
        three = "bertscore,sas,judge"

        def before_after(metrics: str) -> None:
            if baseline is not None and want("baseline"):
                run(f"baseline {metrics}/qa_score", small, args.baseline_rows, metrics,
                    MODEL_FLAGS[:2], checkout=baseline)
                run(f"new {metrics}/qa_score (same rows)", small, args.baseline_rows,
                    metrics, MODEL_FLAGS[:2])

        if want("forward"):
            forward_only(bench, models["judge"], rows[: min(args.rows, 100_000)])
        if want("judge"):
            run("judge/qa_score", big, args.rows, "judge", MODEL_FLAGS)
        if want("mixed"):
            run(f"{three}/qa_score", mixed, args.mixed_rows, three, MODEL_FLAGS)
        if (want("judge") and want("mp")) or (only and "judge_mp" in only and want("judge_mp")):
            run("judge/qa_score_mp", big, args.rows, "judge", MODEL_FLAGS + mp)
        if (want("mixed") and want("mp")) or (only and "mixed_mp" in only and want("mixed_mp")):
            run(f"{three}/qa_score_mp", mixed, args.mixed_rows, three, MODEL_FLAGS + mp)
        if want("corpus"):
            corpus(bench, "judge/score_corpus", [JudgeMetric(model=models["judge"])],
                   rows[: args.mixed_rows])
        if want("corpus"):
            corpus(bench, "bertscore,sas,judge/score_corpus",
                   [BERTScoreMetric(model=models["bertscore"]),
                    SASMetric(model=models["sas"]), JudgeMetric(model=models["judge"])],
                   rows[: args.mixed_rows // 4])
        before_after("judge")
        before_after(three)
        for metrics in ("sas", "bertscore"):
            if want(metrics):
                run(f"{metrics}/qa_score", mixed, args.mixed_rows, metrics, MODEL_FLAGS)
            if want(metrics) and want("mp"):
                run(f"{metrics}/qa_score_mp", mixed, args.mixed_rows, metrics,
                    MODEL_FLAGS + mp)
    if sampler is not None:
        sampler.stop()
    _ratios(bench)
    return 0


def _ratios(bench: Bench) -> None:
    r = bench.results
    get = lambda name, key="rows_per_s": (r.get(name) or {}).get(key)  # noqa: E731
    ratios = {}
    forward = get("judge/forward")
    for name in ("judge/qa_score", "judge/qa_score_mp"):
        steady = get(name, "steady_rows_per_s")
        if forward and steady:
            ratios[f"{name} steady / forward"] = round(steady / forward, 3)
    if get("judge/qa_score") and get("judge/score_corpus"):
        ratios["judge qa_score / score_corpus"] = round(
            get("judge/qa_score") / get("judge/score_corpus"), 3)
    for metrics in ("judge", "bertscore,sas,judge"):
        old, new = get(f"baseline {metrics}/qa_score"), get(f"new {metrics}/qa_score (same rows)")
        if old and new:
            ratios[f"{metrics} new / baseline"] = round(new / old, 2)
    r["ratios"] = ratios
    bench.save()
    for k, v in ratios.items():
        print(f"  {k:45} {v}")


def cpu_scores(args) -> int:
    """The judge's scores of the EVOUNA-TQ rows on the CPU (float32), saved for
    `decisions`."""
    from tests.bench.judge_rows import evouna_rows
    from transforms.metrics.base import QAExample
    from transforms.metrics.corpus import score_corpus
    from transforms.metrics.judge import JudgeMetric

    rows = evouna_rows(args.rows, args.evouna)
    examples = [QAExample(r["prediction"], tuple(r["references"]), r["question"]) for r in rows]
    scores = score_corpus([JudgeMetric(model=args.judge, device="cpu")], examples)
    np.save(args.out, np.array([s["judge"] for s in scores], dtype=np.float64))
    print(f"wrote {len(scores)} CPU scores to {args.out}")
    return 0


def decisions(args) -> int:
    """GPU (bfloat16) decisions against the CPU's (float32) at the judge's threshold."""
    import torch

    from tests.bench.judge_rows import evouna_rows
    from transforms.metrics.base import QAExample
    from transforms.metrics.corpus import score_corpus
    from transforms.metrics.judge import JudgeMetric

    if not torch.cuda.is_available():
        print("bench_gpu decisions: no CUDA device here; skipped")
        return 0
    cpu = np.load(args.cpu_scores)
    rows = evouna_rows(len(cpu), args.evouna)
    examples = [QAExample(r["prediction"], tuple(r["references"]), r["question"]) for r in rows]
    metric = JudgeMetric(model=args.judge, device="cuda")
    threshold = metric.model_uses()["cross_encoder"].decision_threshold() or 0.5
    gpu = np.array([s["judge"] for s in score_corpus([metric], examples)])
    same = float(np.mean((gpu >= threshold) == (cpu >= threshold)))
    human = np.array([r["human"] for r in rows])
    report = {"device": torch.cuda.get_device_name(0), "rows": len(cpu),
              "threshold": threshold, "decisions_equal": same,
              "max_abs_score_diff": float(np.abs(gpu - cpu).max()),
              "accuracy_cpu": float(np.mean((cpu >= threshold) == (human == 1))),
              "accuracy_gpu": float(np.mean((gpu >= threshold) == (human == 1)))}
    print(json.dumps(report, indent=1))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_decisions.json").write_text(json.dumps(report, indent=1))
    return 0 if same >= 0.995 else 1


def main(argv: list[str] | None = None) -> int:
    from tests.bench.judge_rows import EVOUNA_TQ, REPEATED_HELP

    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in ("decisions", "cpu_scores") else "run"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evouna", default=str(EVOUNA_TQ))
    parser.add_argument("--out", default=str(REPO / "bench_out"))
    if command == "run":
        parser.add_argument("--rows", type=int, default=200_000)
        parser.add_argument("--mixed_rows", type=int, default=50_000)
        parser.add_argument("--base_model", default=None)
        parser.add_argument("--workers", type=int, default=8)
        parser.add_argument("--mp_model_batch_size", type=int, default=None,
                            help="the window (model inputs) of the multi-process runs "
                                 "(default: the in-process runs' 16384)")
        parser.add_argument("--mp_copies", type=int, default=None,
                            help="--model_copies of the multi-process runs (copies of each "
                                 "model on the one GPU, each in a process of its own)")
        parser.add_argument("--mp_first_batch_size", type=int, default=None,
                            help="--model_first_batch_size of the multi-process runs "
                                 "(default: qa-score's, 1/16 of the window; the window's "
                                 "size: fixed windows)")
        parser.add_argument("--rows_dir", default=None,
                            help="keep the rows' JSONL files here and reuse them in the next "
                                 "invocation (default: a temporary folder)")
        parser.add_argument("--baseline_checkout", default=None)
        parser.add_argument("--baseline_rows", type=int, default=10_000)
        parser.add_argument("--only", default=None,
                            help="comma-separated: forward, judge, mixed, baseline, mp "
                                 "(the multi-process runs), judge_mp, mixed_mp (the "
                                 "multi-process run of the judge, of the three, alone), "
                                 "corpus, sas, bertscore")
        parser.add_argument("--step_timeout", type=float, default=None,
                            help="seconds one qa-score run may take")
        parser.add_argument("--deadline_s", type=float, default=float("inf"),
                            help="start no step after this many seconds")
        parser.add_argument("--with_human", action="store_true",
                            help="keep the human judgments (the runs then also write the "
                                 "meta-evaluation report)")
        parser.add_argument("--repeated", action="store_true", help=REPEATED_HELP)
        parser.add_argument("--allow_cpu", action="store_true",
                            help="run without CUDA (a dry run of the steps, tiny --rows)")
        return run_all(parser.parse_args(argv))
    parser.add_argument("--judge", required=True)
    parser.add_argument("--rows", type=int, default=9690)
    if command == "cpu_scores":
        return cpu_scores(parser.parse_args(argv))
    parser.add_argument("--cpu_scores", required=True)
    return decisions(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
