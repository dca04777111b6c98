"""KPQA keyphrase-predictor training (token classification, labels K / O).

`AutoModelForTokenClassification` with two labels on any encoder checkpoint (default: the
packaged all-MiniLM-L6-v2), trained on (question, answer sentence, answer span) examples
from SQuAD-format JSON (squad_data.py) with cross-entropy over the labelled word-pieces.
The held-out articles are the dev split: token-level and exact-span F1 of the keyphrase
class are reported on them and the best checkpoint is picked by `best_metric`. The output
is a standard token-classification checkpoint with `id2label = {0: "K", 1: "O"}`, which
the scorer's KPQA metrics load by path.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from transforms.models import loading
from transforms.training import card, squad_data
from transforms.training.batching import IGNORE_INDEX, Features
from transforms.training.config import TrainConfig
from transforms.training.cross_encoder import rows_digest
from transforms.training.evaluation import auroc, keyphrase_metrics
from transforms.training.loop import Trainer

logger = logging.getLogger(__name__)

BEST_METRICS = ("token_f1", "span_f1", "token_auroc", "loss")


@dataclasses.dataclass(frozen=True)
class KeyphraseData:
    """Where the examples come from, how they are split, and the starting model.

    Attributes:
        squad: a SQuAD-format JSON file (plain or .gz).
        model: the encoder to start from (None: the packaged all-MiniLM-L6-v2).
        max_length: truncation length of `question [SEP] sentence` in tokens.
        train_articles, eval_articles: article counts of the seeded split.
        max_train_examples, max_eval_examples: seeded example caps.
        best_metric: token_f1, span_f1, token_auroc or loss.
    """

    squad: str
    model: str | None = None
    max_length: int = 96
    train_articles: int = 40
    eval_articles: int = 8
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    best_metric: str = "token_f1"

    def __post_init__(self) -> None:
        if self.max_length < 8:
            raise ValueError(f"max_length must be >= 8, got {self.max_length}")
        if self.train_articles < 1 or self.eval_articles < 1:
            raise ValueError("train_articles and eval_articles must be >= 1")
        for name in ("max_train_examples", "max_eval_examples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.best_metric not in BEST_METRICS:
            raise ValueError(f"best_metric must be one of {BEST_METRICS}, got {self.best_metric!r}")


class KeyphraseTask:
    """The trainer's view of the keyphrase token classifier (see loop.Task)."""

    name = "keyphrase"
    auto_class = "AutoModelForTokenClassification"

    def __init__(self, best_metric: str) -> None:
        self.best_metric = best_metric

    def model_kwargs(self) -> dict[str, Any]:
        labels = dict(enumerate(squad_data.LABELS))
        return {"num_labels": len(labels), "id2label": labels,
                "label2id": {v: k for k, v in labels.items()}}

    def prepare_model(self, model: Any) -> None:
        names = [model.config.id2label[i] for i in range(model.config.num_labels)]
        if names != list(squad_data.LABELS):
            raise ValueError(f"a keyphrase model needs labels {squad_data.LABELS}, got {names}")

    @staticmethod
    def _logits(model: Any, batch: Mapping[str, Any]) -> Any:
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        return model(**inputs).logits.float()

    def loss(self, model: Any, batch: Mapping[str, Any]) -> Any:
        import torch
        logits = self._logits(model, batch)
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1),
            ignore_index=IGNORE_INDEX)

    def outputs(self, model: Any, batch: Mapping[str, Any]) -> list[np.ndarray]:
        logits = self._logits(model, batch).cpu().numpy()
        lengths = batch["attention_mask"].sum(dim=1).cpu().numpy()
        return [logits[k, : int(n)] for k, n in enumerate(lengths)]

    def metrics(self, rows: Sequence[Features], outputs: Sequence[np.ndarray]) -> dict[str, float]:
        gold, predicted, nll, p_key = [], [], [], []
        for row, logits in zip(rows, outputs):
            labels = np.asarray(row.label)
            keep = labels != IGNORE_INDEX
            z = logits[keep].astype(np.float64)
            log_probs = z - np.logaddexp.reduce(z, axis=1, keepdims=True)
            nll.extend(-log_probs[np.arange(len(z)), labels[keep]])
            p_key.extend(np.exp(log_probs[:, squad_data.KEYPHRASE]))
            gold.append(labels[keep] == squad_data.KEYPHRASE)
            predicted.append(z.argmax(axis=1) == squad_data.KEYPHRASE)
        # token_auroc: how well P(K), the weight KPQA uses, ranks answer words first.
        return {**keyphrase_metrics(gold, predicted),
                "token_auroc": auroc(np.concatenate(gold), np.asarray(p_key)),
                "loss": float(np.mean(nll))}


def _cap(features: list[Features], limit: int | None, seed: int) -> list[Features]:
    if limit is None or len(features) <= limit:
        return features
    keep = np.sort(np.random.default_rng(seed).choice(len(features), limit, replace=False))
    return [features[i] for i in keep]


def train_keyphrase(data: KeyphraseData, config: TrainConfig,
                    on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Builds the examples, trains, writes the card; returns the run's report.

    Raises:
        ValueError: a bad SQuAD file, too few articles, an empty split, a model with
            another head (before training starts).
    """
    articles = squad_data.read_squad(data.squad)
    train_articles, eval_articles = squad_data.split_articles(
        articles, data.train_articles, data.eval_articles, config.seed)
    source = loading.resolve_model(data.model)
    head = loading.read_config(source) or {}
    if any(a.endswith("ForTokenClassification") for a in head.get("architectures") or []):
        names = list((head.get("id2label") or {}).values())
        if names != list(squad_data.LABELS):
            raise ValueError(f"model {data.model} is a token classifier with labels {names}; "
                             f"start from an encoder or a keyphrase model ({squad_data.LABELS})")
    tokenizer = loading.load_tokenizer(loading.ModelSpec(source))
    splits, counts = {}, {}
    for split, chosen, limit in (("train", train_articles, data.max_train_examples),
                                 ("dev", eval_articles, data.max_eval_examples)):
        examples, skipped = squad_data.build_examples(chosen, data.squad)
        features, dropped = squad_data.encode_examples(tokenizer, examples, data.max_length)
        if not features:
            raise ValueError(f"{data.squad}: the {split} articles give no usable examples "
                             f"(skipped {dict(skipped)}, dropped {dict(dropped)})")
        splits[split] = _cap(features, limit, config.seed)
        counts[split] = {"articles": len(chosen), "questions": len(examples),
                         "examples": len(splits[split]), **skipped, **dropped}
    fingerprint = {"squad": data.squad, "counts": counts, "start": source,
                   "digest": rows_digest(splits["train"] + splits["dev"]),
                   "max_length": data.max_length, "best_metric": data.best_metric}
    task = KeyphraseTask(data.best_metric)
    trainer = Trainer(task, config, splits["train"], splits["dev"], tokenizer=tokenizer,
                      model_source=source, fingerprint=fingerprint)
    logger.info("training a keyphrase predictor: %s, %d steps", counts, trainer.total_steps)
    result = trainer.fit(on_step)
    info = card.run_info(
        title="KPQA keyphrase predictor", task=task.name,
        model=loading.ModelSpec(source).display_name(), init_checkpoint=None,
        data={"squad": data.squad, "files": {"train": [data.squad], "dev": [data.squad]},
              "rows": {s: c["examples"] for s, c in counts.items()},
              "counts": counts,
              "split": f"by article, seeded shuffle: {data.train_articles} train, "
                       f"{data.eval_articles} held out (the dev split)",
              "train_articles": sorted(str(a.get("title")) for a in train_articles),
              "held_out_articles": sorted(str(a.get("title")) for a in eval_articles),
              "examples": "one per question: the first answer, the sentence(s) holding it"},
        layout="`transforms.models.layouts.encode_keyphrase_batch`: [CLS] question [SEP] "
               f"answer sentence [SEP], segment ids 0/1, truncated to {data.max_length} tokens; "
               "labels K (0) / O (1) on the first word-piece of each sentence word, -100 "
               "elsewhere",
        config=config, extra_hparams={"max_length": data.max_length,
                                      "best_metric": data.best_metric,
                                      "loss": "cross-entropy over labelled word-pieces"},
        result=result, test=None,
        usage=("Score with it: the keyphrase `model` option of the kpqa_* metrics of "
               "`python -m pipelines.score_predictions` (`KPQAMetric(model="
               f"\"{config.output_dir}\")` in transforms/metrics/kpqa.py); "
               "weights = softmax(logits)[K] per answer word-piece. Span F1 on the held-out "
               "articles is exact-match F1 over runs of K words (seqeval on K/O tags, as the "
               "KPQA release reports it); token F1 counts words; token AUROC says how well "
               "P(K) ranks answer words above the others."))
    card.write_outputs(config.output_dir, info)
    return info
