"""ROUGE-L as coco-caption's `Rouge` (beta = 1.2) on PTB token strings.

Tokens are `text.split(" ")` (so an empty text is one empty token, as in coco). With one
reference: P = LCS / len(candidate), R = LCS / len(reference),
F = (1 + beta^2) P R / (R + beta^2 P), 0 when P or R is 0. Several references: each is
scored on its own and the maximum F taken (KPQA's one-corpus-per-reference-column
convention; coco's own multi-reference rule, max P and max R separately, differs).
The LCS length is computed bit-parallel (Hyyro 2004), which gives the same integer as
coco's dynamic programme.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transforms.metrics.base import Score
from transforms.metrics.lexical import LexicalMetric, TokenizedExample

DEFAULT_BETA = 1.2


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token sequences."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    masks: dict[str, int] = {}
    for i, token in enumerate(b):
        masks[token] = masks.get(token, 0) | (1 << i)
    full = (1 << len(b)) - 1
    v = full
    for token in a:
        m = masks.get(token)
        if m is not None:
            u = v & m
            v = ((v + u) | (v - u)) & full
    return len(b) - v.bit_count()


def rouge_l(candidate: str, reference: str, beta: float = DEFAULT_BETA) -> Score:
    """ROUGE-L of tokenised strings, with coco's arithmetic."""
    token_c = candidate.split(" ")
    token_r = reference.split(" ")
    lcs = lcs_length(token_r, token_c)
    prec = lcs / float(len(token_c))
    rec = lcs / float(len(token_r))
    if prec != 0 and rec != 0:
        score = ((1 + beta**2) * prec * rec) / float(rec + beta**2 * prec)
    else:
        score = 0.0
    return Score(prec, rec, score)


def rouge_l_max(candidate: str, references: Sequence[str], beta: float = DEFAULT_BETA) -> float:
    """ROUGE-L F of a tokenised candidate, the maximum over the references.

    Raises:
        ValueError: no references.
    """
    if not references:
        raise ValueError("rouge_l_max needs at least one reference")
    return max(rouge_l(candidate, r, beta).fmeasure for r in references)


class RougeMetric(LexicalMetric):
    """The `rouge` family: column rougeL.

    Args:
        beta: the recall weight (coco: 1.2).
        **kwargs: see `LexicalMetric`.

    Raises:
        ValueError: beta not a positive number.
    """

    family = "rouge"
    ALL_COLUMNS = ("rougeL",)

    def __init__(self, columns: Sequence[str] | None = None, beta: float = DEFAULT_BETA,
                 **kwargs: Any) -> None:
        super().__init__(columns, **kwargs)
        if isinstance(beta, bool) or not isinstance(beta, int | float) or not beta > 0:
            raise ValueError(f"beta must be a positive number, got {beta!r}")
        self.beta = float(beta)

    def _details(self) -> dict[str, str]:
        return {"beta": str(self.beta)}

    def score_tokenized(
        self, examples: Sequence[TokenizedExample], corpus_stats: dict[str, Any]
    ) -> list[dict[str, float]]:
        return [{"rougeL": rouge_l_max(ex.prediction, ex.references, self.beta)}
                for ex in examples]
