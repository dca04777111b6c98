"""What a metric needs from a model, described without loading it: `ModelUse` and its outputs.

A `ModelUse` names a checkpoint (`ModelSpec`), the task it runs and how its output is read
(layer, activation, class, segments). Metrics declare uses; the runners (the scoring
pipeline's `RunInference`, `transforms.metrics.corpus.score_corpus`) load one predictor
per distinct use (predictors.py). The constructors here read the checkpoint's config
(from disk, or the Hub when online) to check the head and choose defaults, so a bad
checkpoint fails when the metric is built, on the launcher.

Outputs per task (what a predictor returns for each input, in input order):

| task | input | output |
|---|---|---|
| token_embeddings | str | `TokenEmbeddings` (hidden state `layer`) |
| token_match | (candidate, reference) str pair | `TokenMatch` (BERTScore's greedy match of hidden state `layer`) |
| sentence_embedding | str | 1-d float32 array (mean-pooled over tokens, specials too) |
| sequence_score | tuple of 1..3 str (see layouts.py) | float (activation applied) |
| token_scores | (question or None, answer) | `TokenScores` (answer word-pieces) |
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from transforms.models.loading import ModelSpec

TASKS = ("token_embeddings", "token_match", "sentence_embedding", "sequence_score",
         "token_scores")
ENCODER_TASKS = ("token_embeddings", "token_match", "sentence_embedding")
ACTIVATIONS = ("sigmoid", "softmax", "none")
SEGMENT_OVERFLOW = ("error", "clamp")
# Written into a binary checkpoint's config.json by transforms/training/cross_encoder.py.
DECISION_THRESHOLD_KEY = "qa_eval_decision_threshold"


@dataclasses.dataclass(frozen=True, eq=False)
class TokenEmbeddings:
    """Contextual embeddings of one sentence, special tokens included.

    Attributes:
        token_ids: (n,) int64 word-piece ids, `[CLS] ... [SEP]`.
        vectors: (n, d) float32 hidden states of the chosen layer.
        special: (n,) bool, True at the tokenizer's CLS and SEP ids (bert-score zeroes
            their weights by id).
    """

    token_ids: np.ndarray
    vectors: np.ndarray
    special: np.ndarray


class TokenMatch(NamedTuple):
    """BERTScore's greedy match of one (candidate, reference) pair, before weighting.

    Every token of either side (special tokens included, as bert-score matches them) is
    matched with its most similar token of the other side, by the cosine of their hidden
    states; the weights (uniform or idf) are applied by the metric.

    Attributes:
        cand_ids, ref_ids: (n,) / (m,) int64 word-piece ids, `[CLS] ... [SEP]`.
        cand_max: (n,) float32: per candidate token, its best cosine with a reference token.
        ref_max: (m,) float32: per reference token, its best cosine with a candidate token.
        cand_special, ref_special: True at the tokenizer's CLS and SEP ids.

    A named tuple, not a frozen dataclass like the other outputs: a window makes one per
    (candidate, reference) pair, about 14 a row, and a frozen dataclass costs 1.5 µs
    more each to build. Like its arrays, it has no value equality and no hash.
    """

    cand_ids: np.ndarray
    cand_max: np.ndarray
    cand_special: np.ndarray
    ref_ids: np.ndarray
    ref_max: np.ndarray
    ref_special: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class TokenScores:
    """Per-word-piece probabilities of one class for the answer part of an input.

    Attributes:
        tokens: the answer's word-pieces (strings, as the tokenizer spells them).
        token_ids: (n,) int64 ids of those word-pieces.
        scores: (n,) float32 P(class) for each word-piece.
    """

    tokens: tuple[str, ...]
    token_ids: np.ndarray
    scores: np.ndarray


@dataclasses.dataclass(frozen=True)
class ModelUse:
    """One model and the output a metric needs from it. Equal uses share one model.

    Attributes:
        task: one of `TASKS`.
        spec: the checkpoint and how to load it.
        layer: hidden state for the encoder tasks (0 = embeddings); None = last layer.
        activation: sequence_score: `sigmoid` (one logit), `softmax` (take class
            `label`) or `none` (raw logit `label`).
        label: the class read by softmax/none activations and by token_scores.
        segments: the most segments an input of this use has (3 for BEM).
        segment_overflow: a segment id the model has no embedding for: `error`, or
            `clamp` it to the model's last token type (documented approximation).
    """

    task: str
    spec: ModelSpec
    layer: int | None = None
    activation: str = "none"
    label: int = 0
    segments: int = 1
    segment_overflow: str = "error"

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.segment_overflow not in SEGMENT_OVERFLOW:
            raise ValueError(
                f"segment_overflow must be one of {SEGMENT_OVERFLOW}, got {self.segment_overflow!r}")
        if self.layer is not None and self.layer < 0:
            raise ValueError(f"layer must be >= 0, got {self.layer}")
        if self.label < 0:
            raise ValueError(f"label must be >= 0, got {self.label}")
        if not 1 <= self.segments <= 3:
            raise ValueError(f"segments must be 1, 2 or 3, got {self.segments}")

    def key(self) -> str:
        """A stable identity: metrics whose uses have equal keys share one RunInference."""
        return repr(self)

    def signature_fields(self) -> dict[str, str]:
        """Model fields for a metric signature (model, revision, layer, max length, dtype,
        and `thr` when the checkpoint saved a decision threshold)."""
        fields = self.spec.signature_fields()
        if self.task in ENCODER_TASKS:
            fields["layer"] = "last" if self.layer is None else str(self.layer)
        threshold = self.decision_threshold()
        if threshold is not None:
            fields["thr"] = f"{threshold:g}"
        return fields

    def decision_threshold(self) -> float | None:
        """A sequence-score checkpoint's saved decision threshold (config.json's
        `DECISION_THRESHOLD_KEY`), or None.

        Raises:
            ValueError: the saved value is not a finite number.
        """
        if self.task != "sequence_score":
            return None
        value = (self.spec.config() or {}).get(DECISION_THRESHOLD_KEY)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{self.spec.display_name()}: config.json's {DECISION_THRESHOLD_KEY} "
                             f"must be a finite number, got {value!r}")
        return float(value)


def encoder_use(spec: ModelSpec, layer: int | None, pooled: bool = False,
                task: str | None = None) -> ModelUse:
    """An encoder use: token embeddings, or mean-pooled sentence embeddings when `pooled`,
    or the `task` given (`token_match`: BERTScore's greedy match, on the model's device).

    `layer=None` resolves to the last layer when the checkpoint's config is readable, so
    the signature names the layer actually used.

    Raises:
        ValueError: `layer` beyond the model's layers.
    """
    n_layers = (spec.config() or {}).get("num_hidden_layers")
    if layer is None and n_layers is not None:
        layer = int(n_layers)
    if layer is not None and n_layers is not None and not 0 <= layer <= n_layers:
        raise ValueError(f"layer must be in 0..{n_layers} for {spec.display_name()}, got {layer}")
    task = task or ("sentence_embedding" if pooled else "token_embeddings")
    if task not in ENCODER_TASKS:
        raise ValueError(f"an encoder task is one of {ENCODER_TASKS}, got {task!r}")
    return ModelUse(task=task, spec=spec, layer=layer)


def _num_labels(config: Mapping[str, Any]) -> int:
    if config.get("id2label"):
        return len(config["id2label"])
    return int(config.get("num_labels", 2))


def _check_head(spec: ModelSpec, suffix: str, what: str, how: str) -> Mapping[str, Any] | None:
    config = spec.config()
    if config is None:
        return None
    archs = config.get("architectures") or []
    if not any(a.endswith(suffix) for a in archs):
        raise ValueError(
            f"{spec.display_name()} is not a {what} (its architectures are {archs}, need "
            f"*{suffix}); {how}")
    return config


def cross_encoder_use(spec: ModelSpec, *, activation: str = "auto", label: int = 1,
                      segments: int = 2, segment_overflow: str = "error",
                      how: str = "pass a fine-tuned checkpoint") -> ModelUse:
    """A sequence-classification use, with its activation fixed here, once.

    `activation="auto"`: sigmoid for a one-logit head, softmax class `label` otherwise
    (BEM reads softmax[1]). Needs a readable config; pass the activation explicitly for a
    Hub id that is not in the local cache.

    Raises:
        ValueError: not a sequence classifier; activation incompatible with the head; a
            layout with more segments than the model has token types (unless clamped);
            `auto` without a readable config.
    """
    config = _check_head(spec, "ForSequenceClassification", "sequence classifier", how)
    if activation == "auto":
        if config is None:
            raise ValueError(
                f"cannot read the config of {spec.model!r} to choose an activation; pass "
                "activation='sigmoid' (one logit) or 'softmax' explicitly")
        activation = "sigmoid" if _num_labels(config) == 1 else "softmax"
    if config is not None:
        n = _num_labels(config)
        if activation == "sigmoid" and n != 1:
            raise ValueError(f"sigmoid needs a one-logit head; {spec.display_name()} has {n}")
        if activation == "softmax" and n < 2:
            raise ValueError(f"softmax needs at least two classes; {spec.display_name()} has {n}")
        if activation != "sigmoid" and label >= n:
            raise ValueError(f"label {label} is out of range for a head with {n} classes")
        types = int(config.get("type_vocab_size", 2) or 0)
        if segments > max(types, 1) and segment_overflow == "error":
            raise ValueError(
                f"this layout uses {segments} segment ids but {spec.display_name()} has "
                f"type_vocab_size={types}; fine-tune a model with {segments} token types "
                "(transforms.models.torch_models.ensure_token_types) or pass "
                "segment_overflow='clamp' to map the extra segments onto the last type")
    if activation == "sigmoid":
        label = 0
    return ModelUse(task="sequence_score", spec=spec, activation=activation, label=label,
                    segments=segments, segment_overflow=segment_overflow)


def token_classifier_use(spec: ModelSpec, *, label: int | None = None,
                         how: str = "pass a fine-tuned checkpoint") -> ModelUse:
    """A token-classification use reading P(class `label`) per answer word-piece.

    `label=None`: the class named K/KEY/KEYPHRASE in the config's id2label, else 0 (the
    KPQA release's label order, `K` then `O`).
    """
    config = _check_head(spec, "ForTokenClassification", "token classifier", how) or {}
    if label is None:
        names = {str(v).upper(): int(k) for k, v in (config.get("id2label") or {}).items()}
        label = next((names[n] for n in ("K", "KEY", "KEYPHRASE") if n in names), 0)
    if config and label >= _num_labels(config):
        raise ValueError(f"label {label} is out of range for {spec.display_name()}")
    return ModelUse(task="token_scores", spec=spec, label=label, segments=2)
