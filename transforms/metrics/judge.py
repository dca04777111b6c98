"""The answer-correctness judge: a BEM-layout cross-encoder scored in its trainer's layout.

`python -m pipelines.train_cross_encoder --format evouna` trains a one-logit cross-encoder
on `(answer, reference segment, question)` where the reference segment is built from the
gold answers without looking at the label (`judge_reference`):

- `best` (the trainer's default): the gold the answer matches best, by containment, then
  token recall, then file order (`best_gold`);
- `all`: every distinct gold (one per SQuAD-normalised form), best match first, joined
  by `GOLD_SEPARATOR`, while the segment stays within `max_gold_chars` characters (the
  best one is always kept);
- `marked`: the best-matching gold after a mark saying whether a normalised gold occurs
  in the normalised answer (`MARKS`: the `contains` metric's test), so the model reads
  the lexical evidence beside the texts and learns when to overrule it.

The `judge` metric builds the same segment from a row's references, so the model sees at
scoring time exactly what it saw in training: one model input per row (the `bem` metric
scores every reference and takes the maximum, a layout the judge was not trained in).
The score is the sigmoid of the logit; the decision threshold the trainer chose on dev
(`qa_eval_decision_threshold` in the checkpoint's config.json) is in the signature
(`thr`) and is what `qa-score`'s report uses for accuracy.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.metrics.base import MetricInputError, QAExample, format_signature
from transforms.metrics.model_base import ModelMetric, ModelRequest
from transforms.metrics.squad import normalize_answer
from transforms.models import layouts
from transforms.models.loading import ModelSpec
from transforms.models.uses import ModelUse, cross_encoder_use

VERSION = "1"
GOLD_LAYOUTS = ("best", "all", "marked")
GOLD_SEPARATOR = " / "
# `marked`: the reference segment starts with MARKS[gold contained in the answer].
MARKS = {True: "[found]", False: "[not found]"}
# Written into a judge checkpoint's config.json by train_cross_encoder --format evouna:
# {"gold_layout": ..., "max_gold_chars": ...}, the layout the judge was trained in.
LAYOUT_KEY = "qa_eval_judge_layout"
DEFAULT_MAX_GOLD_CHARS = 200
_HOW = ("train one with `python -m pipelines.train_cross_encoder --format evouna` (EVOUNA's "
        "TQ.json) or --format judge (python -m transforms.training.short_answers)")


# Gold answers repeat across rows (every answer to a question has the same golds), so a
# gold's normalised form and token counts are computed once per process, not per row.
_GOLD_MEMO_SIZE = 1 << 16


@functools.lru_cache(maxsize=_GOLD_MEMO_SIZE)
def _gold_profile(gold: str) -> tuple[str, tuple[tuple[str, int], ...], int,
                                      frozenset[str] | None]:
    """A gold's SQuAD-normalised text, its token counts, its number of tokens, and its
    tokens as a set when none repeats (most golds), else None."""
    norm = normalize_answer(gold)
    tokens = norm.split()
    counts = tuple(collections.Counter(tokens).items())
    return norm, counts, len(tokens), frozenset(tokens) if len(counts) == len(tokens) else None


class _Answer:
    """An answer's normalised text, and its token counts (or its set of tokens) when
    first needed (only to break ties between golds equally contained), computed once for
    all its golds."""

    __slots__ = ("norm", "_counts", "_words")

    def __init__(self, answer: str) -> None:
        self.norm = normalize_answer(answer)
        self._counts: collections.Counter | None = None
        self._words: set[str] | None = None

    def contains(self, gold_norm: str) -> bool:
        """`overlap.contains`' rule on normalised texts: an empty gold matches an empty
        answer only."""
        return gold_norm in self.norm if gold_norm else not self.norm

    def recall(self, profile: tuple) -> float:
        """Token recall of a gold (its `_gold_profile`), multiset, 0.0 for no tokens."""
        _norm, counts, n, distinct = profile
        if not n:
            return 0.0
        if distinct is not None:
            # each gold token once: min(its count in the answer, 1) is whether the answer
            # has it, so the multiset sum is the size of an intersection (the same integer)
            if self._words is None:
                self._words = set(self.norm.split())
            return len(distinct.intersection(self._words)) / n
        if self._counts is None:
            self._counts = collections.Counter(self.norm.split())
        get = self._counts.get
        return sum(min(get(t, 0), c) for t, c in counts) / n

    def match(self, gold: str) -> tuple[float, float]:
        """(containment, token recall) of one gold, as `overlap_score(answer, (gold,))`
        gives them: the same normalisation, multiset counts and empty-string rules."""
        profile = _gold_profile(gold)
        return float(self.contains(profile[0])), self.recall(profile)


@functools.lru_cache(maxsize=_GOLD_MEMO_SIZE // 8)
def _golds(golds: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[tuple, ...]]:
    """The normalised texts and the profiles of a row's golds: every answer to a question
    has the same golds, so the list is memoised whole as well as gold by gold."""
    profiles = tuple(_gold_profile(g) for g in golds)
    return tuple(p[0] for p in profiles), profiles


def _best(answer: _Answer, golds: Sequence[str]) -> tuple[str, bool]:
    """The first gold with the highest (containment, token recall), and whether it is
    contained. Recall is computed only to choose among several golds with the best
    containment (the contained ones, when any is): the same choice as ranking every gold
    by both, with far less work."""
    norms, profiles = _golds(golds if isinstance(golds, tuple) else tuple(golds))
    text = answer.norm
    # `_Answer.contains` inline: an empty gold matches an empty answer only
    contained = [(n in text) if n else not text for n in norms]
    top = True in contained
    candidates = [i for i, c in enumerate(contained) if c is top]
    if len(candidates) == 1:
        return golds[candidates[0]], top
    best, best_recall = candidates[0], -1.0
    for i in candidates:
        recall = answer.recall(profiles[i])
        if recall > best_recall:  # the first of equal matches wins, as max() picks it
            best, best_recall = i, recall
    return golds[best], top


def best_gold(answer: str, golds: Sequence[str]) -> str:
    """The gold answer an answer matches best: containment, then token recall, then order."""
    return _best(_Answer(answer), golds)[0]


def ranked_golds(answer: str, golds: Sequence[str]) -> list[str]:
    """The gold answers, best match first (containment, then token recall, then file
    order), one per SQuAD-normalised form (`"Sunset Blvd."` repeats `"Sunset Blvd"`)."""
    seen, unique = set(), []
    for g in golds:
        key = _gold_profile(g)[0] or g
        if key not in seen:
            seen.add(key)
            unique.append(g)
    profile = _Answer(answer)
    scored = [(profile.match(g), -i, g) for i, g in enumerate(unique)]
    return [g for _, _, g in sorted(scored, reverse=True)]


def judge_reference(answer: str, golds: Sequence[str], gold_layout: str = "best",
                    max_gold_chars: int = DEFAULT_MAX_GOLD_CHARS) -> str:
    """The reference segment of the judge's input for one answer, label-free.

    `best`: the best-matching gold (`best_gold`). `all`: every distinct gold, best match
    first, joined by `GOLD_SEPARATOR`, stopping before the gold that would pass
    `max_gold_chars` characters (the best one is always kept): TriviaQA questions have up
    to 185 aliases (median 8), and those that match the answer least go first.
    `marked`: `MARKS[contained]` then the best-matching gold, where `contained` is whether
    that gold (hence any gold) occurs in the answer after SQuAD normalisation.

    Raises:
        ValueError: an unknown layout or no gold.
    """
    if gold_layout not in GOLD_LAYOUTS:
        raise ValueError(f"gold_layout must be one of {GOLD_LAYOUTS}, got {gold_layout!r}")
    if not golds:
        raise ValueError("the judge needs at least one gold answer")
    if gold_layout == "best":
        return best_gold(answer, golds)
    if gold_layout == "marked":
        gold, contained = _best(_Answer(answer), golds)
        return f"{MARKS[contained]} {gold}"
    ranked = ranked_golds(answer, golds)
    kept, size = [ranked[0]], len(ranked[0])
    for g in ranked[1:]:
        size += len(GOLD_SEPARATOR) + len(g)
        if size > max_gold_chars:
            break
        kept.append(g)
    return GOLD_SEPARATOR.join(kept)


class JudgeMetric(ModelMetric):
    """The judge: one input per row, `(prediction, judge_reference(...), question)`.

    Args:
        columns: ("judge",).
        model: the judge's checkpoint (required; an output of train_cross_encoder).
        gold_layout: "best", "all" or "marked"; None (default): the layout saved in the
            checkpoint's config.json (`LAYOUT_KEY`), else "best" (checkpoints trained
            before the layout was saved).
        max_gold_chars: the `all` layout's cap; None: the saved one, else the default.
        activation: see `model_base.cross_encoder_use` (auto: sigmoid for one logit).
        segment_overflow: `error` (default) or `clamp` for models with two token types.
        **spec_kwargs: `ModelSpec` fields.

    Raises:
        ValueError: an unknown layout, a cap below 1, a missing model, a layout that
            differs from the one the checkpoint was trained in.
    """

    family = "judge"
    _role = "cross_encoder"

    def __init__(self, columns: Sequence[str] = ("judge",), *, model: str | None = None,
                 gold_layout: str | None = None, max_gold_chars: int | None = None,
                 activation: str = "auto", segment_overflow: str = "error",
                 **spec_kwargs: Any) -> None:
        if tuple(columns) != ("judge",):
            raise ValueError(f"judge has the single column 'judge', got {columns}")
        if not model:
            raise ValueError(f"judge needs a fine-tuned judge checkpoint (--judge_model, a "
                             f"Hugging Face id or a local path): {_HOW}")
        spec = ModelSpec.of(model, **spec_kwargs)
        saved = (spec.config() or {}).get(LAYOUT_KEY) or {}
        for name, given in (("gold_layout", gold_layout), ("max_gold_chars", max_gold_chars)):
            if given is not None and name in saved and saved[name] != given:
                raise ValueError(
                    f"judge: {name}={given!r}, but {spec.display_name()} was trained with "
                    f"{name}={saved[name]!r} (its config.json's {LAYOUT_KEY}); leave the "
                    "option out to use the trained one")
        gold_layout = gold_layout or saved.get("gold_layout", "best")
        if max_gold_chars is None:
            max_gold_chars = saved.get("max_gold_chars", DEFAULT_MAX_GOLD_CHARS)
        if gold_layout not in GOLD_LAYOUTS:
            raise ValueError(f"judge: gold_layout must be one of {GOLD_LAYOUTS}, got "
                             f"{gold_layout!r}")
        if not isinstance(max_gold_chars, int) or max_gold_chars < 1:
            raise ValueError(f"judge: max_gold_chars must be an integer >= 1, got "
                             f"{max_gold_chars!r}")
        self.columns = ("judge",)
        self.gold_layout, self.max_gold_chars = gold_layout, max_gold_chars
        self._use = cross_encoder_use(spec,
                                      activation=activation, label=1, segments=3,
                                      segment_overflow=segment_overflow, how=_HOW)

    def model_uses(self) -> Mapping[str, ModelUse]:
        return {self._role: self._use}

    def requests(self, example: QAExample) -> list[ModelRequest]:
        if not example.references:
            raise MetricInputError("judge needs at least one reference")
        if example.question is None:
            raise MetricInputError("judge needs a question")
        reference = judge_reference(example.prediction, example.references, self.gold_layout,
                                    self.max_gold_chars)
        return [ModelRequest(self._role,
                             layouts.bem_input(example.prediction, reference, example.question))]

    def fold(self, example: QAExample, outputs: Sequence[Any],
             corpus_stats: Mapping[str, Any]) -> dict[str, float]:
        return {"judge": float(outputs[0])}

    def signature(self) -> dict[str, str]:
        refs = {"best": "best", "marked": "best+mark",
                "all": f"all<={self.max_gold_chars}"}[self.gold_layout]
        return {"judge": format_signature("judge", VERSION, {
            **self._use.signature_fields(), "act": self._use.activation,
            "segments": f"0/1/2,{self._use.segment_overflow}", "refs": refs})}
