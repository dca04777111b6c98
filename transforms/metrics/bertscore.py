"""BERTScore (Zhang et al. 2020) from per-sentence token embeddings, as bert-score 0.3.13.

Per (candidate, reference): embeddings of a chosen hidden layer, L2-normalised; cosine
matrix; each candidate token takes its best reference token (precision) and each
reference token its best candidate token (recall), averaged with token weights
normalised per sentence; F = 2PR/(P+R).

The metric asks the model for one `TokenMatch` per (candidate, reference) pair (task
`token_match`): the embeddings, the cosine matrices and their maxima are computed on the
model's device, batched over pairs (transforms/models/device.py), and only each
token's best cosine comes back; the weights are applied here (`weighted_matches`, a
row's pairs at once; `weighted_match` for one pair).
`greedy_match` is the same computation from token vectors, for the KPQA-weighted variant.

- Weights: 1 per token and 0 for the tokenizer's CLS/SEP ids (bert-score without idf), or
  idf = log((M+1)/(df+1)) over the corpus's M references (unseen tokens log(M+1)), CLS/SEP
  0, computed as the `ReferenceIdf` corpus statistic.
- A candidate or reference without weighted tokens (empty, as bert-score detects it, or
  every token weighted 0) scores P = R = F = 0 (bert-score: 0 for empty, NaN otherwise).
- Several references: the reference with the best F gives P, R and F together (bert-score
  maximises each column separately; its F column equals ours).
- Baseline rescaling: (x - b)/(1 - b) per column, b read from a bert-score baseline file
  (CSV `LAYER,P,R,F`, the row of the layer used).
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from transforms.metrics.base import (
    CorpusStatistic,
    MetricInputError,
    QAExample,
    Score,
    format_signature,
)
from transforms.metrics.model_base import ModelMetric, ModelRequest
from transforms.models.baselines import read_rescale_baseline
from transforms.models.loading import ModelSpec, TokenIds
from transforms.models.uses import ModelUse, TokenEmbeddings, TokenMatch, encoder_use

# 1.1: each pair's weighted sums in float64 (`_pair_scores`); 1.0's float32 dot products
# differ by about a float32 rounding step (more where P + R is near 0).
VERSION = "1.1"
# `bertscore` is F1, the number the papers call BERTScore (and kpqa_bertscore's shape).
COLUMNS = ("bertscore", "bertscore_precision", "bertscore_recall")


ZERO = Score(0.0, 0.0, 0.0)


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def greedy_match(cand: np.ndarray, cand_weights: np.ndarray, ref: np.ndarray,
                 ref_weights: np.ndarray) -> Score:
    """BERTScore of one pair from token vectors (n, d) and token weights (n,).

    Weights are normalised to sum 1 per sentence here; weights totalling 0 on either
    side give `ZERO` (`_pair_scores`' rule; all-zero weights give it before any matrix
    is formed).
    """
    if not (np.any(cand_weights) and np.any(ref_weights)):
        return ZERO
    sim = _normalise(cand) @ _normalise(ref).T
    return _one_pair(sim.max(axis=1), cand_weights, sim.max(axis=0), ref_weights)


def uniform_weights(emb: TokenEmbeddings) -> np.ndarray:
    """1 per token, 0 at CLS/SEP (bert-score without idf)."""
    return uniform_token_weights(emb.token_ids, emb.special)


def uniform_token_weights(token_ids: np.ndarray, special: np.ndarray) -> np.ndarray:
    """1 per token, 0 at CLS/SEP (bert-score without idf)."""
    return np.where(special, 0.0, 1.0).astype(np.float32)


def weighted_match(match: TokenMatch, cand_weights: np.ndarray,
                   ref_weights: np.ndarray) -> Score:
    """BERTScore of one pair from its greedy match (`TokenMatch`) and token weights:
    `greedy_match`'s averages, from the maxima the model's device computed."""
    return _one_pair(match.cand_max, cand_weights, match.ref_max, ref_weights)


def weighted_matches(matches: Sequence[TokenMatch],
                     weigh: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> list[Score]:
    """`weighted_match` of every pair, `weigh(token_ids, special)` giving the weights,
    with numpy calls for all the pairs at once: every candidate's tokens then every
    reference's laid end to end, one call of `weigh` (elementwise, so each side gets the
    weights a call of its own gives), then every pair's sums (`_pair_scores`). Equal to
    `weighted_match` pair by pair, bit for bit.

    Raises:
        ValueError: a pair whose maxima and token ids differ in length.
    """
    if not matches:
        return []
    cand_n = [len(m.cand_ids) for m in matches]
    ref_n = [len(m.ref_ids) for m in matches]
    if [len(m.cand_max) for m in matches] != cand_n or \
            [len(m.ref_max) for m in matches] != ref_n:
        i, m = next((i, m) for i, m in enumerate(matches)
                    if (len(m.cand_max), len(m.ref_max)) != (cand_n[i], ref_n[i]))
        raise ValueError(f"pair {i}: {len(m.cand_max)} and {len(m.ref_max)} maxima for "
                         f"{cand_n[i]} and {ref_n[i]} tokens")
    weights = weigh(np.concatenate([*(m.cand_ids for m in matches),
                                    *(m.ref_ids for m in matches)]),
                    np.concatenate([*(m.cand_special for m in matches),
                                    *(m.ref_special for m in matches)]))
    maxima = np.concatenate([*(m.cand_max for m in matches), *(m.ref_max for m in matches)])
    return _pair_scores(maxima, weights, cand_n, ref_n)


def _one_pair(cand_max: np.ndarray, cand_w: np.ndarray, ref_max: np.ndarray,
              ref_w: np.ndarray) -> Score:
    """`_pair_scores` of one pair, given each side's maxima and weights.

    Raises:
        ValueError: a side's maxima and weights of different lengths.
    """
    for side, maxima, weights in (("candidate", cand_max, cand_w),
                                  ("reference", ref_max, ref_w)):
        if len(maxima) != len(weights):
            raise ValueError(f"{side} side: {len(maxima)} maxima and {len(weights)} weights")
    return _pair_scores(np.concatenate([cand_max, ref_max]), np.concatenate([cand_w, ref_w]),
                        [len(cand_w)], [len(ref_w)])[0]


def _pair_scores(maxima: np.ndarray, weights: np.ndarray, cand_n: Sequence[int],
                 ref_n: Sequence[int]) -> list[Score]:
    """P, R and F of pairs whose sides are laid end to end, every candidate's first
    (`cand_n[i]` tokens for pair i's), then every reference's (`ref_n[i]`): precision =
    sum(maxima * weights) / sum(weights) over a candidate's tokens, recall the same over
    its reference's, F = 2PR/(P+R) (0 when P + R is 0), `ZERO` where either side's
    weights total 0. The quotients and F are Python floats, pair by pair.

    The sums are float64, segment by segment (`_segment_sums`, all sides in one call): a
    product of two float32 numbers is exact in float64, and each pair's sums depend on
    its own tokens only, so a pair gets the same bits alone or among others, on any CPU.
    (Float32 dot products per pair, as in version 1.0, add in the BLAS kernel's order;
    the two differ by about a float32 rounding step, more where P + R is near 0.)

    Raises:
        ValueError: `maxima`, `weights` and the sides' sizes of different lengths.
    """
    k = len(cand_n)
    dots, totals = _segment_sums(maxima, weights, [*cand_n, *ref_n])
    cand_dot, cand_total, ref_dot, ref_total = dots[:k], totals[:k], dots[k:], totals[k:]
    scores = []
    for c_dot, c_total, r_dot, r_total in zip(cand_dot, cand_total, ref_dot, ref_total):
        if c_total == 0.0 or r_total == 0.0:
            scores.append(ZERO)
            continue
        precision, recall = c_dot / c_total, r_dot / r_total
        total = precision + recall
        scores.append(Score(precision, recall,
                            2 * precision * recall / total if total != 0 else 0.0))
    return scores


def _segment_sums(values: np.ndarray, weights: np.ndarray, sizes: Sequence[int]
                  ) -> tuple[list[float], list[float]]:
    """float64 `sum(values * weights)` and `sum(weights)` of each consecutive segment of
    `sizes` elements (0.0 for an empty one), each with one `np.add.reduceat`, which sums
    every segment on its own: a segment's sums have the same bits wherever it sits.

    Raises:
        ValueError: `values`, `weights` and the segments' total of different lengths.
    """
    weights = np.asarray(weights, dtype=np.float64)
    starts = [0, *itertools.accumulate(sizes)]
    if not len(values) == len(weights) == starts[-1]:
        raise ValueError(f"{len(values)} values and {len(weights)} weights for "
                         f"segments of {starts[-1]} tokens in all")
    products = weights * values
    starts.pop()
    # reduceat takes an empty segment's start as its one element, so empty segments are
    # left out of the starts; rows of BERTScore pairs never have one (CLS and SEP)
    if all(sizes):
        return np.add.reduceat(products, starts).tolist(), np.add.reduceat(weights, starts).tolist()
    filled = [i for i, n in enumerate(sizes) if n]
    dots, totals = [0.0] * len(sizes), [0.0] * len(sizes)
    if filled:
        at = [starts[i] for i in filled]
        for i, d, t in zip(filled, np.add.reduceat(products, at).tolist(),
                           np.add.reduceat(weights, at).tolist()):
            dots[i], totals[i] = d, t
    return dots, totals


class IdfTable(NamedTuple):
    """Document frequencies of word-piece ids over M references."""

    num_docs: int
    df: Mapping[int, int]

    def weights(self, emb: TokenEmbeddings) -> np.ndarray:
        """idf per token of `emb`; CLS/SEP 0."""
        return self.token_weights(emb.token_ids, emb.special)

    def token_weights(self, token_ids: np.ndarray, special: np.ndarray) -> np.ndarray:
        """idf per token id; 0 where `special` (CLS/SEP)."""
        top = math.log(self.num_docs + 1)
        idf = [top - math.log(self.df.get(int(t), 0) + 1) for t in token_ids]
        return np.where(special, 0.0, np.asarray(idf, dtype=np.float64)).astype(np.float32)


class ReferenceIdf(CorpusStatistic):
    """idf of word-pieces over every reference of every example (each one a document).

    Tokenises with the encoder's tokenizer exactly as the encoder does (specials
    included, so CLS/SEP get df = M, i.e. idf 0, as in bert-score), through
    `transforms.models.loading.TokenIds`, which loads the tokenizer where `add` first
    runs and does not pickle it.
    """

    def __init__(self, spec: ModelSpec) -> None:
        self.key = f"bertscore_idf|{spec.model}|{spec.revision or ''}"
        self._token_ids = TokenIds(spec)

    def _encode(self, text: str) -> list[int]:
        return self._token_ids(text.strip())

    def create(self) -> list[Any]:
        return [0, collections.Counter()]

    def add(self, accumulator: list[Any], example: QAExample) -> list[Any]:
        for ref in example.references:
            accumulator[0] += 1
            accumulator[1].update(set(self._encode(ref)))
        return accumulator

    def merge(self, accumulators: Sequence[list[Any]]) -> list[Any]:
        merged = self.create()
        for num_docs, df in accumulators:
            merged[0] += num_docs
            merged[1].update(df)
        return merged

    def extract(self, accumulator: list[Any]) -> IdfTable:
        return IdfTable(accumulator[0], dict(accumulator[1]))


def rescale(score: Score, baseline: Score) -> Score:
    """(x - b) / (1 - b) per column."""
    return Score(*((x - b) / (1 - b) for x, b in zip(score, baseline)))


def best_by_f(scores: Sequence[Score]) -> Score:
    """The score with the highest F (the first on ties); `ZERO` for no scores."""
    best = ZERO
    for i, s in enumerate(scores):
        if i == 0 or s.fmeasure > best.fmeasure:
            best = s
    return best


def bertscore(cand: TokenEmbeddings, refs: Sequence[TokenEmbeddings],
              idf: IdfTable | None = None, baseline: Score | None = None) -> Score:
    """BERTScore of a candidate against several references (best-F reference)."""
    weigh = idf.weights if idf is not None else uniform_weights
    cand_w = weigh(cand)
    best = best_by_f([greedy_match(cand.vectors, cand_w, r.vectors, weigh(r)) for r in refs])
    return rescale(best, baseline) if baseline is not None else best


class BERTScoreMetric(ModelMetric):
    """`bertscore` (F1), `bertscore_precision`, `bertscore_recall`.

    Args:
        columns: the columns wanted (a subset of `COLUMNS`).
        model: encoder name, path or Hub id (None = the packaged all-MiniLM-L6-v2).
        layer: hidden state to use (0 = embeddings); None = the last layer.
        idf: weight tokens by idf over the corpus's references.
        baseline_path: a bert-score baseline file to rescale with.
        **spec_kwargs: `ModelSpec` fields (revision, device, dtype, max_length).

    Raises:
        ValueError: unknown columns, a bad layer or baseline file, a bad model spec.
    """

    family = "bertscore"

    def __init__(self, columns: Sequence[str] = COLUMNS, *, model: str | None = None,
                 layer: int | None = None, idf: bool = False,
                 baseline_path: str | None = None, **spec_kwargs: Any) -> None:
        unknown = set(columns) - set(COLUMNS)
        if unknown or not columns:
            raise ValueError(f"bertscore columns are {COLUMNS}, got {tuple(columns)}")
        self.columns = tuple(columns)
        self._use = encoder_use(ModelSpec.of(model, **spec_kwargs), layer, task="token_match")
        if baseline_path is not None and self._use.layer is None:
            raise ValueError("baseline rescaling needs an explicit layer for this model")
        self._baseline = (Score(*read_rescale_baseline(baseline_path, self._use.layer))
                          if baseline_path else None)
        self._baseline_path = baseline_path
        self._idf = ReferenceIdf(self._use.spec) if idf else None

    def model_uses(self) -> Mapping[str, ModelUse]:
        return {"pairs": self._use}

    def corpus_statistics(self) -> tuple[CorpusStatistic, ...]:
        return (self._idf,) if self._idf is not None else ()

    def signature(self) -> dict[str, str]:
        fields = self._use.signature_fields()
        fields["idf"] = "yes" if self._idf is not None else "no"
        fields["rescale"] = self._baseline_path or "no"
        fields["refs"] = "best-f"
        return {c: format_signature(c, VERSION, fields) for c in self.columns}

    def requests(self, example: QAExample) -> list[ModelRequest]:
        if not example.references:
            raise MetricInputError("bertscore needs at least one reference")
        candidate = example.prediction.strip()
        return [ModelRequest("pairs", (candidate, r.strip())) for r in example.references]

    def fold(self, example: QAExample, outputs: Sequence[Any],
             corpus_stats: Mapping[str, Any]) -> dict[str, float]:
        weigh = (corpus_stats[self._idf.key].token_weights if self._idf is not None
                 else uniform_token_weights)
        best = best_by_f(weighted_matches(outputs, weigh))
        score = rescale(best, self._baseline) if self._baseline is not None else best
        values = {"bertscore": score.fmeasure, "bertscore_precision": score.precision,
                  "bertscore_recall": score.recall}
        return {c: values[c] for c in self.columns}
