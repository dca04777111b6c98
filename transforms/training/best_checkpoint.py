"""The best checkpoint of a cross-encoder run, once training has stopped: its decision
threshold chosen on dev (saved in its config.json, where the scorer reads it), and its
metrics on a held-out split (test, or the WES-hard test split), per `pair_kind` too
where the rows carry one (pair_kinds.py).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transforms.models.uses import DECISION_THRESHOLD_KEY as THRESHOLD_KEY
from transforms.training.batching import Features
from transforms.training.evaluation import accuracy_at, choose_threshold, value_at
from transforms.training.loop import Trainer
from transforms.training.pair_kinds import kind_accuracy

logger = logging.getLogger(__name__)


def sigmoid(logits: Sequence[Any]) -> np.ndarray:
    return 1 / (1 + np.exp(-np.asarray(logits, dtype=np.float64)))


def calibrate(trainer: Trainer, checkpoint_dir: str, dev: Sequence[Features],
              objective: str) -> dict[str, Any]:
    """Chooses the best checkpoint's decision threshold on the dev rows and saves it in
    the checkpoint's config.json (`THRESHOLD_KEY`), where the scorer reads it.

    Returns:
        What the model card reports: threshold, objective, its dev value and at 0.5.
    """
    labels = [r.label for r in dev]
    scores = sigmoid(trainer.predict_checkpoint(checkpoint_dir, dev))
    choice = choose_threshold(labels, scores, objective)
    at_half = value_at(objective, labels, scores, 0.5)
    info = {"threshold": round(choice.threshold, 6), "objective": objective,
            "split": "dev", "split_rows": len(dev), "value": choice.value,
            "value_at_0.5": at_half, "config_key": THRESHOLD_KEY}
    path = update_config(checkpoint_dir, {
        THRESHOLD_KEY: info["threshold"],
        f"{THRESHOLD_KEY}_source": {k: v for k, v in info.items() if k != "config_key"}})
    logger.info("decision threshold %.4f (dev %s %.4f; %.4f at 0.5), saved in %s",
                choice.threshold, objective, choice.value, at_half, path)
    return info


def update_config(checkpoint_dir: str, entries: Mapping[str, Any]) -> str:
    """Adds `entries` to a checkpoint's config.json (written to a temp file, then renamed);
    returns the file's path."""
    path = os.path.join(checkpoint_dir, "config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config.update(entries)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    os.replace(tmp, path)
    return path


def evaluate_split(trainer: Trainer, task: Any, checkpoint_dir: str, rows: Sequence[Features],
                   kinds: Sequence[str | None], calibration: Mapping[str, Any] | None
                   ) -> tuple[dict[str, float], dict[str, dict[str, Any]] | None]:
    """The checkpoint's metrics on `rows`: the task's, accuracy at the dev threshold
    (`calibration`), and (None without kinds) accuracy per pair kind (`kinds`, one per
    row: `pair_kinds.kind_accuracy`)."""
    outputs = trainer.predict_checkpoint(checkpoint_dir, rows)
    metrics = task.metrics(rows, outputs)
    labels, scores = [r.label for r in rows], sigmoid(outputs)
    threshold = calibration["threshold"] if calibration else None
    if threshold is not None:
        metrics["accuracy_at_threshold"] = accuracy_at(labels, scores, threshold)
    return metrics, kind_accuracy(kinds, labels, scores, threshold) if task.binary else None
