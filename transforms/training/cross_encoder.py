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
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from transforms.metrics import judge
from transforms.models import layouts, loading, torch_models
from transforms.training import card, pair_data
from transforms.training.batching import Features
from transforms.training.best_checkpoint import calibrate, evaluate_split, update_config
from transforms.training.config import TrainConfig
from transforms.training.evaluation import (
    THRESHOLD_OBJECTIVES,
    binary_metrics,
    graded_metrics,
    is_binary,
)
from transforms.training.loop import Trainer
from transforms.training.pair_kinds import NEGATIVE_KINDS, hard_test_files
from transforms.training.start_model import base_model_name, start_checkpoint

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
        negative_kinds: wes: train and dev keep their positives and the negatives of
            these `pair_kind`s only (pair_kinds.py; None: every row).
        hard_test_file: wes: the WES-hard test split's shards (a path or glob; None: the
            folder beside `input`, `<input>-hard/`, when there is one).
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
    negative_kinds: tuple[str, ...] | None = None
    hard_test_file: str | None = None

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
        unknown = set(self.negative_kinds or ()) - set(NEGATIVE_KINDS)
        if unknown or self.negative_kinds == ():
            raise ValueError(f"negative_kinds must be kinds of {NEGATIVE_KINDS}, got "
                             f"{self.negative_kinds!r}")
        if self.format != "wes" and (self.negative_kinds or self.hard_test_file):
            raise ValueError("negative_kinds and hard_test_file apply to format wes only")
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


def rows_digest(rows: Sequence[Features]) -> str:
    """A short hash of encoded rows (a resumed run must see the same data)."""
    digest = hashlib.sha256()
    for r in rows:
        digest.update(repr((r.input_ids, r.token_type_ids, r.label)).encode())
    return digest.hexdigest()[:16]


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
                                  data.gold_layout, data.max_gold_chars, data.negative_kinds)
    hard_files = ([] if data.format != "wes" or data.skip_test
                  else hard_test_files(data.hard_test_file, data.input))
    hard = pair_data.subsample(pair_data.read_split("wes", hard_files, "test"),
                               data.max_test_rows, config.seed)
    binary = is_binary([r.label for s in ("train", "dev") for r in splits[s]])
    allowed = BINARY_METRICS if binary else GRADED_METRICS
    best = allowed[0] if data.best_metric == "auto" else data.best_metric
    if best not in allowed:
        raise ValueError(f"best_metric {best} does not suit {'binary' if binary else 'graded'} "
                         f"targets; choose one of {allowed}")
    weights = class_weights([r.label for r in splits["train"]], data.class_weight)
    source = start_checkpoint(data.init_checkpoint, data.model)
    tokenizer = loading.load_tokenizer(loading.ModelSpec(source))
    max_length = data.max_length or DEFAULT_MAX_LENGTH[data.format]
    encoded = {s: encode_rows(tokenizer, rows, max_length) for s, rows in splits.items()}
    encoded_hard = encode_rows(tokenizer, hard, max_length)
    fingerprint = {"format": data.format, "files": {s: f for s, f in files.items()},
                   "rows": {s: len(r) for s, r in encoded.items()},
                   "digest": rows_digest(encoded["train"] + encoded["dev"]),
                   "start": source, "max_length": max_length, "best_metric": best,
                   **({"gold_layout": data.gold_layout, "max_gold_chars": data.max_gold_chars}
                      if data.format in pair_data.JUDGE_FORMATS else {}),
                   **({"class_weights": list(weights)} if data.class_weight != "none" else {}),
                   **({"negative_kinds": list(data.negative_kinds)} if data.negative_kinds
                      else {})}
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
    held_out = {}  # split -> (metrics, accuracy per pair kind)
    for split, rows, kinds in (("test", encoded["test"], [r.kind for r in splits["test"]]),
                               ("hard_test", encoded_hard, [r.kind for r in hard])):
        if rows and not data.skip_test and result.best_step is not None:
            held_out[split] = evaluate_split(trainer, task, config.output_dir, rows, kinds,
                                             calibration)
            logger.info("%s (best checkpoint): %s", split, held_out[split][0])
    test = held_out.get("test", (None, None))[0]
    family = {"wes": "wes", "stsb": "sas", "square": "square", "bem": "bem",
              "evouna": "judge", "judge": "judge"}[data.format]
    module = _METRIC_MODULE.get(data.format, "transforms/metrics/model_metrics.py")
    layout_option = (f", gold_layout=\"{data.gold_layout}\""
                     if data.format in pair_data.JUDGE_FORMATS else "")
    mined_card = os.path.join(os.path.dirname(os.path.abspath(data.input or ".")),
                              "dataset_card.md")
    info = card.run_info(
        title=f"{data.format.upper()} cross-encoder ({family} metric)", task=task.name,
        model=base_model_name(data.init_checkpoint, data.model),
        init_checkpoint=data.init_checkpoint,
        data={"format": data.format, "input": data.input,
              "files": {s: f for s, f in {**files, "hard_test": hard_files}.items() if f},
              "rows": {**fingerprint["rows"], **({"hard_test": len(hard)} if hard else {})},
              "targets": "binary 0/1" if binary else "graded in [0, 1]",
              "row_caps": {k: v for k, v in limits.items() if v},
              **({"negative_kinds": list(data.negative_kinds)} if data.negative_kinds
                 else {}),
              **({"dataset_card": mined_card}
                 if data.format == "wes" and os.path.isfile(mined_card) else {})},
        layout=f"`transforms.models.layouts.{_layout(data)}`, truncated to "
               f"{max_length} tokens; one logit, sigmoid = score",
        config=config, extra_hparams={"max_length": max_length, "best_metric": best,
                                      "loss": "BCE with logits" + (
                                          f", class weights {weights[0]:.3f} (0) / "
                                          f"{weights[1]:.3f} (1)" if weights != (1.0, 1.0)
                                          else "")},
        result=result, test=test, calibration=calibration, held_out={
            **({"hard_test": held_out["hard_test"][0]} if "hard_test" in held_out else {}),
            **{f"{split}_by_pair_kind": by_kind for split, (_, by_kind) in held_out.items()
               if by_kind}},
        usage=(f"Score with it: the `model` option of the `{family}` metric of "
               f"`python -m pipelines.score_predictions` (`{_METRIC_CLASS[data.format]}"
               f"(model=\"{config.output_dir}\"{layout_option})` in {module}); "
               "or load it with `AutoModelForSequenceClassification.from_pretrained` and "
               "apply a sigmoid to the logit."))
    card.write_outputs(config.output_dir, info)
    return info
