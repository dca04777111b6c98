"""`make demo`: the product end to end on the bundled real data: mine -> train -> score.

    python -m pipelines.demo --output demo_out [--data ../shared/data]
        [--train_minutes 5.5] [--sas_model M] [--wes_model M] [--kpqa_model M]
        [--bem_model M] [--square_model M]

1. Mines WES from the real Wikipedia slice at k = 2 and 5 (the 106-article sample leaves
   773 positive pairs at the paper's k = 5; k = 2 leaves 5,627, enough to train on).
2. Trains the learned metrics on CPU within a wall-clock budget (`--train_minutes`, or
   the environment variable QA_EVAL_DEMO_TRAIN_MINUTES; default 5.5), in two lanes that
   share the two cores, one torch thread each:
   - lane A: the WES cross-encoder on wes-k2 (one epoch, at most 45% of the budget),
     then the SAS cross-encoder on STS-B, initialised from it (whatever is left);
   - lane B: the KPQA keyphrase predictor on SQuAD dev (40 articles; 8 held out).
   A model given with `--<metric>_model` is used as it is and not trained.
3. Scores the KPQA release's AVSD answers (6 references, 1-5 ratings) and the SAS
   release's SQuAD answer pairs (0/1/2 labels) with every metric that has a model:
   lexical, BERTScore and the bi-encoder (packaged MiniLM), sas, wes and kpqa_* (the
   models just trained), bem and square when their checkpoints are given (the bundled
   data has no BEM- or SQuArE-style training rows).
4. Prints what each model reached, the meta-evaluation tables (SQuAD-SAS beside the SAS
   paper's Table 2) and where every output went.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipelines import mine_wes, score_predictions

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("QA_EVAL_SHARED_DATA", REPO.parent / "shared" / "data"))
BUDGET_ENV = "QA_EVAL_DEMO_TRAIN_MINUTES"
DEFAULT_TRAIN_MINUTES = 5.5
LEXICAL_METRICS = ("em", "f1", "bleu1", "bleu4", "rougeL", "meteor", "cider")
EMBEDDING_METRICS = ("bertscore", "bi_encoder")
KPQA_METRICS = ("kpqa_bleu1", "kpqa_rougeL", "kpqa_bertscore")
TRAINED = ("wes", "sas", "kpqa")
GIVEN_ONLY = ("bem", "square")
# SAS paper, Table 2, SQuAD, Pearson r on the F1 = 0 and F1 > 0 subsets.
SAS_PAPER_TABLE2 = {"bleu4": (0.00, 0.18), "rougeL": (0.10, 0.56), "meteor": (0.38, 0.45),
                    "f1": (0.00, 0.60), "bi_encoder": (0.48, 0.69),
                    "bertscore": (0.27, 0.61), "sas": (0.56, 0.75)}
REST = "REST"  # --max_minutes placeholder: the rest of the lane's budget
# Both pipelines run in process. For scoring it is the faster mode on one machine (torch
# already uses both cores: the full AVSD suite took 1.7 min in process, 2.7-3.4 min with
# 2 worker processes), and it keeps clear of a Beam fault of the multi-process
# DirectRunner with large data volumes (docs/repro/multiprocess_cogroupbykey.py);
# mining the 6 MB sample takes a few seconds longer. The FnApiRunner is named rather than
# the DirectRunner, which in Beam 2.77 first tries Prism and downloads its binary when the
# machine is online: the demo runs what the tests run, on any machine.
RUNNER = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]


def training_plan(data: Path, wes_corpus: Path, models: Path, minutes: float,
                  given: dict[str, str | None], max_steps: int | None = None
                  ) -> list[list[tuple[str, list[str]]]]:
    """The training commands, as lanes run side by side (each lane in order).

    Args:
        data: the shared data folder.
        wes_corpus: the mined wes-k<k> folder to train the WES cross-encoder on.
        models: where the checkpoints go (models/<metric>).
        minutes: the wall-clock budget of the whole training phase.
        given: metric -> a checkpoint the user gave (not trained), or None.
        max_steps: cap every run at this many steps (quick runs and tests).

    Returns:
        Lanes of (metric, command-line arguments of `python -m ...`).
    """
    # With the default budget one epoch fits (WES 260 steps, STS 180, keyphrase 279 at
    # batch 32); larger budgets follow the README recipe (STS 3 epochs, keyphrase 2).
    long = minutes >= 12
    common = ["--num_threads=1", "--no_progress", "--overwrite", "--seed=13"]
    if max_steps is not None:
        common.append(f"--max_steps={max_steps}")
    wes_minutes = 0.45 * minutes if not given["sas"] else minutes
    lane_a: list[tuple[str, list[str]]] = []
    if not given["wes"]:
        lane_a.append(("wes", [
            "pipelines.train_cross_encoder", "--format=wes", f"--input={wes_corpus}",
            f"--output={models / 'wes'}", "--epochs=1", f"--max_minutes={wes_minutes:.2f}",
            *common]))
    if not given["sas"]:
        # The rest of the lane's budget: `run_lanes` fills in what WES left over.
        init = (["--init_checkpoint", str(models / "wes")] if not given["wes"] else [])
        lane_a.append(("sas", [
            "pipelines.train_cross_encoder", "--format=stsb", f"--input={data / 'stsb'}",
            f"--output={models / 'sas'}", f"--epochs={3 if long else 1}",
            f"--max_minutes={REST}", *init, *common]))
    lane_b: list[tuple[str, list[str]]] = []
    if not given["kpqa"]:
        # Batches of 16 at lr 2e-4 learn much faster per minute than 32 at 1e-4 (held-out
        # span F1 0.35 vs 0.16 after 5 minutes); within the default budget the schedule
        # is set to the steps that fit (about 60 a minute on one core).
        size = ["--epochs=2"] if long else [f"--max_steps={int(60 * minutes)}"]
        lane_b.append(("kpqa", [
            "pipelines.train_keyphrase", f"--squad={data / 'squad' / 'dev-v1.1.json.gz'}",
            f"--output={models / 'keyphrase'}", "--batch_size=16", "--lr=2e-4", *size,
            f"--max_minutes={minutes:.2f}", *common]))
    return [lane for lane in (lane_a, lane_b) if lane]


def run_lanes(lanes: list[list[tuple[str, list[str]]]], logs: Path, minutes: float) -> None:
    """Runs the lanes side by side, each in order; logs go to logs/<metric>.log.

    `--max_minutes=REST` in a command becomes what is left of the lane's `minutes` when
    the command starts (at least half a minute).

    Raises:
        RuntimeError: a training run failed (the end of its log is in the message).
    """
    logs.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    deadline = time.monotonic() + 60 * minutes

    def lane_worker(lane: list[tuple[str, list[str]]]) -> None:
        for name, args in lane:
            left = max(0.5, (deadline - time.monotonic()) / 60)
            args = [f"--max_minutes={left:.2f}" if a == f"--max_minutes={REST}" else a
                    for a in args]
            log = logs / f"{name}.log"
            started = time.monotonic()
            with open(log, "w", encoding="utf-8") as f:
                code = subprocess.call([sys.executable, "-m", *args], stdout=f,
                                       stderr=subprocess.STDOUT, cwd=REPO)
            print(f"      {name}: finished in {time.monotonic() - started:.0f} s "
                  f"(exit {code}; log {log})", flush=True)
            if code != 0:
                tail = log.read_text(encoding="utf-8").splitlines()[-15:]
                failures.append(f"{name} training failed (exit {code}); {log}:\n" +
                                "\n".join(tail))
                return

    threads = [threading.Thread(target=lane_worker, args=(lane,)) for lane in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError("\n\n".join(failures))


def describe_training(metric: str, folder: Path) -> str:
    """One line on what a trained checkpoint reached (from its metrics.json)."""
    info = json.loads((folder / "metrics.json").read_text())
    steps = info["training"]
    done = (f"{steps['global_step']}/{steps['total_steps']} steps "
            f"({steps['epochs_done']:.2f} epochs, {steps['wall_s']:.0f} s)")
    best = info["best"]
    row = next(h for h in info["dev_history"] if h["step"] == best["step"])
    if metric == "kpqa":
        return (f"held-out SQuAD articles: token F1 {row['token_f1']:.3f}, span F1 "
                f"{row['span_f1']:.3f} (KPQA paper 0.558 span F1, BERT-base on SQuAD "
                f"train); {done}")
    if metric == "sas":
        test = info.get("test") or {}
        return (f"sts-test Pearson {test.get('pearson', float('nan')):.3f} (SAS paper's "
                f"large cross-encoder about 0.9); dev Spearman {best['value']:.3f}; {done}")
    return (f"mined dev split: AUROC {row['auroc']:.3f}, accuracy {row['accuracy']:.3f}; "
            f"{done}")


def scoring_jobs(data: Path, out: Path, models: dict[str, str | None],
                 max_rows: int | None = None) -> dict[str, list[str]]:
    """The scoring runs of the demo: name -> scoring pipeline arguments.

    AVSD has questions, so every metric runs on it; the SQuAD-SAS pairs have none, so the
    question-conditioned ones (kpqa_*, bem, square) do not.
    """
    with_model = [m for m in ("sas", "wes", "bem", "square") if models.get(m)]
    pair_only = [m for m in with_model if m in ("sas", "wes")]  # no question needed
    avsd_metrics = [*LEXICAL_METRICS, *EMBEDDING_METRICS, *with_model,
                    *(KPQA_METRICS if models.get("kpqa") else ())]
    sas_metrics = [*LEXICAL_METRICS, *EMBEDDING_METRICS, *pair_only]
    model_flags = [f"--{m}_model={models[m]}"
                   for m in (*with_model, *(("kpqa",) if models.get("kpqa") else ()))]
    sas_flags = [f"--{m}_model={models[m]}" for m in pair_only]
    avsd_input, sas_input = (data / "judgments/kpqa/avsd_all.csv",
                             data / "judgments/sas/SQuAD_SAS.csv")
    if max_rows is not None:
        avsd_input, sas_input = (_head(avsd_input, out / "inputs", max_rows),
                                 _head(sas_input, out / "inputs", max_rows))
    return {
        "avsd": [
            f"--input={avsd_input}", f"--output={out / 'avsd'}",
            f"--metrics={','.join(avsd_metrics)}", "--prediction_column=answer",
            "--reference_prefix=reference", "--max_references=5", "--human_column=scores",
            *model_flags,
        ],
        "squad_sas": [
            f"--input={sas_input}", f"--output={out / 'squad_sas'}",
            f"--metrics={','.join(sas_metrics)}", "--prediction_column=answer1",
            "--reference_columns=answer2", "--human_column=label",
            "--report_subsets=f1=0,f1>0", *sas_flags,
        ],
    }


def _head(path: Path, folder: Path, rows: int) -> Path:
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / path.name
    pd.read_csv(path).head(rows).to_csv(target, index=False)
    return target


def sas_table(report_json: Path) -> str:
    """SQuAD-SAS Pearson r on F1 = 0 and F1 > 0, beside the SAS paper's Table 2."""
    report = json.loads(report_json.read_text())
    by_scope = {scope["subset"]: {m["metric"]: m for m in scope["rows"]}
                for scope in report["scopes"] if scope["system"] is None}
    zero, some = by_scope.get("f1=0", {}), by_scope.get("f1>0", {})
    lines = ["| metric | r, F1 = 0 (here) | r, F1 > 0 (here) | SAS paper Table 2 (F1 = 0 / > 0) |",
             "|---|---:|---:|---|"]
    order = sorted(some, key=lambda m: -abs(_r(some.get(m)) or 0.0))
    for metric in order:
        paper = SAS_PAPER_TABLE2.get(metric)
        paper_text = f"{paper[0]:.2f} / {paper[1]:.2f}" if paper else "-"
        lines.append(f"| {metric} | {_fmt(_r(zero.get(metric)))} | "
                     f"{_fmt(_r(some.get(metric)))} | {paper_text} |")
    return "\n".join(lines)


def _r(entry: dict | None) -> float | None:
    return None if entry is None else entry.get("pearson")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="demo_out", help="folder for every output")
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="the shared real data")
    parser.add_argument("--train_minutes", type=float,
                        default=float(os.environ.get(BUDGET_ENV, DEFAULT_TRAIN_MINUTES)),
                        help=f"wall-clock budget of the training phase (env {BUDGET_ENV}; "
                             f"default {DEFAULT_TRAIN_MINUTES}); 12 or more trains the "
                             "README recipe's epochs")
    for metric in (*TRAINED, *GIVEN_ONLY):
        parser.add_argument(f"--{metric}_model", default=None,
                            help=f"use this {metric} checkpoint (path or Hub id) instead of "
                                 "training one" if metric in TRAINED else
                            f"a {metric} checkpoint to score with (none is trained here)")
    parser.add_argument("--max_steps", type=int, default=None,
                        help="cap every training run (quick runs; tests)")
    parser.add_argument("--max_rows", type=int, default=None,
                        help="score only the first N rows of each judgment file (quick runs)")
    args = parser.parse_args(argv)
    if args.train_minutes <= 0:
        parser.error(f"--train_minutes must be > 0, got {args.train_minutes}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    data, out = Path(args.data), Path(args.output).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.monotonic()

    wes_dir = out / "wes"
    print(f"[1/3] mining WES from {data / 'wiki'} (k = 2 and 5) ...", flush=True)
    mine_wes.run([f"--input={data / 'wiki/enwiki-20160501-p10p30302-sample.xml.bz2'}",
                  f"--output={wes_dir}", "--min_incoming_links=2,5", "--seed=13", *RUNNER],
                 save_main_session=False)
    stats = json.loads((wes_dir / "stats.json").read_text())
    for name, corpus in stats["corpora"].items():
        splits = ", ".join(f"{s} {c['positives']}" for s, c in corpus["splits"].items())
        print(f"      {name}: {corpus['titles_written']} titles, {corpus['positives']} positive"
              f" + {corpus['negatives']} negative pairs (positives by split: {splits})")

    given = {m: getattr(args, f"{m}_model") for m in (*TRAINED, *GIVEN_ONLY)}
    models_dir = out / "models"
    lanes = training_plan(data, wes_dir / "wes-k2", models_dir, args.train_minutes, given,
                          args.max_steps)
    trained = [name for lane in lanes for name, _ in lane]
    print(f"[2/3] training {', '.join(trained) or 'nothing (every checkpoint given)'} "
          f"on CPU, budget {args.train_minutes:g} min (two lanes: "
          f"{' | '.join(' -> '.join(n for n, _ in lane) for lane in lanes)}) ...", flush=True)
    run_lanes(lanes, models_dir / "logs", args.train_minutes)
    folders = {"wes": models_dir / "wes", "sas": models_dir / "sas",
               "kpqa": models_dir / "keyphrase"}
    models = dict(given)
    for name in trained:
        models[name] = str(folders[name])
        print(f"      {name}: {describe_training(name, folders[name])}")
    for name in (*TRAINED, *GIVEN_ONLY):
        if given[name]:
            print(f"      {name}: given, {given[name]}")

    print("[3/3] scoring QA predictions against human judgments ...", flush=True)
    reports = {}
    for name, job in scoring_jobs(data, out / "scores", models, args.max_rows).items():
        score_predictions.run([*job, *RUNNER], save_main_session=False)
        reports[name] = out / "scores" / f"{name}.report.md"
        print(f"\n--- {name}: {reports[name]}\n")
        print(reports[name].read_text())
    print("--- SQuAD-SAS, as the SAS paper's Table 2 (Pearson r by lexical overlap)\n")
    print(sas_table(out / "scores" / "squad_sas.report.json"))
    if not (given["bem"] or given["square"]):
        print("\n(bem and square are not scored: the bundled data has no BEM- or "
              "SQuArE-style training rows; pass --bem_model / --square_model to add them.)")

    print(f"\nDone in {(time.monotonic() - started) / 60:.1f} min. Outputs:")
    print(f"  WES corpora:        {wes_dir}/wes-k2, {wes_dir}/wes-k5 (+ -clusters)")
    print(f"  WES dataset card:   {wes_dir / 'dataset_card.md'}")
    for name in trained:
        print(f"  {name} checkpoint:  {folders[name]} (model_card.md inside)")
    for name, report in reports.items():
        prefix = report.with_suffix("").with_suffix("")
        print(f"  {name} scores:  {prefix}.scores.parquet, {prefix}.summary.json")
        print(f"  {name} report:  {report}, {prefix}.report.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
