"""Joining the scoring branches back onto their rows by row key.

Every scoring branch emits `(row_key, ScoreResult)`: the in-process lexical metrics
(`score.ScoreMetrics`) and, when model-backed metrics are requested, `RunModelMetrics`
(one `RunInference` over whole rows for every model, each row's outputs folded in the
same stage). `JoinScores` runs one `CoGroupByKey` over the validated rows (`ROWS`) and
those branches and emits, per row, either one scored record (every branch gave scores)
or one dead-letter record (some branch rejected the row, or gave it nothing). A row is
never half-scored in the output.
"""

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from transforms.io.counting import STATS_TAG, CountingDoFn
from transforms.scoring.rows import dead_letter
from transforms.scoring.score import merge_branch_results

logger = logging.getLogger(__name__)

_STAGE = "join"
ROWS = "rows"
DEAD_LETTER = "dead_letter"


class MergeScoresFn(CountingDoFn):
    """`(row_key, {rows: [...], branch: [...]})` -> scored record | dead-letter record.
    Counts (namespace `join`): `passed` and `filtered:<reason>`."""

    def __init__(self, branches: Sequence[str]) -> None:
        super().__init__(_STAGE, ["passed", *(f"filtered:{reason}" for reason in (
            "metric_input_error", "inference_failed", "missing_score", "orphan_score"))])
        self._branches = tuple(branches)

    def process(self, element: tuple[str, Mapping[str, Iterable[Any]]]) -> Iterator[Any]:
        key, grouped = element
        rows = list(grouped[ROWS])
        if len(rows) != 1:
            # A score whose row is gone (or a duplicated key) is a pipeline bug, not bad input.
            self.count("filtered:orphan_score")
            logger.error("row key %s has %d rows; its scores are dropped", key, len(rows))
            for row in rows:
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter(
                    row.source, "missing_score", f"row key {key} seen {len(rows)} times",
                    row.id, row.system))
            return
        ok, record = merge_branch_results(
            rows[0], {b: list(grouped[b]) for b in self._branches}, self._branches)
        if ok:
            self.count("passed")
            yield record
        else:
            self.count(f"filtered:{record['reason']}")
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, record)


class JoinScores(beam.PTransform):
    """Joins `{ROWS: (key, ScoringRow), branch: (key, ScoreResult), ...}` by row key.

    Returns a dict: `scored` -> scored records, `dead_letter` -> dead-letter records,
    `stats` -> the `((namespace, name), n)` counts of `MergeScoresFn`.
    """

    def expand(self, inputs):  # {branch: PCollection} -> {"scored", "dead_letter"}
        if ROWS not in inputs:
            raise ValueError(f"JoinScores needs a {ROWS!r} input, got {sorted(inputs)}")
        branches = tuple(sorted(name for name in inputs if name != ROWS))
        if not branches:
            raise ValueError("JoinScores needs at least one scoring branch")
        merged = (
            dict(inputs)
            | "GroupByRowKey" >> beam.CoGroupByKey()
            | "MergeBranchScores" >> beam.ParDo(MergeScoresFn(branches)).with_outputs(
                DEAD_LETTER, STATS_TAG, main="scored"))
        return {"scored": merged.scored, "dead_letter": merged[DEAD_LETTER]}

