"""The KPQA authors' released per-item BLEU-1, BLEU-4, ROUGE-L and CIDEr values, on the
full files (METEOR, which needs the JVM, is checked in test_meteor.py).

Their protocol: reference column j of every row is scored as its own single-reference
coco-caption corpus (CIDEr-D document frequencies and corpus size from column j alone) and
each row takes the maximum over the columns; AVSD used the first 5 reference columns,
NarrativeQA 2, SemEval 1.
"""

from __future__ import annotations

import csv

import pytest

from tests.conftest import SHARED_DATA
from transforms.metrics.base import QAExample
from transforms.metrics.corpus import score_corpus
from transforms.metrics.registry import build_metrics

KPQA = str(SHARED_DATA / "judgments" / "kpqa")
REFERENCES = {"avsd_all": 5, "nrqa_mhpgm": 2, "semeval_mhpgm": 1}
RELEASED = {"bleu1": "BLEU-1", "bleu4": "BLEU-4", "rougeL": "ROUGE-L", "cider": "CIDEr",
            "meteor": "METEOR"}


def load_kpqa(name: str) -> tuple[list[QAExample], list[dict[str, float]]]:
    """The rows of a KPQA judgment file and the released metric values for them."""
    n_refs = REFERENCES[name]
    with open(f"{KPQA}/{name}.csv", newline="", encoding="utf-8") as f:
        rows = [QAExample(r["answer"], tuple(r[f"reference{j}"] for j in range(1, n_refs + 1)),
                          r["question"]) for r in csv.DictReader(f)]
    with open(f"{KPQA}/released_metric_scores/{name}.csv", newline="", encoding="utf-8") as f:
        released = [{ours: float(r[theirs]) for ours, theirs in RELEASED.items()}
                    for r in csv.DictReader(f)]
    assert len(rows) == len(released)
    return rows, released


def score_all(metrics, rows: list[QAExample], batch_size: int = 128) -> list[dict[str, float]]:
    """Corpus statistics over all rows, then batches: what the pipeline does."""
    return score_corpus(metrics, rows, batch_size=batch_size)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_released_bleu_rouge_cider(name: str) -> None:
    rows, released = load_kpqa(name)
    ours = score_all(build_metrics(["bleu1", "bleu4", "rougeL", "cider"]), rows)
    for column in ("bleu1", "bleu4", "rougeL", "cider"):
        bad = [(i, ours[i][column], released[i][column]) for i in range(len(rows))
               if abs(ours[i][column] - released[i][column]) > 1e-6]
        assert bad == [], f"{name} {column}: {len(bad)} rows differ, first {bad[:3]}"
