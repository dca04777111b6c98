"""`model_card.md` and `metrics.json` of a training run.

Both are written from one plain dict (`run_info`), so the card and the JSON never
disagree. The card says what the checkpoint is, the data it saw (paths, row counts,
splits), the input layout, every hyper-parameter, the budget and why training stopped,
the dev results over time, the best checkpoint, test results and how to use it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.training import checkpoint
from transforms.training.config import TrainConfig
from transforms.training.loop import TrainResult


def run_info(*, title: str, task: str, model: str, init_checkpoint: str | None,
             data: Mapping[str, Any], layout: str, config: TrainConfig,
             extra_hparams: Mapping[str, Any], result: TrainResult,
             test: Mapping[str, float] | None, usage: str,
             calibration: Mapping[str, Any] | None = None,
             held_out: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything the card and metrics.json report, as one JSON-ready dict; `held_out`:
    results beside `test`, each a key of its own (`HELD_OUT`)."""
    hparams = {k: v for k, v in vars(config).items()
               if k not in ("output_dir", "progress", "resume", "overwrite")}
    return {
        "title": title, "task": task, "model": model, "init_checkpoint": init_checkpoint,
        "data": dict(data), "layout": layout,
        "hyperparameters": {**hparams, **extra_hparams},
        "training": {
            "global_step": result.global_step, "total_steps": result.total_steps,
            "steps_per_epoch": result.steps_per_epoch,
            "epochs_done": round(result.global_step / result.steps_per_epoch, 3),
            "stop_reason": result.stop_reason, "device": result.device,
            "precision": result.precision, "wall_s": round(result.wall_s, 1),
            "cpu_s": round(result.cpu_s, 1),
            "padding_ratio": round(result.padding_ratio, 3),
        },
        "best": {"metric": result.best_metric, "value": result.best_value,
                 "step": result.best_step},
        "dev_history": result.history,
        "test": dict(test) if test else None,
        "calibration": dict(calibration) if calibration else None,
        "loss_curve": [list(p) for p in result.loss_curve],
        "usage": usage,
        **{key: held_out[key] for key, _ in HELD_OUT if (held_out or {}).get(key)},
    }


# Held-out results beside `test` (cross_encoder.py): key -> the card's section title.
HELD_OUT = (
    ("test_by_pair_kind", "Test results per pair kind"),
    ("hard_test", "WES-hard test results (best checkpoint)"),
    ("hard_test_by_pair_kind", "WES-hard test results per pair kind"),
)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.4g}"
    if value is None or (isinstance(value, (dict, list, tuple)) and not value):
        return "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{v}`" for v in value) or "-"
    return str(value)


def _table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    if not rows:
        return ["(none)"]
    cols = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return lines


def _pairs(mapping: Mapping[str, Any]) -> list[str]:
    return _table([{"name": k, "value": v} for k, v in mapping.items()])


def render_card(info: Mapping[str, Any]) -> str:
    """The markdown model card of `run_info`."""
    data, training, best = info["data"], info["training"], info["best"]
    lines = [f"# {info['title']}", "",
             f"Task: {info['task']}. Base model: `{info['model']}`"
             + (f", initialised from `{info['init_checkpoint']}`" if info["init_checkpoint"]
                else "") + ".", "",
             "## Data", ""]
    splits = [{"split": s, "rows": data["rows"].get(s), "files": data["files"].get(s, [])}
              for s in data["rows"]]
    lines += _table(splits) + [""]
    lines += [f"- {k}: {_fmt(v)}" for k, v in data.items() if k not in ("rows", "files")]
    lines += ["", "## Input layout", "", info["layout"], "", "## Hyper-parameters", ""]
    lines += _pairs(info["hyperparameters"]) + ["", "## Training", ""]
    lines += _pairs(training) + ["", "## Dev results", ""]
    lines += [f"Best checkpoint (saved in this folder): step {_fmt(best['step'])}, "
              f"{best['metric']} = {_fmt(best['value'])}.", ""]
    lines += _table(info["dev_history"]) + [""]
    if info.get("calibration"):
        c = info["calibration"]
        lines += ["## Decision threshold", "",
                  f"A score >= {c['threshold']:.4f} means \"correct\": the threshold that "
                  f"maximises {c['objective']} on the {c['split']} split "
                  f"({c['split_rows']} rows: {c['objective']} {_fmt(c['value'])}, against "
                  f"{_fmt(c['value_at_0.5'])} at 0.5). It is saved in `config.json` as "
                  f"`{c['config_key']}`; `qa-score`'s report uses it for accuracy, and the "
                  "metric's signature names it.", ""]
    if info["test"]:
        lines += ["## Test results (best checkpoint)", ""] + _pairs(info["test"]) + [""]
    for key, title in HELD_OUT:
        if key.endswith("_by_pair_kind") and info.get(key):
            lines += [f"## {title}", "", "Accuracy: the share of a kind's rows on the right "
                      "side of 0.5 (and of the decision threshold).", ""]
            lines += _table([{"pair_kind": k, **v} for k, v in info[key].items()]) + [""]
        elif info.get(key):
            lines += [f"## {title}", ""] + _pairs(info[key]) + [""]
    lines += ["## Use", "", info["usage"], "",
              "`last/` holds the latest state (optimizer, scheduler, RNG, data position) "
              "for `--resume`; delete it to keep only the best checkpoint.", ""]
    return "\n".join(lines)


def write_outputs(output_dir: str, info: Mapping[str, Any]) -> tuple[str, str]:
    """Writes `model_card.md` and `metrics.json`; returns their paths."""
    card = os.path.join(output_dir, checkpoint.CARD_FILE)
    tmp = card + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(render_card(info))
    os.replace(tmp, card)
    metrics = os.path.join(output_dir, checkpoint.METRICS_FILE)
    checkpoint.write_json(metrics, info)
    return card, metrics
