"""A model on its device: padded passes in, numpy arrays out (torch, no Beam).

The device half of a loaded model (the host half, which encodes inputs and groups them
into passes, is `predictors.Predictor`). `DeviceModel.run(passes)` takes padded passes
(numpy arrays, `batching.Padded`) and returns one numpy array per pass, in one call:
every pass is copied and launched before any result is read back, so on a GPU the device
works through the window while the host is still launching, and the host waits once.
`DeviceModel.match` is BERTScore's greedy match (`matching`), on the device, planned on the
host (every index computed with numpy and copied with the window's inputs) so that the
host waits only for the maxima it reads back. Its methods take and return plain picklable
values, so it can live in another process behind Beam's `MultiProcessShared` proxy,
serving several host processes from its threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from transforms.models import batching, matching, torch_models
from transforms.models.uses import ENCODER_TASKS, ModelUse

logger = logging.getLogger(__name__)

_AUTO_CLASS = {"token_embeddings": "AutoModel", "token_match": "AutoModel",
               "sentence_embedding": "AutoModel",
               "sequence_score": "AutoModelForSequenceClassification",
               "token_scores": "AutoModelForTokenClassification"}


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
        self.model = torch_models.load_model(use.spec, _AUTO_CLASS[use.task])
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
            if layer is not None and layer != n_layers and not torch_models.truncate_layers(
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
        self._width: int | None = None  # token_match: the hidden states' width
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
            window, _ = self._window(passes)
            for kwargs in window:
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
        cand_max, ref_max = self._match_on_device(passes, starts, lengths, pairs)
        return cand_max.cpu().numpy(), ref_max.cpu().numpy()  # the host's one wait

    def _match_on_device(self, passes: Sequence[batching.Padded], starts: np.ndarray,
                         lengths: np.ndarray, pairs: np.ndarray) -> tuple[Any, Any]:
        """`match`'s maxima as device tensors, launched without the host waiting once.

        A boolean mask on a device tensor, or a copy from ordinary host memory, makes the
        host wait for the device (`cudaStreamSynchronize`): the match did both, once per
        pass and several times per chunk of pairs. The host knows every length, so
        `matching.plan_match` computes every index with numpy; the indices travel in the
        window's one copy (`_window`); the device only gathers with integer indices. The
        passes' unit vectors are written, padding included, into one table whose last row
        is zeros; each chunk's maxima go to a buffer in chunk layout, and one gather at
        the end puts the real tokens' maxima in pair order."""
        import torch
        dim = self._hidden_width()  # the chunks are planned before any pass has run
        plan = matching.plan_match(passes, starts, lengths, pairs, dim)
        with torch.inference_mode():
            window, indices = self._window(passes, plan.indices)
            table = torch.empty(plan.blank + 1, dim, device=self.device)
            table[plan.blank].zero_()
            for kwargs, at in zip(window, plan.pass_at):
                hidden = self._forward(kwargs)
                if hidden.shape[-1] != dim:
                    raise ValueError(f"hidden states of width {hidden.shape[-1]}, a "
                                     f"one-token pass gave {dim}")
                # padding rows too (never gathered): one write, no mask to select with
                rows = table[at:at + hidden.shape[0] * hidden.shape[1]].view(hidden.shape)
                torch.div(hidden, hidden.norm(dim=-1, keepdim=True), out=rows)
            return matching.greedy_match(table, plan, indices)

    def _hidden_width(self) -> int:
        """The width of the hidden states `match` compares, from a one-token pass on the
        first call (a config's `hidden_size` is not always the output's width)."""
        if self._width is None:
            import torch
            one = torch.ones(1, 1, dtype=torch.long, device=self.device)
            with torch.inference_mode():
                hidden = self._forward({"input_ids": one, "attention_mask": one})
            self._width = int(hidden.shape[-1])
        return self._width

    def _window(self, passes: Sequence[batching.Padded], extra: Sequence[np.ndarray] = ()
                ) -> tuple[list[dict[str, Any]], list[Any]]:
        """Every pass's model inputs on the device, and `extra`'s integer arrays, from one
        host-to-device copy.

        The arrays are laid end to end, as int32, in one staging buffer (on a GPU
        page-locked and kept per thread, so the copy runs asynchronously and nothing waits
        for it), copied once, then viewed per array: the passes' arrays widened to int64
        on the device, `extra`'s left int32 (the greedy match's indices: `torch`'s
        gathers take them as they are). Copying each array of each pass from ordinary
        memory instead stalled the host until the device had caught up, three times a
        pass (docs/decisions.md).

        Returns:
            (per pass, its inputs by name; per `extra` array, its int32 device view of the
            array's shape).
        """
        inputs = [(k, name, array) for k, padded in enumerate(passes)
                  for name, array in zip(batching.Padded._fields, padded) if array is not None]
        views = self._copy([array for _, _, array in inputs] + list(extra))
        window: list[dict[str, Any]] = [{} for _ in passes]
        for (k, name, _), view in zip(inputs, views):
            window[k][name] = view.long()
        return window, views[len(inputs):]

    def _copy(self, arrays: Sequence[np.ndarray]) -> list[Any]:
        """int32 device views of `arrays` (each of its array's shape), from one copy of a
        staging buffer that holds them end to end. The values must fit int32 (token ids,
        masks, segment ids, the match's indices: the caller's to guarantee)."""
        import torch
        total = sum(array.size for array in arrays)
        if total > matching.INT32_MAX:
            raise ValueError(f"{total} integers in one window: more than int32 can index")
        staging = self._staging(total)
        flat = staging.numpy()
        at = 0
        for array in arrays:
            flat[at:at + array.size] = array.ravel()
            at += array.size
        on_device = staging[:total].to(self.device, non_blocking=True)
        if self.device.type == "cuda":  # the buffer is reused once this copy is done
            self._local.copied = torch.cuda.Event()
            self._local.copied.record()
        views = []
        at = 0
        for array in arrays:
            views.append(on_device[at:at + array.size].view(array.shape))
            at += array.size
        return views

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
