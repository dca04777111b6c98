"""A checkpoint's model in torch on a worker: its device and dtype, loaded, changed in place.

`resolve_device` and `resolve_dtype` turn a `loading.ModelSpec`'s device and dtype policy
into torch's on this worker; `load_model` loads a checkpoint with a transformers Auto
class, in eval mode on them, never running code that came with it
(`loading.safe_load_kwargs`); `truncate_layers` and `ensure_token_types` change a loaded
BERT-like encoder in place (its first layers only, more token types). torch and
transformers are imported inside the functions.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from transforms.models.loading import HALF_DTYPES, ModelFolderError, ModelSpec, safe_load_kwargs

logger = logging.getLogger(__name__)


def resolve_device(device: str) -> Any:
    """Returns the torch device for `auto|cpu|cuda` on this worker.

    Raises:
        RuntimeError: `cuda` was asked for and this worker has no CUDA device.
    """
    import torch
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda was requested but this worker has no CUDA device")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


def resolve_dtype(dtype: str, device: Any) -> Any:
    """Returns the torch dtype for a spec's dtype on a resolved device.

    `auto` is bfloat16 on CUDA devices that support it, float16 on older CUDA devices and
    float32 on CPU. A half type asked for explicitly on a CPU worker (possible with
    device=auto) falls back to float32 with a warning.
    """
    import torch
    on_cuda = device.type == "cuda"
    if dtype == "auto":
        if not on_cuda:
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if dtype in HALF_DTYPES and not on_cuda:
        logger.warning("dtype %s needs CUDA; this worker is on CPU, using float32", dtype)
        return torch.float32
    return getattr(torch, dtype)


# Whether scaled-dot-product attention may use cuDNN's kernel on a GPU. Off by default:
# with a padding mask, torch sends attention to cuDNN first on Hopper, and cuDNN builds an
# execution plan for every new (rows, padded length) shape, tens of milliseconds each; a
# scoring run's passes have a new shape nearly every time. Measured on an H200
# (docs/benchmarks.md, "GPU scoring"): the judge's 47 passes over 50,000 rows, their shapes new, 3.65 s
# with cuDNN and 0.43 s without; the same passes again 0.41 s and 0.35 s. Without it,
# attention runs on the memory-efficient kernel, which needs no plan.
# QA_CUDNN_ATTENTION=1 turns it back on.
CUDNN_ATTENTION = os.environ.get("QA_CUDNN_ATTENTION", "0") == "1"


def use_cudnn_attention(enabled: bool) -> None:
    """Lets (or stops) torch's scaled-dot-product attention use cuDNN in this process."""
    import torch
    torch.backends.cuda.enable_cudnn_sdp(enabled)


def load_model(spec: ModelSpec, auto_class: str = "AutoModel", **kwargs: Any) -> Any:
    """Loads a checkpoint with a transformers Auto class, in eval mode on its device/dtype.

    Args:
        spec: which checkpoint and how.
        auto_class: `AutoModel`, `AutoModelForSequenceClassification`,
            `AutoModelForTokenClassification`.
        **kwargs: passed to `from_pretrained` (e.g. `num_labels`).

    Raises:
        ValueError: the checkpoint's files cannot be read (the message names the folder).
    """
    from pickle import UnpicklingError  # what torch.load(weights_only=True) refuses with

    import transformers
    from safetensors import SafetensorError
    device = resolve_device(spec.device)
    dtype = resolve_dtype(spec.dtype, device)
    cls = getattr(transformers, auto_class)
    # One "Loading weights" bar per worker process and model clutters pipeline logs; the
    # log line below says what was loaded.
    transformers.utils.logging.disable_progress_bar()
    if os.path.isdir(spec.model):
        spec.config()  # config.json and weights present and readable, or an error naming them
    safe = safe_load_kwargs(spec.model)
    try:
        model = cls.from_pretrained(spec.model, revision=spec.revision, dtype=dtype,
                                    trust_remote_code=False, **safe, **kwargs)
    except (SafetensorError, UnpicklingError) as e:
        raise ModelFolderError(f"cannot read the weights of {spec.model}: {e}") from e
    except (OSError, ValueError) as e:
        raise ModelFolderError(f"cannot load the model in {spec.model}: {e}") from e
    model.eval()
    model.to(device)
    if device.type == "cuda":
        use_cudnn_attention(CUDNN_ATTENTION)
    logger.info("loaded %s (%s) on %s as %s", spec.model, auto_class, device, dtype)
    return model


def truncate_layers(model: Any, layer: int) -> bool:
    """Keeps the first `layer` transformer layers of a BERT-like encoder, in place.

    The output of the truncated model is then hidden state `layer` (0 = embeddings), as
    bert-score computes it. Returns False when the architecture is not recognised (the
    caller then reads `hidden_states[layer]` instead).

    Raises:
        ValueError: `layer` is outside 0..number of layers.
    """
    import torch
    for owner_name in ("encoder", "transformer"):
        owner = getattr(model, owner_name, None)
        layers = getattr(owner, "layer", None)
        if isinstance(layers, torch.nn.ModuleList):
            if not 0 <= layer <= len(layers):
                raise ValueError(f"layer must be in 0..{len(layers)}, got {layer}")
            owner.layer = torch.nn.ModuleList(list(layers)[:layer])
            return True
    return False


def ensure_token_types(model: Any, num_types: int) -> None:
    """Grows a BERT-like model's token-type embeddings to `num_types` rows, in place.

    New rows copy the last existing row, so a checkpoint pre-trained with two segment
    types can be fine-tuned on a three-segment layout (BEM) and saved with
    `type_vocab_size = num_types`. Does nothing when the model already has enough.
    """
    import torch
    owner = getattr(model, model.base_model_prefix, model).embeddings
    old = owner.token_type_embeddings
    if old.num_embeddings >= num_types:
        return
    new = torch.nn.Embedding(num_types, old.embedding_dim, device=old.weight.device,
                             dtype=old.weight.dtype)
    with torch.no_grad():
        new.weight[: old.num_embeddings] = old.weight
        new.weight[old.num_embeddings:] = old.weight[-1]
    owner.token_type_embeddings = new
    model.config.type_vocab_size = num_types
