"""Mine the Wiki Entity Similarity (WES) dataset from Wikipedia XML dumps.

Locally (DirectRunner, in-process or with worker processes):

    python -m pipelines.mine_wes \\
        --input '../shared/data/wiki/*.xml.bz2' --output out/wes \\
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

Outputs: `<output>/wes-k<k>/{train,dev,test}-SSSSS-of-NNNNN.parquet`,
`<output>/wes-k<k>-clusters/`, `<output>/redirects-*.parquet`, and last, once every shard
is written, `<output>/stats.json` and `<output>/dataset_card.md`.

Everything is written to `<output>/.temp-<uuid>/` first and moved into place by the last
step, which also replaces an earlier run (with `--overwrite`: until then it stays as it
was) and removes the `.temp-*` folders of runs that were killed. Two runs into one
`--output` at the same time are not supported.
"""

from __future__ import annotations

import logging
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

from transforms.io.options import InputOutputOptions
from transforms.io.publish import check_output_dir, new_temp_dir
from transforms.wes.mine import MineWes, parse_thresholds
from transforms.wes.sampling import parse_splits
from transforms.wes.write import run_files
from transforms.wiki.read import match_inputs

logger = logging.getLogger(__name__)


class MineWesOptions(PipelineOptions):
    """Flags of the mining pipeline; `--input` (dump files: comma-separated paths or globs
    of .xml, .xml.bz2, .xml.gz) and `--output` (a directory) come from
    `InputOutputOptions`."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--min_incoming_links", default="5",
                            help="thresholds k, comma-separated: one corpus per k (default 5)")
        parser.add_argument("--seed", type=int, default=0, help="seed of splits and negatives")
        parser.add_argument("--splits", default="75,15,10", help="train,dev,test proportions")
        parser.add_argument("--no_dictionary_filter", action="store_true",
                            help="keep dictionary-word link texts (the paper's Table 2 ablation)")
        parser.add_argument("--resolve_redirects", action="store_true",
                            help="fold links to redirect pages into their targets")
        parser.add_argument("--skip_bad_files", action="store_true",
                            help="count and report unreadable dump files instead of failing")
        parser.add_argument("--full_parse_timeout_s", type=float, default=60.0,
                            help="time limit of a whole-page parse (fallback path)")
        parser.add_argument("--max_page_mb", type=float, default=10.0,
                            help="skip (and count) pages with more wikitext than this")
        parser.add_argument("--split_multistream_mb", type=float, default=16.0,
                            help="read a multistream dump that has its index next to it "
                                 "(x-multistream-index.txt.bz2) in byte ranges of about "
                                 "this many MB, in parallel; 0 = read every file whole")


def run(argv=None, save_main_session=True, test_pipeline=None):
    """Builds and runs the mining pipeline; returns the PipelineResult.

    Raises:
        ValueError: bad flags, inputs that match nothing, or an output directory that
            holds an earlier run (without --overwrite); all before anything runs.
    """
    options = PipelineOptions(argv)
    options.view_as(SetupOptions).save_main_session = save_main_session
    opts = options.view_as(MineWesOptions)
    io = options.view_as(InputOutputOptions)
    if not io.input or not io.output:
        raise ValueError("--input (dump files) and --output (a directory) are required")
    thresholds = parse_thresholds(opts.min_incoming_links)
    fractions = parse_splits(opts.splits)
    paths = match_inputs([p.strip() for p in io.input.split(",") if p.strip()])
    check_output_dir(io.output, io.overwrite, run_files)
    config = {
        "inputs": paths, "min_incoming_links": thresholds, "seed": opts.seed,
        "splits": opts.splits, "dictionary_filter": not opts.no_dictionary_filter,
        "resolve_redirects": opts.resolve_redirects,
    }
    mine = MineWes(
        paths, io.output, new_temp_dir(io.output), thresholds, opts.seed, fractions, config,
        overwrite=io.overwrite, resolve_redirects=opts.resolve_redirects,
        dictionary_filter=not opts.no_dictionary_filter, skip_bad_files=opts.skip_bad_files,
        split_mb=opts.split_multistream_mb, full_parse_timeout_s=opts.full_parse_timeout_s,
        max_page_mb=opts.max_page_mb)
    pipeline = test_pipeline or beam.Pipeline(options=options)
    with pipeline as p:
        _ = p | "MineWes" >> mine
    return p.result


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run(argv if argv is not None else sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
