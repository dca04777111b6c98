"""The training loop shared by every model: budgets, schedule, AMP, evaluation, resume.

A `Task` says how to build the model and how to turn a padded batch into a loss and into
per-row outputs; the `Trainer` does the rest:

- AdamW (no weight decay on biases and LayerNorm weights), linear warm-up over the first
  `warmup_ratio` of the steps then linear decay to 0, gradient clipping;
- length-grouped batches (`batching.epoch_batches`), deterministic from the seed;
- budgets: `max_steps` (sets the schedule; otherwise `epochs` does) and `max_minutes`
  (a wall-clock stop that keeps the schedule, so `--resume` continues the same run);
- dev metrics every `eval_every` steps, at the end of every epoch and at the end; the best
  by `task.best_metric` is saved to the output folder, the latest state to `last/` every
  `save_every` steps and at every evaluation;
- CUDA with bf16 (fp16 + gradient scaling where bf16 is unsupported) autocast when
  present, fp32 on CPU.

Resuming restores model, optimizer, scheduler, scaler, the RNG states and the position in
the epoch, so an interrupted run ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from transforms.models import loading, torch_models
from transforms.training import batching, checkpoint
from transforms.training.batching import Features
from transforms.training.config import TrainConfig
from transforms.training.evaluation import improved

logger = logging.getLogger(__name__)


class Task(Protocol):
    """What the trainer needs to know about a model (see cross_encoder.py, keyphrase.py)."""

    name: str
    auto_class: str
    best_metric: str

    def model_kwargs(self) -> dict[str, Any]:
        """`from_pretrained` kwargs for a fresh model (num_labels, id2label)."""

    def prepare_model(self, model: Any) -> None:
        """Adjusts a loaded model in place (token types, config metadata)."""

    def loss(self, model: Any, batch: Mapping[str, Any]) -> Any:
        """The mean training loss of a batch of tensors."""

    def outputs(self, model: Any, batch: Mapping[str, Any]) -> list[np.ndarray]:
        """Per-row logits (float32 numpy) of a batch of tensors, in row order."""

    def metrics(self, rows: Sequence[Features], outputs: Sequence[np.ndarray]) -> dict[str, float]:
        """Dev/test metrics (including `loss`) from the rows and their outputs."""


@dataclasses.dataclass
class TrainResult:
    """What a run did: steps, why it stopped, dev history, best checkpoint, timings."""

    global_step: int
    total_steps: int
    steps_per_epoch: int
    stop_reason: str
    best_metric: str
    best_value: float | None
    best_step: int | None
    history: list[dict[str, float]]
    loss_curve: list[tuple[int, float]]
    wall_s: float
    cpu_s: float
    device: str
    precision: str
    padding_ratio: float


def resolve_precision(precision: str, device: Any) -> tuple[Any, str]:
    """(autocast dtype or None, the precision in words) for a resolved device.

    Raises:
        ValueError: bf16/fp16 asked for on a CPU device.
    """
    import torch
    if device.type != "cuda":
        if precision in ("bf16", "fp16"):
            raise ValueError(f"precision {precision} needs CUDA; this machine has none")
        return None, "fp32"
    if precision == "auto":
        precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision], precision


def _param_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name
         else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


class Trainer:
    """Trains `task`'s model on encoded rows (see the module docstring).

    Args:
        task: the model-specific parts.
        config: hyper-parameters, budgets, runtime.
        train, dev: encoded rows (non-empty).
        tokenizer: saved beside every checkpoint.
        model_source: the checkpoint a fresh run starts from (a resolved path or Hub id).
        fingerprint: data and model facts a resumed run must share (paths, row counts,
            a digest of the encoded rows, model, max length).
    """

    def __init__(self, task: Task, config: TrainConfig, train: Sequence[Features],
                 dev: Sequence[Features], *, tokenizer: Any, model_source: str,
                 fingerprint: Mapping[str, Any]) -> None:
        if not train or not dev:
            raise ValueError("the train and dev splits must not be empty")
        self.task, self.config = task, config
        self.train, self.dev = list(train), list(dev)
        self.tokenizer, self.model_source = tokenizer, model_source
        self.fingerprint = {**fingerprint, **config.fixed(), "task": task.name}
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.with_types = "token_type_ids" in tokenizer.model_input_names
        self.lengths = [len(r.input_ids) for r in self.train]
        self.steps_per_epoch = math.ceil(len(self.train) / config.batch_size)
        self.total_steps = config.max_steps or config.epochs * self.steps_per_epoch
        self.device = None
        self.amp_dtype = None
        self.precision = "fp32"

    # -- model and evaluation -------------------------------------------------------

    def load_model(self, path: str, fresh: bool) -> Any:
        """Loads a checkpoint in fp32 on the run's device (fresh: with the task's head).

        No code that came with the checkpoint runs (see `loading.safe_load_kwargs`).
        """
        import torch
        import transformers
        cls = getattr(transformers, self.task.auto_class)
        kwargs = self.task.model_kwargs() if fresh else {}
        model = cls.from_pretrained(path, dtype=torch.float32, trust_remote_code=False,
                                    **loading.safe_load_kwargs(path), **kwargs)
        self.task.prepare_model(model)
        return model.to(self.device)

    def _autocast(self) -> Any:
        import torch
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=self.amp_dtype)

    def evaluate(self, model: Any, rows: Sequence[Features]) -> dict[str, float]:
        """Metrics of `model` on `rows` (eval mode, length-sorted batches)."""
        return self.task.metrics(rows, self.predict(model, rows))

    def predict(self, model: Any, rows: Sequence[Features]) -> list[Any]:
        """The task's outputs of `model` for `rows`, in row order."""
        import torch
        model.eval()
        outputs: list[Any] = [None] * len(rows)
        for positions in batching.eval_batches([len(r.input_ids) for r in rows],
                                               self.config.eval_batch_size):
            batch = batching.to_tensors(batching.collate(
                [rows[i] for i in positions], self.pad_id, self.with_types), self.device)
            with torch.inference_mode(), self._autocast():
                for i, out in zip(positions, self.task.outputs(model, batch)):
                    outputs[i] = out
        return outputs

    def evaluate_checkpoint(self, path: str, rows: Sequence[Features]) -> dict[str, float]:
        """Loads a saved checkpoint (e.g. the best one) and evaluates it on `rows`."""
        return self.task.metrics(rows, self.predict_checkpoint(path, rows))

    def predict_checkpoint(self, path: str, rows: Sequence[Features]) -> list[Any]:
        """Loads a saved checkpoint (e.g. the best one) and returns its outputs on `rows`."""
        if self.device is None:
            self._setup_device()
        return self.predict(self.load_model(path, fresh=False), rows)

    def _setup_device(self) -> None:
        import torch
        if self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)
        self.device = torch_models.resolve_device(self.config.device)
        self.amp_dtype, self.precision = resolve_precision(self.config.precision, self.device)

    # -- training -------------------------------------------------------------------

    def _step(self, model: Any, rows: Sequence[Features], optimizer: Any, scheduler: Any,
              scaler: Any) -> float:
        """One optimizer step on `rows`; returns the batch loss."""
        import torch
        batch = batching.to_tensors(batching.collate(rows, self.pad_id, self.with_types),
                                    self.device)
        model.train()
        with self._autocast():
            loss = self.task.loss(model, batch)
        if scaler is not None:  # fp16: scale the loss, unscale before clipping
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), self.config.max_grad_norm)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    def fit(self, on_step: Callable[[int], None] | None = None) -> TrainResult:
        """Trains until the budget is spent; returns what happened.

        Args:
            on_step: called with the global step after every optimizer step (tests use
                it to interrupt a run).

        Raises:
            ValueError: the output folder does not suit the run mode, or a resumed run's
                data or hyper-parameters differ from the saved ones.
        """
        import torch
        from tqdm.auto import tqdm
        from transformers import get_linear_schedule_with_warmup
        cfg = self.config
        self._setup_device()
        checkpoint.prepare_output_dir(cfg.output_dir, cfg.resume, cfg.overwrite)
        state = checkpoint.load_state(cfg.output_dir) if cfg.resume else None
        if state is not None:
            diff = checkpoint.fingerprint_mismatch(state["fingerprint"], self.fingerprint)
            if diff:
                raise ValueError("cannot resume: the data or hyper-parameters differ from the "
                                 "saved run: " + "; ".join(diff))
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        last_dir = os.path.join(cfg.output_dir, checkpoint.LAST)
        model = self.load_model(last_dir if state else self.model_source, fresh=state is None)
        optimizer = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate)
        warmup = math.ceil(cfg.warmup_ratio * self.total_steps)
        scheduler = get_linear_schedule_with_warmup(optimizer, warmup, self.total_steps)
        scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None
        s = {"global_step": 0, "epoch": 0, "batch_in_epoch": 0, "best_value": None,
             "best_step": None, "history": [], "loss_curve": [], "wall_s": 0.0, "cpu_s": 0.0}
        if state is not None:
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            if scaler is not None and state.get("scaler"):
                scaler.load_state_dict(state["scaler"])
            checkpoint.set_rng_state(state["rng"])
            s.update({k: state[k] for k in s})
            if state["total_steps"] != self.total_steps:
                logger.warning("the step budget changed from %d to %d: the learning-rate "
                               "schedule is stretched to the new length",
                               state["total_steps"], self.total_steps)
            logger.info("resuming at step %d (epoch %d, batch %d)", s["global_step"],
                        s["epoch"], s["batch_in_epoch"])
        wall0, cpu0 = time.monotonic(), time.process_time()
        base_wall, base_cpu = s["wall_s"], s["cpu_s"]

        def clock() -> None:
            s["wall_s"] = base_wall + time.monotonic() - wall0
            s["cpu_s"] = base_cpu + time.process_time() - cpu0

        def save_last() -> None:
            clock()
            checkpoint.save_last(cfg.output_dir, model, self.tokenizer, {
                **s, "total_steps": self.total_steps, "best_metric": self.task.best_metric,
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else None,
                "rng": checkpoint.rng_state(), "fingerprint": self.fingerprint})

        running: list[float] = []

        def evaluate_dev() -> None:
            metrics = self.evaluate(model, self.dev)
            step = s["global_step"]
            clock()
            entry = {"step": step, "epoch": round(step / self.steps_per_epoch, 3),
                     "train_loss": float(np.mean(running)) if running else math.nan,
                     **metrics, "wall_s": round(s["wall_s"], 1)}
            running.clear()
            s["history"].append(entry)
            value = metrics.get(self.task.best_metric, math.nan)
            if improved(self.task.best_metric, value, s["best_value"]):
                s["best_value"], s["best_step"] = value, step
                checkpoint.save_pretrained(model, self.tokenizer, cfg.output_dir)
            logger.info("step %d dev: %s", step, ", ".join(
                f"{k} {v:.4f}" for k, v in metrics.items()))
            bar.set_postfix_str(f"dev {self.task.best_metric} {value:.4f}", refresh=False)

        bar = tqdm(total=self.total_steps, initial=s["global_step"], desc=self.task.name,
                   unit="step", disable=not cfg.progress, dynamic_ncols=True)
        stop_reason = "completed"
        if cfg.eval_first and s["global_step"] == 0 and not s["history"]:
            evaluate_dev()
        batches, batches_epoch, window = None, None, []
        with bar:
            while s["global_step"] < self.total_steps:
                if batches_epoch != s["epoch"]:
                    batches = batching.epoch_batches(self.lengths, cfg.batch_size,
                                                     cfg.block_batches, cfg.seed, s["epoch"])
                    batches_epoch = s["epoch"]
                rows = [self.train[i] for i in batches[s["batch_in_epoch"]]]
                value = self._step(model, rows, optimizer, scheduler, scaler)
                running.append(value)
                window.append(value)
                s["global_step"] += 1
                s["batch_in_epoch"] += 1
                step = s["global_step"]
                epoch_end = s["batch_in_epoch"] == len(batches)
                if epoch_end:
                    s["epoch"] += 1
                    s["batch_in_epoch"] = 0
                if step % cfg.log_every == 0 or step == self.total_steps:
                    s["loss_curve"].append((step, float(np.mean(window))))
                    window.clear()
                bar.update(1)
                bar.set_postfix_str(f"loss {value:.4f} lr {scheduler.get_last_lr()[0]:.2e}",
                                    refresh=False)
                if on_step is not None:
                    on_step(step)
                if (epoch_end or step == self.total_steps
                        or (cfg.eval_every and step % cfg.eval_every == 0)):
                    evaluate_dev()
                    save_last()
                elif cfg.save_every and step % cfg.save_every == 0:
                    save_last()
                if (cfg.max_minutes is not None and step < self.total_steps
                        and time.monotonic() - wall0 > 60 * cfg.max_minutes):
                    stop_reason = f"time budget ({cfg.max_minutes:g} min); resumable with --resume"
                    break
        if not s["history"] or s["history"][-1]["step"] != s["global_step"]:
            evaluate_dev()
            save_last()
        clock()
        return TrainResult(
            global_step=s["global_step"], total_steps=self.total_steps,
            steps_per_epoch=self.steps_per_epoch, stop_reason=stop_reason,
            best_metric=self.task.best_metric, best_value=s["best_value"],
            best_step=s["best_step"], history=s["history"], loss_curve=s["loss_curve"],
            wall_s=s["wall_s"], cpu_s=s["cpu_s"], device=str(self.device),
            precision=self.precision,
            padding_ratio=batching.padding_ratio(self.lengths, batching.epoch_batches(
                self.lengths, cfg.batch_size, cfg.block_batches, cfg.seed, 0)))
