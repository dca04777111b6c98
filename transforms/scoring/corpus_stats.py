"""CIDEr-D document frequencies computed and served per n-gram shard, never whole.

The document-frequency table grows with the corpus, so no element and no side input holds
it. Rows travel in batches (`BatchElements`); for every batch `CiderBatchFn` emits

- `docs`: (statistic, corpus key) -> documents in the batch (summed: the corpus sizes, a
  handful of numbers, served as a small `AsDict` side input);
- `df`: (statistic, corpus key, shard) -> the batch's partial document frequencies of the
  n-grams hashed to that shard (summed per key by `SumDocumentFrequencies`, which keeps
  only n-grams with df >= 2: df 0 and df 1 both give log(max(1, df)) = 0, the value CIDEr-D
  uses for an n-gram it does not find, so they change no value);
- `requests`: (statistic, corpus key, shard) -> (batch id, the n-grams of that shard the
  batch's rows read);
- `rows`: (batch id, the batch).

`AnswerRequests` joins each shard's table with the shard's requests (`CoGroupByKey`) and
answers each request with the frequencies of its own n-grams; `ScoreBatchesFn` regroups
the answers with their batch (`CoGroupByKey` by batch id) and scores it against a
`CiderCorpus` restricted to the batch's n-grams (same values: see `cider.corpus_of`).
The largest element is one shard's table: about the whole table / `shards`.

`frozen` statistics (`--corpus_statistics`) replace the run's own `docs` and `df` with the
ones read from a file (`statistics_file.ReadCorpusStatistics`).
"""

from __future__ import annotations

import math
import os
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam

from transforms.metrics.base import MetricInputError
from transforms.metrics.cider import (
    CiderDocumentFrequency,
    corpus_of,
    document_ngrams,
    needed_ngrams,
)
from transforms.metrics.lexical import tokenize_examples

DOCS = "docs"
DF = "df"
REQUESTS = "requests"
ROWS = "rows"
# Input bytes per document-frequency shard when the number of shards is derived from the
# input size (`shards_for_input`): a shard's table then stays in the low MBs.
BYTES_PER_SHARD = 1 << 20
MIN_SHARDS = 16
MAX_SHARDS = 1 << 16
# compressed inputs expand about this much (text)
_COMPRESSED_EXPANSION = 5


def is_distributed(statistic: Any) -> bool:
    """Whether a corpus statistic is computed per n-gram shard (CIDEr-D's frequencies)."""
    return isinstance(statistic, CiderDocumentFrequency)


def gram_text(gram: str | tuple[str, ...]) -> str:
    """An n-gram as text: its tokens joined by single spaces (unigrams are plain strings in
    `bleu.ngram_counts`, longer n-grams tuples; tokens hold no whitespace)."""
    return gram if isinstance(gram, str) else " ".join(gram)


def text_gram(text: str) -> str | tuple[str, ...]:
    """The n-gram key `gram_text` wrote: a unigram as a str, longer ones as tuples."""
    tokens = text.split(" ")
    return tokens[0] if len(tokens) == 1 else tuple(tokens)


_WORD_HASH: dict[str, int] = {}
_WORD_HASH_MAX = 1 << 20


def _word_hash(word: str) -> int:
    value = _WORD_HASH.get(word)
    if value is None:
        if len(_WORD_HASH) >= _WORD_HASH_MAX:
            _WORD_HASH.clear()
        value = _WORD_HASH[word] = zlib.crc32(word.encode("utf-8", "surrogatepass"))
    return value


def ngram_shard(gram: str | tuple[str, ...], shards: int) -> int:
    """The shard of an n-gram, from the CRC-32 of its words (memoised per word), stable
    across processes and runs (Python's own hash of a str is not)."""
    if isinstance(gram, str):
        return _word_hash(gram) % shards
    value = 0
    for word in gram:
        value = (value * 1_000_003 + _word_hash(word)) & 0xFFFFFFFFFFFF
    return value % shards


def shards_for_input(files: Sequence[str]) -> int:
    """How many shards the document frequencies of these inputs get: one per
    `BYTES_PER_SHARD` of input (compressed files counted expanded), within
    [`MIN_SHARDS`, `MAX_SHARDS`]; unreadable sizes count as 0."""
    from transforms.scoring.inputs import COMPRESSIONS

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


def reference_group(references: Sequence[str], groups: int) -> int:
    """The batching group of a row: a stable hash of its references, so that rows with the
    same references (one question, several systems) share a batch and its n-grams are
    requested and counted once per batch (`ChunkGroups`)."""
    value = 0
    for reference in references:
        value = zlib.crc32(reference.encode("utf-8", "surrogatepass"), value)
    return value % groups


class ChunkGroups(beam.DoFn):
    """(group, rows) -> lists of at most `size` rows, streamed from the group (a group may
    be large: it is never held whole)."""

    def __init__(self, size: int) -> None:
        self._size = size

    def process(self, element: tuple[int, Iterable[Any]]) -> Iterator[list]:
        _, rows = element
        chunk: list = []
        for row in rows:
            chunk.append(row)
            if len(chunk) == self._size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


class BatchByReferences(beam.PTransform):
    """`(row_key, ScoringRow)` -> batches (lists) of at most `size` rows, rows with equal
    references together (`reference_group`): `groups` keys, so about rows / groups rows
    per key."""

    def __init__(self, size: int, groups: int) -> None:
        super().__init__()
        if size < 1 or groups < 1:
            raise ValueError(f"size and groups must be >= 1, got {size}, {groups}")
        self._size = size
        self._groups = groups

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        groups = self._groups
        return (rows
                | "KeyByReferences" >> beam.Map(
                    lambda kv: (reference_group(kv[1].example.references, groups), kv))
                | "GroupByReferences" >> beam.GroupByKey()
                | "ChunkGroups" >> beam.ParDo(ChunkGroups(self._size)))


class CiderBatchFn(beam.DoFn):
    """A batch of `(row_key, ScoringRow)` -> `rows`, `docs`, `df` and `requests` (module doc).

    Args:
        statistics: the distributed statistics (CiderDocumentFrequency), by position.
        shards: number of n-gram shards.
        count_documents: False when the frequencies come from a file: no `docs`/`df`.

    An example whose texts the tokenizer rejects adds nothing here; the scoring step
    dead-letters it (`metric_input_error`).
    """

    def __init__(self, statistics: Sequence[CiderDocumentFrequency], shards: int,
                 count_documents: bool = True) -> None:
        self._statistics = tuple(statistics)
        self._shards = shards
        self._count_documents = count_documents

    def _tokenized(self, stat: CiderDocumentFrequency, examples: list) -> list:
        try:
            return tokenize_examples(examples, stat.tokenizer, stat.java)
        except MetricInputError:
            out = []
            for ex in examples:
                try:
                    out.extend(tokenize_examples([ex], stat.tokenizer, stat.java))
                except MetricInputError:
                    out.append(None)
            return out

    def process(self, batch: Sequence[tuple[str, Any]]) -> Iterator[Any]:
        batch = list(batch)
        batch_id = batch[0][0]
        yield beam.pvalue.TaggedOutput(ROWS, (batch_id, batch))
        examples = [row.example for _, row in batch]
        shards = self._shards
        for index, stat in enumerate(self._statistics):
            # whole-batch Counters and sets first (C-speed updates), split by shard once
            # per distinct n-gram at the end
            docs: Counter = Counter()
            counts: dict[int, Counter] = {}
            wanted: dict[int, set] = {}
            for tokens in self._tokenized(stat, examples):
                if tokens is None:
                    continue
                if self._count_documents:
                    for key, doc in document_ngrams(tokens.references, stat.df_mode):
                        docs[key] += 1
                        counter = counts.get(key)
                        if counter is None:
                            counter = counts[key] = Counter()
                        counter.update(doc)
                for key, grams in needed_ngrams(tokens.prediction, tokens.references,
                                                stat.df_mode).items():
                    target = wanted.get(key)
                    if target is None:
                        wanted[key] = grams
                    else:
                        target.update(grams)
            shard_of: dict = {}
            for key, n in docs.items():
                yield beam.pvalue.TaggedOutput(DOCS, ((index, key), n))
            for key, counter in counts.items():
                parts: dict[int, dict] = {}
                for gram, n in counter.items():
                    shard = shard_of.get(gram)
                    if shard is None:
                        shard = shard_of[gram] = ngram_shard(gram, shards)
                    part = parts.get(shard)
                    if part is None:
                        part = parts[shard] = {}
                    part[gram] = n
                for shard, part in parts.items():
                    yield beam.pvalue.TaggedOutput(DF, ((index, key, shard), part))
            for key, grams in wanted.items():
                requested: dict[int, list] = {}
                for gram in grams:
                    shard = shard_of.get(gram)
                    if shard is None:
                        shard = shard_of[gram] = ngram_shard(gram, shards)
                    part = requested.get(shard)
                    if part is None:
                        part = requested[shard] = []
                    part.append(gram)
                for shard, part in requested.items():
                    yield beam.pvalue.TaggedOutput(REQUESTS,
                                                   ((index, key, shard), (batch_id, part)))


class SumDocumentFrequencies(beam.CombineFn):
    """Partial frequency Counters of one shard -> {n-gram: df} with df >= 2 only."""

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
    """(shard key, {df: [table], requests: [(batch id, n-grams)]}) ->
    (batch id, (statistic, corpus key, {n-gram: df} of the requested n-grams with df >= 2))."""
    (index, key, _), grouped = element
    table: dict = {}
    for part in grouped[DF]:  # one table per shard key (none when no reference has one)
        table = part if not table else {**table, **part}
    get = table.get
    for batch_id, grams in grouped[REQUESTS]:
        found = {}
        for gram in grams:
            df = get(gram)
            if df is not None:
                found[gram] = df
        yield batch_id, (index, key, found)


def batch_corpora(statistics: Sequence[CiderDocumentFrequency],
                  answers: Iterable[tuple[int, int, dict]], docs: dict[tuple[int, int], int]
                  ) -> dict[str, dict[int, Any]]:
    """The `corpus_stats` entries of one batch: statistic key -> {corpus key: CiderCorpus}
    restricted to the n-grams the batch asked for; corpus sizes from `docs`."""
    merged: dict[tuple[int, int], dict] = {}
    for index, key, found in answers:
        merged.setdefault((index, key), {}).update(found)
    out: dict[str, dict[int, Any]] = {stat.key: {} for stat in statistics}
    for (index, key), n in docs.items():
        out[statistics[index].key][key] = corpus_of(n, merged.get((index, key), {}))
    return out


class ShardedCiderStatistics(beam.PTransform):
    """Batches of rows -> {`rows`: (batch id, batch), `answers`: (batch id, (statistic,
    corpus key, {n-gram: df})), `docs`: ((statistic, corpus key), documents), `df`:
    ((statistic, corpus key, shard), {n-gram: df >= 2})}.

    Args:
        statistics: the distributed statistics.
        shards: number of n-gram shards.
        frozen: None, or the `{docs, df}` PCollections of saved statistics to use instead
            of the run's own.
    """

    def __init__(self, statistics: Sequence[CiderDocumentFrequency], shards: int,
                 frozen: dict[str, beam.PCollection] | None = None) -> None:
        super().__init__()
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self._statistics = tuple(statistics)
        self._shards = shards
        self._frozen = frozen

    def expand(self, batches: beam.PCollection) -> dict[str, beam.PCollection]:
        parts = batches | "SplitBatchForStatistics" >> beam.ParDo(CiderBatchFn(
            self._statistics, self._shards, count_documents=self._frozen is None)
        ).with_outputs(DOCS, DF, REQUESTS, ROWS)
        if self._frozen is None:
            docs = parts[DOCS] | "SumDocuments" >> beam.CombinePerKey(sum)
            df = parts[DF] | "SumDocumentFrequencies" >> beam.CombinePerKey(
                SumDocumentFrequencies())
        else:
            docs, df = self._frozen[DOCS], self._frozen[DF]
        answers = (
            {DF: df, REQUESTS: parts[REQUESTS]}
            | "GroupRequestsByShard" >> beam.CoGroupByKey()
            | "AnswerRequests" >> beam.FlatMap(answer_requests))
        return {ROWS: parts[ROWS], "answers": answers, DOCS: docs, DF: df}
