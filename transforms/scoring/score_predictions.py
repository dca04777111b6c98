"""`ScorePredictions`: the whole scoring graph, prediction files -> published outputs (see
the map in transforms/scoring/__init__.py); `warn_multiprocess_direct_runner`: the
runner policy of the model branch.

`pipelines/score_predictions.py` parses the flags into a `ScoringConfig` (config.py) and
applies `ScorePredictions` to its pipeline.
"""

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from transforms.io.progress import direct_workers, is_local_runner
from transforms.metrics.base import Metric
from transforms.metrics.bertscore import ReferenceIdf
from transforms.metrics.corpus import unique_statistics
from transforms.scoring import model_server
from transforms.scoring.config import ScoringConfig, is_model_backed
from transforms.scoring.corpus_stats import is_distributed
from transforms.scoring.finalize import FinalizeOutputs
from transforms.scoring.global_statistics import ComputeCorpusStatistics
from transforms.scoring.incremental import (
    GROUPS,
    NEW,
    OLD,
    JoinIncremental,
    ReadPreviousScores,
    SplitByPrevious,
    carried_result,
)
from transforms.scoring.join import ROWS, JoinScores
from transforms.scoring.read import SPLIT_BYTES, ReadPredictions, plan_for_workers
from transforms.scoring.rows import content_key
from transforms.scoring.score import RECORDS, ScoreBatches, ScoreMetrics
from transforms.scoring.statistics_file import (
    IDF,
    ReadCorpusStatistics,
    ReadIdfStatistics,
    WriteCorpusStatistics,
    idf_records,
)
from transforms.scoring.summary import SummarizeScores
from transforms.scoring.write import (
    WriteDeadLetters,
    WriteReport,
    WriteScores,
    WriteSummary,
)

if TYPE_CHECKING:  # RunInference's module imports torch: only when model metrics run
    from apache_beam.ml.inference.base import ModelHandler

logger = logging.getLogger(__name__)

_DIRECT_RUNNERS = ("DirectRunner", "SwitchingDirectRunner")


def warn_multiprocess_direct_runner(options: PipelineOptions, shared: bool = False) -> bool:
    """Warns (and returns True) when model metrics are about to run on the DirectRunner
    with worker processes or threads, each loading its own copy of every model: on one
    machine that is slower than in process (torch already uses every core), and that mode
    of Beam's has lost large chunks of data between workers and the runner
    (docs/repro/multiprocess_cogroupbykey.py; a run with missing rows fails rather than
    write partial scores). With `shared` (--share_model_across_processes) it is the way to
    feed one GPU from several processes, and no warning is given."""
    runner = options.view_as(StandardOptions).runner
    mode = options.view_as(DirectOptions).direct_running_mode
    if shared:
        return False
    if (runner or "DirectRunner") in _DIRECT_RUNNERS and mode in (
            "multi_processing", "multi_threading"):
        logger.warning(
            "model metrics on the DirectRunner with --direct_running_mode=%s and a copy of "
            "each model per worker: on one machine --direct_running_mode=in_memory is "
            "faster (torch uses every core) unless --share_model_across_processes feeds one "
            "GPU from the workers; and this mode of Beam's has lost large data chunks "
            "between workers (docs/repro/multiprocess_cogroupbykey.py)", mode)
        return True
    return False


class ScorePredictions(beam.PTransform):
    """The pipeline's root -> the final paths of the run's outputs (summary.json last).

    Args:
        config: the validated configuration (`config.build_config`).
        handler_factory: `(ModelUse, **handler_kwargs) -> ModelHandler` for the model
            metrics (tests inject fakes); None = transforms.scoring.handlers.
        owned: the launcher owns the run's outputs (transforms/io/ownership.py); the
            publishing step checks that it still does before it moves anything.
    """

    def __init__(self, config: ScoringConfig,
                 handler_factory: Callable[..., "ModelHandler"] | None = None,
                 owned: bool = False):
        super().__init__()
        self._owned = owned  # the run owns its outputs: checked before publishing
        self._config = config
        self._handler_factory = handler_factory
        self._model_branches: list[Any] = []  # ModelMetricsOnBatches, once expanded

    def model_handlers(self) -> list["ModelHandler"]:
        """The model handlers of the graph this transform built (after it is applied):
        one multi-use handler per model branch (the launcher may start their shared
        copies early: `MultiUseModelHandler.start_serving`)."""
        return [branch.models for branch in self._model_branches]

    def expand(self, p):
        config, paths = self._config, self._config.paths
        # No previous run: rows stay in the batches the reader forms, model metrics and
        # in-process ones scored on them in turn, with no join (`_score_batches`).
        batched = config.previous is None
        split_bytes, spread = SPLIT_BYTES, True
        if batched:
            split_bytes, spread = self._plan_spread(p.pipeline.options)
        read = p | "ReadPredictions" >> ReadPredictions(
            config.input, config.mapping, config.input_format, config.max_text_chars,
            split_bytes=split_bytes, batch_rows=config.max_batch_size if batched else None)
        rows = read["batches" if batched else "rows"]
        statistics = unique_statistics(config.metrics)
        idf = [s for s in statistics if isinstance(s, ReferenceIdf)]
        frozen_idf = [s.key for s in idf] if config.corpus_statistics else []
        values = rows | "ComputeCorpusStatistics" >> ComputeCorpusStatistics(
            config.metrics, skip=frozen_idf)
        if frozen_idf:
            from_file = p | "ReadIdfStatistics" >> ReadIdfStatistics(config.corpus_statistics, idf)
            values = values | "WithFrozenIdf" >> beam.Map(
                lambda computed, frozen: {**computed, **frozen},
                beam.pvalue.AsSingleton(from_file))
        corpus_stats = beam.pvalue.AsSingleton(values)
        self._sink: WriteCorpusStatistics | None = None  # --save_corpus_statistics
        self._idf_records = None
        if config.save_corpus_statistics and idf:
            self._idf_records = values | "IdfRecords" >> beam.FlatMap(idf_records(idf))
            if not any(is_distributed(s) for s in statistics):  # no CIDEr-D sink to join
                _ = {IDF: self._idf_records} | "SaveStatistics" >> self._new_sink()
        self._frozen = None
        if config.corpus_statistics:
            distributed = [s for s in statistics if is_distributed(s)]
            self._frozen = p | "ReadCorpusStatistics" >> ReadCorpusStatistics(
                config.corpus_statistics, distributed, config.df_shards)
        if batched:
            joined = self._score_batches(rows, corpus_stats, spread)
        elif config.previous is None:
            branches = {ROWS: rows, **self._branches(rows, config.metrics, corpus_stats)}
            joined = branches | "JoinScoresByRowKey" >> JoinScores()
        else:
            joined = self._incremental(p, rows, corpus_stats)
        dead = ((read["dead_letter"], joined["dead_letter"])
                | "CollectDeadLetters" >> beam.Flatten())
        written = [
            joined["scored"] | "WriteScores" >> WriteScores(
                paths, config.metric_columns, config.with_human, config.signatures,
                config.mapping.keep, batched=batched),
            dead | "WriteDeadLetters" >> WriteDeadLetters(paths),
            (joined["scored"], dead)
            | "SummarizeBySystem" >> SummarizeScores(
                config.metric_columns, config.with_human,
                config.previous.means() if config.previous is not None else None,
                batched=batched)
            | "WriteSummary" >> WriteSummary(paths, config.summary_metadata(),
                                             read["stats"]),
        ]
        if config.report is not None:
            written.append(joined["scored"] | "WriteMetaEvaluationReport" >> WriteReport(
                paths, config.metric_columns, config.report, config.mapping.human,
                batched=batched))
        if is_local_runner(p.pipeline.options) and any(
                h.shares_models for h in self.model_handlers()):
            model_server.folder()  # one that others may reach is refused before the run
        statistics = None
        if self._sink is not None:
            written.append(self._sink.written)
            statistics = (self._sink.path, config.save_corpus_statistics)
        return tuple(written) | "FinalizeOutputs" >> FinalizeOutputs(
            paths, with_report=config.report is not None, overwrite=config.overwrite,
            statistics=statistics, owned=self._owned)

    def _plan_spread(self, options: PipelineOptions) -> tuple[int, bool]:
        """(JSONL range size, whether the reader's batches are spread over the workers
        before they are scored).

        A `Reshuffle` spreads them on runners whose workers the pipeline cannot count,
        and on a direct runner whose splits would not give each worker a fair share. Where
        a direct runner's workers can be counted, the ranges are sized to give each about
        four (`read.plan_for_workers`), and when the splits spread the work
        (`SplitPlan.spreads`) each worker reads and scores its own: on the FnApiRunner a
        reshuffle is a barrier at which every batch is packed and held until the last row
        is read, while the model waits. One worker: never spread, there is nowhere to
        spread to."""
        workers = direct_workers(options)
        if workers is None:
            return SPLIT_BYTES, True
        if workers == 1:
            return SPLIT_BYTES, False
        plan = plan_for_workers(self._config.input, self._config.input_format, workers)
        spread = not plan.spreads(workers)
        logger.info("%d workers, %d splits (JSONL in ranges of %.1f MiB, the largest split "
                    "%.1f MiB of %.1f): batches %s", workers, plan.splits,
                    plan.split_bytes / 2**20, plan.largest / 2**20, plan.total / 2**20,
                    "spread over the workers" if spread else "scored where they are read")
        return plan.split_bytes, spread

    def _new_sink(self, *args: Any) -> WriteCorpusStatistics:
        """The run's one writer of --save_corpus_statistics (`WriteCorpusStatistics(path,
        *args)`), writing under a temporary name that `FinalizeOutputs` moves in with the
        run's other outputs: a run that fails leaves no statistics file, and replaces none."""
        if self._sink is not None:
            raise RuntimeError("a second writer of --save_corpus_statistics")
        self._sink = WriteCorpusStatistics(
            self._config.paths.temp(self._config.save_corpus_statistics), *args)
        return self._sink

    def _statistics_sink(self, metrics: Sequence[Metric]) -> beam.PTransform | None:
        """The writer of the run's CIDEr-D statistics (--save_corpus_statistics), with the
        idf records when there are any; None when nothing is saved from these metrics."""
        distributed = [s for s in unique_statistics(metrics) if is_distributed(s)]
        if not (distributed and self._config.save_corpus_statistics):
            return None
        return self._new_sink(distributed, self._idf_records)

    def _score_batches(self, batches: beam.PCollection, corpus_stats: Any,
                       spread: bool) -> dict:
        """Every metric of a run without a previous run, scored on the reader's
        `RowBatch`es -> {`scored`, `dead_letter`} records: the model metrics first
        (`ScoreModelBatches` attaches each row's model scores to its batch), then the
        in-process ones, which finish each row's record; no per-row element is formed
        before the output records, and no join is needed. `spread`: the batches are
        reshuffled over the workers first (`_plan_spread`)."""
        config = self._config
        in_process = [m for m in config.metrics if not is_model_backed(m)]
        models = [m for m in config.metrics if is_model_backed(m)]
        if models:
            # imported here: RunInference's module imports torch (seconds, 300 MB), which
            # a run of text metrics alone never needs
            from transforms.scoring.run_model_metrics import ScoreModelBatches

            if spread:
                batches = batches | "SpreadBatchesOverWorkers" >> beam.Reshuffle()
            branch = ScoreModelBatches(models, corpus_stats=corpus_stats,
                                       handler_factory=self._handler_factory,
                                       handler_kwargs=config.handler_kwargs)
            self._model_branches.append(branch)
            batches = batches | "ScoreModelMetrics" >> branch
        return batches | "ScoreInProcessMetrics" >> ScoreBatches(
            in_process, corpus_stats, config.df_shards, self._frozen,
            self._statistics_sink(in_process), emit=RECORDS, spread=spread and not models)

    def _branches(self, rows: beam.PCollection, metrics: Sequence[Metric], corpus_stats: Any,
                  label: str = "") -> dict[str, beam.PCollection]:
        """The scoring branches of `metrics` over keyed rows: `in_process{label}` (the
        lexical metrics) and `models{label}` (the model metrics), those that have any."""
        config = self._config
        in_process = [m for m in metrics if not is_model_backed(m)]
        models = [m for m in metrics if is_model_backed(m)]
        branches = {}
        if in_process:
            distributed = any(is_distributed(s) for s in unique_statistics(in_process))
            branches[f"in_process{label}"] = rows | f"ScoreInProcessMetrics{label}" >> \
                ScoreMetrics(in_process, corpus_stats, config.max_batch_size,
                             config.df_shards, self._frozen if distributed else None,
                             self._statistics_sink(in_process))
        if models:
            # imported here: RunInference's module imports torch (seconds, 300 MB), which
            # a run of text metrics alone never needs
            from transforms.scoring.run_model_metrics import RunModelMetrics

            branch = RunModelMetrics(
                models, rows_per_batch=config.max_batch_size, corpus_stats=corpus_stats,
                handler_factory=self._handler_factory, handler_kwargs=config.handler_kwargs)
            self._model_branches.append(branch.batches)
            branches[f"models{label}"] = rows | f"ScoreModelMetrics{label}" >> branch
        return branches

    def _incremental(self, p, rows: beam.PCollection, corpus_stats: Any) -> dict:
        """The scoring graph of an incremental run (see transforms/scoring/incremental.py):
        recomputed metrics on every distinct content, carried ones on new contents only,
        the previous values for the others; joined by content key and fanned out."""
        config, plan = self._config, self._config.carry
        previous = p | "ReadPreviousScores" >> ReadPreviousScores(
            config.previous, (*plan.carried_columns, *plan.compared))
        split = (rows, previous) | "SplitByPrevious" >> SplitByPrevious(plan.carried_columns)
        contents = (split[NEW], split[OLD]) | "EveryContent" >> beam.Flatten()
        # CIDEr-D with the run's own document frequencies counts them over the rows its
        # branch scores: that branch gets every row (keyed by content), not one per content.
        computed_in = [m for m in plan.computed if not is_model_backed(m)]
        counts_rows = not config.corpus_statistics and any(
            is_distributed(s) for s in unique_statistics(computed_in))
        in_rows = contents if not counts_rows else rows | "KeyEveryRowByContent" >> beam.Map(
            lambda keyed: (content_key(keyed[1].example), keyed[1]))
        branches = {GROUPS: split[GROUPS], **self._branches(in_rows, computed_in, corpus_stats),
                    **self._branches(contents, [m for m in plan.computed if is_model_backed(m)],
                                     corpus_stats)}
        fresh = self._branches(split[NEW], plan.carried, corpus_stats, "_carried")
        for name, results in fresh.items():
            columns = [c for m in plan.carried for c in m.columns
                       if is_model_backed(m) == name.startswith("models")]
            kept = split["carried"] | f"PreviousValues_{name}" >> beam.Map(
                carried_result, columns)
            branches[name] = (results, kept) | f"NewAndKept_{name}" >> beam.Flatten()
        return branches | "JoinByContentKey" >> JoinIncremental(
            plan.carried_columns, plan.compared)
