"""The output folder of a training run, and how checkpoints are written and read.

```
<output>/                    the best checkpoint so far (by the dev metric): config.json,
                             model.safetensors, tokenizer files; model_card.md, metrics.json
<output>/last/               the latest checkpoint (model.safetensors, tokenizer files)
                             + resume_state.json and resume_state.safetensors (optimizer,
                             scheduler, grad scaler, RNG states, epoch, batch position, best
                             so far, history, the run's fingerprint) + trainer_state.json
                             (a summary for people)
```

The output folder itself is an ordinary Hugging Face checkpoint, loadable by path as soon
as the first evaluation has run. Checkpoints are written to a temporary sibling and
renamed into place, so an interruption while saving leaves the previous one intact.

Nothing in the output folder is a pickle, so `--resume` pointed at a folder from
elsewhere cannot run code: the trainer state is JSON (its structure, numbers and strings)
plus one safetensors file (its tensors, referenced from the JSON by key), and the weights
are read with `use_safetensors=True`. The `trainer_state.pt` pickle of earlier versions is
refused, never unpickled.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from collections.abc import Mapping
from typing import Any

import numpy as np

from transforms.models import loading

logger = logging.getLogger(__name__)

LAST = "last"
STATE_FILE = "resume_state.json"
STATE_TENSORS = "resume_state.safetensors"
STATE_JSON = "trainer_state.json"
LEGACY_STATE_FILE = "trainer_state.pt"
_STATE_FORMAT = 1
# Tags of the JSON encoding of the state (`_encode`): what JSON itself cannot say.
_TENSOR, _TUPLE, _ARRAY, _ITEMS = "__tensor__", "__tuple__", "__ndarray__", "__items__"
_STATE_KEYS = ("global_step", "epoch", "batch_in_epoch", "total_steps", "optimizer",
               "scheduler", "rng", "fingerprint")
CARD_FILE = "model_card.md"
METRICS_FILE = "metrics.json"
_MARKERS = (LAST, CARD_FILE, METRICS_FILE)


def prepare_output_dir(output_dir: str, resume: bool, overwrite: bool) -> None:
    """Checks the output folder against the run mode, before any training.

    - `resume`: `<output>/last/resume_state.json` must exist.
    - otherwise the folder must be new or empty, or hold an earlier training run
      (then `overwrite` deletes it).

    Raises:
        ValueError: nothing to resume, or only a pickled state of an earlier version (it
            is not loaded); an earlier run without `overwrite`; a non-empty folder that is
            not a training output.
    """
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    state = os.path.join(output_dir, LAST, STATE_FILE)
    if resume:
        legacy = os.path.join(output_dir, LAST, LEGACY_STATE_FILE)
        if not os.path.isfile(state) and os.path.exists(legacy):
            raise ValueError(
                f"cannot resume from {legacy}: it is a pickle (the format of earlier "
                "versions), and unpickling a file can run any code it names, so it is not "
                f"loaded; resume needs {STATE_FILE} + {STATE_TENSORS}. Start the run again "
                "(--overwrite) or train into another --output")
        if not os.path.isfile(state):
            raise ValueError(f"nothing to resume: {state} does not exist")
        return
    if not os.path.isdir(output_dir) or not os.listdir(output_dir):
        os.makedirs(output_dir, exist_ok=True)
        return
    names = os.listdir(output_dir)
    if not any(m in names for m in _MARKERS):
        raise ValueError(f"{output_dir} is not empty and holds no training run; choose "
                         "another --output")
    if not overwrite:
        raise ValueError(f"{output_dir} already holds a training run; pass --resume to "
                         "continue it or --overwrite to replace it")
    logger.warning("deleting the earlier run in %s (--overwrite)", output_dir)
    shutil.rmtree(output_dir)
    os.makedirs(output_dir)


def _replace_dir(tmp: str, final: str) -> None:
    old = final + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.isdir(final):
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def save_pretrained(model: Any, tokenizer: Any, directory: str) -> None:
    """`save_pretrained` of model and tokenizer into `directory`, atomically per file.

    Files are written to `<directory>/.best.tmp/` and then moved in one by one with
    `os.replace`, so the folder always holds a whole checkpoint (old or new files) and
    keeps whatever else it holds (the model card, `last/`).
    """
    tmp = os.path.join(directory, ".best.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    os.makedirs(directory, exist_ok=True)
    for f in sorted(os.listdir(tmp)):
        os.replace(os.path.join(tmp, f), os.path.join(directory, f))
    shutil.rmtree(tmp, ignore_errors=True)


def rng_state() -> dict[str, Any]:
    """Python, numpy, torch (and CUDA) random states."""
    import torch
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restores what `rng_state` captured."""
    import torch
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_last(output_dir: str, model: Any, tokenizer: Any, state: Mapping[str, Any]) -> None:
    """Writes `<output>/last/` (model, tokenizer, trainer state), replacing the old one.

    Raises:
        TypeError: the state holds a value the JSON + safetensors encoding cannot hold
            (the message names where).
    """
    from safetensors.torch import save_file
    final = os.path.join(output_dir, LAST)
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tensors: dict[str, Any] = {}
    encoded = _encode(dict(state), tensors, "state")
    save_file(tensors, os.path.join(tmp, STATE_TENSORS), metadata={"format": str(_STATE_FORMAT)})
    with open(os.path.join(tmp, STATE_FILE), "w", encoding="utf-8") as f:
        json.dump({"format": _STATE_FORMAT, "state": encoded}, f)
    summary = {k: state[k] for k in ("global_step", "epoch", "batch_in_epoch", "total_steps",
                                     "best_metric", "best_value", "best_step") if k in state}
    with open(os.path.join(tmp, STATE_JSON), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    _replace_dir(tmp, final)


def load_state(output_dir: str) -> dict[str, Any]:
    """The trainer state of `<output>/last/`, decoded from JSON and safetensors.

    Neither file can run code when read; the model weights beside them are read from
    safetensors (`Trainer.load_model` with `loading.safe_load_kwargs`).

    Raises:
        ValueError: a state file, or the model weights, missing or unreadable (the message
            names the file).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    last = os.path.join(output_dir, LAST)
    if not any(os.path.isfile(os.path.join(last, n)) for n in loading.SAFETENSORS_WEIGHTS):
        raise ValueError(f"cannot resume: {last} has no {loading.SAFETENSORS_WEIGHTS[0]} "
                         "(the trainer writes its weights as safetensors only)")
    path = os.path.join(last, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        if not isinstance(saved, dict) or saved.get("format") != _STATE_FORMAT:
            raise ValueError(f"not a trainer state of format {_STATE_FORMAT}")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"cannot resume: {path} is not a readable trainer state ({e})") from e
    tensors_path = os.path.join(last, STATE_TENSORS)
    try:
        tensors = load_file(tensors_path, device="cpu")
    except (OSError, SafetensorError) as e:
        raise ValueError(f"cannot resume: {tensors_path} is not a readable safetensors "
                         f"file ({e})") from e
    try:
        state = _decode(saved["state"], tensors)
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"cannot resume: {path} (with {STATE_TENSORS}) does not hold a "
                         f"whole trainer state ({type(e).__name__}: {e})") from e
    return state


def _encode(obj: Any, tensors: dict[str, Any], where: str) -> Any:
    """A JSON-ready copy of `obj`, its tensors moved into `tensors` (by a key).

    Tuples, non-string dict keys and numpy arrays are tagged, so that `_decode` gives
    back equal values of the same types (the optimizer's state is keyed by int; Python's
    and numpy's RNG states are tuples).
    """
    import torch
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, torch.Tensor):
        key = str(len(tensors))
        tensors[key] = obj.detach().to("cpu").contiguous()
        return {_TENSOR: key}
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise TypeError(f"cannot save the {obj.dtype} array at {where} in the trainer state")
        return {_ARRAY: obj.tolist(), "dtype": obj.dtype.str}
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(obj)]
        return {_TUPLE: items} if isinstance(obj, tuple) else items
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: _encode(v, tensors, f"{where}.{k}") for k, v in obj.items()}
        return {_ITEMS: [[_encode(k, tensors, f"{where} key"),
                          _encode(v, tensors, f"{where}[{k!r}]")] for k, v in obj.items()]}
    raise TypeError(f"cannot save a {type(obj).__name__} at {where} in the trainer state")


def _decode(obj: Any, tensors: Mapping[str, Any]) -> Any:
    """Inverse of `_encode`: plain values, tuples, dicts, numeric arrays and tensors."""
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if _TENSOR in obj:
        return tensors[obj[_TENSOR]]
    if _TUPLE in obj:
        return tuple(_decode(v, tensors) for v in obj[_TUPLE])
    if _ARRAY in obj:
        dtype = np.dtype(obj["dtype"])
        if dtype.kind not in "biuf":
            raise ValueError(f"array of dtype {dtype}")
        return np.array(obj[_ARRAY], dtype=dtype)
    if _ITEMS in obj:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in obj[_ITEMS]}
    return {k: _decode(v, tensors) for k, v in obj.items()}


def fingerprint_mismatch(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """`key: saved -> current` for every fingerprint entry that differs."""
    keys = sorted(set(saved) | set(current))
    return [f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in keys
            if saved.get(k) != current.get(k)]


def write_json(path: str, obj: Any) -> None:
    """Writes JSON atomically (NaN written as null)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(_finite(obj), f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
