"""The model a cross-encoder run starts from: an encoder (`model`) or a one-logit
cross-encoder to continue (`init_checkpoint`, a previous output), checked for a
compatible head before anything is trained, and the encoder its weights descend from.
"""

from __future__ import annotations

import os

from transforms.models import loading
from transforms.training import checkpoint
from transforms.training.data_files import read_json


def start_checkpoint(init_checkpoint: str | None, model: str | None) -> str:
    """The resolved checkpoint a fresh run loads, checked for a compatible head."""
    if init_checkpoint:
        path = loading.resolve_model(init_checkpoint)
        config = loading.read_config(path)
        archs = (config or {}).get("architectures") or []
        n = len((config or {}).get("id2label") or {}) or (config or {}).get("num_labels")
        if not any(a.endswith("ForSequenceClassification") for a in archs) or n != 1:
            raise ValueError(f"init_checkpoint {init_checkpoint} is not a one-logit "
                             f"cross-encoder (architectures {archs}, {n} labels); pass an "
                             "output folder of train_cross_encoder, or use model")
        return path
    path = loading.resolve_model(model)
    config = loading.read_config(path) or {}
    archs = config.get("architectures") or []
    n = len(config.get("id2label") or {}) or config.get("num_labels")
    if any(a.endswith("ForSequenceClassification") for a in archs) and n != 1:
        raise ValueError(f"model {model} has a {n}-label classification head; start "
                         "from an encoder or a one-logit cross-encoder")
    return path


def base_model_name(init_checkpoint: str | None, model: str | None) -> str:
    """The encoder the weights descend from (read from an init checkpoint's metrics.json)."""
    if init_checkpoint:
        path = os.path.join(loading.resolve_model(init_checkpoint), checkpoint.METRICS_FILE)
        if os.path.isfile(path):
            return str(read_json("checkpoint metrics", path).get("model", init_checkpoint))
        return init_checkpoint
    return loading.ModelSpec(loading.resolve_model(model)).display_name()
