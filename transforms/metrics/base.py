"""Types shared by every metric: the example a metric sees, the metric contracts, one
precision/recall/F tuple and one signature format.

Pure Python: no Beam, no file I/O, no model loading (transforms/models loads models,
transforms/text runs the external tokenisers). The scoring pipeline (transforms/scoring)
only batches, parallelises and routes; every number comes from a `Metric` defined here
or beside it. Two kinds of metric share the `Metric` base:

- `TextMetric`: computed from the texts alone (`score_batch`): SQuAD, overlap, BLEU,
  ROUGE-L, CIDEr-D, METEOR;
- `model_base.ModelMetric`: computed from model outputs that a runner provides
  (`requests` then `fold`): BERTScore, KPQA, the embedding and cross-encoder metrics.

`corpus.score_corpus` scores a list of examples with any metrics, without Beam.

A metric is built once, on the launcher, from its configuration (validated there, with
`ValueError`), then pickled to workers, where `setup()` acquires anything heavy (a Java
process, a model). Metrics that need a corpus-level statistic (CIDEr-D document
frequencies, BERTScore idf) expose it as a `CorpusStatistic`, which the pipeline runs as a
`CombineGlobally` over all examples and hands back to `score_batch` as a side input.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple


@dataclasses.dataclass(frozen=True)
class QAExample:
    """One QA prediction with its references, as every metric sees it.

    Attributes:
        prediction: the system's answer.
        references: the gold answers, at least one, in input order.
        question: the question, when the input has one.
        negative_references: known wrong answers (SQuArE), possibly empty.
    """

    prediction: str
    references: tuple[str, ...]
    question: str | None = None
    negative_references: tuple[str, ...] = ()


class CorpusStatistic(abc.ABC):
    """A statistic over the whole corpus, computed as a combine (mirrors `beam.CombineFn`).

    The value returned by `extract` must be picklable; the pipeline passes it to
    `Metric.score_batch` as `corpus_stats[self.key]`.
    """

    key: str

    @abc.abstractmethod
    def create(self) -> Any: ...

    @abc.abstractmethod
    def add(self, accumulator: Any, example: QAExample) -> Any: ...

    @abc.abstractmethod
    def merge(self, accumulators: Sequence[Any]) -> Any: ...

    @abc.abstractmethod
    def extract(self, accumulator: Any) -> Any: ...


class Score(NamedTuple):
    """Precision, recall and F-measure of one prediction against one reference (ROUGE-L,
    BERTScore, the KPQA variants)."""

    precision: float
    recall: float
    fmeasure: float


def format_signature(name: str, version: str, fields: Mapping[str, str]) -> str:
    """The one signature format: `name|v:version|key:value|...`, fields in the order given
    (sacrebleu's style). Runners append run-level fields the same way (`|stats:...`)."""
    return "|".join([name, f"v:{version}", *(f"{k}:{v}" for k, v in fields.items())])


class Metric(abc.ABC):
    """A family of metric columns computed together (e.g. bleu1..bleu4 share n-gram counts).

    Attributes:
        family: the registry name of the family ("squad", "bleu", "meteor", ...).
        columns: the output columns this instance was asked for, e.g. ("bleu1", "bleu4").
    """

    family: str
    columns: tuple[str, ...]

    @abc.abstractmethod
    def signature(self) -> dict[str, str]:
        """Signature string per output column: name, implementation version, tokeniser,
        options (and for model metrics: model, revision, layer, max length, dtype)."""

    def corpus_statistics(self) -> tuple[CorpusStatistic, ...]:
        """Corpus-level statistics this metric needs; none by default."""
        return ()

    def setup(self) -> None:  # noqa: B027 (an optional hook, empty by default)
        """Acquires heavy resources on the worker (called once per DoFn instance)."""

    def teardown(self) -> None:  # noqa: B027 (an optional hook, empty by default)
        """Releases what `setup` acquired."""


class TextMetric(Metric):
    """A metric computed from the example's texts alone."""

    @abc.abstractmethod
    def score_batch(
        self, examples: Sequence[QAExample], corpus_stats: dict[str, Any]
    ) -> list[dict[str, float]]:
        """Scores a batch; returns one {column: value} dict per example, in order.

        Raises:
            MetricInputError: an example this metric cannot score (the pipeline re-scores
                the batch example by example and dead-letters the failing one).
        """


class MetricInputError(ValueError):
    """An example that a metric cannot score, with the reason."""


def score_each(examples: Sequence[QAExample], columns: Sequence[str],
               score: Callable[[QAExample], NamedTuple]) -> list[dict[str, float]]:
    """`score` of each example (one that has references), keeping the requested columns.

    Raises:
        MetricInputError: an example without references.
    """
    out = []
    for ex in examples:
        if not ex.references:
            raise MetricInputError("example has no references")
        values = score(ex)._asdict()
        out.append({c: values[c] for c in columns})
    return out
