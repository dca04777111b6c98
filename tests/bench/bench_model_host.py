"""CPU proxy of GPU scoring: would the host side of the model branch starve a GPU?

    python -m tests.bench.bench_model_host [--rows 20000] [--model_rows 2000]
        [--mixed_rows 5000] [--workers N] [--million] [--repeated] [--out bench_out]

A GPU's forward pass outruns the CPU that prepares its inputs (docs/benchmarks.md, "GPU
scoring"): the host work per row decides GPU scoring's speed. Measured without a GPU on
EVOUNA-TQ rows (long LLM answers, up to 185 gold aliases a question), `--metrics judge`, a
judge-shaped checkpoint (MiniLM, three token types, the marked layout). Past the first
9,690 rows every answer is a new text (`evouna_rows(unique=True)`), as in a corpus of model
outputs; `--repeated` repeats them as they are (repeats then come from the caches):

  tokenizer        the bare batch tokenizer: each row's three judge segments (answer,
                   marked best gold, question; computed beforehand, not timed) through
                   the fast tokenizer's public batch call, 2,048 rows per call. The
                   floor of any host side that tokenizes each input.
  tokenizer_rust   the same through the Rust tokenizer's own `encode_batch`.
  tokenizer_words  the same word by word (`WordPieces`, from an empty memo), as the
                   window encoder tokenizes a BERT-style tokenizer's new segments.
  branch           the model branch's own code (`ExpandModelRequestsFn`,
                   `BatchModelHandler` over the per-use handlers, `FoldModelMetricsFn`)
                   on the reader's `RowBatch`es, with a zero-cost stand-in model (same
                   inputs and output shapes, no compute; zero_model.py), driven by a
                   plain loop: everything the branch does per row but the forward pass.
  branch_beam      the same as a Beam pipeline (`ScoreModelBatches`, FnApiRunner in
                   process), Beam's per-batch costs and the pipeline's start included.
  qa_score_zero    the whole `qa-score --metrics judge` with the zero-cost model, in its
                   own process: reading, validation, writing, summary and report
                   included; beside it the rate through the model branch after
                   start-up (its progress lines).
  qa_score_zero_mp the same with `--direct_running_mode=multi_processing
                   --direct_num_workers N --share_model_across_processes` (N = the
                   machine's cores, at most 8; `--workers`): worker processes preparing
                   windows for one shared (zero-cost) model, the GPU configuration; its
                   rate after start-up against the in-process run's says how the host
                   side scales with processes.
  qa_score_zero_three  `qa-score --metrics bertscore,sas,judge` with zero-cost models
                   (BERTScore's greedy match on the device stubbed too) on `--mixed_rows`
                   rows, in process: the host side per process of the three together
                   (sas and bertscore have one input per gold, 14 a row on average).
  qa_score /       the real model on the CPU, `--model_rows` rows without their human
  score_corpus     column (no report): the whole `qa-score` run (windows of 512 inputs)
                   against `metrics.corpus.score_corpus` (plain Python, batches of 512),
                   each in a fresh process (interpreter, imports and model load
                   included, as a user pays them); and qa-score's rate after start-up
                   against score_corpus_in_bench, score_corpus in this process.
  million          with `--million`: `qa-score --metrics judge` (zero-cost model) on
                   1,000,000 new answers in its own process; its peak RSS.

Printed beside them: the ratios and their goals (branch / tokenizer >= 0.8; real
tokens / padded tokens in the passes the handler forms >= 0.7; qa_score / score_corpus
>= 1.0; million within 8 GB; the multi-process scaling, no goal), and
`<out>/model_host.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WINDOW = 2048
BATCH_ROWS = 512


def _mapping():
    from transforms.scoring.reading.rows import ColumnMapping

    return ColumnMapping(question="question", id="id", system="system", human="human")


class _Tally:
    """A stand-in for a Beam counter outside a pipeline: counts into a dict."""

    def __init__(self, into: dict, name: str) -> None:
        self._into, self._name = into, name

    def inc(self, n: int = 1) -> None:
        self._into[self._name] = self._into.get(self._name, 0) + n


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def bare_tokenizer(tokenizer, segments: list[tuple[str, str, str]], how: str) -> int:
    """Tokenizes every segment of every row, WINDOW rows per call (`how`: "call", "rust" or
    "words", as the module docstring says); returns the tokens."""
    from transforms.models.word_pieces import WordPieces

    tokens, backend = 0, tokenizer.backend_tokenizer
    words = WordPieces.of(tokenizer) if how == "words" else None
    for start in range(0, len(segments), WINDOW):
        flat = [s for row in segments[start:start + WINDOW] for s in row]
        if words is not None:
            tokens += sum(map(len, words.ids(flat)))
        elif how == "rust":
            tokens += sum(len(e.ids) for e in backend.encode_batch(flat, add_special_tokens=False))
        else:
            tokens += sum(len(x) for x in tokenizer(flat, add_special_tokens=False)["input_ids"])
    return tokens


def row_batches(path: str) -> list:
    """The reader's RowBatches of the file (BATCH_ROWS consecutive rows each)."""
    from transforms.scoring.reading.read import ReadRowsFn, ReadSplit

    fn = ReadRowsFn(_mapping(), batch_rows=BATCH_ROWS)
    fn.start_bundle()
    return [b for b in fn.process(ReadSplit(path, "jsonl")) if hasattr(b, "rows")]


def branch_direct(metric, batches: list) -> tuple[int, dict]:
    """The model branch's DoFns and handlers in a plain loop (zero-cost model loaded by
    the caller's context); returns (rows scored, handler counts)."""
    from transforms.inference.handlers import build_handler
    from transforms.inference.multi_use import MultiUseModelHandler
    from transforms.scoring.score.batch_model_handler import BatchModelHandler, request_count
    from transforms.scoring.score.run_model_metrics import (
        ExpandModelRequestsFn,
        FoldModelMetricsFn,
        plan_uses,
    )

    counts: dict[str, int] = {}
    uses, roles = plan_uses([metric])
    per_use = {tag: build_handler(use) for tag, use in uses.items()}
    for handler in per_use.values():
        handler._counters = {name: _Tally(counts, name) for name in handler._counters}
    handler = BatchModelHandler(MultiUseModelHandler(per_use))
    models = handler.load_model()
    expand, fold = ExpandModelRequestsFn([metric], roles), FoldModelMetricsFn([metric])
    expand.start_bundle()
    fold.start_bundle()
    scored, window, weight = 0, [], 0

    def flush():
        nonlocal scored
        for result in handler.run_inference(window, models):
            for batch in fold.process(result):
                scored += sum(1 for r in batch.results if r[0] is not None)

    for batch in batches:
        for element in expand.process(batch):
            window.append(element)
            weight += request_count(element)
            if weight >= WINDOW:
                flush()
                window, weight = [], 0
    if window:
        flush()
    return scored, counts


def branch_beam(metric, batches: list) -> int:
    """`ScoreModelBatches` on the FnApiRunner in process; returns the rows it scored."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that

    from transforms.scoring.score.run_model_metrics import ScoreModelBatches

    total = sum(len(b) for b in batches)
    seen = []

    def check(counts):
        seen.append(sum(counts))
        if sum(counts) != total:
            raise AssertionError(f"the branch scored {sum(counts)} of {total} rows")

    options = PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    with beam.Pipeline(options=options) as p:
        scored = (p | beam.Create(batches, reshuffle=False)
                  | ScoreModelBatches([metric])
                  | beam.Map(lambda b: sum(1 for r in b.results if r[0] is not None)))
        assert_that(scored | beam.combiners.Count.Globally().without_defaults()
                    | beam.Map(lambda _: 0), lambda _: None, label="Ran")
        assert_that(scored, check)
    return total


def qa_score(path: str, out: str, judge: str, zero_cost: bool,
             extra: tuple[str, ...] = (), mode: str = "in_memory",
             metrics: str = "judge") -> tuple[float, dict[str, float | None]]:
    """`qa-score --metrics judge` (or `metrics`, their models' flags in `extra`) in its
    own process (with zero-cost models when asked); returns its wall time and, from its
    progress lines, its rate through the model branch after start-up
    and the seconds the model waited for its first window (`progress_span`)."""
    from tests.bench.progress_span import progress_figures

    module = "tests.bench.zero_model" if zero_cost else "pipelines.score_predictions"
    wall, done = _timed_process("qa-score", [
        "-m", module, f"--input={path}", f"--output={out}", f"--metrics={metrics}",
        f"--judge_model={judge}", "--runner=FnApiRunner", f"--direct_running_mode={mode}",
        "--overwrite", "--progress_interval=1", *extra])
    return wall, progress_figures(done.stderr.splitlines())[0]


def _timed_process(what: str, args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    """This Python with `args` in a fresh process (the repository on its path): its wall
    time and its completed process; RuntimeError with its stderr's tail if it failed."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stderr[-3000:]}")
    return wall, done


_CORPUS_SCRIPT = """
import json, sys
from tests.bench.bench_model_host import _mapping
from transforms.metrics.corpus import score_corpus
from transforms.metrics.judge import JudgeMetric
from transforms.scoring.reading.row_validation import to_scoring_row
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
examples = [to_scoring_row(r, _mapping(), None).example for r in rows]
print(len(score_corpus([JudgeMetric(model=sys.argv[2])], examples)))
"""


def score_corpus_process(path: str, judge: str) -> tuple[float, int]:
    """`score_corpus` on the rows of a JSONL file in a fresh process, as a user's script
    would run it: its wall time (interpreter, imports and model load included, as in
    qa-score's) and the rows it scored."""
    wall, done = _timed_process("score_corpus", ["-c", _CORPUS_SCRIPT, path, judge])
    return wall, int(done.stdout.split()[-1])


def million(judge: str, tmp: str) -> dict:
    """1,000,000 rows, zero-cost judge, `qa-score` in its own process: wall, peak RSS."""
    from tests.bench.judge_rows import evouna_rows, write_jsonl

    path = write_jsonl(evouna_rows(1_000_000, unique=True), Path(tmp) / "million.jsonl")
    wall, _ = _timed_process("the million-row run", [
        "-m", "tests.bench.zero_model", f"--input={path}",
        f"--output={Path(tmp) / 'million' / 'run'}", "--metrics=judge",
        f"--judge_model={judge}", "--runner=FnApiRunner", "--direct_running_mode=in_memory",
        "--progress_interval=60"])
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    import pyarrow.parquet as pq
    rows = pq.ParquetFile(Path(tmp) / "million" / "run.scores.parquet").metadata.num_rows
    return {"rows": rows, "wall_s": wall, "rows_per_s": rows / wall,
            "peak_rss_gb": peak_kb / 2**20}


def main(argv: list[str] | None = None) -> int:
    from tests.bench.bench_data import require
    from tests.bench.judge_rows import EVOUNA_TQ, REPEATED_HELP

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--model_rows", type=int, default=2_000,
                        help="rows for the real-model comparison (0: skip it)")
    parser.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 8),
                        help="worker processes of the multi-process run (0: skip it)")
    parser.add_argument("--mixed_rows", type=int, default=5_000,
                        help="rows for the zero-cost bertscore,sas,judge run (0: skip it)")
    parser.add_argument("--million", action="store_true",
                        help="also score 1,000,000 rows (zero-cost model), peak RSS")
    parser.add_argument("--repeated", action="store_true", help=REPEATED_HELP)
    parser.add_argument("--out", default=str(REPO / "bench_out"))
    args = parser.parse_args(argv)
    require(EVOUNA_TQ)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    from tests.bench.judge_rows import evouna_rows, judge_checkpoint, write_jsonl
    from tests.bench.zero_model import zero_cost_models
    from transforms.metrics.corpus import score_corpus
    from transforms.metrics.judge import JudgeMetric
    from transforms.models import loading
    from transforms.scoring.reading.row_validation import to_scoring_row

    results: dict[str, dict] = {}

    def record(name: str, rows: int, wall: float, **extra) -> None:
        results[name] = {"rows": rows, "wall_s": wall, "rows_per_s": rows / wall, **extra}
        after, first = extra.get("steady_rows_per_s"), extra.get("first_done_s")
        print(f"  {name:16} {rows:8d} rows {wall:7.1f} s {rows / wall:9.0f} rows/s "
              + (f"({after:.0f} after start-up) " if after else "")
              + (f"(first window {first:.1f} s after the first row read) "
                 if first is not None else "")
              + f"(load {os.getloadavg()[0]:.1f})", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        judge = judge_checkpoint(loading.packaged_model_path(), Path(tmp) / "judge")
        metric = JudgeMetric(model=judge)
        rows = evouna_rows(args.rows, unique=not args.repeated)
        path = write_jsonl(rows, Path(tmp) / "rows.jsonl")
        tokenizer = loading.load_tokenizer(loading.ModelSpec(judge))
        segments = [m.input for r in rows for m in metric.requests(to_scoring_row(
            r, _mapping(), None).example)]
        for name, how in (("tokenizer", "call"), ("tokenizer_rust", "rust"),
                          ("tokenizer_words", "words")):
            tokens, wall = _timed(bare_tokenizer, tokenizer, segments, how)
            record(name, len(rows), wall, tokens=tokens)
        batches = row_batches(path)
        with zero_cost_models():
            (scored, counts), wall = _timed(branch_direct, metric, batches)
            record("branch", scored, wall, real_tokens=counts.get("real_tokens"),
                   padded_tokens=counts.get("padded_tokens"),
                   forward_passes=counts.get("forward_passes"))
            scored, wall = _timed(branch_beam, metric, batches)
            record("branch_beam", scored, wall)
        wall, steady = qa_score(path, str(Path(tmp) / "zero" / "run"), judge, True)
        record("qa_score_zero", len(rows), wall, **steady)
        if args.workers:
            wall, steady = qa_score(path, str(Path(tmp) / "zero_mp" / "run"), judge, True, (
                f"--direct_num_workers={args.workers}", "--share_model_across_processes"),
                mode="multi_processing")
            record("qa_score_zero_mp", len(rows), wall, **steady,
                   workers=args.workers)
        if args.mixed_rows:
            from tests.bench.bench_gpu import make_models

            models = make_models(loading.packaged_model_path(), str(Path(tmp) / "models"))
            wall, steady = qa_score(
                path if args.mixed_rows >= len(rows) else write_jsonl(
                    rows[: args.mixed_rows], Path(tmp) / "mixed.jsonl"),
                str(Path(tmp) / "three" / "run"), models["judge"], True,
                (f"--sas_model={models['sas']}", f"--bertscore_model={models['bertscore']}"),
                metrics="bertscore,sas,judge")
            record("qa_score_zero_three", min(args.mixed_rows, len(rows)), wall,
                   **steady)
        if args.model_rows:
            # no human column: score_corpus writes no report, so neither does qa-score here
            few = write_jsonl([{k: v for k, v in r.items() if k != "human"}
                               for r in rows[: args.model_rows]], Path(tmp) / "few.jsonl")
            examples = [to_scoring_row(r, _mapping(), None).example
                        for r in rows[: args.model_rows]]
            _, wall = _timed(score_corpus, [JudgeMetric(model=judge)], examples)
            record("score_corpus_in_bench", len(examples), wall)
            wall, scored = score_corpus_process(few, judge)
            record("score_corpus", scored, wall)
            # windows of 512 inputs, score_corpus's batches, so that the progress lines
            # see several of them
            wall, steady = qa_score(few, str(Path(tmp) / "real" / "run"), judge, False,
                                    ("--model_batch_size=512",))
            record("qa_score", len(examples), wall, **steady)
        if args.million:
            results["million"] = million(judge, tmp)
            m = results["million"]
            print(f"  million          {m['rows']:8d} rows {m['wall_s']:7.1f} s "
                  f"{m['rows_per_s']:9.0f} rows/s, peak RSS {m['peak_rss_gb']:.2f} GB")

    branch, tok = results["branch"], results["tokenizer"]
    ratios = {
        "branch_vs_tokenizer": branch["rows_per_s"] / tok["rows_per_s"],
        "branch_vs_tokenizer_rust": branch["rows_per_s"] / results["tokenizer_rust"]["rows_per_s"],
        "real_token_share": branch["real_tokens"] / branch["padded_tokens"],
    }
    mp, alone = results.get("qa_score_zero_mp"), results["qa_score_zero"]
    if mp and mp.get("steady_rows_per_s") and alone.get("steady_rows_per_s"):
        ratios[f"processes_{mp['workers']}_vs_1_after_start_up"] = (
            mp["steady_rows_per_s"] / alone["steady_rows_per_s"])
    if "qa_score" in results:
        ratios["qa_score_vs_score_corpus"] = (results["qa_score"]["rows_per_s"]
                                              / results["score_corpus"]["rows_per_s"])
        ratios["qa_score_vs_score_corpus_in_bench"] = (
            results["qa_score"]["rows_per_s"] / results["score_corpus_in_bench"]["rows_per_s"])
        if results["qa_score"].get("steady_rows_per_s"):
            ratios["qa_score_after_start_up_vs_score_corpus_in_bench"] = (
                results["qa_score"]["steady_rows_per_s"]
                / results["score_corpus_in_bench"]["rows_per_s"])
    goals = {"branch_vs_tokenizer": 0.8, "real_token_share": 0.7,
             "qa_score_vs_score_corpus": 1.0}
    print("ratios (goal):")
    for name, value in ratios.items():
        goal = goals.get(name)
        print(f"  {name:28} {value:6.2f}" + (f"  (>= {goal})" if goal else ""))
    if "million" in results:
        print(f"  million rows peak RSS        {results['million']['peak_rss_gb']:6.2f} GB  (<= 8)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                          "python": platform.python_version(),
                          "load_average_at_end": os.getloadavg()},
              "args": vars(args), "results": results, "ratios": ratios}
    (out / "model_host.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {out / 'model_host.json'}")
    met = all(ratios[k] >= v for k, v in goals.items() if k in ratios)
    if "million" in results:
        met = met and results["million"]["peak_rss_gb"] <= 8
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
