"""Frozen corpus statistics: a run's CIDEr-D document frequencies and BERTScore idf as a
Parquet file (`--save_corpus_statistics`), and scoring against such a file
(`--corpus_statistics`).

One row per (statistic, corpus, n-gram or word-piece):

    statistic  string   the statistic key, e.g. "cider_df:per_position", or
                        "bertscore_idf|<checkpoint>|<revision>"
    tokenizer  string   CIDEr-D: the PTB backend the n-grams were counted with ("python" |
                        "jar"); idf: `IDF_TOKENIZER` (the checkpoint named in the key
                        tokenised the references)
    corpus     int32    CIDEr-D: reference position (0-based), or -1 for the pooled
                        corpus; idf: -1 (every reference of every row is a document)
    ngram      string   CIDEr-D: the n-gram's tokens joined by single spaces; idf: the
                        word-piece id in decimal; null on the row that holds the corpus size
    df         int64    documents holding the n-gram or word-piece; on the size row: the
                        number of documents

CIDEr-D rows are written only for n-grams with df >= 2: df 0 and 1 both weigh
log(max(1, df)) = 0, so a file without them scores exactly as the full table does (see
`cider.corpus_of`). idf rows are written for every word-piece seen (idf separates df 0
from df 1); their number is bounded by the tokenizer's vocabulary.

A scoring run's corpus-level signatures name where the statistics came from: `stats:run`
(the run's own input) or `stats:file:<sha256 of the file, 16 hex digits>`
(`statistics_signature`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam

from transforms.metrics.base import CorpusStatistic
from transforms.metrics.bertscore import IdfTable, ReferenceIdf
from transforms.metrics.cider import CiderDocumentFrequency
from transforms.scoring.reading.inputs import READ_ERRORS
from transforms.scoring.reading.parquet_parts import ReadParquetBatches, source_of
from transforms.scoring.statistics.corpus_stats import DF, DOCS, TEXT_DF, SumDocumentFrequencies
from transforms.scoring.statistics.ngram_hashes import (
    gram_text,
    hashed_table,
    ngram_shard,
    text_gram,
)

COLUMNS = ("statistic", "tokenizer", "corpus", "ngram", "df")
WHAT = "--corpus_statistics"


class StatisticsFileError(ValueError):
    """A corpus statistics file that cannot be read (missing, cut short, corrupt, changed
    while read); the message names it. One line, exit status 2, also when a worker
    raises it (`transforms.io.cli.FILE_ERROR_NAMES`)."""

    user_file_error = True
IDF = "idf"  # the idf records part of `WriteCorpusStatistics`' input
IDF_TOKENIZER = "checkpoint"
# The statistics a file can hold: CIDEr-D's (per n-gram shard, corpus_stats.py) and idf.
FREEZABLE = (CiderDocumentFrequency, ReferenceIdf)


def is_freezable(statistic: CorpusStatistic) -> bool:
    """Whether a statistic can be saved to and read from a statistics file."""
    return isinstance(statistic, FREEZABLE)


def file_key(statistic: CorpusStatistic) -> tuple[str, str]:
    """The (statistic, tokenizer) columns a statistic's rows carry in a file."""
    if isinstance(statistic, ReferenceIdf):
        return statistic.key, IDF_TOKENIZER
    return statistic.key, statistic.tokenizer


def schema():
    """The Parquet schema of a statistics file."""
    import pyarrow as pa

    return pa.schema([("statistic", pa.string()), ("tokenizer", pa.string()),
                      ("corpus", pa.int32()), ("ngram", pa.string()), ("df", pa.int64())])


def file_digest(path: str) -> str:
    """sha256 of a statistics file's bytes, 16 hex digits (read through Beam's FileSystems).

    Raises:
        ValueError: the file cannot be read.
    """
    from apache_beam.io.filesystems import FileSystems

    digest = hashlib.sha256()
    try:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except Exception as e:  # noqa: BLE001 - any filesystem error is a bad flag value
        raise StatisticsFileError(f"{WHAT} {path}: cannot be read: {type(e).__name__}: "
                                  f"{e}") from e
    return digest.hexdigest()[:16]


def file_statistics(path: str) -> set[tuple[str, str]]:
    """The (statistic key, tokenizer) pairs a statistics file holds (reads two columns).

    Raises:
        StatisticsFileError: not a readable Parquet file.
        ValueError: not a statistics file (other columns).
    """
    import pyarrow.parquet as pq
    from apache_beam.io.filesystems import FileSystems

    try:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            parquet = pq.ParquetFile(f)
            names = parquet.schema_arrow.names
            if tuple(names) == COLUMNS:
                table = parquet.read(columns=["statistic", "tokenizer"])
    except READ_ERRORS as e:
        raise StatisticsFileError(f"{WHAT} {path}: cannot be read as Parquet: "
                                  f"{type(e).__name__}: {e}") from e
    if tuple(names) != COLUMNS:
        raise ValueError(f"{WHAT} {path!r} is not a corpus statistics file: "
                         f"columns {names}, expected {list(COLUMNS)}")
    pairs = table.group_by(["statistic", "tokenizer"]).aggregate([]).to_pylist()
    return {(p["statistic"], p["tokenizer"]) for p in pairs}


def check_statistics_file(path: str, statistics: Sequence[CorpusStatistic]) -> str:
    """Checks that the file holds every statistic the run needs; returns its digest.

    Raises:
        ValueError: the file cannot be read, is not a statistics file, or lacks one.
    """
    digest = file_digest(path)
    held = file_statistics(path)
    for stat in statistics:
        key, tokenizer = file_key(stat)
        if (key, tokenizer) not in held:
            counted = "" if tokenizer == IDF_TOKENIZER else f" counted with the {tokenizer!r} tokenizer"
            raise ValueError(
                f"--corpus_statistics {path!r} holds no {key} statistics{counted}; it holds "
                f"{sorted(held)} (save them with --save_corpus_statistics from a run with "
                "the same metric options)")
    return digest


def statistics_signature(digest: str | None) -> str:
    """The signature part naming the statistics' source: `stats:run` or
    `stats:file:<digest>`."""
    return "stats:run" if digest is None else f"stats:file:{digest}"


def _records(statistics: Sequence[CiderDocumentFrequency]):
    def docs_records(element: tuple[tuple[int, int], int]) -> Iterator[dict[str, Any]]:
        (index, key), n = element
        stat = statistics[index]
        yield {"statistic": stat.key, "tokenizer": stat.tokenizer, "corpus": key,
               "ngram": None, "df": n}

    def df_records(element: tuple[tuple[int, int, int], dict]) -> Iterator[dict[str, Any]]:
        (index, key, _), table = element
        stat = statistics[index]
        for gram, df in table.items():
            yield {"statistic": stat.key, "tokenizer": stat.tokenizer, "corpus": key,
                   "ngram": gram_text(gram), "df": df}

    return docs_records, df_records


def idf_records(statistics: Sequence[ReferenceIdf]):
    """`{statistic key: value}` (the run's corpus statistics) -> the file rows of the idf
    tables among them: a size row, then one row per word-piece, ids ascending."""
    keys = sorted({s.key for s in statistics})

    def records(values: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for key in keys:
            table: IdfTable = values[key]
            yield {"statistic": key, "tokenizer": IDF_TOKENIZER, "corpus": -1,
                   "ngram": None, "df": table.num_docs}
            for token_id, df in sorted(table.df.items()):
                yield {"statistic": key, "tokenizer": IDF_TOKENIZER, "corpus": -1,
                       "ngram": str(token_id), "df": df}

    return records


class WriteCorpusStatistics(beam.PTransform):
    """The statistics of a run -> the Parquet file at `path` (one file). Takes a dict with
    `docs` and `text_df` (of `ShardedCiderStatistics`, for the CIDEr-D `statistics`) and/or
    `idf` (records from `idf_records`, also accepted as `idf_records` here, for a sink
    that another transform applies to the CIDEr-D parts). -> the path written, also kept
    as `written` once applied (for `FinalizeOutputs`, which moves a run's statistics from
    a temporary path to their final one)."""

    def __init__(self, path: str, statistics: Sequence[CiderDocumentFrequency] = (),
                 idf_records: beam.PCollection | None = None) -> None:
        super().__init__()
        self.path = path
        self._statistics = tuple(statistics)
        self._idf_records = idf_records

    def expand(self, parts: dict[str, beam.PCollection]) -> beam.PCollection:
        docs_records, df_records = _records(self._statistics)
        records = []
        if DOCS in parts:
            records += [parts[DOCS] | "SizeRecords" >> beam.FlatMap(docs_records),
                        parts[TEXT_DF] | "FrequencyRecords" >> beam.FlatMap(df_records)]
        if IDF in parts:
            records.append(parts[IDF])
        if self._idf_records is not None:
            records.append(self._idf_records)
        self.written = (tuple(records) | "AllRecords" >> beam.Flatten()
                        | "WriteStatisticsParquet" >> beam.io.WriteToParquet(
                            self.path, schema(), num_shards=1, shard_name_template=""))
        return self.written


def _idf_tables(keys: frozenset[str]):
    def tables(batch: Any) -> Iterator[dict[str, list[Any]]]:
        """One Arrow batch of rows -> {key: [documents, {word-piece id: df}]}."""
        part: dict[str, list[Any]] = {}
        columns = batch.to_pydict()
        for statistic, tokenizer, ngram, df in zip(
                columns["statistic"], columns["tokenizer"], columns["ngram"], columns["df"],
                strict=True):
            if statistic not in keys or tokenizer != IDF_TOKENIZER:
                continue
            entry = part.setdefault(statistic, [0, {}])
            if ngram is None:
                entry[0] += df
            else:
                entry[1][int(ngram)] = df
        if part:
            yield part

    return tables


class _MergeIdfTables(beam.CombineFn):
    def create_accumulator(self) -> dict[str, list[Any]]:
        return {}

    def add_input(self, acc: dict[str, list[Any]], part: dict[str, list[Any]]):
        for key, (docs, df) in part.items():
            entry = acc.setdefault(key, [0, {}])
            entry[0] += docs
            entry[1].update(df)
        return acc

    def merge_accumulators(self, accumulators):
        merged: dict[str, list[Any]] = {}
        for acc in accumulators:
            self.add_input(merged, acc)
        return merged

    def extract_output(self, acc: dict[str, list[Any]]) -> dict[str, IdfTable]:
        return {key: IdfTable(docs, df) for key, (docs, df) in acc.items()}


class ReadIdfStatistics(beam.PTransform):
    """A statistics file -> one `{statistic key: IdfTable}` of the idf `statistics` the run
    needs (a singleton; the tables are bounded by the vocabulary)."""

    def __init__(self, path: str, statistics: Sequence[ReferenceIdf]) -> None:
        super().__init__()
        self._source = source_of(path, WHAT, StatisticsFileError)
        self._keys = frozenset(s.key for s in statistics)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (pbegin
                | "ReadIdfParquet" >> ReadParquetBatches(
                    self._source, columns=["statistic", "tokenizer", "ngram", "df"])
                | "IdfTables" >> beam.FlatMap(_idf_tables(self._keys))
                | "MergeIdfTables" >> beam.CombineGlobally(_MergeIdfTables()))


class ReadCorpusStatistics(beam.PTransform):
    """A statistics file -> `{docs, df}` as `ShardedCiderStatistics` takes them, for the
    statistics the run needs (rows of other statistics or tokenizers are skipped), with
    the n-grams hashed and re-sharded into `shards`."""

    def __init__(self, path: str, statistics: Sequence[CiderDocumentFrequency],
                 shards: int) -> None:
        super().__init__()
        self._source = source_of(path, WHAT, StatisticsFileError)
        self._index = {(s.key, s.tokenizer): i for i, s in enumerate(statistics)}
        self._shards = shards

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, beam.PCollection]:
        index, shards = self._index, self._shards

        def split(table: Any) -> Iterator[Any]:
            """One Arrow batch of rows -> sizes, and one (hashes, dfs) per shard key."""
            tables: dict[tuple[int, int, int], dict] = {}
            columns = table.to_pydict()
            for statistic, tokenizer, corpus, ngram, df in zip(
                    *(columns[c] for c in COLUMNS), strict=True):
                position = index.get((statistic, tokenizer))
                if position is None:
                    continue
                if ngram is None:
                    yield beam.pvalue.TaggedOutput(DOCS, ((position, corpus), df))
                    continue
                gram = text_gram(ngram)
                tables.setdefault((position, corpus, ngram_shard(gram, shards)), {})[gram] = df
            for key, part in tables.items():
                yield beam.pvalue.TaggedOutput(DF, (key, hashed_table(part)))

        parts = (pbegin
                 | "ReadStatisticsParquet" >> ReadParquetBatches(self._source)
                 | "SplitStatistics" >> beam.FlatMap(split).with_outputs(DOCS, DF))
        return {
            DOCS: parts[DOCS] | "SumSizes" >> beam.CombinePerKey(sum),
            DF: parts[DF] | "CollectShards" >> beam.CombinePerKey(SumDocumentFrequencies()),
        }
