"""The in-process metrics' step of the scoring graph: `ScoreBatches`.

`ComputeCorpusStatistics` (statistics/global_statistics.py) gives the statistics bounded
by the vocabulary (BERTScore's idf) as one `AsSingleton` side input. CIDEr-D's document
frequencies grow with the corpus: they are summed per n-gram shard
(`corpus_stats.ShardedCiderStatistics`), and each batch gets the frequencies of its own
n-grams only, from the sharded join's answers (`ScoreBatchesWithFrequenciesFn`) or, when
the workers share this machine's files, from the tables written to files
(`ScoreBatchesFromTablesFn`, statistics/frequency_files.py). Each batch is then scored
and its rows' records finished by `batches.ScoreRowsFn`.
"""

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam

from transforms.io.counting import STATS_TAG
from transforms.metrics.base import CorpusStatistic, Metric
from transforms.metrics.corpus import unique_statistics
from transforms.scoring.incremental.carry import CarrySpec
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.score.batches import DEAD_LETTER, ScoreRowsFn
from transforms.scoring.statistics.corpus_stats import (
    ANSWERS,
    DOCS,
    MIN_SHARDS,
    ROWS,
    TABLES,
    TEXT_DF,
    ShardedCiderStatistics,
    answered_frequencies,
    batch_corpora,
    is_distributed,
)
from transforms.scoring.statistics.frequency_files import (
    TableFileNames,
    remove_files,
    shared_tables,
    table_frequencies,
)


class ScoreBatchesWithFrequenciesFn(ScoreRowsFn):
    """`(batch id, {rows: [RowBatch], answers: [(statistic, shard, packed answer)]})`
    -> what `ScoreRowsFn` yields, CIDEr-D scored against the batch's own frequencies
    (`corpus_stats.batch_corpora`) and the corpus sizes (`docs` side input)."""

    def __init__(self, metrics: Sequence[Metric], statistics: Sequence[CorpusStatistic],
                 shards: int, carry: CarrySpec | None = None) -> None:
        super().__init__(metrics, carry)
        self._statistics = tuple(statistics)
        self._shards = shards

    def process(self, element: tuple[str, dict[str, Iterable[Any]]],
                corpus_stats: dict[str, Any], docs: dict[tuple[int, int], int]
                ) -> Iterator[Any]:
        _, grouped = element
        frequencies = answered_frequencies(grouped[ANSWERS])
        for batch in grouped[ROWS]:  # one batch per id
            yield from self._with_frequencies(batch, frequencies, corpus_stats, docs)

    def _with_frequencies(self, batch: RowBatch, frequencies: Any, corpus_stats: dict,
                          docs: dict[tuple[int, int], int]) -> Iterator[Any]:
        examples = [row.example for _, row in batch.rows]
        stats = {**corpus_stats, **batch_corpora(self._statistics, examples, frequencies,
                                                 docs, self._shards)}
        return self._score(batch, stats)


class ScoreBatchesFromTablesFn(ScoreBatchesWithFrequenciesFn):
    """`(batch id, RowBatch)` -> what `ScoreRowsFn` yields, CIDEr-D's frequencies found
    in the table files (`tables` side input: frequency_files.py), read once per bundle
    and worker process."""

    def start_bundle(self) -> None:
        self._tables = None

    def finish_bundle(self) -> None:
        self._tables = None  # the last holder of a process's copy frees it

    def process(self, element: tuple[str, RowBatch], corpus_stats: dict[str, Any],
                docs: dict[tuple[int, int], int], tables: Iterable[Any]) -> Iterator[Any]:
        if self._tables is None:
            self._tables = shared_tables(tables)
        return self._with_frequencies(element[1], table_frequencies(self._tables),
                                      corpus_stats, docs)


class ScoreBatches(beam.PTransform):
    """`RowBatch`es -> {`scored`: lists of scored records, one per batch, `dead_letter`:
    dead-letter records} (`ScoreRowsFn`), for the in-process metrics; with `table_files`
    and CIDEr-D, also `removed`: empty, complete once the table files are removed.

    With CIDEr-D among the metrics, batches are joined with their n-grams' document
    frequencies first (`corpus_stats.ShardedCiderStatistics`), or read them from the
    table files (`table_files`); without, they are spread over the workers (`Reshuffle`,
    when `spread`) and scored.

    Args:
        metrics: metrics built (and validated) on the launcher.
        corpus_stats: the `AsSingleton` side input from `ComputeCorpusStatistics`.
        shards: n-gram shards of the document frequencies (`corpus_stats.shards_for_input`).
        frozen: None, or `{docs, df}` PCollections of saved statistics
            (`statistics_file.ReadCorpusStatistics`) to score against instead of the run's.
        statistics_sink: None, or a PTransform applied to the `{docs, text_df}`
            PCollections of the run's statistics (`statistics_file.WriteCorpusStatistics`).
        spread: reshuffle the batches over the workers before scoring them.
        carry: an incremental run's `CarrySpec` (its batches have a `Carry`).
        table_files: None, or `frequency_files.TableFileNames`: CIDEr-D's frequencies are
            written to files and read from there (workers that share this machine's files).
    """

    def __init__(self, metrics: Sequence[Metric], corpus_stats: Any,
                 shards: int = MIN_SHARDS, frozen: dict[str, beam.PCollection] | None = None,
                 statistics_sink: beam.PTransform | None = None, spread: bool = True,
                 carry: CarrySpec | None = None,
                 table_files: TableFileNames | None = None) -> None:
        super().__init__()
        self._metrics = tuple(metrics)
        self._corpus_stats = corpus_stats
        self._shards = shards
        self._frozen = frozen
        self._sink = statistics_sink
        self._spread = spread
        self._carry = carry
        self._files = table_files

    def expand(self, batches):  # -> {scored, dead_letter(, removed)}
        distributed = [s for s in unique_statistics(self._metrics) if is_distributed(s)]
        if not distributed:
            if self._spread:
                batches = batches | "SpreadBatchesOverWorkers" >> beam.Reshuffle()
            scored = batches | "ScoreBatches" >> beam.ParDo(
                ScoreRowsFn(self._metrics, self._carry), self._corpus_stats
            ).with_outputs(STATS_TAG, DEAD_LETTER, main="scores")
            return {"scored": scored.scores, DEAD_LETTER: scored[DEAD_LETTER]}
        stats = batches | "ShardedCiderStatistics" >> ShardedCiderStatistics(
            distributed, self._shards, self._frozen, text_frequencies=self._sink is not None,
            table_files=self._files)
        if self._sink is not None:
            _ = {DOCS: stats[DOCS], TEXT_DF: stats[TEXT_DF]} | "SaveStatistics" >> self._sink
        docs = beam.pvalue.AsDict(stats[DOCS])
        if self._files is None:
            inputs = ({ROWS: stats[ROWS], ANSWERS: stats[ANSWERS]}
                      | "GroupFrequenciesByBatch" >> beam.CoGroupByKey())
            fn, tables = ScoreBatchesWithFrequenciesFn, ()
        else:
            inputs, fn = stats[ROWS], ScoreBatchesFromTablesFn
            tables = (beam.pvalue.AsList(stats[TABLES]),)
        scored = inputs | "ScoreBatches" >> beam.ParDo(
            fn(self._metrics, distributed, self._shards, self._carry),
            self._corpus_stats, docs, *tables).with_outputs(STATS_TAG, DEAD_LETTER,
                                                            main="scores")
        out = {}
        if self._files is not None:  # once every batch is scored
            out["removed"] = (scored.scores
                              | "CountScoredBatches" >> beam.combiners.Count.Globally()
                              | "RemoveFrequencyTables" >> beam.FlatMap(remove_files, self._files))
        return {"scored": scored.scores, DEAD_LETTER: scored[DEAD_LETTER], **out}
