"""`make demo`: the product end to end on the bundled real data, on the DirectRunner.

    python -m pipelines.demo --output demo_out [--data ../shared/data]

1. Mines WES from the real Wikipedia slice (k = 2 and 5: the 106-article sample is far
   too small for the paper's k = 5, 10, 20 to leave much).
2. Scores the KPQA release's AVSD answers (5 references, 1-5 human ratings) and the SAS
   release's SQuAD answer pairs (0/1/2 labels) with every metric the scorer has, and
   meta-evaluates them against the human judgments.
3. Prints the dataset counts, the meta-evaluation tables and where every output went.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from pathlib import Path

from pipelines import mine_wes, score_predictions

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("QA_EVAL_SHARED_DATA", REPO.parent / "shared" / "data"))
LEXICAL_METRICS = "em,f1,bleu1,bleu4,rougeL,meteor,cider"


def scoring_jobs(data: Path, out: Path) -> dict[str, list[str]]:
    """The scoring runs of the demo: name -> scoring pipeline arguments."""
    return {
        "avsd": [
            f"--input={data / 'judgments/kpqa/avsd_all.csv'}", f"--output={out / 'avsd'}",
            f"--metrics={LEXICAL_METRICS}", "--prediction_column=answer",
            "--reference_prefix=reference", "--max_references=5", "--human_column=scores",
        ],
        "squad_sas": [
            f"--input={data / 'judgments/sas/SQuAD_SAS.csv'}", f"--output={out / 'squad_sas'}",
            f"--metrics={LEXICAL_METRICS}", "--prediction_column=answer1",
            "--reference_columns=answer2", "--human_column=label",
            "--report_subsets=f1=0,f1>0",
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="demo_out", help="folder for every output")
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="the shared real data")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    data, out = Path(args.data), Path(args.output).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    runner = ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
              "--direct_num_workers=2", "--default_sdk_harness_log_level=WARNING"]

    wes_dir = out / "wes"
    print(f"[1/2] mining WES from {data / 'wiki'} ...", flush=True)
    mine_wes.run([f"--input={data / 'wiki/enwiki-20160501-p10p30302-sample.xml.bz2'}",
                  f"--output={wes_dir}", "--min_incoming_links=2,5", "--seed=13", *runner],
                 save_main_session=False)
    stats = json.loads((wes_dir / "stats.json").read_text())
    for name, corpus in stats["corpora"].items():
        splits = ", ".join(f"{s} {c['positives']}" for s, c in corpus["splits"].items())
        print(f"      {name}: {corpus['titles_written']} titles, {corpus['positives']} positive"
              f" + {corpus['negatives']} negative pairs (positives by split: {splits})")

    print("[2/2] scoring QA predictions against human judgments ...", flush=True)
    reports = {}
    for name, job in scoring_jobs(data, out / "scores").items():
        score_predictions.run([*job, *runner], save_main_session=False)
        reports[name] = out / "scores" / f"{name}.report.md"
        print(f"\n--- {name}: {reports[name]}\n")
        print(reports[name].read_text())

    print("Outputs:")
    print(f"  WES corpora:        {wes_dir}/wes-k2, {wes_dir}/wes-k5 (+ -clusters)")
    print(f"  WES dataset card:   {wes_dir / 'dataset_card.md'}")
    for name, report in reports.items():
        prefix = report.with_suffix("").with_suffix("")
        print(f"  {name} scores:  {prefix}.scores.parquet, {prefix}.summary.json")
        print(f"  {name} report:  {report}, {prefix}.report.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
