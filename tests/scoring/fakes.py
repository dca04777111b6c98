"""A fake metric family for wiring tests: no real scoring, every code path of the contract.

`FakeMetric` computes `fake_len` (prediction length in characters), `fake_overlap` (best
share of prediction tokens found in a reference) and `fake_corpus` (the number of examples
in the corpus, from its `CorpusStatistic`). A prediction equal to `REJECT` raises
`MetricInputError`, as a metric does for an input it cannot score; `CRASH` raises
RuntimeError, a bug that must fail the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transforms.metrics import registry
from transforms.metrics.base import (
    CorpusStatistic,
    MetricInputError,
    QAExample,
    TextMetric,
    format_signature,
)

FAKE_COLUMNS = ("fake_len", "fake_overlap", "fake_corpus")
REJECT = "REJECT"
CRASH = "CRASH"


class CountExamples(CorpusStatistic):
    key = "fake_count"

    def create(self) -> int:
        return 0

    def add(self, accumulator: int, example: QAExample) -> int:
        return accumulator + 1

    def merge(self, accumulators: Sequence[int]) -> int:
        return sum(accumulators)

    def extract(self, accumulator: int) -> int:
        return accumulator


def overlap(prediction: str, references: Sequence[str]) -> float:
    tokens = prediction.split()
    return max(sum(t in ref.split() for t in tokens) / len(tokens) for ref in references)


class FakeMetric(TextMetric):
    family = "fake"

    def __init__(self, columns: Sequence[str] = FAKE_COLUMNS) -> None:
        self.columns = tuple(columns)
        self.set_up = False

    def signature(self) -> dict[str, str]:
        return {c: format_signature(c, "1", {"impl": "fake"}) for c in self.columns}

    def corpus_statistics(self) -> tuple[CorpusStatistic, ...]:
        return (CountExamples(),)

    def setup(self) -> None:
        self.set_up = True

    def score_batch(self, examples: Sequence[QAExample],
                    corpus_stats: dict[str, Any]) -> list[dict[str, float]]:
        if not self.set_up:
            raise RuntimeError("score_batch before setup")
        out = []
        for example in examples:
            if example.prediction == REJECT:
                raise MetricInputError("fake metric rejects 'REJECT'")
            if example.prediction == CRASH:
                raise RuntimeError("fake metric crashed")
            values = {"fake_len": lambda e=example: float(len(e.prediction)),
                      "fake_overlap": lambda e=example: overlap(e.prediction, e.references),
                      "fake_corpus": lambda: float(corpus_stats["fake_count"])}
            out.append({c: values[c]() for c in self.columns})
        return out


FAKE_SPEC = registry.FamilySpec("fake", FAKE_COLUMNS, "tests.scoring.fakes:FakeMetric")


def install(monkeypatch: Any) -> None:
    """Registers the fake family (the registry's extension point) for one test."""
    monkeypatch.setitem(registry._FAMILIES, FAKE_SPEC.family, FAKE_SPEC)
    for column in FAKE_COLUMNS:
        monkeypatch.setitem(registry._COLUMN_TO_FAMILY, column, FAKE_SPEC.family)
