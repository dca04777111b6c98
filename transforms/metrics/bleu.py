"""BLEU-1..4 as coco-caption's per-sentence scores (`BleuScorer`, option "closest").

Per sentence, with one reference: clipped n-gram matches `correct[k]` and candidate n-gram
counts `guess[k]`; BLEU-k = prod_{i<=k} ((correct_i + 1e-15) / (guess_i + 1e-9))^(1/k),
times exp(1 - 1/ratio) when ratio = (testlen + 1e-15) / (reflen + 1e-9) < 1. The floating
point operations follow coco's order, so values are bit-identical. Tokens are the
whitespace split of the PTB strings. Several references: each is scored on its own (as
KPQA did, one single-reference corpus per reference column) and each BLEU-k takes its
maximum over them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple

from transforms.metrics.lexical import (
    MAX_N,
    LexicalMetric,
    TokenizedExample,
    ngram_counts,
    text_ngrams,
)

# coco-caption's smoothing: (correct + TINY) / (guess + SMALL), and the length ratio the same
# way (KPQA's BLEU-1 keeps it too).
TINY = 1e-15
SMALL = 1e-9


class BleuStats(NamedTuple):
    """Sufficient statistics of one candidate against one reference."""

    correct: tuple[int, ...]
    guess: tuple[int, ...]
    testlen: int
    reflen: int


def bleu_stats_counts(
    test_counts: Sequence[Counter], testlen: int, ref_counts: Sequence[Counter], reflen: int
) -> BleuStats:
    """BleuStats from precomputed n-gram counts (one reference, so 'closest' = its length)."""
    n = len(test_counts)
    correct = tuple(
        sum([min(tc[g], rc[g]) for g in tc.keys() & rc.keys()])  # integer: order-free
        for tc, rc in zip(test_counts, ref_counts, strict=True)
    )
    guess = tuple(max(0, testlen - k + 1) for k in range(1, n + 1))
    return BleuStats(correct, guess, testlen, reflen)


def _length(text: str) -> int:
    return sum(text_ngrams(text)[0].values())


def bleu_stats(prediction: str, reference: str, n: int = MAX_N) -> BleuStats:
    """Statistics of a tokenised prediction against one tokenised reference."""
    test, ref = prediction.split(), reference.split()
    return bleu_stats_counts(ngram_counts(test, n), len(test), ngram_counts(ref, n), len(ref))


def bleu_from_stats(stats: BleuStats) -> tuple[float, ...]:
    """BLEU-1..n of one sentence, exactly as `BleuScorer.compute_score` computes it."""
    values = []
    bleu = 1.0
    for k, (c, g) in enumerate(zip(stats.correct, stats.guess, strict=True)):
        bleu *= (float(c) + TINY) / (float(g) + SMALL)
        values.append(bleu ** (1.0 / (k + 1)))
    ratio = (stats.testlen + TINY) / (stats.reflen + SMALL)
    if ratio < 1:
        penalty = math.exp(1 - 1 / ratio)
        values = [v * penalty for v in values]
    return tuple(values)


def sentence_bleu(prediction: str, references: Sequence[str], n: int = MAX_N) -> tuple[float, ...]:
    """BLEU-1..n of a tokenised prediction, each the maximum over the references.

    Raises:
        ValueError: no references.
    """
    if not references:
        raise ValueError("sentence_bleu needs at least one reference")
    test_counts = text_ngrams(prediction)[:n]
    testlen = _length(prediction)
    best = [-math.inf] * n
    for reference in references:
        stats = bleu_stats_counts(test_counts, testlen, text_ngrams(reference)[:n],
                                  _length(reference))
        best = [max(b, s) for b, s in zip(best, bleu_from_stats(stats), strict=True)]
    return tuple(best)


class BleuMetric(LexicalMetric):
    """The `bleu` family: columns bleu1..bleu4 from one n-gram count per text."""

    family = "bleu"
    ALL_COLUMNS = ("bleu1", "bleu2", "bleu3", "bleu4")

    def _details(self) -> dict[str, str]:
        return {"reflen": "closest", "smooth": "coco-1e-15/1e-9"}

    def score_tokenized(
        self, examples: Sequence[TokenizedExample], corpus_stats: dict[str, Any]
    ) -> list[dict[str, float]]:
        n = max(int(c[-1]) for c in self.columns)
        out = []
        for ex in examples:
            scores = sentence_bleu(ex.prediction, ex.references, n)
            out.append({c: scores[int(c[-1]) - 1] for c in self.columns})
        return out
