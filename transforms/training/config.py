"""`TrainConfig`: the hyper-parameters, budgets and runtime settings of one training run.

Validated when built; `fixed()` gives the options a resumed run must share with the run it
continues (every one but `RESUMABLE_CHANGES`). The `Trainer` (loop.py) runs it; the
entry points build it from their flags (options.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transforms.models import loading

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# Options that may change when a run is resumed; every other one must match.
RESUMABLE_CHANGES = ("epochs", "max_steps", "max_minutes", "eval_every", "save_every",
                     "eval_first", "log_every", "num_threads", "device", "precision",
                     "progress", "resume", "overwrite", "eval_batch_size", "output_dir")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters, budgets and runtime settings of one run (validated when built).

    Attributes:
        output_dir: the output folder (see checkpoint.py for its layout).
        seed: seeds head initialisation, batch order and dropout.
        epochs: passes over the train split (ignored when max_steps is set).
        max_steps: optimizer steps; sets the schedule length.
        max_minutes: wall-clock budget of this invocation; the run stops resumably.
        batch_size, eval_batch_size: rows per training / evaluation batch.
        learning_rate, weight_decay, warmup_ratio, max_grad_norm: optimisation.
        block_batches: batches per length-sorting block (<= 1: random batches).
        eval_every: evaluate every this many steps (None: at epoch ends and the end).
        save_every: write `last/` every this many steps (and at every evaluation).
        eval_first: evaluate before the first step as well.
        log_every: steps per point of the training-loss curve.
        num_threads: torch CPU threads (None: torch's default).
        device: auto, cpu or cuda.
        precision: auto (bf16/fp16 autocast on CUDA, fp32 on CPU), fp32, bf16, fp16.
        progress: show a tqdm progress bar.
        resume: continue the run in `output_dir/last`.
        overwrite: delete an earlier run in `output_dir` first.
    """

    output_dir: str
    seed: int = 13
    epochs: int = 1
    max_steps: int | None = None
    max_minutes: float | None = None
    batch_size: int = 32
    eval_batch_size: int = 128
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    block_batches: int = 20
    eval_every: int | None = None
    save_every: int | None = 200
    eval_first: bool = False
    log_every: int = 10
    num_threads: int | None = None
    device: str = "auto"
    precision: str = "auto"
    progress: bool = True
    resume: bool = False
    overwrite: bool = False

    def __post_init__(self) -> None:
        positive = {"epochs": self.epochs, "batch_size": self.batch_size,
                    "eval_batch_size": self.eval_batch_size, "log_every": self.log_every}
        for name in ("max_steps", "eval_every", "save_every", "num_threads"):
            if getattr(self, name) is not None:
                positive[name] = getattr(self, name)
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"max_minutes must be > 0, got {self.max_minutes}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise ValueError("weight_decay must be >= 0 and max_grad_norm > 0")
        if self.device not in loading.DEVICES:
            raise ValueError(f"device must be one of {loading.DEVICES}, got {self.device!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.device == "cpu" and self.precision in ("bf16", "fp16"):
            raise ValueError(f"precision {self.precision} needs CUDA; use fp32 or auto on CPU")
        if self.resume and self.overwrite:
            raise ValueError("resume and overwrite exclude each other")

    def fixed(self) -> dict[str, Any]:
        """The options a resumed run must share with the run it continues."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in RESUMABLE_CHANGES}
