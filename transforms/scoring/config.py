"""Everything the scoring pipeline decides at graph build time, validated on the launcher.

`build_config` turns the command-line values into a `ScoringConfig`: the metrics (built
by the registry, so unknown names fail here), the input files and the columns they offer
(`sniff.sniff_columns`), the resolved `ColumnMapping` (column_flags.py), the output names
and the report spec. Every problem is a `ValueError` whose message lists what is
available.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from apache_beam.io.filesystems import FileSystems

from transforms.inference.model_flags import merge_model_flags
from transforms.metrics import registry
from transforms.metrics.base import Metric
from transforms.metrics.corpus import unique_statistics
from transforms.scoring.column_flags import resolve_columns, resolve_kept_columns, split_list
from transforms.scoring.incremental.plan import CarryPlan, plan_carry
from transforms.scoring.incremental.previous_run import PreviousRun, load_previous_run
from transforms.scoring.outputs.manifest import run_manifest, utc_now
from transforms.scoring.outputs.paths import OutputPaths, check_prefix
from transforms.scoring.reading.rows import CONTENT_KEY_VERSION, ColumnMapping
from transforms.scoring.reading.sniff import sniff_columns
from transforms.scoring.report.report_spec import (
    DEFAULT_MIN_N,
    DEFAULT_RESAMPLES,
    MIN_RESAMPLES,
    ReportSpec,
    default_threshold_given,
    parse_subsets,
    parse_thresholds,
)
from transforms.scoring.statistics.corpus_stats import shards_for_input
from transforms.scoring.statistics.statistics_file import (
    check_statistics_file,
    is_freezable,
    statistics_signature,
)

# The longest prediction, reference or question scored, in characters (--max_text_chars).
# ROUGE-L costs 0.06 s on two texts of this length, 13.6 s on two of 2 MB (quadratic).
DEFAULT_MAX_TEXT_CHARS = 100_000
RESERVED_COLUMNS = ("row_key", "content_key", "file", "row", "id", "system", "human")


@dataclasses.dataclass(frozen=True)
class ScoringConfig:
    """The validated configuration of one scoring run."""

    input: str
    input_format: str | None
    files: tuple[str, ...]
    available_columns: tuple[str, ...]
    mapping: ColumnMapping
    metrics: tuple[Metric, ...]
    metric_columns: tuple[str, ...]
    signatures: dict[str, str]
    paths: OutputPaths
    report: ReportSpec | None
    max_batch_size: int
    handler_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    max_text_chars: int | None = DEFAULT_MAX_TEXT_CHARS
    manifest: dict[str, Any] = dataclasses.field(default_factory=dict)
    overwrite: bool = False
    max_dead_letter_fraction: float | None = None
    previous: PreviousRun | None = None
    carry: CarryPlan | None = None
    # --corpus_statistics / --save_corpus_statistics (statistics_file.py); the digest of
    # the file scored against, and the n-gram shards of CIDEr-D's frequencies.
    corpus_statistics: str | None = None
    save_corpus_statistics: str | None = None
    statistics_digest: str | None = None
    df_shards: int = 16

    @property
    def model_metrics(self) -> tuple[Metric, ...]:
        """The model-backed metrics (one RunInference branch)."""
        return tuple(m for m in self.metrics if is_model_backed(m))

    @property
    def in_process_metrics(self) -> tuple[Metric, ...]:
        """The lexical metrics, scored in process (one ScoreMetrics branch)."""
        return tuple(m for m in self.metrics if not is_model_backed(m))

    @property
    def with_human(self) -> bool:
        return self.mapping.human is not None

    def summary_metadata(self) -> dict[str, Any]:
        """Run facts written at the top of summary.json."""
        return {"run_id": self.paths.run_id, **self.manifest, "input": self.input,
                "input_files": len(self.files), "columns": dataclasses.asdict(self.mapping),
                "metric_columns": list(self.metric_columns), "signatures": self.signatures,
                "max_text_chars": self.max_text_chars,
                "content_key_version": CONTENT_KEY_VERSION,
                **({"corpus_statistics": self.corpus_statistics}
                   if self.corpus_statistics else {}),
                **({"saved_corpus_statistics": self.save_corpus_statistics}
                   if self.save_corpus_statistics else {}),
                **({"incremental": self.carry.describe(self.previous)}
                   if self.previous is not None else {})}


def is_model_backed(metric: Metric) -> bool:
    """Whether a built metric runs a model (it declares `model_uses`)."""
    return callable(getattr(metric, "model_uses", None))


_NEEDS_QUESTION = ("bem", "judge", "square", "kpqa")


def parse_metric_options(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """`--metric_options '{"cider": {"df_mode": "pooled"}}'` -> dict.

    Raises:
        ValueError: not a JSON object.
    """
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise ValueError(f"--metric_options is not valid JSON: {e}") from e
    if not isinstance(parsed, dict):  # configuration errors are ValueError by contract
        raise ValueError(  # noqa: TRY004
            f"--metric_options must be a JSON object, got {value!r}")
    return parsed


def saved_thresholds(metrics: Sequence[Any]) -> dict[str, float]:
    """{column: decision threshold} of the single-column model metrics whose checkpoint
    saved one (`ModelUse.decision_threshold`, e.g. a binary judge trained with
    train_cross_encoder); other metrics have none."""
    out = {}
    for metric in metrics:
        uses = metric.model_uses() if hasattr(metric, "model_uses") else {}
        found = {t for use in uses.values() if (t := use.decision_threshold()) is not None}
        if len(found) == 1 and len(metric.columns) == 1:
            out[metric.columns[0]] = found.pop()
    return out


def build_config(*, input: str | None, output: str | None, metrics: str | None,
                 metric_options: str | Mapping[str, Any] | None = None,
                 input_format: str | None = None, output_format: str = "parquet",
                 report_subsets: str | None = None, accuracy_threshold: str | None = None,
                 report_min_n: int = DEFAULT_MIN_N,
                 report_resamples: int = DEFAULT_RESAMPLES, max_batch_size: int = 512,
                 run_id: str | None = None,
                 model_flags: Mapping[str, Any] | None = None,
                 max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
                 keep_input_columns: str | None = None, overwrite: bool = False,
                 input_checksums: str = "auto",
                 max_dead_letter_fraction: float | None = None,
                 previous_run: str | None = None,
                 corpus_statistics: str | None = None,
                 save_corpus_statistics: str | None = None,
                 **column_flags: Any) -> ScoringConfig:
    """Validates the command line and builds the run's configuration.

    Args:
        input: file path or glob.
        output: output prefix.
        metrics: comma-separated metric names.
        metric_options: per-family metric options (JSON object or mapping).
        input_format: jsonl|csv|parquet, or None to go by extension.
        output_format: parquet|jsonl for the scores file.
        report_subsets: see `report.parse_subsets`.
        accuracy_threshold: see `report_spec.parse_thresholds`; without it a metric uses
            the threshold saved with its checkpoint (`saved_thresholds`), else 0.5.
        report_min_n: report scopes with fewer rows name no best metric and get no panel.
        max_batch_size: rows per `score_batch` call at most.
        max_text_chars: rows with a longer prediction, reference, negative reference or
            question are dead-lettered `text_too_long`; 0 = no limit.
        keep_input_columns: what the scores file carries of each row, see
            `resolve_kept_columns`.
        run_id: names the temporary files; random when None.
        overwrite: replace a complete run at the prefix (refused otherwise).
        input_checksums: how summary.json identifies the input files
            (`manifest.CHECKSUM_MODES`).
        max_dead_letter_fraction: the run fails (after writing) when a larger share of
            its rows is dead-lettered; None = no limit.
        previous_run: the prefix of an earlier complete run to carry scores over from
            (`incremental`); it may be `output` itself with `overwrite`.
        model_flags: the dedicated model flags (`MODEL_FLAGS`), see `merge_model_flags`.
        corpus_statistics: a statistics file (statistics_file.py) to score CIDEr-D against
            instead of the run's own document frequencies.
        save_corpus_statistics: where to write the statistics of the scored input (not
            with `corpus_statistics`; an existing file only with `overwrite`).
        **column_flags: the keyword arguments of `resolve_columns`.

    Returns:
        The ScoringConfig.

    Raises:
        ValueError: anything wrong with the configuration, with what is available.
    """
    if not input:
        raise ValueError("--input is required (a file path or glob)")
    if not output:
        raise ValueError("--output is required (a path prefix)")
    names = split_list(metrics)
    if not names:
        raise ValueError(f"--metrics is required; available: {registry.available_metrics()}")
    options, handler_kwargs = merge_model_flags(
        parse_metric_options(metric_options), model_flags or {}, names)
    built, signatures = _build_metrics(names, options)
    metric_columns = tuple(signatures)
    digest = _statistics_flags(built, names, signatures, corpus_statistics,
                               save_corpus_statistics, overwrite)
    _check_limits(max_batch_size=max_batch_size, max_text_chars=max_text_chars,
                  max_dead_letter_fraction=max_dead_letter_fraction)
    paths = OutputPaths(output, output_format, run_id or uuid.uuid4().hex[:12])
    check_prefix(paths, overwrite)
    started_at = utc_now()
    previous = carry = None
    if previous_run:
        previous = load_previous_run(previous_run)
        carry = plan_carry(built, signatures, previous)
    files, available, mapping = _input_columns(
        input, input_format, keep_input_columns, metric_columns, column_flags)
    needs_question = [m.family for m in built if m.family in _NEEDS_QUESTION]
    if needs_question and mapping.question is None:
        raise ValueError(f"metric families {needs_question} need a question column; "
                         f"available columns: {available} (set it with --question_column)")
    spec = _report_spec(built, mapping, available, metric_columns, report_subsets,
                        accuracy_threshold, report_min_n, report_resamples)
    return ScoringConfig(
        input=input, input_format=input_format, files=tuple(files),
        available_columns=tuple(available), mapping=mapping, metrics=built,
        metric_columns=metric_columns, signatures=signatures, paths=paths, report=spec,
        max_batch_size=max_batch_size, handler_kwargs=handler_kwargs,
        max_text_chars=max_text_chars or None, overwrite=overwrite,
        max_dead_letter_fraction=max_dead_letter_fraction,
        manifest=run_manifest(files, input_checksums, started_at),
        previous=previous, carry=carry, corpus_statistics=corpus_statistics or None,
        save_corpus_statistics=save_corpus_statistics or None, statistics_digest=digest,
        df_shards=shards_for_input(files))


def _build_metrics(names: Sequence[str], options: Mapping[str, Any]
                   ) -> tuple[tuple[Metric, ...], dict[str, str]]:
    """The metrics, validated, and their signatures by column (in output order)."""
    built = tuple(registry.build_metrics(names, options))
    metric_columns = tuple(c for m in built for c in m.columns)
    clash = [c for c in metric_columns if c in RESERVED_COLUMNS]
    if clash:
        raise ValueError(f"metric columns {clash} clash with output columns {RESERVED_COLUMNS}")
    signatures: dict[str, str] = {}
    for metric in built:
        signature = metric.signature()
        absent = [c for c in metric.columns if c not in signature]
        if absent:
            raise ValueError(f"metric {metric.family} gives no signature for {absent}")
        signatures.update({c: str(signature[c]) for c in metric.columns})
    return built, signatures


def _statistics_flags(built: Sequence[Metric], names: Sequence[str],
                      signatures: dict[str, str], corpus_statistics: str | None,
                      save_corpus_statistics: str | None, overwrite: bool) -> str | None:
    """Checks --corpus_statistics / --save_corpus_statistics, and adds where each metric's
    corpus statistics come from to its signature; the statistics file's hash (or None)."""
    freezable = [s for s in unique_statistics(built) if is_freezable(s)]
    if (corpus_statistics or save_corpus_statistics) and not freezable:
        raise ValueError("--corpus_statistics/--save_corpus_statistics need a metric with "
                         "corpus statistics (cider, or bertscore with --bertscore_idf); "
                         "requested: " + ",".join(names))
    if corpus_statistics and save_corpus_statistics:
        raise ValueError(
            "--save_corpus_statistics writes the statistics of the scored input, which a run "
            "with --corpus_statistics does not compute (it scores against the file's): give "
            f"one of the two (to keep {corpus_statistics!r} elsewhere, copy it)")
    if save_corpus_statistics and not overwrite and FileSystems.exists(save_corpus_statistics):
        raise ValueError(
            f"--save_corpus_statistics {save_corpus_statistics!r} exists; pass --overwrite to "
            "replace it (runs scored against it would no longer match its hash) or choose "
            "another path")
    digest = (check_statistics_file(corpus_statistics, freezable)
              if corpus_statistics else None)
    for metric in built:
        stats = metric.corpus_statistics()
        if stats:
            source = statistics_signature(
                digest if all(is_freezable(s) for s in stats) else None)
            signatures.update({c: f"{signatures[c]}|{source}" for c in metric.columns})
    return digest


def _check_limits(*, max_batch_size: int, max_text_chars: int,
                  max_dead_letter_fraction: float | None) -> None:
    if max_batch_size < 1:
        raise ValueError(f"--max_batch_size must be >= 1, got {max_batch_size}")
    if max_text_chars < 0:
        raise ValueError(f"--max_text_chars must be >= 1 (or 0 for no limit), "
                         f"got {max_text_chars}")
    if max_dead_letter_fraction is not None and not 0 <= max_dead_letter_fraction <= 1:
        raise ValueError(f"--max_dead_letter_fraction must be in [0, 1], "
                         f"got {max_dead_letter_fraction}")


def _input_columns(input: str, input_format: str | None, keep_input_columns: str | None,
                   metric_columns: Sequence[str], column_flags: Mapping[str, Any]
                   ) -> tuple[list[str], list[str], ColumnMapping]:
    """The input's files, their columns and the resolved column mapping."""
    files, available = sniff_columns(input, input_format)
    if not available:
        raise ValueError(f"--input {input!r}: the files looked into offer no columns (empty "
                         "files, or files that share no column)")
    mapping = resolve_columns(available, **column_flags)
    kept = resolve_kept_columns(keep_input_columns, available,
                                [*RESERVED_COLUMNS, *metric_columns])
    if kept:
        mapping = dataclasses.replace(mapping, keep=kept)
    return files, available, mapping


def _report_spec(built: Sequence[Metric], mapping: ColumnMapping, available: Sequence[str],
                 metric_columns: Sequence[str], report_subsets: str | None,
                 accuracy_threshold: str | None, report_min_n: int,
                 report_resamples: int) -> ReportSpec | None:
    """The report's spec (None without a human column), its flags checked."""
    if mapping.human is None and (report_subsets or accuracy_threshold):
        raise ValueError("--report_subsets/--accuracy_threshold need a human column; "
                         f"available columns: {available} (set it with --human_column)")
    if report_min_n < 1:
        raise ValueError(f"--report_min_n must be >= 1, got {report_min_n}")
    if report_resamples < MIN_RESAMPLES:
        raise ValueError(f"--report_resamples must be >= {MIN_RESAMPLES} (a 95% interval "
                         f"from fewer resamples is too coarse), got {report_resamples}")
    if mapping.human is None:
        return None
    default, overrides = parse_thresholds(accuracy_threshold, metric_columns)
    return ReportSpec(parse_subsets(report_subsets, metric_columns), default,
                      tuple(sorted(overrides.items())),
                      saved_thresholds=tuple(sorted(saved_thresholds(built).items())),
                      default_given=default_threshold_given(accuracy_threshold),
                      min_n=report_min_n, resamples=report_resamples)
