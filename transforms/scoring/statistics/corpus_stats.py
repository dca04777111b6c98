"""The Beam stages that compute CIDEr-D document frequencies per n-gram shard and serve
each batch the frequencies of its own n-grams: the table is never whole.

The document-frequency table grows with the corpus, so no element and no side input holds
it. Rows travel in batches (`RowBatch`, one element per batch: what the reader formed from
consecutive rows of a split, or `BatchByReferences` from keyed rows: reference_batches.py);
for every batch `CiderBatchFn` emits

- `rows`: (batch id, the batch);
- `docs`: (statistic, corpus key) -> documents in the batch (summed: the corpus sizes, a
  handful of numbers, served as a small `AsDict` side input);
- `df`: (statistic, corpus key, shard) -> the batch's partial document frequencies of the
  n-grams hashed to that shard, as two numpy arrays (n-gram hashes, counts), summed per key
  by `SumDocumentFrequencies`, which keeps only n-grams with df >= 2: df 0 and df 1 both
  give log(max(1, df)) = 0, the value CIDEr-D uses for an n-gram it does not find, so they
  change no value;
- `requests`: (statistic, shard) -> (batch id, the sorted hashes of the n-grams of that
  shard the batch's rows read, in any corpus: about 30 per row, and per corpus which of
  them it reads there, a bit each: `BatchTexts.requests`);
- `text_df` (only when the statistics are saved, `--save_corpus_statistics`): the same
  partial frequencies keyed by the n-grams' text, for the file.

`answer_requests` joins each shard's tables (one per corpus) with the shard's requests
(`CoGroupByKey`) and answers each request, per corpus, with which of the n-grams it reads
in that corpus have df >= 2 (a bit each, in its order) and their frequencies (a byte
each, the few of 255 or more apart): most n-grams of a batch are rare, so an answer is a
few bits per requested n-gram, and a reference's n-grams are asked of its own corpus only; the scoring step
regroups the answers with their batch
(`CoGroupByKey` by batch id), makes the batch's requests again to read them, and scores
the batch against a `CiderCorpus` restricted to its n-grams (same values: see
`cider.corpus_of`).

N-grams travel as 64-bit hashes in numpy arrays, sharded and tabled as ngram_hashes.py
makes them (`BatchNgrams`, `by_shard`, `fold_tables`; the chance of a hash collision is
stated there). The largest element is one shard's table: 9-12 bytes per n-gram with
df >= 2, about the whole table / `shards`.

A run whose workers share this machine's files asks nothing: its tables are written to
files and each batch's n-grams are found there where it is scored (`table_files`:
frequency_files.py), the same frequencies with no request or answer between stages.

`frozen` statistics (`--corpus_statistics`) replace the run's own `docs` and `df` with the
ones read from a file (`statistics_file.ReadCorpusStatistics`).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from transforms.metrics.cider import (
    CiderDocumentFrequency,
    corpus_of,
    document_ngrams,
)
from transforms.metrics.lexical import TokenizedExample
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.statistics.batch_texts import BatchTexts, tokenized_batch
from transforms.scoring.statistics.frequency_files import (
    TableFileNames,
    WriteFrequencyTables,
)
from transforms.scoring.statistics.ngram_hashes import (
    add_part,
    by_shard,
    fold_tables,
    found_frequencies,
    lookup,
    narrow_frequencies,
    ngram_shard,
    pack_answer,
    smallest_uint,
    unpack_answer,
)

DOCS = "docs"
DF = "df"
REQUESTS = "requests"
ANSWERS = "answers"
TABLES = "tables"
ROWS = "rows"
TEXT_DF = "text_df"
# Input bytes per document-frequency shard when the number of shards is derived from the
# input size (`shards_for_input`): 16 MB of JSONL holds about 40,000 rows, whose n-grams
# with df >= 2 take a few MB as hashes and counts.
BYTES_PER_SHARD = 16 << 20
MIN_SHARDS = 16
MAX_SHARDS = 1 << 16
# compressed inputs expand about this much (text)
_COMPRESSED_EXPANSION = 5
# How many joins the requests are answered in (`ShardedCiderStatistics`)
REQUEST_JOINS = 8


def is_distributed(statistic: Any) -> bool:
    """Whether a corpus statistic is computed per n-gram shard (CIDEr-D's frequencies)."""
    return isinstance(statistic, CiderDocumentFrequency)


def shards_for_input(files: Sequence[str]) -> int:
    """How many shards the document frequencies of these inputs get: one per
    `BYTES_PER_SHARD` of input (compressed files counted expanded), within
    [`MIN_SHARDS`, `MAX_SHARDS`]; unreadable sizes count as 0."""
    from transforms.scoring.reading.inputs import COMPRESSIONS

    total = 0
    for path in files:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        if path.lower().endswith(tuple(COMPRESSIONS)):
            size *= _COMPRESSED_EXPANSION
        total += size
    return max(MIN_SHARDS, min(MAX_SHARDS, math.ceil(total / BYTES_PER_SHARD)))


class CiderBatchFn(beam.DoFn):
    """A `RowBatch` -> `rows`, `docs`, `df`, `requests` (and `text_df`): module doc.

    Args:
        statistics: the distributed statistics (CiderDocumentFrequency), by position.
        shards: number of n-gram shards.
        count_documents: False when the frequencies come from a file: no `docs`/`df`.
        text_frequencies: also emit `text_df` (the statistics are saved to a file).
        requests: emit `requests` (False: the frequencies are read from files,
            frequency_files.py, and nothing is asked).
    """

    def __init__(self, statistics: Sequence[CiderDocumentFrequency], shards: int,
                 count_documents: bool = True, text_frequencies: bool = False,
                 requests: bool = True) -> None:
        self._statistics = tuple(statistics)
        self._shards = shards
        self._count_documents = count_documents
        self._text = text_frequencies and count_documents
        self._requests = requests

    def process(self, batch: RowBatch) -> Iterator[Any]:
        yield beam.pvalue.TaggedOutput(ROWS, (batch.batch_id, batch))
        examples = [row.example for _, row in batch.rows]
        shards = self._shards
        for index, stat in enumerate(self._statistics):
            tokenized = tokenized_batch(stat, examples)
            texts = BatchTexts(tokenized)
            reads = {}
            for key, document, reads[key], documents in texts.corpora(stat.df_mode):
                if self._count_documents:
                    yield beam.pvalue.TaggedOutput(DOCS, ((index, key), documents))
                    hashes, counts = texts.ngrams.documents(document)
                    counts = smallest_uint(counts)  # at most the batch's rows
                    for shard, part, (part_counts,) in by_shard(hashes, shards, counts):
                        yield beam.pvalue.TaggedOutput(DF, ((index, key, shard),
                                                            (part, part_counts)))
            if self._requests:
                for shard, part, bits in texts.requests_of(reads, shards):
                    yield beam.pvalue.TaggedOutput(REQUESTS, ((index, shard),
                                                              (batch.batch_id, part, bits)))
            if self._text:
                yield from self._text_frequencies(index, stat, tokenized)

    def _text_frequencies(self, index: int, stat: CiderDocumentFrequency,
                          tokenized: Sequence[TokenizedExample | None]) -> Iterator[Any]:
        """The batch's partial frequencies keyed by n-gram (`text_df`, to save them)."""
        texts: dict[int, Counter] = {}
        for tokens in tokenized:
            if tokens is not None:
                for key, doc in document_ngrams(tokens.references, stat.df_mode):
                    texts.setdefault(key, Counter()).update(doc)
        for key, counter in texts.items():
            parts: dict[int, dict] = {}
            for gram, n in counter.items():
                parts.setdefault(ngram_shard(gram, self._shards), {})[gram] = n
            for shard, part in parts.items():
                yield beam.pvalue.TaggedOutput(TEXT_DF, ((index, key, shard), part))


class SumDocumentFrequencies(beam.CombineFn):
    """Partial (hashes, counts) of one shard -> (hashes, dfs) of the n-grams with
    df >= 2, hashes sorted (numpy arrays)."""

    def create_accumulator(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return []

    def add_input(self, accumulator: list, part: tuple[np.ndarray, np.ndarray]) -> list:
        return add_part(accumulator, part)

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        merged = [part for acc in accumulators for part in acc]
        return fold_tables(merged) if len(merged) > 1 else merged

    def extract_output(self, accumulator: list) -> tuple[np.ndarray, np.ndarray]:
        if not accumulator:
            return np.empty(0, np.uint64), np.empty(0, np.uint8)
        ((hashes, counts),) = fold_tables(accumulator)
        keep = counts >= 2
        return hashes[keep], counts[keep]


class SumTextFrequencies(beam.CombineFn):
    """Partial {n-gram: count} of one shard -> {n-gram: df} with df >= 2 only (the
    frequencies a statistics file holds)."""

    def create_accumulator(self) -> Counter:
        return Counter()

    def add_input(self, accumulator: Counter, counts: dict) -> Counter:
        accumulator.update(counts)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Counter]) -> Counter:
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for acc in accumulators:
            merged.update(acc)
        return merged

    def extract_output(self, accumulator: Counter) -> dict:
        return {g: d for g, d in accumulator.items() if d >= 2}


def answer_requests(element: tuple[Any, dict[str, Iterable[Any]]]) -> Iterator[Any]:
    """((statistic, shard), {df: [(corpus key, (hashes, dfs))], requests: [(batch id,
    hashes, {corpus key: bits of the hashes read there})]}) -> (batch id, (statistic,
    shard, {corpus key: (found, narrow, wide)} as `pack_answer` packs it)), for each corpus
    whose table holds any n-gram the request reads in it: `found`, which of those n-grams
    it holds (df >= 2), one bit each in the order of the request (`np.packbits`; the batch
    makes the request again: `batch_corpora`), and their frequencies in that order, a byte
    each, the few of 255 or more apart (`narrow_frequencies`)."""
    (index, shard), grouped = element
    parts: dict[int, list] = {}
    for key, table in grouped[DF]:  # one table per corpus key (none without a reference)
        parts.setdefault(key, []).append(table)
    tables = {key: fold_tables(tables)[0] for key, tables in parts.items()}
    for batch_id, hashes, reads in grouped[REQUESTS]:
        answer = {}
        for key in reads.keys:
            if key not in tables:
                continue
            table, dfs = tables[key]
            found, at = lookup(table, hashes[reads.read_in(key, len(hashes))])
            if found.any():
                answer[key] = (np.packbits(found), *narrow_frequencies(dfs[at[found]]))
        yield batch_id, (index, shard, pack_answer(answer))


def answered_frequencies(answers: Iterable[tuple[int, int, bytes]]):
    """The frequencies of a batch's requests from the answers `answer_requests` gave it,
    as `batch_corpora` reads them: (statistic, shard, the request's sorted hashes,
    `ReadBits`) -> (corpus key, the hashes read there with df >= 2, their dfs as int64)
    for each corpus that answered. RuntimeError when a request has no answer or an answer
    does not match its request."""
    answered = {(index, shard): unpack_answer(answer) for index, shard, answer in answers}

    def frequencies(index: int, shard: int, part: np.ndarray, reads: Any
                    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        answer = answered.get((index, shard))
        if answer is None:
            raise RuntimeError(f"no frequencies came back for the batch's n-grams of "
                               f"statistic {index}, shard {shard}")
        for key, frequency in answer.items():
            try:
                read = reads.read_in(key, len(part))
                if read is None:
                    raise RuntimeError(f"corpus {key} answered, which it reads nothing of")
                asked = part[read]
                found, dfs = found_frequencies(frequency, len(asked))
            except RuntimeError as e:
                raise RuntimeError(f"the frequencies of the batch's n-grams (statistic "
                                   f"{index}, shard {shard}) do not match its request: "
                                   f"{e}") from e
            yield key, asked[found], dfs

    return frequencies


def batch_corpora(statistics: Sequence[CiderDocumentFrequency], examples: Sequence[Any],
                  frequencies: Any, docs: dict[tuple[int, int], int], shards: int
                  ) -> dict[str, dict[int, Any]]:
    """The `corpus_stats` entries of one batch: statistic key -> {corpus key: CiderCorpus}
    restricted to n-grams of the batch (every one it reads with df >= 2); corpus sizes
    from `docs`. The batch's requests are made again here as `CiderBatchFn` made them
    (`shards` as there), and `frequencies` gives what each corpus holds of each:
    `answered_frequencies` (the sharded join) or `frequency_files.table_frequencies`."""
    out: dict[str, dict[int, Any]] = {}
    for index, stat in enumerate(statistics):
        texts = BatchTexts(tokenized_batch(stat, examples))
        hashes, first = texts.ngrams.first_occurrences()
        known: dict[int, list] = {}
        for shard, part, reads in texts.requests(stat.df_mode, shards):
            for key, found, dfs in frequencies(index, shard, part, reads):
                known.setdefault(key, []).append((found, dfs))
        tables = {}
        for key, found in known.items():
            at = np.searchsorted(hashes, np.concatenate([h for h, _ in found]))
            tables[key] = dict(zip(texts.ngrams.grams_at(first[at]),
                                   np.concatenate([d for _, d in found]).tolist(),
                                   strict=True))
        corpora = out.setdefault(stat.key, {})
        for (i, key), n in docs.items():
            if i == index:
                corpora[key] = corpus_of(n, tables.get(key, {}))
    return out


class ShardedCiderStatistics(beam.PTransform):
    """`RowBatch`es -> {`rows`: (batch id, batch), `docs`: ((statistic, corpus key),
    documents)} and the frequencies of each batch's n-grams: `df`, ((statistic, corpus
    key, shard), (hashes, dfs >= 2)), and `answers`, (batch id, (statistic, shard, the
    packed answer to the request)); or with `table_files`, `tables`: ((statistic, corpus
    key, shard), the file of its summed table: frequency_files.py); with
    `text_frequencies`, `text_df`: ((statistic, corpus key, shard), {n-gram: df >= 2})
    for the statistics file.

    Args:
        statistics: the distributed statistics.
        shards: number of n-gram shards.
        frozen: None, or the `{docs, df}` PCollections of saved statistics to use instead
            of the run's own.
        text_frequencies: also sum the frequencies by n-gram text (to save them).
        table_files: None (the sharded join), or the names of the table files
            (`frequency_files.TableFileNames`: for workers that share this machine's
            files).
    """

    def __init__(self, statistics: Sequence[CiderDocumentFrequency], shards: int,
                 frozen: dict[str, beam.PCollection] | None = None,
                 text_frequencies: bool = False,
                 table_files: TableFileNames | None = None) -> None:
        super().__init__()
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self._statistics = tuple(statistics)
        self._shards = shards
        self._frozen = frozen
        self._text = text_frequencies and frozen is None
        self._files = table_files

    def expand(self, batches: beam.PCollection) -> dict[str, beam.PCollection]:
        parts = batches | "SplitBatchForStatistics" >> beam.ParDo(CiderBatchFn(
            self._statistics, self._shards, count_documents=self._frozen is None,
            text_frequencies=self._text, requests=self._files is None)
        ).with_outputs(DOCS, DF, REQUESTS, ROWS, TEXT_DF)
        if self._frozen is None:
            docs = parts[DOCS] | "SumDocuments" >> beam.CombinePerKey(sum)
        else:
            docs = self._frozen[DOCS]
        out = {ROWS: parts[ROWS], DOCS: docs}
        if self._text:
            out[TEXT_DF] = parts[TEXT_DF] | "SumTextFrequencies" >> beam.CombinePerKey(
                SumTextFrequencies())
        if self._files is not None:  # the counts go to files where they are made
            out[TABLES] = (parts[DF] if self._frozen is None else self._frozen[DF]
                           ) | "WriteFrequencyTables" >> WriteFrequencyTables(
                               self._files, summed=self._frozen is not None)
        else:
            out[DF] = (parts[DF] | "SumDocumentFrequencies" >> beam.CombinePerKey(
                SumDocumentFrequencies())) if self._frozen is None else self._frozen[DF]
            out[ANSWERS] = self._answers(parts[REQUESTS], out[DF])
        return out

    def _answers(self, requests: beam.PCollection, df: beam.PCollection) -> beam.PCollection:
        """Each request joined with its shard's tables and answered (`answer_requests`).

        The requests are the largest data here (about 8 bytes per n-gram of every row):
        joined in `REQUEST_JOINS` parts by shard, as many groupings, so that a runner that
        holds a grouping whole in memory (the in-process one, which also copies it twice
        when the next stage reads it) holds one part at a time."""
        joins = min(REQUEST_JOINS, self._shards)
        by_part = lambda element, parts: element[0][1] % parts  # noqa: E731
        requests = requests | "PartRequests" >> beam.Partition(by_part, joins)
        tables = (df
                  | "KeyTablesByShard" >> beam.Map(
                      lambda kv: ((kv[0][0], kv[0][2]), (kv[0][1], kv[1])))
                  | "PartTables" >> beam.Partition(by_part, joins))
        return [
            {DF: tables[i], REQUESTS: requests[i]}
            | f"GroupRequestsByShard{i}" >> beam.CoGroupByKey()
            | f"AnswerRequests{i}" >> beam.FlatMap(answer_requests)
            for i in range(joins)] | "AllAnswers" >> beam.Flatten()
