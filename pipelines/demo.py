"""`make demo`: the product end to end on the bundled real data: mine -> train -> score.

    python -m pipelines.demo --output demo_out [--data DIR] [--mirror FOLDER_OR_URL]
        [--train_minutes 5.5] [--judge_steps 100] [--sas_model M] [--wes_model M]
        [--kpqa_model M] [--judge_model M] [--bem_model M] [--square_model M]

0. Fetches the data it reads (the registry's `demo` set: transforms/data/registry.json)
   into the data folder (`--data`; default: the data cache, $QA_EVAL_DATA_DIR, else
   $XDG_CACHE_HOME/qa-eval or ~/.cache/qa-eval), as `qa-data fetch demo` does: files
   already there with the right SHA-256 are kept, the others come from `--mirror` (a
   folder or base URL; default $QA_EVAL_DATA_MIRROR, else the shared data folder beside
   the repository when there is one, else the original hosts). A file that cannot be
   fetched ends the demo in one line naming it and its address (exit status 2).
1. Mines WES from the real Wikipedia slice at k = 2 and 5 (the 106-article sample leaves
   773 positive pairs at the paper's k = 5; k = 2 leaves 5,627, enough to train on),
   with random and adversarial negatives (`WES_NEGATIVES`) and the WES-hard test split.
2. Trains the learned metrics on CPU within a wall-clock budget (`--train_minutes`, or
   the environment variable QA_EVAL_DEMO_TRAIN_MINUTES; default 5.5), in two lanes that
   share the two cores, one torch thread each:
   - lane A: the WES cross-encoder on wes-k2 (one epoch, at most 45% of the budget),
     then the SAS cross-encoder on STS-B, initialised from it (whatever is left);
   - lane B: the KPQA keyphrase predictor on SQuAD dev (40 articles; 8 held out);
   then the answer-correctness judge: the SAS cross-encoder fine-tuned for
   `--judge_steps` batches of 32 (default 100, about 3 minutes on one core;
   `--judge_minutes` caps it, default 6) on short-answer equivalence pairs (SQuAD dev's
   answers, the mined WES pairs; `transforms.training.short_answers`) mixed with
   EVOUNA-TQ's train split, its decision threshold chosen on the mixed dev split.
   A model given with `--<metric>_model` is used as it is and not trained.
3. Scores the KPQA release's AVSD answers (6 references, 1-5 ratings) and the SAS
   release's SQuAD answer pairs (0/1/2 labels) with every metric that has a model:
   lexical, BERTScore and the bi-encoder (packaged MiniLM), sas, wes and kpqa_* (the
   models just trained), bem and square when their checkpoints are given (the bundled
   data has no BEM- or SQuArE-style training rows). Then EVOUNA-TQ: the dev split with
   em, f1, contains, token_recall (every gold answer), bertscore and sas (the
   best-matching gold, chosen without the label as in the judge's training) to choose
   each one's accuracy threshold, and the test split with those and the `judge` metric
   (which picks the best-matching gold itself, at its own calibrated threshold), overall
   and per answering system; and the short-answer test split (held-out SQuAD articles)
   the same way: em, f1, contains, token_recall and sas at thresholds chosen on its dev
   split, the judge at its own.
4. Prints what each model reached, the meta-evaluation tables (SQuAD-SAS beside the SAS
   paper's Table 2, EVOUNA-TQ's accuracy and AUROC per metric) and where every output
   went.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from pipelines import mine_wes, score_predictions
from transforms.data import registry as data_registry
from transforms.data.fetch import Fetcher, FetchError
from transforms.demo.scoring import (
    EVOUNA_LEXICAL,
    EVOUNA_MODEL,
    SHORT_METRICS,
    dev_thresholds,
    evouna_job,
    evouna_rows,
    judge_table,
    sas_table,
    scoring_jobs,
    short_rows,
)
from transforms.demo.training import (
    DEFAULT_JUDGE_MINUTES,
    DEFAULT_JUDGE_STEPS,
    GIVEN_ONLY,
    QUICK_DEV_ROWS,
    REPO,
    SHORT_TRAIN_MIX,
    TRAINED,
    WES_NEGATIVES,
    describe_training,
    judge_plan,
    run_lanes,
    short_answer_data,
    training_plan,
)
from transforms.io import cli

logger = logging.getLogger(__name__)

# The shared data folder beside the repository (where there is one): the mirror the
# demo's fetch step uses when no other is named.
SHARED_DATA = Path(os.environ.get("QA_EVAL_SHARED_DATA", REPO.parent / "shared" / "data"))
DATA_SET = "demo"
BUDGET_ENV = "QA_EVAL_DEMO_TRAIN_MINUTES"
DEFAULT_TRAIN_MINUTES = 5.5
# Both pipelines run in process. For scoring it is the faster mode on one machine (torch
# already uses both cores: the full AVSD suite took 1.7 min in process, 2.7-3.4 min with
# 2 worker processes), and it keeps clear of a Beam fault of the multi-process
# DirectRunner with large data volumes (docs/repro/multiprocess_cogroupbykey.py);
# mining the 6 MB sample takes a few seconds longer. The FnApiRunner is named rather than
# the DirectRunner, which in Beam 2.77 first tries Prism and downloads its binary when the
# machine is online: the demo runs what the tests run, on any machine.
RUNNER = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]


def default_mirror() -> str | None:
    """$QA_EVAL_DATA_MIRROR, else the shared data folder when it exists, else None (the
    original hosts)."""
    return data_registry.default_mirror() or (str(SHARED_DATA) if SHARED_DATA.is_dir()
                                              else None)


def fetch_data(data: Path, mirror: str | None) -> None:
    """Step 0: the demo's data set into `data`, checked (`qa-data fetch demo`).

    Raises:
        FetchError: a file that could not be fetched (one line: the data set, the address).
    """
    entries = data_registry.select([DATA_SET])
    print(f"[0/3] data: {len(entries)} files in {data} ...", flush=True)
    with Fetcher(data, mirror) as fetcher:
        outcomes = [fetcher.fetch_entry(entry) for entry in entries]
    fetched = sum(o.status == "fetched" for o in outcomes)
    print(f"      {len(entries) - fetched} already there, {fetched} fetched"
          + (f" from {mirror}" if fetched and mirror else
             " from their original hosts" if fetched else "") + "; every SHA-256 checked")


def build_parser() -> cli.ArgumentParser:
    """The command line of the demo (see the module docstring)."""
    parser = cli.ArgumentParser(prog="python -m pipelines.demo",
                                description=__doc__.splitlines()[0])
    g = parser.add_argument_group("input")
    g.add_argument("--data", default=str(data_registry.default_data_dir()),
                   help="the data folder, filled first with what the demo reads (default: "
                        f"the data cache, ${data_registry.DATA_DIR_ENV}, else "
                        "$XDG_CACHE_HOME/qa-eval or ~/.cache/qa-eval)")
    g.add_argument("--mirror", default=default_mirror(),
                   help="a folder or base URL holding the data files under their cache paths, "
                        f"used instead of the original hosts (default: "
                        f"${data_registry.MIRROR_ENV}, else {SHARED_DATA} when it exists, "
                        "else the original hosts)")
    g.add_argument("--max_rows", type=int, default=None,
                   help="score only the first N rows of each judgment file (quick runs)")
    g = parser.add_argument_group("output")
    g.add_argument("--output", default="demo_out", type=cli.output_path,
                   help="folder for every output (emptied first)")
    g = parser.add_argument_group("models")
    g.add_argument("--train_minutes", type=float,
                        default=float(os.environ.get(BUDGET_ENV, DEFAULT_TRAIN_MINUTES)),
                        help=f"wall-clock budget of the training phase (env {BUDGET_ENV}; "
                             f"default {DEFAULT_TRAIN_MINUTES}); 12 or more trains the "
                             "README recipe's epochs")
    g.add_argument("--judge_steps", type=int, default=DEFAULT_JUDGE_STEPS,
                   help="optimizer steps of the judge's training on the short-answer pairs "
                        "and EVOUNA-TQ, after the other models (default "
                        f"{DEFAULT_JUDGE_STEPS}; 435 is one epoch)")
    g.add_argument("--judge_minutes", type=float, default=DEFAULT_JUDGE_MINUTES,
                   help="wall-clock cap of the judge's training (default "
                        f"{DEFAULT_JUDGE_MINUTES:g})")
    for metric in (*TRAINED, *GIVEN_ONLY):
        g.add_argument(f"--{metric}_model", default=None,
                       help=f"use this {metric} checkpoint (path or Hub id) instead of "
                            "training one" if metric in TRAINED else
                       f"a {metric} checkpoint to score with (none is trained here)")
    g.add_argument("--max_steps", type=int, default=None,
                   help="cap every training run (quick runs; tests)")
    g.add_argument("--max_eval_rows", type=int, default=QUICK_DEV_ROWS,
                   help="with --max_steps: the held-out rows each training run evaluates "
                        f"and calibrates on, per split (default {QUICK_DEV_ROWS})")
    cli.add_runtime_arguments(parser.add_argument_group("runtime"), progress=False)
    return parser


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    args = cli.parse_flags(build_parser(), argv, beam=False)
    if args.train_minutes <= 0:
        raise cli.UsageError(f"--train_minutes must be > 0, got {args.train_minutes}")
    if args.judge_steps < 1:
        raise cli.UsageError(f"--judge_steps must be >= 1, got {args.judge_steps}")
    if args.max_eval_rows < 1:
        raise cli.UsageError(f"--max_eval_rows must be >= 1, got {args.max_eval_rows}")
    if args.judge_minutes <= 0:
        raise cli.UsageError(f"--judge_minutes must be > 0, got {args.judge_minutes}")
    return args


def main(argv: list[str] | None = None) -> int:
    """`make demo`: exit status 0, or 2 for a bad flag (one line on stderr)."""
    # The demo prints its own story; the pipelines' INFO lines would bury it.
    return cli.run_main("python -m pipelines.demo", _demo, argv,
                        user_errors=(cli.UsageError, FetchError),
                        setup_logging=lambda verbose: cli.configure_logging(
                            verbose, logging.INFO if verbose else logging.WARNING))


def _demo(argv: list[str]) -> None:
    args = _parse_args(argv)
    data, out = Path(args.data).expanduser(), Path(args.output).resolve()
    fetch_data(data, args.mirror)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.monotonic()

    wes_dir = out / "wes"
    print(f"[1/3] mining WES from {data / 'wiki'} (k = 2 and 5) ...", flush=True)
    mine_wes.run([f"--input={data / 'wiki/enwiki-20160501-p10p30302-sample.xml.bz2'}",
                  f"--output={wes_dir}", "--min_incoming_links=2,5", "--seed=13",
                  f"--negatives={WES_NEGATIVES}", *RUNNER],
                 save_main_session=False)
    stats = json.loads((wes_dir / "stats.json").read_text())
    for name, corpus in stats["corpora"].items():
        splits = ", ".join(f"{s} {c['positives']}" for s, c in corpus["splits"].items())
        print(f"      {name}: {corpus['titles_written']} titles, {corpus['positives']} positive"
              f" + {corpus['negatives']} negative pairs (positives by split: {splits})")

    given = {m: getattr(args, f"{m}_model") for m in (*TRAINED, *GIVEN_ONLY)}
    models_dir = out / "models"
    lanes = training_plan(data, wes_dir / "wes-k2", models_dir, args.train_minutes, given,
                          args.max_steps, args.max_eval_rows)
    evouna_file = data / "judgments" / "evouna" / "TQ.json"
    squad_file = data / "squad" / "dev-v1.1.json.gz"
    if not evouna_file.is_file():
        print(f"      (no {evouna_file}: the judge is neither trained nor scored)")
    short = None
    if evouna_file.is_file() and squad_file.is_file():
        short = short_answer_data(data, wes_dir / "wes-k2", out / "short")
        train = short["counts"]["train"]
        print("      short-answer pairs for the judge (SQuAD articles and WES titles split "
              "apart): train " + ", ".join(f"{s} {c['pairs']:,}" for s, c in train.items())
              + f" (mix {SHORT_TRAIN_MIX}); test split: "
              f"{short['counts']['test']['squad']['pairs']:,} SQuAD pairs")
    trained = [name for lane in lanes for name, _ in lane]
    print(f"[2/3] training {', '.join(trained) or 'nothing (every checkpoint given)'} "
          f"on CPU, budget {args.train_minutes:g} min (two lanes: "
          f"{' | '.join(' -> '.join(n for n, _ in lane) for lane in lanes)}) ...", flush=True)
    run_lanes(lanes, models_dir / "logs", args.train_minutes,
              lambda line: print(line, flush=True))
    folders = {"wes": models_dir / "wes", "sas": models_dir / "sas",
               "kpqa": models_dir / "keyphrase", "judge": models_dir / "judge"}
    sas_model = given["sas"] or str(folders["sas"])
    if evouna_file.is_file() and not given["judge"]:
        what = "short-answer pairs and EVOUNA-TQ" if short else "EVOUNA-TQ"
        print(f"      judge: training on {what} from {sas_model}, {args.judge_steps} "
              f"steps (at most {args.judge_minutes:g} min) ...", flush=True)
        run_lanes([judge_plan(data, models_dir, sas_model, args.judge_steps,
                              args.judge_minutes, args.max_steps,
                              out / "short" if short else None, args.max_eval_rows)],
                  models_dir / "logs",
                  args.judge_minutes, lambda line: print(line, flush=True))
        trained.append("judge")
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
        _qa_score(job)
        reports[name] = out / "scores" / f"{name}.report.md"
        print(f"\n--- {name}: {reports[name]}\n")
        print(reports[name].read_text())
    print("--- SQuAD-SAS, as the SAS paper's Table 2 (Pearson r by lexical overlap)\n")
    print(sas_table(out / "scores" / "squad_sas.report.json"))
    if evouna_file.is_file():
        for report in _score_evouna(data, out, models, args.max_rows):
            reports[report.name.split(".")[0]] = report
    if short:
        reports.update(_score_short(short["scoring_files"], out, models, args.max_rows))
    if not (given["bem"] or given["square"]):
        print("\n(bem and square are not scored on AVSD and SQuAD-SAS: the bundled data has "
              "no BEM- or SQuArE-style training rows; pass --bem_model / --square_model to "
              "add them.)")

    print(f"\nDone in {(time.monotonic() - started) / 60:.1f} min. Outputs:")
    print(f"  WES corpora:        {wes_dir}/wes-k2, {wes_dir}/wes-k5 (+ -clusters, -hard)")
    print(f"  WES dataset card:   {wes_dir / 'dataset_card.md'}")
    for name in trained:
        print(f"  {name} checkpoint:  {folders[name]} (model_card.md inside)")
    for name, report in reports.items():
        prefix = report.with_suffix("").with_suffix("")
        print(f"  {name} scores:  {prefix}.scores.parquet, {prefix}.summary.json")
        print(f"  {name} report:  {report}, {prefix}.report.png")


def _score_evouna(data: Path, out: Path, models: dict[str, str | None],
                  max_rows: int | None) -> list[Path]:
    """EVOUNA-TQ: dev scored to choose every metric's threshold, then test scored with
    them and the judge (lexical metrics and the judge against every gold, bertscore and
    sas against the best-matching one: `transforms.demo.scoring.EVOUNA_MODEL`); prints
    the reports and the one-line-per-metric table."""
    rows = evouna_rows(data, out, max_rows)
    scores = out / "scores"
    thresholds: dict[str, float] = {}
    for name, metrics in (("all", list(EVOUNA_LEXICAL)), ("best", list(EVOUNA_MODEL))):
        dev_out = scores / f"evouna_dev_{name}"
        _qa_score(evouna_job(rows[name]["dev"], dev_out, metrics, {"sas": models.get("sas")}))
        thresholds.update(dev_thresholds(Path(f"{dev_out}.scores.parquet"), metrics))
    reports = []
    for name, metrics, judge in (("all", EVOUNA_LEXICAL, models.get("judge")),
                                 ("best", EVOUNA_MODEL, None)):
        test_out = scores / f"evouna_tq_{name}"
        _qa_score(evouna_job(rows[name]["test"], test_out, list(metrics),
                             {"sas": models.get("sas"), "judge": judge}, thresholds))
        report = Path(f"{test_out}.report.md")
        print(f"\n--- evouna_tq_{name} (EVOUNA-TQ test split, "
              f"{'every gold answer' if name == 'all' else 'the best-matching gold'}; "
              f"thresholds chosen on dev): {report}\n")
        print(report.read_text())
        reports.append(report)
    print("--- EVOUNA-TQ test split: accuracy at the dev-chosen threshold (the judge: the "
          "one saved with its checkpoint) and AUROC, overall and per answering system\n")
    print(judge_table([r.with_suffix(".json") for r in reports]))
    return reports


def _score_short(scoring: dict[str, str], out: Path, models: dict[str, str | None],
                 max_rows: int | None) -> dict[str, Path]:
    """The short-answer split: dev scored to choose every metric's threshold,
    then test scored with them and the judge; prints the report and the table."""
    rows = short_rows(scoring, out, max_rows)
    dev_out, test_out = out / "scores" / "short_dev", out / "scores" / "short_test"
    metrics = list(SHORT_METRICS)
    _qa_score(evouna_job(rows["dev"], dev_out, metrics, {"sas": models.get("sas")}))
    thresholds = dev_thresholds(Path(f"{dev_out}.scores.parquet"), metrics)
    _qa_score(evouna_job(rows["test"], test_out, metrics,
                         {"sas": models.get("sas"), "judge": models.get("judge")}, thresholds))
    report = Path(f"{test_out}.report.md")
    print(f"\n--- short_test (short answers: held-out SQuAD articles, the annotators' "
          f"overlapping answers against same-kind spans and other questions' answers; "
          f"thresholds chosen on dev): {report}\n")
    print(report.read_text())
    print("--- Short-answer test split: accuracy at the dev-chosen threshold (the judge: "
          "the one saved with its checkpoint) and AUROC\n")
    print(judge_table([report.with_suffix(".json")]))
    return {"short_test": report}


def _qa_score(job: list[str]) -> None:
    """One `qa-score` run in this process, on the demo's runner."""
    score_predictions.run([*job, *RUNNER], save_main_session=False)


if __name__ == "__main__":
    sys.exit(main())
