"""The contract of model-backed metrics, beside `TextMetric` in base.py.

A model metric never loads or runs a model. It declares the models it needs
(`model_uses`: role -> `transforms.models.uses.ModelUse`); per example it *asks* for
model inputs (`requests`: a role and a hashable input, such as a sentence or a
(prediction, reference) pair); a runner computes one output per distinct input; the
metric then *folds* the outputs back into per-example scores (`fold`: for instance the
maximum over references). Two runners exist:

- the scoring pipeline: one Beam `RunInference` for every model
  (transforms/scoring/score/run_model_metrics.py, with the `ModelHandler`s of
  transforms/inference/handlers.py), so equal uses of several metrics share a model and
  identical inputs are computed once per batch;
- `transforms.metrics.corpus.score_corpus`, for plain Python, tests and benchmarks: it
  gives `score_outputs` one predictor per role.

What `fold` receives per task is the table in transforms/models/uses.py.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

from transforms.metrics.base import Metric, QAExample
from transforms.models.uses import ModelUse

# Outputs for a list of distinct inputs of one role, in input order.
PredictFn = Callable[[Sequence[Hashable]], Sequence[Any]]


class ModelRequest(NamedTuple):
    """One model input an example needs: the role names a `ModelUse` of the metric."""

    role: str
    input: Hashable


def max_or_zero(values: Sequence[float]) -> float:
    """The maximum over references; 0.0 when there is nothing to take it over."""
    return float(max(values)) if len(values) else 0.0


class ModelMetric(Metric):
    """A metric computed from model outputs (see the module docstring)."""

    @abc.abstractmethod
    def model_uses(self) -> Mapping[str, ModelUse]:
        """The models this metric needs, by role name."""

    @abc.abstractmethod
    def requests(self, example: QAExample) -> list[ModelRequest]:
        """The model inputs one example needs, in the order `fold` expects them.

        Raises:
            MetricInputError: the example cannot be scored (e.g. no question for BEM).
        """

    @abc.abstractmethod
    def fold(self, example: QAExample, outputs: Sequence[Any],
             corpus_stats: Mapping[str, Any]) -> dict[str, float]:
        """Turns the outputs of `requests(example)` (same order) into {column: value}."""

    def score_outputs(self, examples: Sequence[QAExample], predict: Mapping[str, PredictFn],
                      corpus_stats: Mapping[str, Any]) -> list[dict[str, float]]:
        """Scores a batch given one predict function per role: the distinct inputs of
        each role are predicted once, then every example is folded.

        Raises:
            MetricInputError: an example this metric cannot score.
        """
        per_example = [self.requests(ex) for ex in examples]
        wanted: dict[str, dict[Hashable, None]] = {}
        for reqs in per_example:
            for role, inp in reqs:
                wanted.setdefault(role, {})[inp] = None
        results: dict[str, dict[Hashable, Any]] = {}
        for role, inputs in wanted.items():
            unique = list(inputs)
            results[role] = dict(zip(unique, predict[role](unique), strict=True))
        return [self.fold(ex, [results[r][i] for r, i in reqs], corpus_stats)
                for ex, reqs in zip(examples, per_example)]
