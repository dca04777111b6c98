"""Loaded models that turn a list of distinct inputs into outputs (torch, no Beam).

A `Predictor` is the one object a `ModelHandler.load_model` returns (Beam keeps a weak
reference to it, and with `share_model_across_processes` calls it through a proxy, so its
`predict` takes and returns plain picklable values). Inside `predict`: an LRU cache of
recent outputs, encoding of the missing inputs in one tokenizer call, length-sorted
forward passes capped by rows and padded tokens, each padded to its own longest row,
under `torch.inference_mode()`, and outputs returned in input order.
"""

from __future__ import annotations

import abc
import collections
import logging
import threading
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from transforms.models import batching, layouts, loading
from transforms.models.uses import ModelUse, TokenEmbeddings, TokenScores

logger = logging.getLogger(__name__)

# A Beam batch is also the window inside which inputs are sorted by length. On the 20,000
# judgment pairs of the benchmark, padded/real tokens is 1.28 with 512-row windows and
# 4,096-token passes, 1.09 with 2,048-row windows, 1.01 for a global sort. On a GPU raise
# max_batch_tokens (e.g. 32768) and the window with it.
DEFAULT_MAX_BATCH_ROWS = 2048
DEFAULT_MAX_BATCH_TOKENS = 4096
# Cached outputs per process, by task: scores are a float, token embeddings ~30 KB each.
DEFAULT_CACHE_SIZE = {"sequence_score": 200_000, "sentence_embedding": 50_000,
                      "token_embeddings": 5_000, "token_scores": 20_000}
STAT_NAMES = ("inputs", "cache_hits", "forward_passes", "real_tokens", "padded_tokens")


class Predictor(abc.ABC):
    """Tokenizer + model + batching policy for one `ModelUse`.

    Args:
        use: what to load and which output to produce.
        max_batch_rows: most rows per forward pass.
        max_batch_tokens: most padded tokens (rows x longest row) per forward pass.
        cache_size: outputs kept in the per-process LRU cache (0 disables it); None =
            `DEFAULT_CACHE_SIZE[use.task]`.
    """

    auto_class = "AutoModel"

    def __init__(self, use: ModelUse, max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS,
                 max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                 cache_size: int | None = None) -> None:
        self.use = use
        self.max_batch_rows = max_batch_rows
        self.max_batch_tokens = max_batch_tokens
        self.cache_size = DEFAULT_CACHE_SIZE[use.task] if cache_size is None else cache_size
        self.tokenizer = loading.load_tokenizer(use.spec)
        self.model = loading.load_model(use.spec, self.auto_class)
        self.device = next(self.model.parameters()).device
        self.max_length = loading.tokenizer_max_length(use.spec, self.tokenizer, self.model.config)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.uses_token_types = "token_type_ids" in self.tokenizer.model_input_names
        self._cache: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._after_load()

    @abc.abstractmethod
    def _after_load(self) -> None:
        """Adjusts and checks the loaded model (layer truncation, head checks)."""

    @abc.abstractmethod
    def encode(self, inputs: Sequence[Hashable]) -> list[layouts.Encoded]:
        """Token ids (and segment ids) per input."""

    @abc.abstractmethod
    def _outputs(self, batch: batching.Padded, encoded: Sequence[layouts.Encoded]) -> list[Any]:
        """Runs one padded pass; returns one output per row."""

    def predict(self, inputs: Sequence[Hashable]) -> tuple[list[Any], dict[str, int]]:
        """Outputs for `inputs` (in order) and counts: inputs, cache hits, forward passes,
        real and padded tokens."""
        stats = dict.fromkeys(STAT_NAMES, 0)
        stats["inputs"] = len(inputs)
        found: dict[Hashable, Any] = {}
        with self._lock:
            for x in inputs:
                if x in self._cache:
                    self._cache.move_to_end(x)
                    found[x] = self._cache[x]
        stats["cache_hits"] = sum(1 for x in inputs if x in found)
        missing, _ = batching.dedup([x for x in inputs if x not in found])
        if missing:
            computed = self._compute(missing, stats)
            found.update(zip(missing, computed))
            if self.cache_size:
                with self._lock:
                    for x, y in zip(missing, computed):
                        self._cache[x] = y
                    while len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
        return [found[x] for x in inputs], stats

    def _compute(self, inputs: list[Hashable], stats: dict[str, int]) -> list[Any]:
        import torch
        encoded = self.encode(inputs)
        lengths = [len(e.input_ids) for e in encoded]
        results: list[Any] = [None] * len(inputs)
        for positions in batching.plan_batches(lengths, self.max_batch_rows,
                                               self.max_batch_tokens):
            rows = [encoded[i] for i in positions]
            padded = batching.pad([r.input_ids for r in rows],
                                  [r.token_type_ids for r in rows], self.pad_id)
            stats["forward_passes"] += 1
            stats["real_tokens"] += sum(lengths[i] for i in positions)
            stats["padded_tokens"] += padded.input_ids.size
            with torch.inference_mode():
                outputs = self._outputs(padded, rows)
            for i, out in zip(positions, outputs):
                results[i] = out
        return results

    def _model_kwargs(self, batch: batching.Padded) -> dict[str, Any]:
        import torch
        kwargs = {"input_ids": torch.from_numpy(batch.input_ids).to(self.device),
                  "attention_mask": torch.from_numpy(batch.attention_mask).to(self.device)}
        if self.uses_token_types and batch.token_type_ids is not None:
            kwargs["token_type_ids"] = torch.from_numpy(batch.token_type_ids).to(self.device)
        return kwargs


class EncoderPredictor(Predictor):
    """Hidden state `use.layer` per token (`token_embeddings`) or its masked mean
    (`sentence_embedding`). Input: a string, encoded `[CLS] text [SEP]` and truncated to
    `max_length`, as bert-score encodes it."""

    def _after_load(self) -> None:
        layer = self.use.layer
        n_layers = self.model.config.num_hidden_layers
        if layer is not None and not 0 <= layer <= n_layers:
            raise ValueError(f"layer must be in 0..{n_layers}, got {layer}")
        self._layer_index = None
        if layer is not None and layer != n_layers:
            # Dropping the unused top layers is bert-score's own trick: same numbers, less work.
            if not loading.truncate_layers(self.model, layer):
                self._layer_index = layer
        special = [self.tokenizer.cls_token_id, self.tokenizer.sep_token_id]
        self._special_ids = np.array([t for t in special if t is not None], dtype=np.int64)

    def encode(self, inputs: Sequence[Hashable]) -> list[layouts.Encoded]:
        if not all(isinstance(x, str) for x in inputs):
            raise ValueError("encoder inputs must be strings")
        enc = self.tokenizer(list(inputs), truncation=True, max_length=self.max_length)
        types = enc.get("token_type_ids")
        return [layouts.Encoded(tuple(ids), tuple(types[k]) if types is not None else None)
                for k, ids in enumerate(enc["input_ids"])]

    def _outputs(self, batch: batching.Padded, encoded: Sequence[layouts.Encoded]) -> list[Any]:
        kwargs = self._model_kwargs(batch)
        if self._layer_index is None:
            hidden = self.model(**kwargs).last_hidden_state
        else:
            hidden = self.model(**kwargs, output_hidden_states=True).hidden_states[self._layer_index]
        hidden = hidden.float()
        if self.use.task == "sentence_embedding":
            mask = kwargs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return list(pooled.cpu().numpy())
        vectors = hidden.cpu().numpy()
        out = []
        for k, row in enumerate(encoded):
            ids = np.asarray(row.input_ids, dtype=np.int64)
            out.append(TokenEmbeddings(ids, np.ascontiguousarray(vectors[k, : len(ids)]),
                                       np.isin(ids, self._special_ids)))
        return out


class CrossEncoderPredictor(Predictor):
    """One score per (1..3)-segment input (layouts.py), activation fixed by the use."""

    auto_class = "AutoModelForSequenceClassification"

    def _after_load(self) -> None:
        n = self.model.config.num_labels
        if self.use.activation == "sigmoid" and n != 1:
            raise ValueError(f"sigmoid activation needs a one-logit head, the model has {n}")
        if self.use.activation != "sigmoid" and self.use.label >= n:
            raise ValueError(f"label {self.use.label} out of range for {n} classes")
        self._type_vocab = int(getattr(self.model.config, "type_vocab_size", 0) or 0)

    def encode(self, inputs: Sequence[Hashable]) -> list[layouts.Encoded]:
        encoded = layouts.encode_batch(self.tokenizer, inputs, self.max_length)
        if not self.uses_token_types:
            return encoded
        top = max(max(e.token_type_ids or (0,)) for e in encoded)
        if top < max(self._type_vocab, 1):
            return encoded
        if self.use.segment_overflow == "error":
            raise ValueError(
                f"segment id {top} needs type_vocab_size > {top}; the model has "
                f"{self._type_vocab} (use segment_overflow='clamp' or a model with more types)")
        last = max(self._type_vocab - 1, 0)
        return [e._replace(token_type_ids=tuple(min(t, last) for t in e.token_type_ids))
                for e in encoded]

    def _outputs(self, batch: batching.Padded, encoded: Sequence[layouts.Encoded]) -> list[Any]:
        import torch
        logits = self.model(**self._model_kwargs(batch)).logits.float()
        if self.use.activation == "sigmoid":
            scores = torch.sigmoid(logits[:, 0])
        elif self.use.activation == "softmax":
            scores = torch.softmax(logits, dim=-1)[:, self.use.label]
        else:
            scores = logits[:, self.use.label]
        return [float(s) for s in scores.cpu().numpy()]


class TokenScorePredictor(Predictor):
    """P(class `use.label`) per answer word-piece of a (question, answer) input."""

    auto_class = "AutoModelForTokenClassification"

    def _after_load(self) -> None:
        if self.use.label >= self.model.config.num_labels:
            raise ValueError(f"label {self.use.label} out of range for "
                             f"{self.model.config.num_labels} classes")

    def encode(self, inputs: Sequence[Hashable]) -> list[layouts.Encoded]:
        return layouts.encode_keyphrase_batch(self.tokenizer, inputs, self.max_length)

    def _outputs(self, batch: batching.Padded, encoded: Sequence[layouts.Encoded]) -> list[Any]:
        import torch
        logits = self.model(**self._model_kwargs(batch)).logits.float()
        probs = torch.softmax(logits, dim=-1)[..., self.use.label].cpu().numpy()
        out = []
        for k, row in enumerate(encoded):
            start, end = row.span
            ids = np.asarray(row.input_ids[start:end], dtype=np.int64)
            tokens = tuple(self.tokenizer.convert_ids_to_tokens(ids.tolist()))
            out.append(TokenScores(tokens, ids, probs[k, start:end].astype(np.float32)))
        return out


_PREDICTORS = {"token_embeddings": EncoderPredictor, "sentence_embedding": EncoderPredictor,
               "sequence_score": CrossEncoderPredictor, "token_scores": TokenScorePredictor}


def load_predictor(use: ModelUse, **kwargs: Any) -> Predictor:
    """Loads the predictor for a use (kwargs: max_batch_rows, max_batch_tokens, cache_size)."""
    return _PREDICTORS[use.task](use, **kwargs)
