"""Shared plumbing of the coco-caption metric families (bleu, rouge, cider, meteor).

Each family validates its columns and tokenizer options when built, PTB-tokenises the
predictions and references of a batch once, and scores each reference separately; the
multi-reference value is the maximum over the references (the KPQA / SQuAD convention).
"""

from __future__ import annotations

import abc
import functools
from collections import Counter, _count_elements
from collections.abc import Sequence
from typing import Any, NamedTuple

from transforms.metrics.base import MetricInputError, QAExample, TextMetric, format_signature
from transforms.text import ptb

COCO_IMPL = "pycocoevalcap-1.2"
MAX_N = 4


class TokenizedExample(NamedTuple):
    """PTB token strings of one example (coco form: tokens joined by single spaces)."""

    prediction: str
    references: tuple[str, ...]


def tokenize_texts(texts: Sequence[str], backend: str = "python", java: str = "java") -> list[str]:
    """PTB token strings of texts, with tokenizer failures reported as MetricInputError."""
    for text in texts:
        if not isinstance(text, str):
            raise MetricInputError(f"text must be a string, got {type(text).__name__}")
    try:
        return ptb.tokenize(texts, backend=backend, java=java)
    except UnicodeEncodeError as err:
        raise MetricInputError(f"text cannot be encoded as UTF-8: {err}") from err
    except ptb.PTBTokenizerError as err:
        raise MetricInputError(f"PTB tokenizer failed on this batch: {err}") from err


def clear_caches() -> None:
    """Forgets memoised tokenisations and n-gram counts (benchmarks clear between batches;
    the per-word lexer memo, a vocabulary cache, is kept)."""
    ptb.clear_cache()
    text_ngrams.cache_clear()


def ngram_counts(words: Sequence[str], n: int = MAX_N) -> list[Counter]:
    """Per order k = 1..n, the Counter of k-grams of `words` (unigrams as plain strings,
    longer n-grams as tuples), each in order of first occurrence as coco's `precook`."""
    counts = []
    for k in range(1, n + 1):
        c: Counter = Counter()
        # collections' own C counting loop; Counter(iterable) adds a slow ABC check per call
        _count_elements(c, words if k == 1 else zip(*(words[i:] for i in range(k))))
        counts.append(c)
    return counts


# A batch of 512 rows has about 1,500 texts; the memo serves the metrics of one batch
# (and a question's references across its rows), not the whole corpus: at about 3.5 KB
# an entry, 65,536 entries held 230 MB in every worker process.
_NGRAM_CACHE_SIZE = 1 << 13


@functools.lru_cache(maxsize=_NGRAM_CACHE_SIZE)
def text_ngrams(text: str) -> tuple[Counter, ...]:
    """`ngram_counts(text.split(), 4)`, memoised (BLEU and CIDEr of a batch share it).

    The Counters are shared: callers must not modify them.
    """
    return tuple(ngram_counts(text.split(), MAX_N))


def tokenize_examples(
    examples: Sequence[QAExample], backend: str = "python", java: str = "java"
) -> list[TokenizedExample]:
    """PTB-tokenises the predictions and references of a batch in one call.

    Raises:
        MetricInputError: an example without references or with a non-string text.
    """
    texts: list[str] = []
    for ex in examples:
        if not ex.references:
            raise MetricInputError("example has no references")
        texts.append(ex.prediction)
        texts.extend(ex.references)
    tokens = tokenize_texts(texts, backend=backend, java=java)
    out = []
    pos = 0
    for ex in examples:
        n = 1 + len(ex.references)
        out.append(TokenizedExample(tokens[pos], tuple(tokens[pos + 1: pos + n])))
        pos += n
    return out


class LexicalMetric(TextMetric):
    """Base of the coco-caption families.

    Args:
        columns: the requested subset of the family's `ALL_COLUMNS`.
        tokenizer: PTB backend, "python" (default) or "jar".
        java: java executable (jar tokenizer fallback, METEOR).

    Raises:
        ValueError: unknown or empty columns, an unknown tokenizer.
    """

    ALL_COLUMNS: tuple[str, ...] = ()
    VERSION = "1"

    def __init__(
        self, columns: Sequence[str] | None = None, tokenizer: str = "python", java: str = "java"
    ) -> None:
        columns = tuple(self.ALL_COLUMNS if columns is None else columns)
        unknown = [c for c in columns if c not in self.ALL_COLUMNS]
        if unknown or not columns:
            raise ValueError(
                f"{self.family} columns must be a non-empty subset of {self.ALL_COLUMNS}, "
                f"got {columns!r}"
            )
        if tokenizer not in ptb.BACKENDS:
            raise ValueError(f"tokenizer must be one of {ptb.BACKENDS}, got {tokenizer!r}")
        if not isinstance(java, str) or not java:
            raise ValueError(f"java must be a non-empty executable name, got {java!r}")
        self.columns = tuple(c for c in self.ALL_COLUMNS if c in columns)
        self.tokenizer = tokenizer
        self.java = java

    def _details(self) -> dict[str, str]:
        """Family-specific options for the signature."""
        return {}

    def signature(self) -> dict[str, str]:
        fields = {"impl": COCO_IMPL, "tok": ptb.TOKENIZER_ID, "refs": "max-each",
                  **self._details()}
        return {c: format_signature(c, self.VERSION, fields) for c in self.columns}

    def tokenize(self, examples: Sequence[QAExample]) -> list[TokenizedExample]:
        """PTB token strings of a batch, with this metric's tokenizer options."""
        return tokenize_examples(examples, backend=self.tokenizer, java=self.java)

    def score_batch(
        self, examples: Sequence[QAExample], corpus_stats: dict[str, Any]
    ) -> list[dict[str, float]]:
        return self.score_tokenized(self.tokenize(examples), corpus_stats)

    @abc.abstractmethod
    def score_tokenized(
        self, examples: Sequence[TokenizedExample], corpus_stats: dict[str, Any]
    ) -> list[dict[str, float]]:
        """Scores already tokenised examples; one {column: value} per example."""
