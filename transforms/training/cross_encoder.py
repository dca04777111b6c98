"""Single-logit cross-encoder training (WES, STS-B, SQuArE, BEM rows).

`AutoModelForSequenceClassification` with `num_labels=1` on any encoder checkpoint (default:
the packaged all-MiniLM-L6-v2), trained with BCE-with-logits against targets in [0, 1]
(0/1 labels, or graded such as STS score / 5); the scorer reads it with a sigmoid. BEM
rows have three segments, so the model gets a third token-type embedding (a copy of the
second, `torch_models.ensure_token_types`). A curriculum (e.g. WES, then STS:
docs/design.md's best model) is two runs, the second with `init_checkpoint` = the first
one's output.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from transforms.metrics import judge
from transforms.models import layouts, loading, torch_models
from transforms.models.uses import DECISION_THRESHOLD_KEY as THRESHOLD_KEY
from transforms.training import card, checkpoint, pair_data
from transforms.training.batching import Features
from transforms.training.config import TrainConfig
from transforms.training.data_files import read_json
from transforms.training.evaluation import (
    THRESHOLD_OBJECTIVES,
    accuracy_at,
    binary_metrics,
    choose_threshold,
    graded_metrics,
    is_binary,
    value_at,
)
from transforms.training.loop import Trainer

logger = logging.getLogger(__name__)

# EVOUNA rows (answer, gold, question): median 38 tokens, 99th percentile 166, longest 333.
DEFAULT_MAX_LENGTH = {"wes": 64, "stsb": 128, "square": 256, "bem": 128, "evouna": 192,
                      "judge": 192}
BINARY_METRICS = ("auroc", "accuracy", "loss")
GRADED_METRICS = ("spearman", "pearson", "loss")
CLASS_WEIGHTS = ("none", "balanced")
_SIGMOID = "torch.nn.modules.activation.Sigmoid"
_METRIC_CLASS = {"wes": "WESMetric", "stsb": "SASMetric", "square": "SQuArEMetric",
                 "bem": "BEMMetric", "evouna": "JudgeMetric", "judge": "JudgeMetric"}
_METRIC_MODULE = {"evouna": "transforms/metrics/judge.py", "judge": "transforms/metrics/judge.py"}


@dataclasses.dataclass(frozen=True)
class CrossEncoderData:
    """Which rows to train on and which model to start from.

    Attributes:
        format: wes, stsb, square, bem, evouna or judge (see pair_data.py).
        input: the folder holding the splits by the format's file names.
        train_file, dev_file, test_file: explicit paths or globs (override `input`).
        model: the encoder to start from (None: the packaged all-MiniLM-L6-v2).
        init_checkpoint: a one-logit cross-encoder to continue from (a previous output).
        max_length: truncation length in tokens (None: DEFAULT_MAX_LENGTH[format]).
        max_train_rows, max_dev_rows, max_test_rows: seeded row caps.
        skip_test: do not evaluate the test split at the end.
        best_metric: the dev metric that picks the best checkpoint (auto: AUROC for 0/1
            targets, Spearman for graded ones).
        threshold_objective: what the decision threshold of a binary model maximises on
            the dev split ("accuracy" or "f1").
        gold_layout: evouna and judge: the reference segment holds the best-matching gold
            ("best"), every distinct gold, best match first ("all"), or the best-matching
            gold after a containment mark ("marked"; `pair_data.judge_reference`). None:
            "marked" for evouna and judge (the measured best, docs/benchmarks.md), "best"
            otherwise.
        max_gold_chars: evouna and judge with gold_layout "all": the reference segment's
            length cap.
        class_weight: "none", or "balanced" (0/1 targets: each class carries half the
            loss; `class_weights`).
    """

    format: str
    input: str | None = None
    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    model: str | None = None
    init_checkpoint: str | None = None
    max_length: int | None = None
    max_train_rows: int | None = None
    max_dev_rows: int | None = None
    max_test_rows: int | None = None
    skip_test: bool = False
    best_metric: str = "auto"
    threshold_objective: str = "accuracy"
    gold_layout: str | None = None
    max_gold_chars: int = judge.DEFAULT_MAX_GOLD_CHARS
    class_weight: str = "none"

    def __post_init__(self) -> None:
        if self.gold_layout is None:
            object.__setattr__(self, "gold_layout",
                               "marked" if self.format in pair_data.JUDGE_FORMATS
                               else "best")
        if self.class_weight not in CLASS_WEIGHTS:
            raise ValueError(f"class_weight must be one of {CLASS_WEIGHTS}, got "
                             f"{self.class_weight!r}")
        if self.gold_layout not in judge.GOLD_LAYOUTS:
            raise ValueError(f"gold_layout must be one of {judge.GOLD_LAYOUTS}, got "
                             f"{self.gold_layout!r}")
        if self.max_gold_chars < 1:
            raise ValueError(f"max_gold_chars must be >= 1, got {self.max_gold_chars}")
        if self.format not in pair_data.JUDGE_FORMATS and (
                self.gold_layout != "best"
                or self.max_gold_chars != judge.DEFAULT_MAX_GOLD_CHARS):
            raise ValueError("gold_layout and max_gold_chars apply to formats evouna and "
                             "judge only")
        if self.format not in pair_data.FORMATS:
            raise ValueError(f"format must be one of {pair_data.FORMATS}, got {self.format!r}")
        if self.max_length is not None and self.max_length < 8:
            raise ValueError(f"max_length must be >= 8, got {self.max_length}")
        if self.threshold_objective not in THRESHOLD_OBJECTIVES:
            raise ValueError(f"threshold_objective must be one of {THRESHOLD_OBJECTIVES}, "
                             f"got {self.threshold_objective!r}")
        for name in ("max_train_rows", "max_dev_rows", "max_test_rows"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        known = ("auto", *BINARY_METRICS, *GRADED_METRICS)
        if self.best_metric not in known:
            raise ValueError(f"best_metric must be one of {sorted(set(known))}, got "
                             f"{self.best_metric!r}")
        if self.init_checkpoint and self.model:
            raise ValueError("give model (an encoder) or init_checkpoint (a cross-encoder to "
                             "continue), not both")


class CrossEncoderTask:
    """The trainer's view of a one-logit cross-encoder (see loop.Task)."""

    name = "cross-encoder"
    auto_class = "AutoModelForSequenceClassification"

    def __init__(self, binary: bool, segments: int, best_metric: str,
                 class_weights: tuple[float, float] = (1.0, 1.0)) -> None:
        """`class_weights`: the loss weight of a target-0 and of a target-1 example (a
        graded target t gets (1 - t) * w0 + t * w1)."""
        self.binary, self.segments, self.best_metric = binary, segments, best_metric
        self.class_weights = class_weights

    def model_kwargs(self) -> dict[str, Any]:
        return {"num_labels": 1}

    def prepare_model(self, model: Any) -> None:
        if self.segments == 3:
            torch_models.ensure_token_types(model, 3)
        # sentence-transformers' CrossEncoder reads its activation from here.
        model.config.sentence_transformers = {"activation_fn": _SIGMOID}

    @staticmethod
    def _logits(model: Any, batch: Mapping[str, Any]) -> Any:
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        return model(**inputs).logits[:, 0].float()

    def loss(self, model: Any, batch: Mapping[str, Any]) -> Any:
        import torch
        labels = batch["labels"]
        weight = None
        if self.class_weights != (1.0, 1.0):
            w0, w1 = self.class_weights
            weight = (1 - labels) * w0 + labels * w1
        return torch.nn.functional.binary_cross_entropy_with_logits(
            self._logits(model, batch), labels, weight=weight)

    def outputs(self, model: Any, batch: Mapping[str, Any]) -> list[np.ndarray]:
        return list(self._logits(model, batch).cpu().numpy())

    def metrics(self, rows: Sequence[Features], outputs: Sequence[np.ndarray]) -> dict[str, float]:
        logits = np.asarray(outputs, dtype=np.float64)
        labels = np.asarray([r.label for r in rows], dtype=np.float64)
        bce = np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))
        scores = 1 / (1 + np.exp(-logits))
        quality = binary_metrics(labels, scores) if self.binary else graded_metrics(labels, scores)
        return {**quality, "loss": float(bce.mean())}


def class_weights(labels: Sequence[float], mode: str) -> tuple[float, float]:
    """The loss weights of target-0 and target-1 examples: (1, 1) for "none"; for
    "balanced", n / (2 * n_class), so each class carries half the loss (EVOUNA-TQ's train
    split, 85% positive: 3.33 and 0.59).

    Raises:
        ValueError: an unknown mode, or "balanced" for targets that are not 0/1 or lack a
            class.
    """
    if mode not in CLASS_WEIGHTS:
        raise ValueError(f"class_weight must be one of {CLASS_WEIGHTS}, got {mode!r}")
    if mode == "none":
        return (1.0, 1.0)
    if not is_binary(labels):
        raise ValueError("class_weight balanced needs 0/1 targets")
    positives = sum(1 for x in labels if x >= 0.5)
    negatives = len(labels) - positives
    if not positives or not negatives:
        raise ValueError("class_weight balanced needs both classes in the train split")
    return (len(labels) / (2 * negatives), len(labels) / (2 * positives))


def _sigmoid(logits: Sequence[Any]) -> np.ndarray:
    return 1 / (1 + np.exp(-np.asarray(logits, dtype=np.float64)))


def calibrate(trainer: Trainer, checkpoint_dir: str, dev: Sequence[Features],
              objective: str) -> dict[str, Any]:
    """Chooses the best checkpoint's decision threshold on the dev rows and saves it in
    the checkpoint's config.json (`THRESHOLD_KEY`), where the scorer reads it.

    Returns:
        What the model card reports: threshold, objective, its dev value and at 0.5.
    """
    labels = [r.label for r in dev]
    scores = _sigmoid(trainer.predict_checkpoint(checkpoint_dir, dev))
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


def rows_digest(rows: Sequence[Features]) -> str:
    """A short hash of encoded rows (a resumed run must see the same data)."""
    digest = hashlib.sha256()
    for r in rows:
        digest.update(repr((r.input_ids, r.token_type_ids, r.label)).encode())
    return digest.hexdigest()[:16]


def _start_checkpoint(data: CrossEncoderData) -> str:
    """The resolved checkpoint a fresh run loads, checked for a compatible head."""
    if data.init_checkpoint:
        path = loading.resolve_model(data.init_checkpoint)
        config = loading.read_config(path)
        archs = (config or {}).get("architectures") or []
        n = len((config or {}).get("id2label") or {}) or (config or {}).get("num_labels")
        if not any(a.endswith("ForSequenceClassification") for a in archs) or n != 1:
            raise ValueError(f"init_checkpoint {data.init_checkpoint} is not a one-logit "
                             f"cross-encoder (architectures {archs}, {n} labels); pass an "
                             "output folder of train_cross_encoder, or use model")
        return path
    path = loading.resolve_model(data.model)
    config = loading.read_config(path) or {}
    archs = config.get("architectures") or []
    n = len(config.get("id2label") or {}) or config.get("num_labels")
    if any(a.endswith("ForSequenceClassification") for a in archs) and n != 1:
        raise ValueError(f"model {data.model} has a {n}-label classification head; start "
                         "from an encoder or a one-logit cross-encoder")
    return path


def base_model_name(data: CrossEncoderData) -> str:
    """The encoder the weights descend from (read from an init checkpoint's metrics.json)."""
    if data.init_checkpoint:
        path = os.path.join(loading.resolve_model(data.init_checkpoint), checkpoint.METRICS_FILE)
        if os.path.isfile(path):
            return str(read_json("checkpoint metrics", path).get("model", data.init_checkpoint))
        return data.init_checkpoint
    return loading.ModelSpec(loading.resolve_model(data.model)).display_name()


def encode_rows(tokenizer: Any, rows: Sequence[pair_data.PairRow], max_length: int
                ) -> list[Features]:
    """Encodes rows with `layouts.encode_batch` (the scorer's own encoding)."""
    encoded = layouts.encode_batch(tokenizer, [r.segments for r in rows], max_length)
    return [Features(e.input_ids, e.token_type_ids, r.label) for e, r in zip(encoded, rows)]


def _layout(data: CrossEncoderData) -> str:
    judged = data.format in pair_data.JUDGE_FORMATS
    if judged and data.gold_layout == "all":
        return pair_data.LAYOUT_ALL_GOLDS.format(max_gold_chars=data.max_gold_chars)
    if judged and data.gold_layout == "marked":
        return pair_data.LAYOUT_MARKED
    return pair_data.LAYOUT[data.format]


def train_cross_encoder(data: CrossEncoderData, config: TrainConfig,
                        on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Validates the data, trains, evaluates the best checkpoint on test, writes the card.

    Returns:
        The run's report (also written to `metrics.json`).

    Raises:
        ValueError: bad input or options (before training starts).
    """
    files = pair_data.split_files(data.format, data.input, {
        "train": data.train_file, "dev": data.dev_file, "test": data.test_file})
    if data.skip_test:
        files["test"] = []
    limits = {"train": data.max_train_rows, "dev": data.max_dev_rows, "test": data.max_test_rows}
    splits = pair_data.load_pairs(data.format, files, config.seed, limits,
                                  data.gold_layout, data.max_gold_chars)
    binary = is_binary([r.label for s in ("train", "dev") for r in splits[s]])
    allowed = BINARY_METRICS if binary else GRADED_METRICS
    best = allowed[0] if data.best_metric == "auto" else data.best_metric
    if best not in allowed:
        raise ValueError(f"best_metric {best} does not suit {'binary' if binary else 'graded'} "
                         f"targets; choose one of {allowed}")
    weights = class_weights([r.label for r in splits["train"]], data.class_weight)
    source = _start_checkpoint(data)
    tokenizer = loading.load_tokenizer(loading.ModelSpec(source))
    max_length = data.max_length or DEFAULT_MAX_LENGTH[data.format]
    encoded = {s: encode_rows(tokenizer, rows, max_length) for s, rows in splits.items()}
    fingerprint = {"format": data.format, "files": {s: f for s, f in files.items()},
                   "rows": {s: len(r) for s, r in encoded.items()},
                   "digest": rows_digest(encoded["train"] + encoded["dev"]),
                   "start": source, "max_length": max_length, "best_metric": best,
                   **({"gold_layout": data.gold_layout, "max_gold_chars": data.max_gold_chars}
                      if data.format in pair_data.JUDGE_FORMATS else {}),
                   **({"class_weights": list(weights)} if data.class_weight != "none" else {})}
    task = CrossEncoderTask(binary, pair_data.SEGMENTS[data.format], best, weights)
    trainer = Trainer(task, config, encoded["train"], encoded["dev"], tokenizer=tokenizer,
                      model_source=source, fingerprint=fingerprint)
    logger.info("training a cross-encoder on %s: %s rows, %d steps", data.format,
                fingerprint["rows"], trainer.total_steps)
    result = trainer.fit(on_step)
    calibration = None
    if binary and result.best_step is not None:
        calibration = calibrate(trainer, config.output_dir, encoded["dev"],
                                data.threshold_objective)
    if data.format in pair_data.JUDGE_FORMATS and result.best_step is not None:
        update_config(config.output_dir, {judge.LAYOUT_KEY: {
            "gold_layout": data.gold_layout, "max_gold_chars": data.max_gold_chars}})
    test = None
    if encoded["test"] and not data.skip_test and result.best_step is not None:
        outputs = trainer.predict_checkpoint(config.output_dir, encoded["test"])
        test = task.metrics(encoded["test"], outputs)
        if calibration is not None:
            test["accuracy_at_threshold"] = accuracy_at(
                [r.label for r in encoded["test"]], _sigmoid(outputs),
                calibration["threshold"])
        logger.info("test (best checkpoint): %s", test)
    family = {"wes": "wes", "stsb": "sas", "square": "square", "bem": "bem",
              "evouna": "judge", "judge": "judge"}[data.format]
    module = _METRIC_MODULE.get(data.format, "transforms/metrics/model_metrics.py")
    layout_option = (f", gold_layout=\"{data.gold_layout}\""
                     if data.format in pair_data.JUDGE_FORMATS else "")
    mined_card = os.path.join(os.path.dirname(os.path.abspath(data.input or ".")),
                              "dataset_card.md")
    info = card.run_info(
        title=f"{data.format.upper()} cross-encoder ({family} metric)", task=task.name,
        model=base_model_name(data),
        init_checkpoint=data.init_checkpoint,
        data={"format": data.format, "input": data.input,
              "files": {s: f for s, f in files.items() if f}, "rows": fingerprint["rows"],
              "targets": "binary 0/1" if binary else "graded in [0, 1]",
              "row_caps": {k: v for k, v in limits.items() if v},
              **({"dataset_card": mined_card}
                 if data.format == "wes" and os.path.isfile(mined_card) else {})},
        layout=f"`transforms.models.layouts.{_layout(data)}`, truncated to "
               f"{max_length} tokens; one logit, sigmoid = score",
        config=config, extra_hparams={"max_length": max_length, "best_metric": best,
                                      "loss": "BCE with logits" + (
                                          f", class weights {weights[0]:.3f} (0) / "
                                          f"{weights[1]:.3f} (1)" if weights != (1.0, 1.0)
                                          else "")},
        result=result, test=test, calibration=calibration,
        usage=(f"Score with it: the `model` option of the `{family}` metric of "
               f"`python -m pipelines.score_predictions` (`{_METRIC_CLASS[data.format]}"
               f"(model=\"{config.output_dir}\"{layout_option})` in {module}); "
               "or load it with `AutoModelForSequenceClassification.from_pretrained` and "
               "apply a sigmoid to the logit."))
    card.write_outputs(config.output_dir, info)
    return info
