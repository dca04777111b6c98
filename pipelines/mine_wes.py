"""Mine the Wiki Entity Similarity (WES) dataset from Wikipedia XML dumps.

Locally (DirectRunner, in-process or with worker processes):

    python -m pipelines.mine_wes \\
        --input "$(qa-data dir)"/'wiki/*.xml.bz2' --output out/wes \\
        --min_incoming_links 5,10,20 --seed 13 \\
        [--direct_running_mode=multi_processing --direct_num_workers=2: see
         docs/repro/multiprocess_cogroupbykey.py before relying on it]

On Dataflow (the same code; workers install the project with --setup_file):

    python -m pipelines.mine_wes \\
        --input 'gs://BUCKET/enwiki-20181220-pages-articles*.xml*.bz2' \\
        --output gs://BUCKET/wes --min_incoming_links 5,10,20 --seed 13 \\
        --runner DataflowRunner --project PROJECT --region REGION \\
        --temp_location gs://BUCKET/tmp --setup_file ./setup.py

On Flink (a running Flink cluster with Beam's Flink job server):

    python -m pipelines.mine_wes --input ... --output ... \\
        --runner PortableRunner --job_endpoint localhost:8099 \\
        --environment_type DOCKER --setup_file ./setup.py

`wes-mine --help` lists every flag (grouped: input, output, mining, runtime); a flag that
neither this pipeline nor Beam knows, or any other user mistake (inputs that match
nothing, an output holding an earlier run), fails before anything runs: one line on
stderr, exit status 2 (`--verbose` for the traceback). On a local runner a progress line
(pages, MB read, links, MB/s) is logged every `--progress_interval` seconds, and the run
ends with a summary: counts, time, every output path.

Harder negatives and more positives (Huang 2022's future work), e.g.
`--negatives random=1,f1=1,substring=1,word_cooccurrence=1,article_cooccurrence=1
--link_pairs 3`: each title still gets as many negatives as positives, the kinds in
those shares, and every row gets a `pair_kind` column (docs/decisions.md, "Adversarial
negatives and link-to-link pairs"). A mix with a kind other than `random` also writes the
WES-hard test split, `<output>/wes-k<k>-hard/`: the test titles that got an adversarial
negative, their positives and those negatives (transforms/wes/hard_test.py). With the
default flags the output is as before.

Outputs: `<output>/wes-k<k>/{train,dev,test}-SSSSS-of-NNNNN.parquet`,
`<output>/wes-k<k>-clusters/`, `<output>/wes-k<k>-hard/` (adversarial mixes only),
`<output>/redirects-*.parquet`, and last, once every shard
is written, `<output>/stats.json` and `<output>/dataset_card.md`.

Everything is written to `<output>/.temp-<uuid>/` first and moved into place by the last
step, which also replaces an earlier run (with `--overwrite`: until then it stays as it
was) and removes the `.temp-*` folders of runs that were killed. A run owns its
`--output` from launch to the end (`<output>/.lock`, transforms/io/ownership.py): a second
run into the same folder meanwhile is refused at once (exit status 2).
"""

import contextlib
import json
import logging
import sys
import textwrap
from collections.abc import Mapping, Sequence

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

from transforms.io import cli
from transforms.io.in_process_memory import hold_stage_data_once
from transforms.io.options import (
    absolute_local,
    add_input_argument,
    add_output_argument,
    add_overwrite_argument,
)
from transforms.io.ownership import OutputLock, new_run_id
from transforms.io.progress import ProgressReporter, is_local_runner, rate
from transforms.io.publish import check_output_dir, new_temp_dir
from transforms.io.storage import check_launch, new_pipeline
from transforms.io.worker_shutdown import stop_workers_together
from transforms.wes.corpus import is_mixed
from transforms.wes.mine import MineWes, parse_thresholds
from transforms.wes.negative_mix import DEFAULT_NEGATIVES, NEGATIVE_KINDS, parse_negative_mix
from transforms.wes.sampling import parse_splits
from transforms.wes.stats import STATS_FILE
from transforms.wes.write import run_files
from transforms.wiki.read import BYTES_READ, match_inputs

logger = logging.getLogger(__name__)

PROG = "wes-mine"


def add_mining_arguments(parser, with_io: bool = True) -> None:
    """Adds the mining flags to `parser` in groups (input, output, mining); `with_io`:
    `--input`/`--output` too (Beam gets those from `InputOutputOptions`)."""
    g = parser.add_argument_group("input")
    if with_io:
        add_input_argument(g, "Wikipedia XML dump files: comma-separated paths or globs of "
                              ".xml, .xml.bz2, .xml.gz (required)")
    g.add_argument("--skip_bad_files", action="store_true",
                   help="count and report unreadable dump files instead of failing")
    g.add_argument("--split_multistream_mb", type=float, default=16.0,
                   help="read a multistream dump that has its index next to it "
                        "(x-multistream-index.txt.bz2) in byte ranges of about this many "
                        "MB, in parallel; 0 = read every file whole")
    g.add_argument("--max_page_mb", type=float, default=10.0,
                   help="skip (and count) pages with more wikitext than this")
    g.add_argument("--full_parse_timeout_s", type=float, default=60.0,
                   help="time limit of a whole-page parse (fallback path)")
    g = parser.add_argument_group("output")
    if with_io:
        add_output_argument(g, "output directory: wes-k<k>/, wes-k<k>-clusters/, "
                               "wes-k<k>-hard/ (the WES-hard test split, with an adversarial "
                               "--negatives mix), redirects-*.parquet, stats.json, "
                               "dataset_card.md (required)")
        add_overwrite_argument(g, "replace the outputs of an earlier run in --output (kept "
                                  "as they were until this run has written all of its own)")
    g = parser.add_argument_group("mining")
    g.add_argument("--min_incoming_links", default="5",
                   help="thresholds k, comma-separated: one corpus per k")
    g.add_argument("--seed", type=int, default=0, help="seed of splits and negatives")
    g.add_argument("--splits", default="75,15,10", help="train,dev,test proportions")
    g.add_argument("--no_dictionary_filter", action="store_true",
                   help="keep dictionary-word link texts (the paper's Table 2 ablation)")
    g.add_argument("--resolve_redirects", action="store_true",
                   help="fold links to redirect pages into their targets")
    g.add_argument("--negatives", default=DEFAULT_NEGATIVES,
                   help="the negatives' mix of kinds, kind=weight comma-separated, from "
                        f"{', '.join(NEGATIVE_KINDS)} (e.g. random=1,f1=1,substring=1); "
                        "each title keeps as many negatives as positives; a kind other "
                        "than random also writes the WES-hard test split, wes-k<k>-hard/")
    g.add_argument("--link_pairs", type=int, default=0,
                   help="also pair two link texts of one cluster as positives, at most "
                        "this many pairs per cluster (0: none)")


class MineWesOptions(PipelineOptions):
    """The mining flags, declared to Beam (`--input`/`--output` come from
    `InputOutputOptions`, `--progress_interval`/`--verbose` from `RuntimeOptions`); the
    same function builds `build_parser`, the one `--help` prints."""

    @classmethod
    def _add_argparse_args(cls, parser):
        add_mining_arguments(parser, with_io=False)


def build_parser() -> cli.ArgumentParser:
    """The command line of `wes-mine`: the source of truth of its flags and --help."""
    parser = cli.ArgumentParser(
        prog=PROG, usage=f"{PROG} --input DUMPS --output DIR [flags]",
        description=__doc__.split("\n", 1)[0],
        epilog=textwrap.fill(cli.BEAM_OPTIONS_HELP, 88))
    add_mining_arguments(parser)
    cli.add_runtime_arguments(parser.add_argument_group(
        "runtime", "Beam's own flags (--runner, ...) are accepted too: see the end."))
    return parser


def describe_progress(counts: Mapping[str, int], elapsed: float) -> str:
    """One progress line from the run's counts so far."""
    mb = counts.get(BYTES_READ, 0) / 1e6
    pages = counts.get("read_dump/pages", 0)
    return (f"progress {elapsed:.0f} s: {pages:,} pages read ({rate(pages, elapsed):,.0f} "
            f"pages/s), {mb:,.1f} MB read ({rate(mb, elapsed):,.2f} MB/s), "
            f"{counts.get('extract_links/pages', 0):,} pages parsed, "
            f"{counts.get('extract_links/links', 0):,} links")


def _group_outputs(output: str, files: Sequence[str]) -> list[str]:
    """Every output path, the shards of a folder as `folder/ (n files)`."""
    folders: dict[str, int] = {}
    singles = []
    root = output.rstrip("/")
    for path in files:
        relative = path[len(root):].lstrip("/") if path.startswith(root) else path
        if "/" in relative:
            folder = f"{root}/{relative.split('/', 1)[0]}/"
            folders[folder] = folders.get(folder, 0) + 1
        else:
            singles.append(path)
    return [*(f"{f} ({n} files)" for f, n in sorted(folders.items())), *sorted(singles)]


def log_final_summary(output: str, elapsed: float) -> list[str]:
    """Logs (and returns) the run's closing lines from its stats.json: counts, time,
    every output path."""
    stats_path = FileSystems.join(output, STATS_FILE)
    with FileSystems.open(stats_path) as f:
        stats = json.loads(f.read())
    counts = stats["counts"]
    corpora = "; ".join(
        f"{name}: {c['titles_written']:,} titles, {c['positives']:,} positive + "
        f"{c['negatives']:,} negative pairs" for name, c in stats["corpora"].items())
    lines = [f"done in {elapsed:.1f} s: {counts.get('read_dump/pages', 0):,} pages read, "
             f"{counts.get('extract_links/links', 0):,} links; {corpora}"
             + ("" if stats["complete"] else
                f"; INCOMPLETE: {len(stats['bad_files'])} bad file(s) skipped"),
             "outputs: " + ", ".join(_group_outputs(output, run_files(output)))]
    for line in lines:
        logger.info("%s", line)
    return lines


def run(argv=None, save_main_session=True, test_pipeline=None):
    """Builds and runs the mining pipeline; returns the PipelineResult.

    Raises:
        cli.UsageError (a ValueError): unknown flags, bad values, inputs that match
            nothing, an output directory that holds an earlier run (without
            --overwrite), or one that another live run owns
            (`ownership.OutputOwnedError`); all before a pipeline is built.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = cli.parse_flags(build_parser(), argv)
    # absolute: the graph's workers have working directories of their own
    args.output = absolute_local(args.output)
    # a file system or runner missing here: one line naming the extra, nothing written
    argv += check_launch({"--input": args.input, "--output": args.output}, argv,
                         comma_separated=("--input",))
    run_id = new_run_id()
    lock = OutputLock(args.output, run_id, folder=True, what=f"--output {args.output}",
                      command=PROG) if args.output else contextlib.nullcontext()
    with lock:  # before anything else: a run that finds --output owned is refused at once
        result = _run(args, argv, run_id, save_main_session, test_pipeline)
    return result


def _run(args, argv, run_id, save_main_session, test_pipeline):
    """`run` once the output folder is this run's."""
    try:
        if not args.input or not args.output:
            raise ValueError("--input (dump files) and --output (a directory) are required")
        thresholds = parse_thresholds(args.min_incoming_links)
        fractions = parse_splits(args.splits)
        mix = parse_negative_mix(args.negatives)
        if args.link_pairs < 0:
            raise ValueError(f"--link_pairs must be >= 0, got {args.link_pairs}")
        paths = match_inputs([p.strip() for p in args.input.split(",") if p.strip()])
        check_output_dir(args.output, args.overwrite, run_files)
    except (ValueError, OSError) as e:
        raise cli.UsageError(str(e)) from e
    options = PipelineOptions(argv)
    options.view_as(SetupOptions).save_main_session = save_main_session
    config = {
        "inputs": paths, "min_incoming_links": thresholds, "seed": args.seed,
        "splits": args.splits, "dictionary_filter": not args.no_dictionary_filter,
        "resolve_redirects": args.resolve_redirects,
    }
    if is_mixed(mix, args.link_pairs):  # a default run's stats.json stays as it was
        config.update(negatives=mix, link_pairs=args.link_pairs)
    mine = MineWes(
        paths, args.output, new_temp_dir(args.output), thresholds, args.seed, fractions,
        config, overwrite=args.overwrite, resolve_redirects=args.resolve_redirects,
        dictionary_filter=not args.no_dictionary_filter, skip_bad_files=args.skip_bad_files,
        split_mb=args.split_multistream_mb, full_parse_timeout_s=args.full_parse_timeout_s,
        max_page_mb=args.max_page_mb, owner=run_id, negatives=mix,
        link_pairs=args.link_pairs)
    pipeline = test_pipeline or new_pipeline(options)
    local = is_local_runner(pipeline.options if test_pipeline else options)
    if local:  # worker processes, where there are some, stop together at the end; the
        stop_workers_together()  # in-process runner holds a stage's data once
        hold_stage_data_once()
    logger.info("mining %d dump file(s) -> %s (k = %s)", len(paths), args.output,
                ",".join(map(str, thresholds)))
    with ProgressReporter(describe_progress, args.progress_interval if local else 0,
                          logger) as reporter:
        with pipeline as p:
            _ = p | "MineWes" >> mine
    log_final_summary(args.output, reporter.elapsed())
    return p.result


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point (`wes-mine`): exit status 0, or 2 for a user mistake (one line
    on stderr; `--verbose` for the traceback)."""
    return cli.run_main(PROG, run, argv)


if __name__ == "__main__":
    sys.exit(main())
