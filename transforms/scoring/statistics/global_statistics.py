"""Corpus statistics computed over all rows at once, as one `CombineGlobally`.

`ComputeCorpusStatistics` runs the `CorpusStatistic`s the metrics declare whose size is
bounded by the vocabulary (BERTScore's idf; not those `corpus_stats.is_distributed`,
which are served per n-gram shard) with `CorpusStatisticsCombineFn`, over `RowBatch`es,
and yields a single `{key: value}` dict, taken as an `AsSingleton` side
input by the in-process metrics (score.py) and the model branch (run_model_metrics.py).
`example_of` is the `QAExample` of a row value, for whatever reads rows' examples.
"""

from collections.abc import Collection, Iterator, Sequence
from typing import Any

import apache_beam as beam

from transforms.metrics.base import CorpusStatistic, Metric, QAExample
from transforms.metrics.corpus import unique_statistics
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.statistics.corpus_stats import is_distributed


class CorpusStatisticsCombineFn(beam.CombineFn):
    """Runs several `CorpusStatistic`s over the examples at once."""

    def __init__(self, statistics: Sequence[CorpusStatistic]) -> None:
        self._statistics = tuple(statistics)

    def create_accumulator(self) -> list[Any]:
        return [s.create() for s in self._statistics]

    def add_input(self, accumulator: list[Any], example: QAExample) -> list[Any]:
        return [s.add(a, example) for s, a in zip(self._statistics, accumulator, strict=True)]

    def merge_accumulators(self, accumulators: Any) -> list[Any]:
        accumulators = list(accumulators)
        return [s.merge([a[i] for a in accumulators]) for i, s in enumerate(self._statistics)]

    def extract_output(self, accumulator: list[Any]) -> dict[str, Any]:
        return {s.key: s.extract(a)
                for s, a in zip(self._statistics, accumulator, strict=True)}


def example_of(value: Any) -> QAExample:
    """The QAExample of a row value: the value itself, or its `.example` (ScoringRow)."""
    return value if isinstance(value, QAExample) else value.example


def _examples_of(batch: RowBatch) -> Iterator[QAExample]:
    """The examples of a `RowBatch`."""
    for _, row in batch.rows:
        yield row.example


class ComputeCorpusStatistics(beam.PTransform):
    """`RowBatch`es -> one `{statistic key: value}` dict (empty when none) of the
    statistics that are not distributed (`corpus_stats.is_distributed`): those are served
    per n-gram shard inside `score.ScoreBatches`. Statistics whose key is in `skip` (read from
    a frozen statistics file instead) are not computed."""

    def __init__(self, metrics: Sequence[Metric], skip: Collection[str] = ()) -> None:
        super().__init__()
        self._statistics = tuple(s for s in unique_statistics(metrics)
                                 if not is_distributed(s) and s.key not in skip)

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        if not self._statistics:
            return rows.pipeline | "NoCorpusStatistics" >> beam.Create([{}])
        return (
            rows
            | "ExtractExamples" >> beam.FlatMap(_examples_of)
            | "CombineStatistics" >> beam.CombineGlobally(
                CorpusStatisticsCombineFn(self._statistics)))
