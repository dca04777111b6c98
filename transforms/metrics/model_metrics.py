"""Embedding and cross-encoder metrics: bi_encoder, sas, wes, bem, square.

- `bi_encoder`: cosine of mean-pooled sentence embeddings (the SAS paper's bi-encoder
  baseline), maximum over references. Default model: the packaged all-MiniLM-L6-v2.
- `sas`, `wes`: a one-logit cross-encoder on (prediction, reference), sigmoid, maximum
  over references (Risch et al. 2021; Huang 2022). Same code, different checkpoints.
- `bem`: `[CLS] candidate [SEP] reference [SEP] question [SEP]`, segment ids 0/1/2, the
  checkpoint's activation (softmax class 1 for a two-class head, as BEM reads it; sigmoid
  for a one-logit head), maximum over references. Needs a question.
- `square`: one input per example, `Question: q Target: a Pos_Ref: r ... Neg_Ref: n ...`
  with every positive and negative reference in input order (the paper used 5 in total;
  `max_positive`/`max_negative` cap them); truncated from the end at the model's limit.
  Needs a question.

The fine-tuned checkpoints cannot be defaulted: building sas/wes/bem/square without one
fails at graph build time with the way to get one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transforms.metrics.base import MetricInputError, QAExample, format_signature
from transforms.metrics.model_base import ModelMetric, ModelRequest, max_or_zero
from transforms.models import layouts
from transforms.models.loading import ModelSpec
from transforms.models.uses import ModelUse, cross_encoder_use, encoder_use

VERSION = "1.0"
_TRAIN_HINT = {
    "sas": "train one with `python -m pipelines.train_cross_encoder` on STS-B "
           "(the GLUE STS-B train TSV), or pass a Hub cross-encoder such as "
           "cross-encoder/stsb-roberta-large (the SAS paper's)",
    "wes": "train one with `python -m pipelines.train_cross_encoder` on the WES shards "
           "written by `python -m pipelines.mine_wes`",
    "bem": "train one with `python -m pipelines.train_cross_encoder` on BEM-style rows, or "
           "convert the released BEM model to a Hugging Face BertForSequenceClassification",
    "square": "train one with `python -m pipelines.train_cross_encoder` on SQuArE-style rows",
}


def _require(family: str, model: str | None) -> str:
    if not model:
        raise ValueError(
            f"{family} needs a fine-tuned cross-encoder checkpoint (--{family}_model, a "
            f"Hugging Face id or a local path): {_TRAIN_HINT[family]}")
    return model


def _references(example: QAExample, family: str) -> tuple[str, ...]:
    if not example.references:
        raise MetricInputError(f"{family} needs at least one reference")
    return example.references


def _question(example: QAExample, family: str) -> str:
    if example.question is None:
        raise MetricInputError(f"{family} needs a question")
    return example.question


class _SingleColumnMetric(ModelMetric):
    """A model metric with one column named after its family."""

    family: str
    _use: ModelUse
    _role: str

    def _set_columns(self, columns: Sequence[str]) -> None:
        if tuple(columns) != (self.family,):
            raise ValueError(f"{self.family} has the single column {self.family!r}, got {columns}")
        self.columns = (self.family,)

    def model_uses(self) -> Mapping[str, ModelUse]:
        return {self._role: self._use}

    def _signature_fields(self) -> dict[str, str]:
        return self._use.signature_fields()

    def signature(self) -> dict[str, str]:
        return {self.family: format_signature(self.family, VERSION, self._signature_fields())}


class BiEncoderMetric(_SingleColumnMetric):
    """Cosine of mean-pooled embeddings, maximum over references.

    Args:
        columns: ("bi_encoder",).
        model: encoder name, path or Hub id (None = the packaged all-MiniLM-L6-v2).
        layer: hidden state to pool (None = last).
        **spec_kwargs: `ModelSpec` fields.
    """

    family = "bi_encoder"
    _role = "encoder"

    def __init__(self, columns: Sequence[str] = ("bi_encoder",), *, model: str | None = None,
                 layer: int | None = None, **spec_kwargs: Any) -> None:
        self._set_columns(columns)
        self._use = encoder_use(ModelSpec.of(model, **spec_kwargs), layer, pooled=True)

    def requests(self, example: QAExample) -> list[ModelRequest]:
        texts = (example.prediction, *_references(example, self.family))
        return [ModelRequest(self._role, t) for t in texts]

    def fold(self, example: QAExample, outputs: Sequence[Any],
             corpus_stats: Mapping[str, Any]) -> dict[str, float]:
        return {self.family: max_or_zero([cosine(outputs[0], r) for r in outputs[1:]])}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity; 0.0 when either vector is zero."""
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / norms) if norms else 0.0


class CrossEncoderMetric(_SingleColumnMetric):
    """`sas` or `wes`: cross-encoder score of (prediction, reference), max over references.

    Args:
        family: "sas" or "wes".
        columns: (family,).
        model: the fine-tuned sequence-classification checkpoint (required).
        activation: see `model_base.cross_encoder_use` (auto: sigmoid for one logit).
        **spec_kwargs: `ModelSpec` fields.
    """

    _role = "cross_encoder"

    def __init__(self, family: str, columns: Sequence[str] | None = None, *,
                 model: str | None = None, activation: str = "auto", **spec_kwargs: Any) -> None:
        if family not in ("sas", "wes"):
            raise ValueError(f"family must be 'sas' or 'wes', got {family!r}")
        self.family = family
        self._set_columns(columns or (family,))
        spec = ModelSpec.of(_require(family, model), **spec_kwargs)
        self._use = cross_encoder_use(spec, activation=activation, segments=2,
                                      how=_TRAIN_HINT[family])

    def requests(self, example: QAExample) -> list[ModelRequest]:
        return [ModelRequest(self._role, layouts.pair_input(example.prediction, r))
                for r in _references(example, self.family)]

    def fold(self, example: QAExample, outputs: Sequence[Any],
             corpus_stats: Mapping[str, Any]) -> dict[str, float]:
        return {self.family: max_or_zero(outputs)}

    def _signature_fields(self) -> dict[str, str]:
        return {**self._use.signature_fields(), "act": self._use.activation, "refs": "max"}


class BEMMetric(_SingleColumnMetric):
    """BEM: (candidate, reference, question), segment ids 0/1/2, max over references.

    Args:
        columns: ("bem",).
        model: the fine-tuned checkpoint (required).
        activation: see `model_base.cross_encoder_use` (auto: softmax[1] for two classes).
        segment_overflow: `error` (default) or `clamp` for models with two token types.
        **spec_kwargs: `ModelSpec` fields.
    """

    family = "bem"
    _role = "cross_encoder"

    def __init__(self, columns: Sequence[str] = ("bem",), *, model: str | None = None,
                 activation: str = "auto", segment_overflow: str = "error",
                 **spec_kwargs: Any) -> None:
        self._set_columns(columns)
        spec = ModelSpec.of(_require("bem", model), **spec_kwargs)
        self._use = cross_encoder_use(spec, activation=activation, label=1, segments=3,
                                      segment_overflow=segment_overflow, how=_TRAIN_HINT["bem"])

    def requests(self, example: QAExample) -> list[ModelRequest]:
        question = _question(example, self.family)
        return [ModelRequest(self._role, layouts.bem_input(example.prediction, r, question))
                for r in _references(example, self.family)]

    def fold(self, example: QAExample, outputs: Sequence[Any],
             corpus_stats: Mapping[str, Any]) -> dict[str, float]:
        return {self.family: max_or_zero(outputs)}

    def _signature_fields(self) -> dict[str, str]:
        return {**self._use.signature_fields(), "act": self._use.activation,
                "segments": f"0/1/2,{self._use.segment_overflow}", "refs": "max"}


class SQuArEMetric(_SingleColumnMetric):
    """SQuArE: one cross-encoder input with all positive and negative references.

    Args:
        columns: ("square",).
        model: the fine-tuned checkpoint (required).
        activation: see `model_base.cross_encoder_use`.
        max_positive: most positive references put in the input (None = all).
        max_negative: most negative references (None = all).
        **spec_kwargs: `ModelSpec` fields.
    """

    family = "square"
    _role = "cross_encoder"

    def __init__(self, columns: Sequence[str] = ("square",), *, model: str | None = None,
                 activation: str = "auto", max_positive: int | None = None,
                 max_negative: int | None = None, **spec_kwargs: Any) -> None:
        self._set_columns(columns)
        for name, value in (("max_positive", max_positive), ("max_negative", max_negative)):
            if value is not None and value < (1 if name == "max_positive" else 0):
                raise ValueError(f"{name} must be >= {1 if name == 'max_positive' else 0}")
        self._max_positive, self._max_negative = max_positive, max_negative
        spec = ModelSpec.of(_require("square", model), **spec_kwargs)
        self._use = cross_encoder_use(spec, activation=activation, segments=1,
                                      how=_TRAIN_HINT["square"])

    def requests(self, example: QAExample) -> list[ModelRequest]:
        positives = _references(example, self.family)[: self._max_positive]
        negatives = example.negative_references[: self._max_negative]
        return [ModelRequest(self._role, layouts.square_input(
            _question(example, self.family), example.prediction, positives, negatives))]

    def fold(self, example: QAExample, outputs: Sequence[Any],
             corpus_stats: Mapping[str, Any]) -> dict[str, float]:
        return {self.family: float(outputs[0])}

    def _signature_fields(self) -> dict[str, str]:
        return {**self._use.signature_fields(), "act": self._use.activation,
                "pos": _cap(self._max_positive), "neg": _cap(self._max_negative)}


def _cap(value: int | None) -> str:
    return "all" if value is None else str(value)


class SASMetric(CrossEncoderMetric):
    """`sas` (registry factory): `CrossEncoderMetric("sas", ...)`."""

    def __init__(self, columns: Sequence[str] = ("sas",), **kwargs: Any) -> None:
        super().__init__("sas", columns, **kwargs)


class WESMetric(CrossEncoderMetric):
    """`wes` (registry factory): `CrossEncoderMetric("wes", ...)`."""

    def __init__(self, columns: Sequence[str] = ("wes",), **kwargs: Any) -> None:
        super().__init__("wes", columns, **kwargs)
