"""`ScorePredictions`: the whole scoring graph, prediction files -> published outputs (see
the map in transforms/scoring/__init__.py); `warn_multiprocess_direct_runner`: the
runner policy of the model branch.

`pipelines/score_predictions.py` parses the flags into a `ScoringConfig` (config.py) and
applies `ScorePredictions` to its pipeline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import apache_beam as beam
from apache_beam.ml.inference.base import ModelHandler
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from transforms.inference.run_model_metrics import RunModelMetrics
from transforms.scoring.config import ScoringConfig
from transforms.scoring.corpus_stats import is_distributed
from transforms.scoring.join import ROWS, JoinScores
from transforms.scoring.read import ReadPredictions
from transforms.scoring.score import ComputeCorpusStatistics, ScoreMetrics, unique_statistics
from transforms.scoring.statistics_file import ReadCorpusStatistics, WriteCorpusStatistics
from transforms.scoring.summary import SummarizeScores
from transforms.scoring.write import (
    FinalizeOutputs,
    WriteDeadLetters,
    WriteReport,
    WriteScores,
    WriteSummary,
)

logger = logging.getLogger(__name__)

_DIRECT_RUNNERS = ("DirectRunner", "SwitchingDirectRunner")


def warn_multiprocess_direct_runner(options: PipelineOptions) -> bool:
    """Warns (and returns True) when model metrics are about to run on the DirectRunner
    with worker processes or threads: on one machine that is slower than in process
    (torch already uses every core), and that mode of Beam's has lost large chunks of
    data between workers and the runner (docs/repro/multiprocess_cogroupbykey.py). The
    model branch keeps its large outputs inside one stage, and a run with missing
    outputs fails rather than write partial scores, but in process is the mode to use."""
    runner = options.view_as(StandardOptions).runner
    mode = options.view_as(DirectOptions).direct_running_mode
    if (runner or "DirectRunner") in _DIRECT_RUNNERS and mode in (
            "multi_processing", "multi_threading"):
        logger.warning(
            "model metrics on the DirectRunner with --direct_running_mode=%s: on one "
            "machine --direct_running_mode=in_memory is faster (torch uses every core), "
            "and this mode of Beam's has lost large data chunks between workers "
            "(docs/repro/multiprocess_cogroupbykey.py)", mode)
        return True
    return False


class ScorePredictions(beam.PTransform):
    """The pipeline's root -> the final paths of the run's outputs (summary.json last).

    Args:
        config: the validated configuration (`config.build_config`).
        handler_factory: `(ModelUse, **handler_kwargs) -> ModelHandler` for the model
            metrics (tests inject fakes); None = transforms.inference.handlers.
    """

    def __init__(self, config: ScoringConfig,
                 handler_factory: Callable[..., ModelHandler] | None = None):
        super().__init__()
        self._config = config
        self._handler_factory = handler_factory

    def expand(self, p):
        config, paths = self._config, self._config.paths
        read = p | "ReadPredictions" >> ReadPredictions(
            config.input, config.mapping, config.input_format, config.max_text_chars)
        corpus_stats = read["rows"] | "ComputeCorpusStatistics" >> ComputeCorpusStatistics(
            config.metrics)
        branches = {ROWS: read["rows"]}
        if config.in_process_metrics:
            distributed = [s for s in unique_statistics(config.in_process_metrics)
                           if is_distributed(s)]
            frozen = sink = None
            if config.corpus_statistics:
                frozen = p | "ReadCorpusStatistics" >> ReadCorpusStatistics(
                    config.corpus_statistics, distributed, config.df_shards)
            if config.save_corpus_statistics:
                sink = WriteCorpusStatistics(config.save_corpus_statistics, distributed)
            branches["in_process"] = read["rows"] | "ScoreInProcessMetrics" >> ScoreMetrics(
                config.in_process_metrics, beam.pvalue.AsSingleton(corpus_stats),
                config.max_batch_size, config.df_shards, frozen, sink)
        if config.model_metrics:
            branches["models"] = read["rows"] | "ScoreModelMetrics" >> RunModelMetrics(
                config.model_metrics, corpus_stats=beam.pvalue.AsSingleton(corpus_stats),
                handler_factory=self._handler_factory, handler_kwargs=config.handler_kwargs)
        joined = branches | "JoinScoresByRowKey" >> JoinScores()
        dead = ((read["dead_letter"], joined["dead_letter"])
                | "CollectDeadLetters" >> beam.Flatten())
        written = [
            joined["scored"] | "WriteScores" >> WriteScores(
                paths, config.metric_columns, config.with_human, config.signatures),
            dead | "WriteDeadLetters" >> WriteDeadLetters(paths),
            (joined["scored"], dead)
            | "SummarizeBySystem" >> SummarizeScores(config.metric_columns, config.with_human)
            | "WriteSummary" >> WriteSummary(paths, config.summary_metadata()),
        ]
        if config.report is not None:
            written.append(joined["scored"] | "WriteMetaEvaluationReport" >> WriteReport(
                paths, config.metric_columns, config.report, config.mapping.human))
        return tuple(written) | "FinalizeOutputs" >> FinalizeOutputs(
            paths, with_report=config.report is not None)
