"""Frozen corpus statistics: a run's CIDEr-D document frequencies as a Parquet file
(`--save_corpus_statistics`), and scoring against such a file (`--corpus_statistics`).

One row per (statistic, corpus, n-gram):

    statistic  string   the statistic key, e.g. "cider_df:per_position"
    tokenizer  string   the PTB backend the n-grams were counted with ("python" | "jar")
    corpus     int32    reference position (0-based), or -1 for the pooled corpus
    ngram      string   the n-gram's tokens joined by single spaces; null on the row that
                        holds the corpus size
    df         int64    documents holding the n-gram; on the size row: the number of
                        documents (references at that position, or examples when pooled)

Only n-grams with df >= 2 are written: df 0 and 1 both weigh log(max(1, df)) = 0, so a
file without them scores exactly as the full table does (see `cider.corpus_of`).

A scoring run's corpus-level signatures name where the statistics came from: `stats:run`
(the run's own input) or `stats:file:<sha256 of the file, 16 hex digits>`
(`statistics_signature`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam

from transforms.metrics.cider import CiderDocumentFrequency
from transforms.scoring.corpus_stats import (
    DF,
    DOCS,
    SumDocumentFrequencies,
    gram_text,
    ngram_shard,
    text_gram,
)

COLUMNS = ("statistic", "tokenizer", "corpus", "ngram", "df")


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
        raise ValueError(f"--corpus_statistics {path!r} cannot be read: {e}") from e
    return digest.hexdigest()[:16]


def file_statistics(path: str) -> set[tuple[str, str]]:
    """The (statistic key, tokenizer) pairs a statistics file holds (reads two columns).

    Raises:
        ValueError: not a statistics file (other columns).
    """
    import pyarrow.parquet as pq
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path, compression_type="uncompressed") as f:
        parquet = pq.ParquetFile(f)
        names = parquet.schema_arrow.names
        if tuple(names) != COLUMNS:
            raise ValueError(f"--corpus_statistics {path!r} is not a corpus statistics file: "
                             f"columns {names}, expected {list(COLUMNS)}")
        table = parquet.read(columns=["statistic", "tokenizer"])
    pairs = table.group_by(["statistic", "tokenizer"]).aggregate([]).to_pylist()
    return {(p["statistic"], p["tokenizer"]) for p in pairs}


def check_statistics_file(path: str, statistics: Sequence[CiderDocumentFrequency]) -> str:
    """Checks that the file holds every statistic the run needs; returns its digest.

    Raises:
        ValueError: the file cannot be read, is not a statistics file, or lacks one.
    """
    digest = file_digest(path)
    held = file_statistics(path)
    for stat in statistics:
        if (stat.key, stat.tokenizer) not in held:
            raise ValueError(
                f"--corpus_statistics {path!r} holds no {stat.key} statistics counted with "
                f"the {stat.tokenizer!r} tokenizer; it holds {sorted(held)}")
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


class WriteCorpusStatistics(beam.PTransform):
    """`{docs, df}` of `ShardedCiderStatistics` -> the Parquet file at `path` (one file)."""

    def __init__(self, path: str, statistics: Sequence[CiderDocumentFrequency]) -> None:
        super().__init__()
        self._path = path
        self._statistics = tuple(statistics)

    def expand(self, parts: dict[str, beam.PCollection]) -> beam.PCollection:
        docs_records, df_records = _records(self._statistics)
        records = ((parts[DOCS] | "SizeRecords" >> beam.FlatMap(docs_records),
                    parts[DF] | "FrequencyRecords" >> beam.FlatMap(df_records))
                   | "AllRecords" >> beam.Flatten())
        return records | "WriteStatisticsParquet" >> beam.io.WriteToParquet(
            self._path, schema(), num_shards=1, shard_name_template="")


class ReadCorpusStatistics(beam.PTransform):
    """A statistics file -> `{docs, df}` as `ShardedCiderStatistics` takes them, for the
    statistics the run needs (rows of other statistics or tokenizers are skipped), with
    the n-grams re-sharded into `shards`."""

    def __init__(self, path: str, statistics: Sequence[CiderDocumentFrequency],
                 shards: int) -> None:
        super().__init__()
        self._path = path
        self._index = {(s.key, s.tokenizer): i for i, s in enumerate(statistics)}
        self._shards = shards

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, beam.PCollection]:
        index, shards = self._index, self._shards

        def split(table: Any) -> Iterator[Any]:
            """One Arrow batch of rows -> sizes, and one {n-gram: df} per shard key."""
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
                yield beam.pvalue.TaggedOutput(DF, (key, part))

        parts = (pbegin
                 | "ReadStatisticsParquet" >> beam.io.ReadFromParquetBatched(self._path)
                 | "SplitStatistics" >> beam.FlatMap(split).with_outputs(DOCS, DF))
        return {
            DOCS: parts[DOCS] | "SumSizes" >> beam.CombinePerKey(sum),
            DF: parts[DF] | "CollectShards" >> beam.CombinePerKey(SumDocumentFrequencies()),
        }
