"""Answer containment and token recall/precision: the lexical checks of LLM-era QA.

Long, free-form answers ("The man behind The Chipmunks was Ross Bagdasarian, known as
David Seville") rarely equal a short gold answer ("David Seville"), so EM is 0 and F1 is
diluted by every extra word. The check that Kamalloo et al. (2023) and the EVOUNA paper
(Wang et al., 2023) use instead asks whether the gold answer occurs in the prediction.

All three columns use the SQuAD v1.1 normalisation (`squad.normalize_answer`: lower case,
no ASCII punctuation, no articles, whitespace collapsed) and take the maximum over the
references, each column separately:

- `contains`: 1.0 when a normalised reference occurs in the normalised prediction. By
  default any substring counts (`boundary="char"`, the literature's check: `"art"` is in
  `"party"`); `boundary="word"` asks the match to start and end at word boundaries,
  Unicode ones (`"hair"` is in `"“hair”"`, since SQuAD's normalisation keeps non-ASCII
  punctuation). On EVOUNA-TQ the substring check agrees with humans more often (0.914
  against 0.908; docs/decisions.md). A reference that normalises to nothing (`"The"`)
  matches only a prediction that does too, as EM.
- `token_recall`: the share of the reference's tokens found in the prediction, counted
  as multisets (a reference token used twice needs two occurrences); 0.0 for an empty
  reference, like SQuAD F1's "no token shared".
- `token_precision`: the share of the prediction's tokens found in the reference, the
  same counts over the prediction's length; 0.0 for an empty prediction.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from transforms.metrics.base import QAExample, TextMetric, format_signature, score_each
from transforms.metrics.squad import normalize_answer

VERSION = "1"
COLUMNS = ("contains", "token_recall", "token_precision")
BOUNDARIES = ("char", "word")


class OverlapScore(NamedTuple):
    """Containment (0 or 1), token recall and token precision of one prediction."""

    contains: float
    token_recall: float
    token_precision: float


def contains(prediction: str, reference: str, boundary: str = "char") -> float:
    """1.0 when the normalised reference occurs in the normalised prediction.

    Args:
        prediction: the system's answer.
        reference: one gold answer.
        boundary: "char" (any substring) or "word" (the match starts and ends at word
            boundaries).

    Returns:
        1.0 or 0.0.
    """
    return _contains(normalize_answer(prediction), normalize_answer(reference), boundary)


def _contains(pred_norm: str, ref_norm: str, boundary: str) -> float:
    if not ref_norm:
        return float(not pred_norm)
    if ref_norm not in pred_norm:
        return 0.0
    if boundary == "char":
        return 1.0
    return float(re.search(rf"(?<!\w){re.escape(ref_norm)}(?!\w)", pred_norm) is not None)


def _shared(pred_tokens: Sequence[str], ref_tokens: Sequence[str]) -> int:
    return sum((collections.Counter(pred_tokens) & collections.Counter(ref_tokens)).values())


def token_recall(prediction: str, reference: str) -> float:
    """The share of the normalised reference's tokens that the prediction holds (multiset)."""
    ref_tokens = normalize_answer(reference).split()
    if not ref_tokens:
        return 0.0
    return _shared(normalize_answer(prediction).split(), ref_tokens) / len(ref_tokens)


def token_precision(prediction: str, reference: str) -> float:
    """The share of the normalised prediction's tokens that the reference holds (multiset)."""
    pred_tokens = normalize_answer(prediction).split()
    if not pred_tokens:
        return 0.0
    return _shared(pred_tokens, normalize_answer(reference).split()) / len(pred_tokens)


def overlap_score(prediction: str, references: Sequence[str],
                  boundary: str = "char") -> OverlapScore:
    """The three columns of a prediction, each the maximum over the references.

    Args:
        prediction: the system's answer.
        references: one or more gold answers.
        boundary: see `contains`.

    Returns:
        The OverlapScore.

    Raises:
        ValueError: no references, or an unknown boundary.
    """
    if not references:
        raise ValueError("overlap_score needs at least one reference")
    if boundary not in BOUNDARIES:
        raise ValueError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
    pred_norm = normalize_answer(prediction)
    pred_tokens = pred_norm.split()
    pred_counts = collections.Counter(pred_tokens)
    best_contains = best_recall = best_precision = 0.0
    for reference in references:
        ref_norm = normalize_answer(reference)
        ref_tokens = ref_norm.split()
        best_contains = max(best_contains, _contains(pred_norm, ref_norm, boundary))
        shared = sum((pred_counts & collections.Counter(ref_tokens)).values())
        if ref_tokens:
            best_recall = max(best_recall, shared / len(ref_tokens))
        if pred_tokens:
            best_precision = max(best_precision, shared / len(pred_tokens))
    return OverlapScore(best_contains, best_recall, best_precision)


class OverlapMetric(TextMetric):
    """The `overlap` family: columns `contains`, `token_recall`, `token_precision`.

    Args:
        columns: the requested subset of COLUMNS.
        boundary: "char" (default) or "word", see `contains`.

    Raises:
        ValueError: an unknown or empty column set, or an unknown boundary.
    """

    family = "overlap"

    def __init__(self, columns: Sequence[str] = COLUMNS, boundary: str = "char") -> None:
        unknown = [c for c in columns if c not in COLUMNS]
        if unknown or not columns:
            raise ValueError(f"overlap columns must be a non-empty subset of {COLUMNS}, "
                             f"got {columns!r}")
        if boundary not in BOUNDARIES:
            raise ValueError(f"overlap boundary must be one of {BOUNDARIES}, got {boundary!r}")
        self.columns = tuple(c for c in COLUMNS if c in columns)
        self.boundary = boundary

    def signature(self) -> dict[str, str]:
        sigs = {}
        for c in self.columns:
            fields = {"norm": "squad-v1.1(lower+punct+articles+ws)"}
            if c == "contains":
                fields["match"] = self.boundary
            else:
                fields["count"] = "multiset"
            fields["refs"] = "max"
            sigs[c] = format_signature(c, VERSION, fields)
        return sigs

    def score_batch(
        self, examples: Sequence[QAExample], corpus_stats: dict[str, Any]
    ) -> list[dict[str, float]]:
        return score_each(examples, self.columns,
                          lambda ex: overlap_score(ex.prediction, ex.references, self.boundary))
