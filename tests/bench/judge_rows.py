"""EVOUNA-TQ rows and judge checkpoints for the judge benchmarks (bench_model_host,
bench_gpu).

`evouna_rows(n)` gives n scoring rows (question, prediction, references, human, system,
id) from EVOUNA-TQ's 9,690 judged answers (every split; a median of 8 and up to 185 gold
aliases per question), repeated in file order with fresh ids when n is larger: the rows
of one question stay together, as in the files a user scores. With `unique`, each
repetition's answers end in " (copy N)", so every answer is a new text, as in a corpus of
a million model outputs (the segment memo then fills and starts again, as it would
there). `judge_checkpoint` saves a
judge-shaped checkpoint: an encoder with a seeded one-logit head, three token types and
the `marked` layout recorded, loaded by path as a trained judge is (its scores mean
nothing; its cost per token is a trained judge's).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench import bench_data
from transforms.metrics.judge import LAYOUT_KEY
from transforms.training import evouna

EVOUNA_TQ = bench_data.data_path(bench_data.EVOUNA_TQ)
# the benchmarks' `--repeated` flag (evouna_rows' `unique=False`)
REPEATED_HELP = ("EVOUNA-TQ's 9,690 answers repeated as they are (rows past the first 9,690 "
                 "then come from the predictor's cache and the judge's memo: an upper bound for "
                 "new answers); default: every answer a new text, as in a corpus of "
                 "model outputs")


def evouna_rows(n: int, path: str | Path = EVOUNA_TQ, unique: bool = False) -> list[dict]:
    """n scoring rows from EVOUNA-TQ (see the module docstring); exits naming the file
    when it is missing."""
    bench_data.require(path)
    answers = list(evouna.judged_answers(evouna.read_questions(str(path))))
    rows = []
    while len(rows) < n:
        copy = len(rows) // len(answers)
        suffix = f" (copy {copy})" if unique and copy else ""
        for a in answers[: n - len(rows)]:
            rows.append({"id": f"{a.id}#{copy}", "system": a.system,
                         "question": a.question, "prediction": a.prediction + suffix,
                         "references": list(a.references), "human": a.human})
    return rows


def write_jsonl(rows: list[dict], path: str | Path) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return str(path)


def judge_checkpoint(base: str, out: str | Path) -> str:
    """A judge-shaped checkpoint from the encoder at `base` (see the module docstring)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from transforms.models import torch_models

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
    torch_models.ensure_token_types(model, 3)
    model.config.update({LAYOUT_KEY: {"gold_layout": "marked", "max_gold_chars": 200}})
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return str(out)
