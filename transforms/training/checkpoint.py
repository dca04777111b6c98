"""The output folder of a training run, and how checkpoints are written and read.

```
<output>/                    the best checkpoint so far (by the dev metric): config.json,
                             model.safetensors, tokenizer files; model_card.md, metrics.json
<output>/last/               the latest checkpoint + trainer_state.pt (optimizer, scheduler,
                             grad scaler, RNG states, epoch, batch position, best so far,
                             history, the run's fingerprint) + trainer_state.json
```

The output folder itself is an ordinary Hugging Face checkpoint, loadable by path as soon
as the first evaluation has run. Checkpoints are written to a temporary sibling and
renamed into place, so an interruption while saving leaves the previous one intact.
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

logger = logging.getLogger(__name__)

LAST = "last"
STATE_FILE = "trainer_state.pt"
STATE_JSON = "trainer_state.json"
CARD_FILE = "model_card.md"
METRICS_FILE = "metrics.json"
_MARKERS = (LAST, CARD_FILE, METRICS_FILE)


def prepare_output_dir(output_dir: str, resume: bool, overwrite: bool) -> None:
    """Checks the output folder against the run mode, before any training.

    - `resume`: `<output>/last/trainer_state.pt` must exist.
    - otherwise the folder must be new or empty, or hold an earlier training run
      (then `overwrite` deletes it).

    Raises:
        ValueError: nothing to resume; an earlier run without `overwrite`; a non-empty
            folder that is not a training output.
    """
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    state = os.path.join(output_dir, LAST, STATE_FILE)
    if resume:
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
    """Writes `<output>/last/` (model, tokenizer, trainer state), replacing the old one."""
    import torch
    final = os.path.join(output_dir, LAST)
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save(dict(state), os.path.join(tmp, STATE_FILE))
    summary = {k: state[k] for k in ("global_step", "epoch", "batch_in_epoch", "total_steps",
                                     "best_metric", "best_value", "best_step") if k in state}
    with open(os.path.join(tmp, STATE_JSON), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    _replace_dir(tmp, final)


def load_state(output_dir: str) -> dict[str, Any]:
    """The trainer state of `<output>/last/` (our own file: full unpickling is allowed)."""
    import torch
    return torch.load(os.path.join(output_dir, LAST, STATE_FILE), map_location="cpu",
                      weights_only=False)


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
