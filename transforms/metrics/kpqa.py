"""KPQA metrics (Lee et al., NAACL 2021): BLEU-1, ROUGE-L and BERTScore with keyphrase weights.

Keyphrase weights come from a token classifier fed `[CLS] question [SEP] answer [SEP]`
(layouts.encode_keyphrase_batch): the weight of each answer word-piece is P(keyphrase),
for the prediction and for each reference, always given the question. Continuation
pieces (`##x`) get weights too. What the released code (hwanheelee1993/KPQA) computes,
and what is done here:

- Tokens: the classifier's own word-pieces (the release tokenised with bert-uncased for
  the metrics and bert-base-uncased for the weights: the same vocabulary), no other
  normalisation, so tokens and weights line up one to one.
- BLEU-1-KPQA (`bleu1_kpqa`): numerator = sum over distinct prediction word-pieces t of
  min(count of t in the prediction, max count of t in a reference) x mean weight of t in
  the prediction; denominator = sum of the prediction's weights; brevity penalty
  exp(1 - r/c) on unweighted lengths (c prediction, r the closest reference length,
  shorter on ties) when c < r; coco-caption's smoothing (+1e-15 / +1e-9) kept.
- ROUGE-L-KPQA (`rouge_l_kpqa`): the release's LCS dynamic programme in which a match of
  reference token i adds that token's reference weight; P = LCS / sum of prediction
  weights, R = LCS / sum of reference weights, F = 2PR/(P+R) (beta = 1, not coco's 1.2).
  An empty side scores 0; a zero weight sum gives 0 for that ratio (the release divides
  by zero).
- BERTScore-KPQA (`bertscore_kpqa`): bertscore's greedy matching with the keyphrase
  weights in place of idf: weights on the answer word-pieces, 0 on [CLS]/[SEP],
  normalised per sentence. The encoder must share the classifier's vocabulary (checked
  per example). The release used bert-large-uncased-whole-word-masking-finetuned-squad,
  layer 1; here any encoder and layer (default: the packaged MiniLM, last layer).
- Several references: each scored alone and the maximum taken, per column (as released).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transforms.metrics.base import MetricInputError, QAExample, Score, format_signature
from transforms.metrics.bertscore import greedy_match
from transforms.metrics.bleu import SMALL, TINY
from transforms.metrics.model_base import ModelMetric, ModelRequest, max_or_zero
from transforms.models import layouts
from transforms.models.loading import ModelSpec
from transforms.models.uses import (
    ModelUse,
    TokenEmbeddings,
    TokenScores,
    encoder_use,
    token_classifier_use,
)

VERSION = "1.0"
# kpqa_bertscore 1.1: `greedy_match` sums in float64, as bertscore 1.1 does
COLUMN_VERSIONS = {"kpqa_bertscore": "1.1"}
COLUMNS = ("kpqa_bleu1", "kpqa_rougeL", "kpqa_bertscore")
_HINT = ("train one with `python -m pipelines.train_keyphrase` on SQuAD v1.1 "
         "(a train-v1.1.json file, such as the data README's), or pass a KPQA keyphrase "
         "checkpoint")


def _check(tokens: Sequence[str], weights: Sequence[float], what: str) -> None:
    if len(tokens) != len(weights):
        raise ValueError(f"{what}: {len(tokens)} tokens but {len(weights)} weights")


def mean_weight_per_token(tokens: Sequence[str], weights: Sequence[float]) -> dict[str, float]:
    """Mean weight of each distinct token over its occurrences (the release's weight_dict)."""
    sums: dict[str, float] = collections.defaultdict(float)
    for t, w in zip(tokens, weights):
        sums[t] += float(w)
    counts = collections.Counter(tokens)
    return {t: sums[t] / counts[t] for t in counts}


def bleu1_kpqa(pred_tokens: Sequence[str], pred_weights: Sequence[float],
               refs_tokens: Sequence[Sequence[str]]) -> float:
    """BLEU-1-KPQA of a prediction against one or more references (see module docstring)."""
    _check(pred_tokens, pred_weights, "prediction")
    if not refs_tokens:
        raise ValueError("bleu1_kpqa needs at least one reference")
    max_counts: collections.Counter[str] = collections.Counter()
    for ref in refs_tokens:
        for t, c in collections.Counter(ref).items():
            max_counts[t] = max(max_counts[t], c)
    test_len = len(pred_tokens)
    ref_len = min((abs(len(r) - test_len), len(r)) for r in refs_tokens)[1]
    mean_w = mean_weight_per_token(pred_tokens, pred_weights)
    correct = sum(min(max_counts.get(t, 0), c) * mean_w[t]
                  for t, c in collections.Counter(pred_tokens).items())
    guess = float(np.sum(pred_weights, dtype=np.float64))
    bleu = (correct + TINY) / (guess + SMALL)
    ratio = (test_len + TINY) / (ref_len + SMALL)
    if ratio < 1:
        bleu *= math.exp(1 - 1 / ratio)
    return bleu


def rouge_l_kpqa(pred_tokens: Sequence[str], pred_weights: Sequence[float],
                 ref_tokens: Sequence[str], ref_weights: Sequence[float]) -> Score:
    """ROUGE-L-KPQA of a prediction against one reference (see module docstring)."""
    _check(pred_tokens, pred_weights, "prediction")
    _check(ref_tokens, ref_weights, "reference")
    if not pred_tokens or not ref_tokens:
        return Score(0.0, 0.0, 0.0)
    cols = len(pred_tokens) + 1
    previous = [0.0] * cols
    for i, ref_tok in enumerate(ref_tokens):
        current = [0.0] * cols
        weight = float(ref_weights[i])
        for j in range(1, cols):
            if ref_tok == pred_tokens[j - 1]:
                current[j] = previous[j - 1] + weight
            else:
                current[j] = max(previous[j], current[j - 1])
        previous = current
    lcs = previous[-1]
    pred_total = float(np.sum(pred_weights, dtype=np.float64))
    ref_total = float(np.sum(ref_weights, dtype=np.float64))
    precision = lcs / pred_total if pred_total else 0.0
    recall = lcs / ref_total if ref_total else 0.0
    total = precision + recall
    return Score(precision, recall, 2 * precision * recall / total if total > 0 else 0.0)


def placed_weights(emb: TokenEmbeddings, keyphrases: TokenScores) -> np.ndarray:
    """Keyphrase weights at the answer positions of an encoder's `[CLS] a [SEP]` tokens.

    Raises:
        MetricInputError: the encoder's word-pieces are not the classifier's (different
            vocabularies).
    """
    n = len(keyphrases.scores)
    if not np.array_equal(emb.token_ids[1: 1 + n], keyphrases.token_ids):
        raise MetricInputError(
            "kpqa_bertscore: the encoder's word-pieces differ from the keyphrase model's; "
            "use an encoder with the same vocabulary")
    weights = np.zeros(len(emb.token_ids), dtype=np.float32)
    weights[1: 1 + n] = keyphrases.scores
    return weights


def bertscore_kpqa(cand: TokenEmbeddings, cand_kp: TokenScores, ref: TokenEmbeddings,
                   ref_kp: TokenScores) -> float:
    """BERTScore-KPQA F1 of a candidate against one reference."""
    return greedy_match(cand.vectors, placed_weights(cand, cand_kp),
                        ref.vectors, placed_weights(ref, ref_kp)).fmeasure


class KPQAMetric(ModelMetric):
    """`kpqa_bleu1`, `kpqa_rougeL`, `kpqa_bertscore`.

    Args:
        columns: the columns wanted (a subset of `COLUMNS`).
        model: the keyphrase token-classification checkpoint (required).
        label: the keyphrase class (None: from id2label, else 0 as in the release).
        encoder_model: the encoder for kpqa_bertscore (None = packaged all-MiniLM-L6-v2).
        encoder_layer: its hidden state (None = last).
        **spec_kwargs: `ModelSpec` fields for both models (device, dtype, max_length).

    Raises:
        ValueError: unknown columns, no keyphrase model, a bad checkpoint or layer.
    """

    family = "kpqa"

    def __init__(self, columns: Sequence[str] = COLUMNS, *, model: str | None = None,
                 label: int | None = None, encoder_model: str | None = None,
                 encoder_layer: int | None = None, **spec_kwargs: Any) -> None:
        unknown = set(columns) - set(COLUMNS)
        if unknown or not columns:
            raise ValueError(f"kpqa columns are {COLUMNS}, got {tuple(columns)}")
        if not model:
            raise ValueError(f"kpqa needs a keyphrase token-classification checkpoint "
                             f"(--kpqa_model, a Hugging Face id or a local path): {_HINT}")
        self.columns = tuple(columns)
        self._uses = {"keyphrase": token_classifier_use(ModelSpec.of(model, **spec_kwargs),
                                                        label=label, how=_HINT)}
        if "kpqa_bertscore" in self.columns:
            self._uses["encoder"] = encoder_use(ModelSpec.of(encoder_model, **spec_kwargs),
                                                encoder_layer)

    def model_uses(self) -> Mapping[str, ModelUse]:
        return dict(self._uses)

    def signature(self) -> dict[str, str]:
        fields = {f"kp_{k}": v for k, v in self._uses["keyphrase"].signature_fields().items()}
        fields["kp_label"] = str(self._uses["keyphrase"].label)
        if "encoder" in self._uses:
            fields.update({f"enc_{k}": v for k, v in self._uses["encoder"].signature_fields().items()})
        fields["refs"] = "max"
        return {c: format_signature(c, COLUMN_VERSIONS.get(c, VERSION), fields)
                for c in self.columns}

    def requests(self, example: QAExample) -> list[ModelRequest]:
        if not example.references:
            raise MetricInputError("kpqa needs at least one reference")
        if example.question is None:
            raise MetricInputError("kpqa needs a question (keyphrase weights are "
                                   "predicted given the question)")
        texts = (example.prediction, *example.references)
        reqs = [ModelRequest("keyphrase", layouts.keyphrase_input(example.question, t))
                for t in texts]
        if "encoder" in self._uses:
            reqs += [ModelRequest("encoder", t.strip()) for t in texts]
        return reqs

    def fold(self, example: QAExample, outputs: Sequence[Any],
             corpus_stats: Mapping[str, Any]) -> dict[str, float]:
        n = 1 + len(example.references)
        kp, emb = outputs[:n], outputs[n:]
        pred = kp[0]
        values: dict[str, list[float]] = {c: [] for c in self.columns}
        for k, ref in enumerate(kp[1:], start=1):
            if "kpqa_bleu1" in values:
                values["kpqa_bleu1"].append(bleu1_kpqa(pred.tokens, pred.scores, [ref.tokens]))
            if "kpqa_rougeL" in values:
                values["kpqa_rougeL"].append(
                    rouge_l_kpqa(pred.tokens, pred.scores, ref.tokens, ref.scores).fmeasure)
            if "kpqa_bertscore" in values:
                values["kpqa_bertscore"].append(bertscore_kpqa(emb[0], pred, emb[k], ref))
        return {c: max_or_zero(v) for c, v in values.items()}
