"""A batch's texts as CIDEr-D's statistics read them: tokenised (`tokenized_batch`), then
numbered for `BatchNgrams` with, per corpus, the documents they add and the texts read in
it (`BatchTexts.corpora`), and the n-grams the batch asks each n-gram shard for
(`BatchTexts.requests`). corpus_stats.py makes both sides of the join with them: the
statistics step from the batch as read, the scoring step from the same batch again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from transforms.metrics.base import MetricInputError
from transforms.metrics.cider import POOLED, CiderDocumentFrequency
from transforms.metrics.lexical import TokenizedExample, tokenize_examples
from transforms.scoring.statistics.ngram_hashes import BatchNgrams, by_shard


def tokenized_batch(stat: CiderDocumentFrequency, examples: Sequence[Any]
                    ) -> list[TokenizedExample | None]:
    """The batch tokenised with the statistic's tokenizer; None for an example the
    tokenizer rejects (it adds nothing here; the scoring step dead-letters it)."""
    try:
        return list(tokenize_examples(examples, stat.tokenizer, stat.java))
    except MetricInputError:
        out: list[TokenizedExample | None] = []
        for ex in examples:
            try:
                out.extend(tokenize_examples([ex], stat.tokenizer, stat.java))
            except MetricInputError:
                out.append(None)
        return out


class BatchTexts:
    """A tokenised batch's texts numbered for `BatchNgrams`: per example its prediction,
    then its references (examples the tokenizer rejected have none)."""

    def __init__(self, tokenized: Sequence[TokenizedExample | None]) -> None:
        texts: list[str] = []
        self.predictions: list[int] = []
        self.references: list[list[int]] = []
        for tokens in tokenized:
            if tokens is None:
                continue
            self.predictions.append(len(texts))
            texts.append(tokens.prediction)
            self.references.append(list(range(len(texts), len(texts) + len(tokens.references))))
            texts.extend(tokens.references)
        self.count = len(texts)
        self.ngrams = BatchNgrams(texts)

    def corpora(self, df_mode: str) -> Iterator[tuple[int, np.ndarray, np.ndarray, int]]:
        """(corpus key, document of each text (-1: none), texts read in it, documents)
        per corpus the batch adds to or reads (see `cider.document_ngrams` and
        `cider.needed_ngrams`)."""
        if df_mode == "pooled":
            document = np.full(self.count, -1, dtype=np.int64)
            for example, references in enumerate(self.references):
                document[references] = example
            read = np.ones(self.count, dtype=bool)
            if self.references:
                yield POOLED, document, read, len(self.references)
            return
        positions = max((len(r) for r in self.references), default=0)
        for j in range(positions):
            document = np.full(self.count, -1, dtype=np.int64)
            read = np.zeros(self.count, dtype=bool)
            documents = 0
            for prediction, references in zip(self.predictions, self.references, strict=True):
                if len(references) > j:
                    document[references[j]] = documents
                    documents += 1
                    read[prediction] = read[references[j]] = True
            yield j, document, read, documents

    def requests(self, df_mode: str, shards: int
                 ) -> Iterator[tuple[int, np.ndarray, ReadBits]]:
        """(shard, the sorted hashes of that shard's n-grams the batch reads in any corpus,
        which of them it reads in each corpus: `ReadBits`) per shard. A prediction's
        n-grams are read in the corpus of each of its references, a reference's in its own
        (per_position); every one in the pooled corpus."""
        return self.requests_of({key: read for key, _, read, _ in self.corpora(df_mode)}, shards)

    def requests_of(self, reads: dict[int, np.ndarray], shards: int
                    ) -> Iterator[tuple[int, np.ndarray, ReadBits]]:
        """`requests`, from the texts read in each corpus as `corpora` gave them."""
        keys = list(reads)
        read_any = np.zeros(self.count, dtype=bool)
        for read in reads.values():
            read_any |= read
        occurrences = read_any[self.ngrams.texts]
        texts = self.ngrams.texts[occurrences]
        # the same hashes as `ngrams.distinct(read_any)`, and where each occurrence is
        wanted, at = np.unique(self.ngrams.hashes[occurrences], return_inverse=True)
        masks = np.zeros((len(wanted), len(keys)), dtype=bool)
        for column, read in enumerate(reads.values()):
            masks[at[read[texts]], column] = True
        for shard, part, (rows,) in by_shard(wanted, shards, masks):
            yield shard, part, ReadBits(tuple(keys), np.packbits(rows, axis=0))


class ReadBits(NamedTuple):
    """Which of a request's n-grams are read in each corpus: `bits[:, j]`, one bit per
    n-gram in the request's order (`np.packbits` along the n-grams), for corpus `keys[j]`."""

    keys: tuple[int, ...]
    bits: np.ndarray

    def read_in(self, key: int, requested: int) -> np.ndarray | None:
        """The mask of the `requested` n-grams read in corpus `key`; None: none are."""
        if key not in self.keys:
            return None
        return np.unpackbits(self.bits[:, self.keys.index(key)], count=requested).view(bool)
