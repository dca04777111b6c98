"""Fine-tune a single-logit cross-encoder: the `wes`, `sas`, `square`, `bem` and `judge` metrics.

WES shards from `pipelines.mine_wes` (binary; the paper's basic cross-encoder):

    python -m pipelines.train_cross_encoder --format wes --input out/wes/wes-k2 \\
        --output models/wes --epochs 1 --batch_size 32 --lr 5e-5

A corpus mined with a negative mix (`wes-mine --negatives random=1,f1=1,...`) has a
`pair_kind` per row: `--negative_kinds random,f1` trains and picks the checkpoint on the
positives and those negatives only. The test split is scored whole, and so is the
WES-hard test split that the mining writes beside the corpus (`wes-k<k>-hard/`, found
by itself; `--hard_test_file` names another), each with its accuracy per pair kind in
metrics.json and the model card:

    python -m pipelines.train_cross_encoder --format wes --input out/wes/wes-k2 \\
        --negative_kinds random --output models/wes-random

STS-B (score / 5, the SAS recipe), here continuing from the WES model (the curriculum
that gave docs/design.md's best model), test Pearson/Spearman reported at the end:

    python -m pipelines.train_cross_encoder --format stsb --input "$(qa-data dir)"/stsb \\
        --init_checkpoint models/wes --output models/sas --epochs 3

The judge on short answers (SQuAD and WES pairs, EVOUNA-TQ mixed into train 1:1 with
the short answers; the converter splits by article and title, `--format judge` lays out
every row as the `judge` metric does, marked layout by default):

    python -m transforms.training.short_answers --squad "$(qa-data dir)"/squad/dev-v1.1.json.gz \
        --wes out/wes/wes-k2 --evouna "$(qa-data dir)"/judgments/evouna/TQ.json \
        --train_mix squad=1,wes=1,evouna=2 --output data/short
    python -m pipelines.train_cross_encoder --format judge --input data/short \
        --init_checkpoint models/sas --output models/judge

SQuArE / BEM rows as JSONL (`<input>/{train,dev,test}.jsonl`, fields in
transforms/training/pair_data.py); an interrupted run continues with `--resume`:

    python -m pipelines.train_cross_encoder --format bem --input data/bem --output models/bem
    python -m pipelines.train_cross_encoder --format bem --input data/bem --output models/bem --resume

Outputs (`--output`): the best checkpoint by the dev metric (a Hugging Face
`*ForSequenceClassification` folder, loadable by path; for 0/1 targets its `config.json`
holds the decision threshold chosen on dev), `model_card.md`, `metrics.json`,
and `last/` for `--resume`. Training runs on CPU; a CUDA path with bf16/fp16 autocast is
written (`--device cuda`) but has not been run on a GPU.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from transforms.io import cli
from transforms.io.storage import check_local_paths
from transforms.metrics import judge
from transforms.training.cross_encoder import (
    BINARY_METRICS,
    CLASS_WEIGHTS,
    DEFAULT_MAX_LENGTH,
    GRADED_METRICS,
    CrossEncoderData,
    train_cross_encoder,
)
from transforms.training.options import add_train_args, cli_main, train_config
from transforms.training.pair_data import FORMATS
from transforms.training.pair_kinds import NEGATIVE_KINDS, parse_negative_kinds


def build_parser() -> cli.ArgumentParser:
    """The command line (see the module docstring)."""
    parser = cli.ArgumentParser(prog="python -m pipelines.train_cross_encoder",
                                description=__doc__.splitlines()[0])
    g = parser.add_argument_group("data")
    g.add_argument("--format", required=True, choices=FORMATS,
                   help="wes: mining output shards; stsb: STS-B csv; square, bem: JSONL rows; "
                        "evouna: EVOUNA's TQ.json, split by question; judge: JSONL rows "
                        "with golds (transforms.training.short_answers)")
    g.add_argument("--input", default=None,
                   help="folder with the splits (wes: wes-k<k>/{split}-*.parquet; stsb: "
                        "sts-{split}.csv; square/bem/judge: {split}.jsonl); evouna: TQ.json")
    for split in ("train", "dev", "test"):
        g.add_argument(f"--{split}_file", default=None,
                       help=f"explicit {split} file(s), a path or glob (overrides --input)")
    for split in ("train", "dev", "test"):
        g.add_argument(f"--max_{split}_rows", type=int, default=None,
                       help=f"use at most this many {split} rows (seeded sample)")
    g.add_argument("--skip_test", action="store_true",
                   help="do not evaluate the best checkpoint on the test split (nor on the "
                        "WES-hard one)")
    g.add_argument("--negative_kinds", default=None, metavar="KIND[,KIND]",
                   help="wes: keep the positives and only the negatives of these pair_kind "
                        f"values ({', '.join(NEGATIVE_KINDS)}) in train and dev; test is "
                        "scored whole, with accuracy per pair kind in metrics.json; needs "
                        "shards mined with a negative mix (a pair_kind column)")
    g.add_argument("--hard_test_file", default=None,
                   help="wes: the WES-hard test split (a path or glob) the best checkpoint "
                        "is also scored on, per pair kind too; default: the one wes-mine "
                        "writes beside --input, <input>-hard/test-*.parquet, when it exists "
                        "(capped by --max_test_rows too)")
    g = parser.add_argument_group("model")
    g.add_argument("--model", default=None,
                   help="encoder to start from: path or Hub id (default: the packaged "
                        "all-MiniLM-L6-v2)")
    g.add_argument("--init_checkpoint", default=None,
                   help="continue from a previous output of this command (curricula: WES, "
                        "then STS)")
    g.add_argument("--max_length", type=int, default=None,
                   help="truncation length in tokens (default: " + ", ".join(
                       f"{k} {v}" for k, v in DEFAULT_MAX_LENGTH.items()) + ")")
    g.add_argument("--best_metric", default="auto",
                   choices=("auto", *sorted(set(BINARY_METRICS + GRADED_METRICS))),
                   help="dev metric that picks the best checkpoint (auto: auroc for 0/1 "
                        "targets, spearman for graded)")
    g.add_argument("--threshold_objective", default="accuracy", choices=("accuracy", "f1"),
                   help="binary targets: the decision threshold saved with the checkpoint "
                        "maximises this on the dev split (default accuracy)")
    g.add_argument("--class_weight", default="none", choices=CLASS_WEIGHTS,
                   help="0/1 targets: balanced weighs each class's examples so both carry "
                        "half the loss (default none)")
    g = parser.add_argument_group("judge (formats evouna and judge)")
    g.add_argument("--gold_layout", default=None, choices=judge.GOLD_LAYOUTS,
                   help="the judge's reference segment: the best-matching gold after "
                        "[found] or [not found], whether a gold occurs in the answer "
                        "(marked, the default), the best-matching gold alone (best), or "
                        "every distinct gold, best match first, joined by ' / ' (all); "
                        "saved in the checkpoint, where the judge metric reads it")
    g.add_argument("--max_gold_chars", type=int, default=judge.DEFAULT_MAX_GOLD_CHARS,
                   help="gold_layout all: golds are added while the segment stays within "
                        f"this many characters (default {judge.DEFAULT_MAX_GOLD_CHARS})")
    add_train_args(parser)
    return parser


def run(argv: Sequence[str] | None = None,
        on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Parses flags, trains, and returns the run's report (as in metrics.json).

    Raises:
        ValueError: bad flags or bad training input, before training starts.
    """
    args = cli.parse_flags(build_parser(), argv, beam=False)
    check_local_paths({f"--{flag}": getattr(args, flag) for flag in (
        "input", "train_file", "dev_file", "test_file", "hard_test_file", "init_checkpoint",
        "output")},
        "the trainers")
    data = CrossEncoderData(
        format=args.format, input=args.input, train_file=args.train_file,
        dev_file=args.dev_file, test_file=args.test_file, model=args.model,
        init_checkpoint=args.init_checkpoint, max_length=args.max_length,
        max_train_rows=args.max_train_rows, max_dev_rows=args.max_dev_rows,
        max_test_rows=args.max_test_rows, skip_test=args.skip_test,
        best_metric=args.best_metric, threshold_objective=args.threshold_objective,
        gold_layout=args.gold_layout, max_gold_chars=args.max_gold_chars,
        class_weight=args.class_weight,
        negative_kinds=parse_negative_kinds(args.negative_kinds),
        hard_test_file=args.hard_test_file)
    return train_cross_encoder(data, train_config(args), on_step=on_step)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: exit status 0, or 2 on bad flags or input (one line on
    stderr; `--verbose` for the traceback)."""
    return cli_main(run, argv, "python -m pipelines.train_cross_encoder")


if __name__ == "__main__":
    sys.exit(main())
