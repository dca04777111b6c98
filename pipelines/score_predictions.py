"""Scores QA predictions with every requested metric; summarises; meta-evaluates.

Reads JSONL/CSV/Parquet prediction rows, scores each with the requested metrics, and writes
PREFIX.scores.parquet (or .jsonl), PREFIX.dead_letter.jsonl, PREFIX.summary.json and, when
the input has a human column, PREFIX.report.md + PREFIX.report.png.

Row flow (see transforms/scoring): every row is keyed by `file:row` as it is read; each
scoring branch emits `(row_key, ScoreResult)` and `JoinScores` (one CoGroupByKey) merges
the branches back onto the rows before anything is written. Two branches: the in-process
(lexical) metrics, and the model-backed metrics (`RunModelMetrics`: one `RunInference` per
distinct model, see transforms/inference), keyed the same way and joined by the same step.

Locally (DirectRunner)::

    python -m pipelines.score_predictions \
        --input '../shared/data/judgments/kpqa/avsd_all.csv' --output out/avsd \
        --metrics em,f1,bleu1,bleu4,rougeL,meteor,cider \
        --prediction_column answer --reference_prefix reference --max_references 5 \
        --human_column scores

(Model metrics on one machine: run in process, `--direct_running_mode=in_memory`; it is
faster, and the multi-process DirectRunner has a Beam fault with large data volumes,
reproduced in docs/repro/multiprocess_cogroupbykey.py; a warning says so.)

Dataflow::

    python -m pipelines.score_predictions \
        --input 'gs://BUCKET/predictions/*.jsonl' --output gs://BUCKET/scores/run1 \
        --metrics em,f1,bleu1,bleu4,rougeL,meteor,cider \
        --runner DataflowRunner --project PROJECT --region REGION \
        --temp_location gs://BUCKET/tmp --setup_file ./setup.py

Flink (a Flink job server on localhost:8099)::

    python -m pipelines.score_predictions \
        --input '/data/predictions/*.parquet' --output /data/scores/run1 \
        --metrics em,f1,rougeL --runner PortableRunner --job_endpoint localhost:8099 \
        --environment_type DOCKER --setup_file ./setup.py
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

import apache_beam as beam
from apache_beam.ml.inference.base import ModelHandler
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

from transforms.io.options import InputOutputOptions
from transforms.scoring.config import (
    COLUMN_FLAGS,
    DEFAULT_MAX_TEXT_CHARS,
    MODEL_FLAGS,
    add_model_flags,
    build_config,
)
from transforms.scoring.outputs import OUTPUT_FORMATS
from transforms.scoring.read import FORMATS
from transforms.scoring.score_predictions import ScorePredictions, warn_multiprocess_direct_runner

logger = logging.getLogger(__name__)


class ScoreOptions(PipelineOptions):
    """Command-line options of the scoring pipeline (`--input`, a prediction file path or
    glob, and `--output`, the output prefix, come from `InputOutputOptions`)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument("--metrics", help="Comma-separated metric names, e.g. em,f1,rougeL.")
        parser.add_argument("--metric_options", default=None,
                            help='Per-family options as JSON, e.g. {"cider": {...}}.')
        parser.add_argument("--input_format", choices=FORMATS, default=None,
                            help="Input format; by default from each file's extension.")
        parser.add_argument("--output_format", choices=OUTPUT_FORMATS, default="parquet",
                            help="Format of PREFIX.scores.*.")
        parser.add_argument("--prediction_column", default=None,
                            help="Prediction column (default: prediction).")
        parser.add_argument("--references_column", default=None,
                            help="One column with a list of references or a single one "
                                 "(default: references).")
        parser.add_argument("--reference_columns", default=None,
                            help="Several reference columns, comma-separated, in order.")
        parser.add_argument("--reference_prefix", default=None,
                            help="Reference columns named PREFIX<number>, in numeric order.")
        parser.add_argument("--max_references", type=int, default=None,
                            help="Use at most the first N references of each row.")
        parser.add_argument("--question_column", default=None, help="Default: question.")
        parser.add_argument("--negative_references_column", default=None,
                            help="Default: negative_references.")
        parser.add_argument("--id_column", default=None, help="Default: id.")
        parser.add_argument("--system_column", default=None, help="Default: system.")
        parser.add_argument("--human_column", default=None,
                            help="Human judgment column (default: human); enables the report.")
        parser.add_argument("--report_subsets", default=None,
                            help="Extra report scopes on metric values, e.g. 'f1>0,f1=0'.")
        parser.add_argument("--accuracy_threshold", default=None,
                            help="Binary labels: '0.5' or '0.5,cider=1.0' (score >= t is 1).")
        parser.add_argument("--max_batch_size", type=int, default=512,
                            help="Rows per lexical metric batch at most.")
        parser.add_argument("--max_text_chars", type=int, default=DEFAULT_MAX_TEXT_CHARS,
                            help="Dead-letter a row (text_too_long) whose prediction, any "
                                 "reference, negative reference or the question is longer "
                                 "than N characters: metric cost grows with length (ROUGE-L "
                                 "quadratically), so one huge row would stall a worker "
                                 f"(default {DEFAULT_MAX_TEXT_CHARS}; 0 = no limit).")
        parser.add_argument("--corpus_statistics", default=None,
                            help="Score CIDEr-D against the document frequencies in this "
                                 "Parquet file (written by --save_corpus_statistics) instead "
                                 "of the run's own; the signature names the file's hash.")
        parser.add_argument("--save_corpus_statistics", default=None,
                            help="Write the CIDEr-D document frequencies (per reference "
                                 "position or pooled, and the corpus sizes) the run scored "
                                 "against to this Parquet file.")
        add_model_flags(parser)


def run(argv: list[str] | None = None, save_main_session: bool = True,
        test_pipeline: beam.Pipeline | None = None,
        handler_factory: Callable[..., ModelHandler] | None = None,
        ) -> beam.runners.runner.PipelineResult:
    """Builds and runs the scoring pipeline.

    Args:
        argv: command-line arguments (pipeline and Beam flags).
        save_main_session: pickle the main session for the workers.
        test_pipeline: a pipeline to build into instead of a new one (tests).
        handler_factory: `(ModelUse, **handler_kwargs) -> ModelHandler` for the model
            metrics (tests inject fakes); None = transforms.inference.handlers.

    Returns:
        The pipeline result.

    Raises:
        ValueError: bad configuration (unknown metric, missing column, contradictory flags).
    """
    options = PipelineOptions(argv)
    options.view_as(SetupOptions).save_main_session = save_main_session
    opts = options.view_as(ScoreOptions)
    io = options.view_as(InputOutputOptions)
    config = build_config(
        input=io.input, output=io.output, metrics=opts.metrics,
        metric_options=opts.metric_options, input_format=opts.input_format,
        output_format=opts.output_format, report_subsets=opts.report_subsets,
        accuracy_threshold=opts.accuracy_threshold, max_batch_size=opts.max_batch_size,
        max_text_chars=opts.max_text_chars, corpus_statistics=opts.corpus_statistics,
        save_corpus_statistics=opts.save_corpus_statistics,
        model_flags={flag: getattr(opts, flag) for flag in MODEL_FLAGS},
        **{flag: getattr(opts, flag) for flag in COLUMN_FLAGS})
    if config.model_metrics:
        warn_multiprocess_direct_runner(options)
    pipeline = test_pipeline or beam.Pipeline(options=options)
    with pipeline as p:
        _ = p | "ScorePredictions" >> ScorePredictions(config, handler_factory)
    return p.result


def main(argv: list[str] | None = None) -> int:
    """Console entry point (`qa-score`); `--help` lists the scoring flags."""
    argv = sys.argv[1:] if argv is None else argv
    if {"-h", "--help"} & set(argv):
        parser = argparse.ArgumentParser(
            prog="qa-score", description=__doc__.split("\n", 1)[0],
            epilog="Any Apache Beam pipeline option (--runner, ...) is accepted as well.")
        ScoreOptions._add_argparse_args(parser)
        parser.print_help()
        return 0
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
