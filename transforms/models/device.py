"""A model on its device: padded passes in, numpy arrays out (torch, no Beam).

The device half of a loaded model (the host half, which encodes inputs and groups them
into passes, is `predictors.Predictor`). `DeviceModel.run(passes)` takes padded passes
(numpy arrays, `batching.Padded`) and returns one numpy array per pass, in one call:
every pass is copied and launched before any result is read back, so on a GPU the device
works through the window while the host is still launching, and the host waits once.
`DeviceModel.match` is BERTScore's greedy match, on the device. Its methods take and
return plain picklable values, so it can live in another process behind Beam's
`MultiProcessShared` proxy, serving several host processes from its threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from transforms.models import batching, loading
from transforms.models.uses import ENCODER_TASKS, ModelUse

logger = logging.getLogger(__name__)

_AUTO_CLASS = {"token_embeddings": "AutoModel", "token_match": "AutoModel",
               "sentence_embedding": "AutoModel",
               "sequence_score": "AutoModelForSequenceClassification",
               "token_scores": "AutoModelForTokenClassification"}
# Greedy matching (token_match) gathers each pair's candidate and reference vectors;
# pairs are matched in chunks of at most this many gathered floats (128 MB as float32).
MATCH_CHUNK_FLOATS = 1 << 25


class DeviceModel:
    """One `ModelUse`'s model on its device: padded passes in, numpy arrays out.

    Outputs per pass, by task: `sequence_score` (rows,) float32 scores, the activation
    applied; `sentence_embedding` (rows, dim) float32 masked means; `token_embeddings`
    (rows, longest, dim) float32 hidden states of `use.layer`; `token_scores`
    (rows, longest) float32 P(class `use.label`). `token_match` uses `match` instead: the
    hidden states stay on the device, and only each pair's best cosines come back.

    Raises:
        ValueError: the checkpoint cannot be loaded, or its head does not fit the use (a
            layer out of range, a sigmoid on a multi-class head, a class out of range).
    """

    def __init__(self, use: ModelUse) -> None:
        self.use = use
        self.model = loading.load_model(use.spec, _AUTO_CLASS[use.task])
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        self._local = threading.local()  # per calling thread: its staging buffer
        config = self.model.config
        self._layer_index = None
        if use.task in ENCODER_TASKS:
            layer, n_layers = use.layer, config.num_hidden_layers
            if layer is not None and not 0 <= layer <= n_layers:
                raise ValueError(f"layer must be in 0..{n_layers}, got {layer}")
            # Dropping the unused top layers is bert-score's own trick: same numbers, less work.
            if layer is not None and layer != n_layers and not loading.truncate_layers(
                    self.model, layer):
                self._layer_index = layer
        elif use.task == "sequence_score":
            n = config.num_labels
            if use.activation == "sigmoid" and n != 1:
                raise ValueError(f"sigmoid activation needs a one-logit head, the model has {n}")
            if use.activation != "sigmoid" and use.label >= n:
                raise ValueError(f"label {use.label} out of range for {n} classes")
        elif use.label >= config.num_labels:
            raise ValueError(f"label {use.label} out of range for {config.num_labels} classes")
        self._mask_form: str | None = None  # the attention mask's form for the model
        self._mask_form = self._probe_mask_form()

    def _probe_mask_form(self) -> str | None:
        """The form in which this model takes a prepared 4-D attention mask, or None to
        give it the 2-D one.

        transformers builds the 4-D mask itself from a 2-D one, and to do so tests
        `padding_mask.all()`: on a GPU that waits for every pass launched before, once a
        pass, so the host cannot launch a window's passes ahead of the device. A 4-D mask
        is used as given: a boolean one for SDPA attention, an additive one for eager.
        Whether this model takes it, and gives the same outputs, is checked here on a
        small padded batch (any other attention implementation, an error or a different
        output: the 2-D mask)."""
        import torch
        form = {"sdpa": "bool", "eager": "additive"}.get(
            getattr(self.model.config, "_attn_implementation", None))
        if form is None:
            return None
        config = self.model.config
        vocab = int(getattr(config, "vocab_size", 0) or 0)
        if vocab < 8:
            return None
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(4, min(vocab, 1000), (3, 7), generator=generator)
        mask = (torch.arange(7)[None, :] < torch.tensor([[7], [4], [1]])).long()
        kwargs = {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device)}
        if int(getattr(config, "type_vocab_size", 0) or 0) > 1:
            kwargs["token_type_ids"] = (torch.arange(7)[None, :].expand(3, 7) >= 3).long().to(
                self.device)
        try:
            with torch.inference_mode():
                self._mask_form = None
                plain = self._forward(kwargs)
                self._mask_form = form
                prepared = self._forward(kwargs)
        except Exception as e:  # noqa: BLE001 (any failure: the model keeps the 2-D mask)
            logger.info("%s: no prepared attention mask (%s)", self.use.spec.model, e)
            return None
        finally:
            self._mask_form = None
        if plain.shape != prepared.shape:
            return None
        if plain.dim() > 1 and plain.shape[:2] == mask.shape:  # per token: real tokens only
            keep = mask.to(self.device).bool()
            plain, prepared = plain[keep], prepared[keep]
        tolerance = 1e-4 if self.dtype == torch.float32 else 2e-2
        same = torch.allclose(plain.float(), prepared.float(), atol=tolerance, rtol=tolerance)
        return form if bool(same) else None

    def _model_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The model's arguments: `kwargs` with the attention mask in the probed form."""
        if self._mask_form is None:
            return kwargs
        import torch
        keep = kwargs["attention_mask"][:, None, None, :].bool()
        if self._mask_form == "bool":
            mask = keep
        else:
            mask = torch.zeros(keep.shape, dtype=self.dtype, device=keep.device).masked_fill(
                ~keep, torch.finfo(self.dtype).min)
        return {**kwargs, "attention_mask": mask}

    def info(self) -> dict[str, Any]:
        """What the host side needs to know of the model (plain values)."""
        config = self.model.config
        return {"max_position_embeddings": getattr(config, "max_position_embeddings", None),
                "type_vocab_size": int(getattr(config, "type_vocab_size", 0) or 0),
                "device": str(self.device)}

    def run(self, passes: Sequence[batching.Padded]) -> list[np.ndarray]:
        """The outputs of every pass (see the class docstring), in order."""
        import torch
        outputs = []
        with torch.inference_mode():
            for kwargs in self._window(passes):
                outputs.append(self._forward(kwargs))
            if self.use.task == "sequence_score" and outputs:
                # one copy back for the whole window; the passes ran in the meantime
                scores = torch.cat(outputs).cpu().numpy()
                return np.split(scores, np.cumsum([len(o) for o in outputs])[:-1])
            return [o.cpu().numpy() for o in outputs]

    def match(self, passes: Sequence[batching.Padded], starts: np.ndarray,
              lengths: np.ndarray, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """BERTScore's greedy match of text pairs, on the device (task `token_match`).

        Args:
            passes: the distinct texts, padded into passes.
            starts, lengths: per text, where its tokens start in the passes' tokens laid
                end to end (pass by pass, row by row, padding left out), and how many.
            pairs: (n, 2) int64: the candidate and reference text of each pair.

        Returns:
            (cand_max, ref_max): every pair's per-token best cosines, laid end to end in
            pair order (candidate tokens of pair 0, of pair 1, ...; the same for the
            references).
        """
        import torch
        with torch.inference_mode():
            tables = []
            for kwargs in self._window(passes):
                hidden = self._forward(kwargs)
                hidden = hidden / hidden.norm(dim=-1, keepdim=True)
                tables.append(hidden[kwargs["attention_mask"].bool()])
            dim = tables[0].shape[-1] if tables else 1
            table = torch.cat([*tables, torch.zeros(1, dim, device=self.device)])
            return _greedy_match(table, starts, lengths, pairs)

    def _window(self, passes: Sequence[batching.Padded]) -> list[dict[str, Any]]:
        """Every pass's model inputs on the device, from one host-to-device copy.

        The passes' arrays are laid end to end, as int32, in one staging buffer (on a GPU
        page-locked and kept per thread, so the copy runs asynchronously and nothing waits
        for it), copied once, then viewed per pass and widened to int64 on the device.
        Copying each array of each pass from ordinary memory instead stalled the host
        until the device had caught up, three times a pass (docs/decisions.md)."""
        import torch
        arrays = [(k, name, array) for k, padded in enumerate(passes)
                  for name, array in zip(batching.Padded._fields, padded) if array is not None]
        total = sum(array.size for _, _, array in arrays)
        staging = self._staging(total)
        flat = staging.numpy()
        at = 0
        for _, _, array in arrays:
            flat[at:at + array.size] = array.ravel()
            at += array.size
        on_device = staging[:total].to(self.device, non_blocking=True)
        if self.device.type == "cuda":  # the buffer is reused once this copy is done
            self._local.copied = torch.cuda.Event()
            self._local.copied.record()
        window: list[dict[str, Any]] = [{} for _ in passes]
        at = 0
        for k, name, array in arrays:
            window[k][name] = on_device[at:at + array.size].view(array.shape).long()
            at += array.size
        return window

    def _staging(self, size: int) -> Any:
        """An int32 host buffer of at least `size` elements: on a GPU page-locked and
        reused by this thread's next windows, once the last copy out of it is done (it
        normally is: `run` returns after copying the window's outputs back, but not when a
        pass failed); elsewhere a fresh one."""
        import torch
        if self.device.type != "cuda":
            return torch.empty(size, dtype=torch.int32)
        copied = getattr(self._local, "copied", None)
        if copied is not None:
            copied.synchronize()
        buffer = getattr(self._local, "staging", None)
        if buffer is None or buffer.numel() < size:
            buffer = torch.empty(max(size, 1 << 20) * 3 // 2, dtype=torch.int32,
                                 pin_memory=True)
            self._local.staging = buffer
        return buffer

    def _forward(self, kwargs: dict[str, Any]) -> Any:
        import torch
        task = self.use.task
        inputs = self._model_kwargs(kwargs)
        if task in ENCODER_TASKS:
            if self._layer_index is None:
                hidden = self.model(**inputs).last_hidden_state
            else:
                hidden = self.model(**inputs, output_hidden_states=True
                                    ).hidden_states[self._layer_index]
            hidden = hidden.float()
            if task != "sentence_embedding":
                return hidden
            mask = kwargs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        logits = self.model(**inputs).logits.float()
        if task == "token_scores":
            return torch.softmax(logits, dim=-1)[..., self.use.label]
        if self.use.activation == "sigmoid":
            return torch.sigmoid(logits[:, 0])
        if self.use.activation == "softmax":
            return torch.softmax(logits, dim=-1)[:, self.use.label]
        return logits[:, self.use.label]


def _greedy_match(table: Any, starts: np.ndarray, lengths: np.ndarray,
                  pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pair, each candidate token's best cosine with a reference token and each
    reference token's with a candidate token, from unit vectors `table` (its last row
    zeros, for padding). Pairs go longest first, in chunks of at most
    `MATCH_CHUNK_FLOATS` gathered floats: one batched matrix product per chunk."""
    import torch
    device, dim, blank = table.device, table.shape[1], table.shape[0] - 1
    cand_len, ref_len = lengths[pairs[:, 0]], lengths[pairs[:, 1]]
    cand_at = np.concatenate([[0], np.cumsum(cand_len)])
    ref_at = np.concatenate([[0], np.cumsum(ref_len)])
    cand_out = torch.empty(int(cand_at[-1]), device=device)
    ref_out = torch.empty(int(ref_at[-1]), device=device)
    order = np.lexsort((-ref_len, -cand_len))
    at = 0
    while at < len(order):
        width = int(cand_len[order[at]]) + int(ref_len[order[at:]].max())
        size = max(1, MATCH_CHUNK_FLOATS // (width * dim))
        chunk = order[at:at + size]
        at += len(chunk)
        cand, cand_valid = _gather(table, starts, pairs[chunk, 0], cand_len[chunk], blank)
        ref, ref_valid = _gather(table, starts, pairs[chunk, 1], ref_len[chunk], blank)
        sim = torch.bmm(cand, ref.transpose(1, 2))
        sim.masked_fill_(~(cand_valid[:, :, None] & ref_valid[:, None, :]), -2.0)
        for out, best, valid, start in (
                (cand_out, sim.amax(dim=2), cand_valid, cand_at),
                (ref_out, sim.amax(dim=1), ref_valid, ref_at)):
            where = start[chunk][:, None] + np.arange(valid.shape[1])[None, :]
            out[torch.from_numpy(where).to(device)[valid]] = best[valid]
    return cand_out.cpu().numpy(), ref_out.cpu().numpy()


def _gather(table: Any, starts: np.ndarray, texts: np.ndarray, lengths: np.ndarray,
            blank: int) -> tuple[Any, Any]:
    """The token vectors of `texts`, padded with the zero row `blank`: (n, longest, dim),
    and where they are real tokens: (n, longest) bool."""
    import torch
    columns = np.arange(int(lengths.max()))
    valid = columns[None, :] < lengths[:, None]
    index = np.where(valid, starts[texts][:, None] + columns[None, :], blank)
    return (table[torch.from_numpy(index).to(table.device)],
            torch.from_numpy(valid).to(table.device))
