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

from transforms.inference import model_server
from transforms.io.progress import direct_workers, is_local_runner
from transforms.metrics.base import Metric
from transforms.metrics.bertscore import ReferenceIdf
from transforms.metrics.corpus import unique_statistics
from transforms.scoring.config import ScoringConfig, is_model_backed
from transforms.scoring.incremental.carry import AttachPrevious
from transforms.scoring.incremental.previous_shards import ReadPreviousShards, shards_for
from transforms.scoring.outputs.finalize import FinalizeOutputs
from transforms.scoring.outputs.summary import SummarizeScores
from transforms.scoring.outputs.write import (
    WriteDeadLetters,
    WriteReport,
    WriteScores,
    WriteSummary,
)
from transforms.scoring.reading.read import SPLIT_BYTES, ReadPredictions, plan_for_workers
from transforms.scoring.score.in_process import ScoreBatches
from transforms.scoring.statistics.corpus_stats import is_distributed
from transforms.scoring.statistics.frequency_files import TableFileNames
from transforms.scoring.statistics.global_statistics import ComputeCorpusStatistics
from transforms.scoring.statistics.statistics_file import (
    IDF,
    ReadCorpusStatistics,
    ReadIdfStatistics,
    WriteCorpusStatistics,
    idf_records,
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
            metrics (tests inject fakes); None = transforms.inference.handlers.
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
        # Every run scores the reader's batches in one row flow; an incremental run's
        # batches first meet their rows' previous values (`_carry`).
        split_bytes, spread = self._plan_spread(p.pipeline.options)
        read = p | "ReadPredictions" >> ReadPredictions(
            config.input, config.mapping, config.input_format, config.max_text_chars,
            split_bytes=split_bytes, batch_rows=config.max_batch_size)
        rows = read["batches"]
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
        local = is_local_runner(p.pipeline.options)
        joined = self._score_batches(self._carry(p, rows), corpus_stats, spread, local)
        dead = ((read["dead_letter"], joined["dead_letter"])
                | "CollectDeadLetters" >> beam.Flatten())
        written = [
            joined["scored"] | "WriteScores" >> WriteScores(
                paths, config.metric_columns, config.with_human, config.signatures,
                config.mapping.keep),
            dead | "WriteDeadLetters" >> WriteDeadLetters(paths),
            (joined["scored"], dead)
            | "SummarizeBySystem" >> SummarizeScores(
                config.metric_columns, config.with_human,
                config.previous.means() if config.previous is not None else None)
            | "WriteSummary" >> WriteSummary(paths, config.summary_metadata(),
                                             read["stats"]),
        ]
        if "removed" in joined:  # CIDEr-D's table files, gone before the outputs move in
            written.append(joined["removed"])
        if config.report is not None:
            written.append(joined["scored"] | "WriteMetaEvaluationReport" >> WriteReport(
                paths, config.metric_columns, config.report, config.mapping.human))
        if local and any(
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
                       spread: bool, local: bool) -> dict:
        """Every metric, scored on the reader's `RowBatch`es -> {`scored`, `dead_letter`}
        records: the model metrics first (`ScoreModelBatches` attaches each row's model
        scores to its batch), then the in-process ones, which finish each row's record; no
        per-row element is formed before the output records, and no join is needed.
        `spread`: the batches are reshuffled over the workers first (`_plan_spread`).
        `local`: the workers share this machine's files: CIDEr-D's frequencies are read
        from files rather than asked for (statistics/frequency_files.py)."""
        config = self._config
        carry = config.carry.spec() if self._carries() else None
        in_process = [m for m in config.metrics if not is_model_backed(m)]
        models = [m for m in config.metrics if is_model_backed(m)]
        if models:
            # imported here: RunInference's module imports torch (seconds, 300 MB), which
            # a run of text metrics alone never needs
            from transforms.scoring.score.run_model_metrics import ScoreModelBatches

            if spread:
                batches = batches | "SpreadBatchesOverWorkers" >> beam.Reshuffle()
            branch = ScoreModelBatches(models, corpus_stats=corpus_stats,
                                       handler_factory=self._handler_factory,
                                       handler_kwargs=config.handler_kwargs, carry=carry)
            self._model_branches.append(branch)
            batches = batches | "ScoreModelMetrics" >> branch
        return batches | "ScoreInProcessMetrics" >> ScoreBatches(
            in_process, corpus_stats, config.df_shards, self._frozen,
            self._statistics_sink(in_process), spread=spread and not models, carry=carry,
            table_files=TableFileNames(config.paths.prefix, config.paths.temp)
            if local else None)

    def _carries(self) -> bool:
        previous = self._config.previous
        return previous is not None and previous.content_keys

    def _carry(self, p, batches: beam.PCollection) -> beam.PCollection:
        """An incremental run's batches with their rows' previous values
        (transforms/scoring/incremental/plan.py); the batches as read otherwise, and when the
        previous run's content keys are of another recipe (nothing can be matched)."""
        config = self._config
        if not self._carries():
            return batches
        spec, shards = config.carry.spec(), shards_for(config.previous)
        tables = p | "ReadPreviousScores" >> ReadPreviousShards(
            config.previous, spec.columns, shards)
        return batches | "AttachPrevious" >> AttachPrevious(spec, tables, shards)
