"""Loaded models that turn a list of distinct inputs into outputs (torch, no Beam).

Two halves, so that several processes can prepare inputs for one model on one device:

- `device.DeviceModel`: the model on its device, padded passes in, numpy arrays out
  (device.py); plain picklable values in and out, so it can live in another process.
- `Predictor`: the host side. `predict(inputs)` looks outputs up in an LRU cache,
  encodes the missing inputs as one `TokenBatch` (encoding.py: each distinct segment
  tokenized once, by the fast tokenizer's batch call), groups them by length into passes
  capped by rows and padded tokens (each padded to its own longest row), has the device
  model run them, and turns the arrays into per-input outputs in input order.

`load_predictor(use)` gives both in one process, the plain-Python way (`score_corpus`,
tests). The Beam handlers (transforms/inference/handlers.py) load the `DeviceModel` with
`load_model` (shared across processes on request) and build the `Predictor` around it in
each worker process.

The window a `Predictor` sorts by length is the list given to `predict`: the larger it
is, the less padding (on the judgment pairs of the model benchmark, padded/real tokens is
1.28 with 512-input windows and 4,096-token passes, 1.09 with 2,048, 1.01 for a global
sort). On a GPU raise `max_batch_tokens` (e.g. 65,536) and the window with it.
"""

from __future__ import annotations

import collections
import threading
import types
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from transforms.models import batching, layouts, loading
from transforms.models.device import DeviceModel
from transforms.models.encoding import SegmentEncoder
from transforms.models.uses import ENCODER_TASKS, ModelUse, TokenEmbeddings, TokenMatch, TokenScores

DEFAULT_MAX_BATCH_ROWS = 2048
# Padded tokens per forward pass: small passes on a CPU (its caches), large ones on a GPU,
# where a pass of a few thousand tokens is too short to keep the device busy.
DEFAULT_MAX_BATCH_TOKENS = 4096
DEFAULT_MAX_BATCH_TOKENS_CUDA = 65536
# Cached outputs per process, by task: scores are a float, token embeddings ~30 KB each.
DEFAULT_CACHE_SIZE = {"sequence_score": 200_000, "sentence_embedding": 50_000,
                      "token_embeddings": 5_000, "token_match": 100_000,
                      "token_scores": 20_000}
STAT_NAMES = ("inputs", "cache_hits", "forward_passes", "real_tokens", "padded_tokens")


class Predictor:
    """The host side of one `ModelUse` (see the module docstring).

    Args:
        use: what to load and which output to produce.
        model: the `DeviceModel`, or any object with its `run` and `info` (a proxy to one
            in another process); None loads one here.
        max_batch_rows: most rows per forward pass.
        max_batch_tokens: most padded tokens (rows x longest row) per forward pass; None =
            `DEFAULT_MAX_BATCH_TOKENS` on a CPU, `DEFAULT_MAX_BATCH_TOKENS_CUDA` on a GPU.
        cache_size: outputs kept in the per-process LRU cache (0 disables it); None =
            `DEFAULT_CACHE_SIZE[use.task]`.
    """

    def __init__(self, use: ModelUse, model: Any = None,
                 max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS,
                 max_batch_tokens: int | None = None,
                 cache_size: int | None = None) -> None:
        self.use = use
        self.model = model if model is not None else DeviceModel(use)
        info = self.model.info()
        if max_batch_tokens is None:
            max_batch_tokens = (DEFAULT_MAX_BATCH_TOKENS_CUDA if info["device"].startswith("cuda")
                                else DEFAULT_MAX_BATCH_TOKENS)
        self.max_batch_rows = max_batch_rows
        self.max_batch_tokens = max_batch_tokens
        self.cache_size = DEFAULT_CACHE_SIZE[use.task] if cache_size is None else cache_size
        self.tokenizer = loading.load_tokenizer(use.spec)
        self.max_length = loading.tokenizer_max_length(
            use.spec, self.tokenizer, types.SimpleNamespace(**info))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.uses_token_types = "token_type_ids" in self.tokenizer.model_input_names
        self._type_vocab = info["type_vocab_size"]
        self._encoder = None if use.task == "token_scores" else SegmentEncoder(
            self.tokenizer, self.max_length)
        special = [self.tokenizer.cls_token_id, self.tokenizer.sep_token_id]
        self._special_ids = np.array([t for t in special if t is not None], dtype=np.int64)
        self.device = info["device"]
        self._cache: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def predict(self, inputs: Sequence[Hashable]) -> tuple[list[Any], dict[str, int]]:
        """Outputs for `inputs` (in order) and counts: inputs, cache hits, forward passes,
        real and padded tokens."""
        stats = dict.fromkeys(STAT_NAMES, 0)
        stats["inputs"] = len(inputs)
        found: dict[Hashable, Any] = {}
        if self.cache_size:
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

    def encode(self, inputs: Sequence[Hashable]) -> batching.TokenBatch:
        """Token ids (and segment ids) of the inputs, as one `TokenBatch`.

        Raises:
            ValueError: an input of the wrong shape for the task, or three segments on a
                model with two token types (unless `segment_overflow="clamp"`).
        """
        task = self.use.task
        if task == "token_scores":
            return batching.TokenBatch.from_encoded(
                layouts.encode_keyphrase_batch(self.tokenizer, inputs, self.max_length))
        if task in ENCODER_TASKS:
            if not all(isinstance(x, str) for x in inputs):
                raise ValueError("encoder inputs must be strings")
            return self._encoder.encode(inputs)
        for x in inputs:
            if not isinstance(x, tuple):
                raise ValueError(f"a cross-encoder input is a tuple of 1..3 strings, got {x!r}")
        tokens = self._encoder.encode(inputs)
        if not self.uses_token_types or not len(tokens.types):
            return tokens
        top = int(tokens.types.max())
        if top < max(self._type_vocab, 1):
            return tokens
        if self.use.segment_overflow == "error":
            raise ValueError(
                f"segment id {top} needs type_vocab_size > {top}; the model has "
                f"{self._type_vocab} (use segment_overflow='clamp' or a model with more types)")
        return tokens._replace(types=np.minimum(tokens.types, max(self._type_vocab - 1, 0)))

    def _passes(self, tokens: batching.TokenBatch, stats: dict[str, int]
                ) -> tuple[list[list[int]], list[batching.Padded]]:
        """The inputs grouped by length into padded passes (and the positions of each)."""
        lengths = tokens.lengths
        plans = batching.plan_batches(lengths, self.max_batch_rows, self.max_batch_tokens)
        passes = [batching.pad_tokens(tokens, positions, self.pad_id, self.uses_token_types)
                  for positions in plans]
        stats.update(forward_passes=len(passes), real_tokens=int(lengths.sum()),
                     padded_tokens=sum(p.input_ids.size for p in passes))  # one per predict
        return plans, passes

    def _compute(self, inputs: list[Hashable], stats: dict[str, int]) -> list[Any]:
        if self.use.task == "token_match":
            return self._match(inputs, stats)
        tokens = self.encode(inputs)
        plans, passes = self._passes(tokens, stats)
        results: list[Any] = [None] * len(inputs)
        for positions, array in zip(plans, self.model.run(passes)):
            for k, i in enumerate(positions):
                results[i] = self._output(array, k, tokens, i)
        return results

    def _match(self, inputs: list[Hashable], stats: dict[str, int]) -> list[TokenMatch]:
        """`TokenMatch` per (candidate, reference) pair: each distinct text encoded once,
        the greedy match on the device (`DeviceModel.match`)."""
        for x in inputs:
            if not (isinstance(x, tuple) and len(x) == 2 and all(isinstance(t, str) for t in x)):
                raise ValueError(f"a token_match input is a (candidate, reference) pair of "
                                 f"texts, got {x!r}")
        texts = list(dict.fromkeys(t for pair in inputs for t in pair))
        where = {t: i for i, t in enumerate(texts)}
        tokens = self.encode(texts)
        plans, passes = self._passes(tokens, stats)
        lengths = tokens.lengths
        order = np.concatenate([np.asarray(p, dtype=np.int64) for p in plans])
        starts = np.zeros(len(texts), dtype=np.int64)
        starts[order] = np.concatenate([[0], np.cumsum(lengths[order])[:-1]])
        pairs = np.array([[where[c], where[r]] for c, r in inputs], dtype=np.int64)
        cand_max, ref_max = self.model.match(passes, starts, lengths, pairs)
        # one isin over the window's tokens (per text, it cost more than the match)
        bounds = tokens.offsets.tolist()
        flat_special = np.isin(tokens.ids, self._special_ids)
        ids = [tokens.ids[a:b] for a, b in zip(bounds, bounds[1:])]
        special = [flat_special[a:b] for a, b in zip(bounds, bounds[1:])]
        # bounds as Python ints: slicing with numpy scalars costs more per pair
        cand_at = np.concatenate([[0], np.cumsum(lengths[pairs[:, 0]])]).tolist()
        ref_at = np.concatenate([[0], np.cumsum(lengths[pairs[:, 1]])]).tolist()
        return [TokenMatch(ids[c], cand_max[cand_at[q]:cand_at[q + 1]], special[c],
                           ids[r], ref_max[ref_at[q]:ref_at[q + 1]], special[r])
                for q, (c, r) in enumerate(pairs.tolist())]

    def _output(self, array: np.ndarray, k: int, tokens: batching.TokenBatch, i: int) -> Any:
        """Input i's output from row k of its pass's array."""
        task = self.use.task
        if task == "sequence_score":
            return float(array[k])
        if task == "sentence_embedding":
            return np.array(array[k])
        ids = tokens.row(i)[0]
        if task == "token_embeddings":
            return TokenEmbeddings(ids.copy(), np.ascontiguousarray(array[k, : len(ids)]),
                                   np.isin(ids, self._special_ids))
        start, end = tokens.spans[i]
        answer = ids[start:end].copy()
        return TokenScores(tuple(self.tokenizer.convert_ids_to_tokens(answer.tolist())),
                           answer, array[k, start:end].astype(np.float32))


def load_predictor(use: ModelUse, **kwargs: Any) -> Predictor:
    """Loads the model and its host side here (kwargs: max_batch_rows, max_batch_tokens,
    cache_size)."""
    return Predictor(use, DeviceModel(use), **kwargs)
