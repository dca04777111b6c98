"""Scores QA predictions with every requested metric; summarises; meta-evaluates.

Reads JSONL/CSV/Parquet prediction rows, scores each with the requested metrics, and writes
PREFIX.scores.parquet (or .jsonl), PREFIX.dead_letter.jsonl, PREFIX.summary.json and, when
the input has a human column, PREFIX.report.md + PREFIX.report.png.

Row flow (see transforms/scoring): every row is keyed by `file:row` as it is read, and rows
travel in the reader's batches: the model-backed metrics score a batch first (one
`RunInference` for every model, transforms/scoring/score/run_model_metrics.py) and attach each
row's scores to it, then the in-process (lexical) metrics finish every row's record, with
no join. An incremental run (`--previous_run`) groups rows by content and joins its
branches by key (transforms/scoring/incremental/plan.py).

`qa-score --help` lists every flag (grouped: input, output, metrics, models, runtime) and
every metric name. A flag that neither this pipeline nor Beam knows fails before anything
runs (exit status 2, naming the closest valid flag), as does any other user mistake
(missing file or column, unknown metric, bad model path): one line on stderr,
`--verbose` for the traceback; so does a file handed in that cannot be read, even when a
worker finds it, and a run into an --output that another live run owns (refused at
once). On a local runner a progress line is logged every
`--progress_interval` seconds, and the run ends with a summary of its counts, its time
and every output path.

Locally (DirectRunner)::

    python -m pipelines.score_predictions \
        --input "$(qa-data dir)"/'judgments/kpqa/avsd_all.csv' --output out/avsd \
        --metrics em,f1,bleu1,bleu4,rougeL,meteor,cider \
        --prediction_column answer --reference_prefix reference --max_references 5 \
        --human_column scores

(Model metrics on one machine without a GPU: run in process,
`--direct_running_mode=in_memory`, where torch uses every core. On a GPU machine, several
worker processes can prepare inputs for one copy of each model on the GPU:
`--direct_running_mode=multi_processing --direct_num_workers 8
--share_model_across_processes`; README "Scoring on a GPU".)

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

import functools
import json
import logging
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

from transforms.inference.model_flags import MODEL_FLAGS
from transforms.io import cli
from transforms.io.in_process_memory import hold_stage_data_once
from transforms.io.local_malloc import tune_local_malloc
from transforms.io.options import (
    absolute_if_local_file,
    absolute_local,
)
from transforms.io.ownership import OutputLock, OutputLocks, new_run_id
from transforms.io.progress import (
    ProgressReporter,
    divide_local_cores,
    freeze_startup_objects,
    is_local_runner,
    pause_collector_until_rows,
    rate,
    resume_collector,
    starts_worker_processes,
)
from transforms.io.storage import check_launch, new_pipeline
from transforms.io.worker_shutdown import stop_workers_together
from transforms.metrics import registry
from transforms.scoring.column_flags import COLUMN_FLAGS
from transforms.scoring.config import (
    ScoringConfig,
    build_config,
)
from transforms.scoring.outputs.paths import OutputPaths
from transforms.scoring.outputs.summary import DeadLetterAlert, dead_letter_alert
from transforms.scoring.score_flags import add_score_arguments
from transforms.scoring.score_predictions import (
    ScorePredictions,
    warn_multiprocess_direct_runner,
)

if TYPE_CHECKING:  # RunInference's module imports torch: only when model metrics run
    from apache_beam.ml.inference.base import ModelHandler

logger = logging.getLogger(__name__)

PROG = "qa-score"


class ScoreOptions(PipelineOptions):
    """The scoring flags, declared to Beam (`--input`/`--output` come from
    `InputOutputOptions`, `--progress_interval`/`--verbose` from `RuntimeOptions`); the
    same function builds `build_parser`, the one `--help` prints."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        add_score_arguments(parser, with_io=False)


def _metrics_epilog() -> str:
    names = registry.describe_metrics()
    width = max(map(len, names))
    lines = [f"  {name:<{width}}  {text}" for name, text in names.items()]
    return "\n".join(["metric names (--metrics; [model]: needs a model, see the models "
                      "flags):", *lines, "", textwrap.fill(cli.BEAM_OPTIONS_HELP, 88)])


def build_parser() -> cli.ArgumentParser:
    """The command line of `qa-score`: the source of truth of its flags and --help."""
    parser = cli.ArgumentParser(
        prog=PROG, usage=f"{PROG} --input FILES --output PREFIX --metrics NAMES [flags]",
        description=__doc__.split("\n", 1)[0], epilog=_metrics_epilog())
    add_score_arguments(parser)
    cli.add_runtime_arguments(parser.add_argument_group(
        "runtime", "Beam's own flags (--runner, ...) are accepted too: see the end."))
    return parser


def prepare(argv: Sequence[str] | None, run_id: str | None = None
            ) -> tuple[object, ScoringConfig]:
    """Parses and validates the command line (no pipeline is built yet).

    Returns:
        (the parsed flags, the run's configuration).

    Raises:
        cli.UsageError: an unknown flag, a bad value, a missing file or column, an
            unknown metric, a bad model: anything wrong with the command line.
    """
    args = cli.parse_flags(build_parser(), argv)
    absolute_paths(args)
    check_storage(args, argv)
    return args, configure(args, run_id)


def absolute_paths(args) -> None:
    """Local paths in `args` made absolute, before anything reads them: they go into the
    graph, and workers have working directories of their own (a relative --input read
    nothing there; docs/decisions.md). Model and baseline flags only when they name an
    existing local file or folder (otherwise they are Hub ids)."""
    for flag in PATH_FLAGS:
        setattr(args, flag, absolute_local(getattr(args, flag)))
    for flag in MODEL_FLAGS:
        if flag.endswith("_model") or flag == "bertscore_baseline":
            setattr(args, flag, absolute_if_local_file(getattr(args, flag)))


PATH_FLAGS = ("input", "output", "previous_run", "corpus_statistics",
              "save_corpus_statistics")


def check_storage(args, argv: Sequence[str] | None) -> list[str]:
    """Every path flag and the runner checked before anything is read or written: a
    file system or runner whose libraries are missing here ends in one line naming the
    extra to install (transforms/io/storage.py); the run's options then reach Beam's
    `FileSystems` (an S3 endpoint, credentials) for what the launcher reads and writes.
    Returns Beam flags to add to the run's (the S3 corrections for its workers)."""
    return check_launch({f"--{flag}": getattr(args, flag) for flag in PATH_FLAGS},
                 list(sys.argv[1:] if argv is None else argv), comma_separated=("--input",))


def configure(args, run_id: str | None = None) -> ScoringConfig:
    """The run's configuration from the parsed flags (see `prepare`)."""
    try:
        return build_config(
            input=args.input, output=args.output, metrics=args.metrics,
            metric_options=args.metric_options, input_format=args.input_format,
            output_format=args.output_format, report_subsets=args.report_subsets,
            accuracy_threshold=args.accuracy_threshold, report_min_n=args.report_min_n,
            report_resamples=args.report_resamples,
            max_batch_size=args.max_batch_size, run_id=run_id,
            max_text_chars=args.max_text_chars, keep_input_columns=args.keep_input_columns,
            overwrite=args.overwrite, input_checksums=args.input_checksums,
            max_dead_letter_fraction=args.max_dead_letter_fraction,
            previous_run=args.previous_run,
            corpus_statistics=args.corpus_statistics,
            save_corpus_statistics=args.save_corpus_statistics,
            model_flags={flag: getattr(args, flag) for flag in MODEL_FLAGS},
            **{flag: getattr(args, flag) for flag in COLUMN_FLAGS})
    except (ValueError, OSError) as e:
        raise cli.UsageError(str(e)) from e


def output_locks(args, run_id: str) -> OutputLocks:
    """The ownership of everything the run publishes: its --output prefix and its
    --save_corpus_statistics file (transforms/io/ownership.py), to take before anything
    else: a run that finds one owned by a live run is refused at once."""
    locks = []
    if args.output:
        try:
            OutputPaths(args.output, args.output_format, run_id)
        except ValueError as e:
            raise cli.UsageError(str(e)) from e
        locks.append(OutputLock(args.output, run_id, what=f"--output {args.output}",
                                command=PROG))
    if args.save_corpus_statistics:
        locks.append(OutputLock(args.save_corpus_statistics, run_id, command=PROG,
                                what=f"--save_corpus_statistics {args.save_corpus_statistics}"))
    return OutputLocks(locks)


def describe_progress(counts: Mapping[str, int], elapsed: float) -> str:
    """One progress line from the run's counts so far."""
    read_dead = sum(n for k, n in counts.items() if k.startswith("read/filtered:"))
    join_dead = sum(n for k, n in counts.items() if k.startswith("join/filtered:"))
    read = counts.get("read/passed", 0) + read_dead
    line = (f"progress {elapsed:.0f} s: {read:,} rows read ({rate(read, elapsed):,.0f} "
            f"rows/s), {counts.get('join/passed', 0):,} scored, "
            f"{read_dead + join_dead:,} dead-lettered")
    lexical = counts.get("score/passed", 0) + counts.get("score/filtered:metric_input_error", 0)
    if lexical:
        line += f"; lexical metrics {lexical:,} rows"
    model_in = counts.get("qa_eval_model_metrics/rows_in", 0)
    if model_in:
        done = counts.get("qa_eval_model_metrics/rows_done", 0)
        line += (f"; model metrics {done:,}/{model_in:,} rows "
                 f"({rate(done, elapsed):,.1f} rows/s)")
    return line


def log_final_summary(config: ScoringConfig, elapsed: float) -> list[str]:
    """Logs (and returns) the run's closing lines: counts, time, every output path."""
    paths = config.paths
    with FileSystems.open(paths.summary) as f:
        overall = json.loads(f.read())["overall"]
    reasons = ", ".join(f"{r} {n:,}" for r, n in overall["dead_lettered_by_reason"].items())
    lines = [f"done in {elapsed:.1f} s: {overall['in']:,} rows read, "
             f"{overall['scored']:,} scored, {overall['dead_lettered']:,} dead-lettered"
             + (f" ({reasons})" if reasons else "")
             + f", {rate(overall['in'], elapsed):,.0f} rows/s",
             "outputs: " + ", ".join(paths.finals(config.report is not None))
             + (f", corpus statistics {config.save_corpus_statistics}"
                if config.save_corpus_statistics else "")]
    for line in lines:
        logger.info("%s", line)
    return lines


def run(argv: list[str] | None = None, save_main_session: bool = True,
        test_pipeline: beam.Pipeline | None = None,
        handler_factory: Callable[..., "ModelHandler"] | None = None,
        tune_local: bool = False) -> beam.runners.runner.PipelineResult:
    """Builds and runs the scoring pipeline.

    Args:
        argv: command-line arguments (pipeline and Beam flags).
        save_main_session: pickle the main session for the workers.
        test_pipeline: a pipeline to build into instead of a new one (tests).
        handler_factory: `(ModelUse, **handler_kwargs) -> ModelHandler` for the model
            metrics (tests inject fakes); None = transforms.inference.handlers.
        tune_local: tune the processes of a local run: glibc's malloc for a run of text
            metrics (`local_malloc.tune_local_malloc`); for a multi-process run with model
            metrics, each worker's tokenizer threads (`progress.divide_local_cores`) and
            the shared models' copies started from here while the workers start
            (`MultiUseModelHandler.start_serving`); the objects of its start-up out
            of the cyclic collector's reach (`progress.freeze_startup_objects`), and
            in process the collector off until the first row is read
            (`progress.pause_collector_until_rows`).
            Only for a process that is this run's alone (`main` from the command
            line): the threshold it fixes cannot be undone, it would slow the model
            metrics of a later run in the same process, the environment it sets would
            outlast the run, and so would the copies and the frozen objects' cycles.

    Returns:
        The pipeline result.

    Raises:
        cli.UsageError (a ValueError): a user mistake (unknown flag or metric, missing
            file or column, contradictory flags, bad model, a complete run at --output
            without --overwrite), before a pipeline is built; `OutputOwnedError` (one of
            them) at once when another live run owns --output or
            --save_corpus_statistics (transforms/io/ownership.py: the run owns both from
            here to its end).
        DeadLetterAlert: the outputs are written, but more rows were dead-lettered than
            --max_dead_letter_fraction allows (exit status 3).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = cli.parse_flags(build_parser(), argv)
    absolute_paths(args)
    argv += check_storage(args, argv)
    run_id = new_run_id()
    with output_locks(args, run_id):
        config = configure(args, run_id)
        options = PipelineOptions(argv)
        options.view_as(SetupOptions).save_main_session = save_main_session
        if config.model_metrics:
            warn_multiprocess_direct_runner(
                options, shared=bool(config.handler_kwargs.get("share_model_across_processes")))
        if tune_local:
            freeze_startup_objects()
            tune_local_malloc(options, runs_models=bool(config.model_metrics))
            divide_local_cores(options, runs_models=bool(config.model_metrics))
        pipeline = test_pipeline or new_pipeline(options)
        run_options = pipeline.options if test_pipeline else options
        local = is_local_runner(run_options)
        if local:  # worker processes, where there are some, stop together at the end; the
            stop_workers_together()  # in-process runner holds a stage's data once
            hold_stage_data_once()
        interval = args.progress_interval if local else 0
        logger.info("scoring %d input file(s) with %s -> %s.*", len(config.files),
                    ",".join(config.metric_columns), config.paths.prefix)
        starting = []
        with ProgressReporter(describe_progress, interval, logger) as reporter:
            if tune_local and local and not starts_worker_processes(run_options):
                pause_collector_until_rows()  # on again at the first row read here
            try:
                with pipeline as p:
                    scoring = ScorePredictions(config, handler_factory, owned=True)
                    _ = p | "ScorePredictions" >> scoring
                    if tune_local:  # torch and the model modules, imported by the graph
                        freeze_startup_objects()
                    if tune_local and starts_worker_processes(run_options):
                        # shared copies start loading now, while the runner starts workers
                        starting = [thread for handler in scoring.model_handlers()
                                    if (thread := handler.start_serving()) is not None]
            finally:  # a copy still starting when the run fails ends with this process
                resume_collector()
                for thread in starting:
                    thread.join(timeout=_COPY_START_S)
        log_final_summary(config, reporter.elapsed())
        if config.max_dead_letter_fraction is not None:
            with FileSystems.open(config.paths.summary) as f:
                alert = dead_letter_alert(json.loads(f.read()),
                                          config.max_dead_letter_fraction,
                                          f" in {config.paths.prefix}")
            if alert:
                raise DeadLetterAlert(alert)
    return p.result


# How long a failed run waits for a shared copy that the launcher is still starting:
# started, it is stopped with this process; still starting at exit, it would keep the
# process waiting for it.
_COPY_START_S = 300


def main(argv: list[str] | None = None) -> int:
    """Console entry point (`qa-score`): exit status 0, 2 for a user mistake (one line on
    stderr; `--verbose` for the traceback), 3 when the run wrote its outputs but
    dead-lettered more rows than --max_dead_letter_fraction allows (one line).

    Called without `argv` (the console script, `python -m`), the process is the run's
    own, and a local run tunes its processes (`run(tune_local=True)`).
    """
    return cli.run_main(PROG, functools.partial(run, tune_local=argv is None), argv)


if __name__ == "__main__":
    sys.exit(main())
