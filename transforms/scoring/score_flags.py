"""The flags of `qa-score` (input, output, metrics; the models' from `model_flags`),
declared by one function: the pipeline's own parser (the one `--help` prints) and its
`PipelineOptions` class (the flags Beam knows) both call `add_score_arguments`."""

from __future__ import annotations

from transforms.inference.model_flags import add_model_flags
from transforms.io import cli
from transforms.io.options import (
    add_input_argument,
    add_output_argument,
    add_overwrite_argument,
)
from transforms.scoring.column_flags import DEFAULT_KEPT_COLUMNS
from transforms.scoring.config import DEFAULT_MAX_TEXT_CHARS
from transforms.scoring.outputs.manifest import CHECKSUM_MODES
from transforms.scoring.outputs.paths import OUTPUT_FORMATS
from transforms.scoring.reading.formats import FORMATS
from transforms.scoring.report.report_spec import DEFAULT_MIN_N, DEFAULT_RESAMPLES


def add_score_arguments(parser, with_io: bool = True) -> None:
    """Adds the scoring flags to `parser` in groups (input, output, metrics, models);
    `with_io`: `--input`/`--output` too (Beam gets those from `InputOutputOptions`)."""
    g = parser.add_argument_group("input")
    if with_io:
        add_input_argument(g, "prediction files: a path, a glob, or several comma-separated "
                              "(.jsonl, .csv, .parquet; required)")
    g.add_argument("--input_format", choices=FORMATS, default=None,
                   help="input format (default: from each file's extension)")
    g.add_argument("--prediction_column", default=None,
                   help="prediction column (default: prediction)")
    g.add_argument("--references_column", default=None,
                   help="one column with a list of references or a single one "
                        "(default: references)")
    g.add_argument("--reference_columns", default=None,
                   help="several reference columns, comma-separated, in order")
    g.add_argument("--reference_prefix", default=None,
                   help="reference columns named PREFIX<number>, in numeric order")
    g.add_argument("--max_references", type=int, default=None,
                   help="use at most the first N references of each row (default: all)")
    g.add_argument("--question_column", default=None,
                   help="question column (default: question, when present)")
    g.add_argument("--negative_references_column", default=None,
                   help="negative references, for square (default: negative_references, "
                        "when present)")
    g.add_argument("--id_column", default=None, help="row id column (default: id, when present)")
    g.add_argument("--system_column", default=None,
                   help="system column, for per-system summaries (default: system, when "
                        "present)")
    g.add_argument("--human_column", default=None,
                   help="human judgment column; enables the report (default: human, when "
                        "present)")
    g.add_argument("--max_text_chars", type=int, default=DEFAULT_MAX_TEXT_CHARS,
                   help="dead-letter a row (text_too_long) whose prediction, any reference, "
                        "negative reference or the question is longer than N characters: "
                        "metric cost grows with length (ROUGE-L quadratically), so one huge "
                        f"row would stall a worker (default {DEFAULT_MAX_TEXT_CHARS}; "
                        "0 = no limit)")
    g.add_argument("--input_checksums", choices=CHECKSUM_MODES, default="auto",
                   help="how summary.json identifies each input file: sha256 (reads it once "
                        "more), metadata (the object store's own checksum, no read), none "
                        "(size and time only); auto: sha256 on a local disk, metadata "
                        "elsewhere")
    g.add_argument("--previous_run", default=None,
                   help="PREFIX of an earlier complete run: carry over the values of every "
                        "metric whose signature is unchanged for rows whose content "
                        "(prediction, references, question, negative references) it scored; "
                        "compute the rest. The output is a complete snapshot; may be "
                        "--output itself with --overwrite (default: none, a full run)")
    g = parser.add_argument_group("output")
    if with_io:
        add_output_argument(g, "output prefix: PREFIX.scores.parquet|.jsonl, "
                               "PREFIX.dead_letter.jsonl, PREFIX.summary.json, with a human "
                               "column PREFIX.report.{md,png,json} (required)")
        add_overwrite_argument(g, "replace a complete run at --output (refused otherwise); "
                                  "its files stay until this run has written all of its "
                                  "own, then every one of them goes (no stale report)")
    g.add_argument("--max_dead_letter_fraction", type=float, default=None,
                   help="after writing, exit with status 3 and one line on stderr when more "
                        "than this share of the rows (0-1) was dead-lettered (default: no "
                        "limit)")
    g.add_argument("--output_format", choices=OUTPUT_FORMATS, default="parquet",
                   help="format of PREFIX.scores.*")
    g.add_argument("--keep_input_columns", nargs="?", default=None,
                   const=",".join(DEFAULT_KEPT_COLUMNS),
                   help="carry input texts into the scores file: alone, "
                        f"{', '.join(DEFAULT_KEPT_COLUMNS)} (the texts the metrics scored); "
                        "or a comma-separated list of those and/or other input columns "
                        "(default: none)")
    g.add_argument("--report_subsets", default=None,
                   help="extra report scopes on metric values, e.g. 'f1>0,f1=0'")
    g.add_argument("--accuracy_threshold", default=None,
                   help="binary human labels: '0.5' or '0.5,cider=1.0' (score >= t is 1); "
                        "overrides a checkpoint's saved threshold (default: saved, else 0.5)")
    g.add_argument("--report_min_n", type=int, default=DEFAULT_MIN_N,
                   help="report scopes with fewer rows get no panel and no best metric "
                        "(system level: fewer systems)")
    g.add_argument("--report_resamples", type=int, default=DEFAULT_RESAMPLES,
                   help="bootstrap resamples of the report's intervals and paired tests "
                        "(at least 100; the report's time grows with rows x resamples x "
                        "metrics, measured in docs/benchmarks.md, Report statistics)")
    g = parser.add_argument_group("metrics")
    g.add_argument("--metrics", default=None,
                   help="comma-separated metric names, e.g. em,f1,rougeL (required; the "
                        "names are listed below)")
    g.add_argument("--metric_options", default=None,
                   help='per-family options as JSON, e.g. {"cider": {"df_mode": "pooled"}}')
    g.add_argument("--max_batch_size", type=int, default=512,
                   help="rows per lexical metric batch at most")
    g.add_argument("--corpus_statistics", default=None,
                   help="score CIDEr-D (document frequencies) and BERTScore with "
                        "--bertscore_idf (idf) against the statistics in this Parquet file "
                        "(written by --save_corpus_statistics) instead of the run's own; "
                        "the signatures name the file's hash (default: the run's own)")
    g.add_argument("--save_corpus_statistics", default=None, type=cli.output_path,
                   help="write the scored input's corpus statistics (CIDEr-D document "
                        "frequencies per reference position or pooled with the corpus "
                        "sizes; BERTScore idf with --bertscore_idf) to this Parquet file, "
                        "for --corpus_statistics in later runs; not with "
                        "--corpus_statistics; an existing file only with --overwrite "
                        "(default: not written)")
    add_model_flags(parser)
