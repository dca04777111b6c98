"""Tests for transforms/scoring/reference_batches.py: keyed rows with the same references
share a batch, batches hold at most `size` rows, and every row is batched once."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that

from tests.runners import RUNNER_ARGS
from transforms.metrics.base import QAExample
from transforms.scoring.reference_batches import (
    BatchByReferences,
    ChunkGroups,
    reference_group,
)
from transforms.scoring.rows import RowSource, ScoringRow


def test_reference_group_is_stable_and_within_the_groups():
    refs = ("the cat", "a cat")
    assert reference_group(refs, 8) == reference_group(list(refs), 8)
    assert all(0 <= reference_group((f"ref {i}",), 8) < 8 for i in range(50))
    assert len({reference_group((f"ref {i}",), 8) for i in range(50)}) > 1


def test_chunk_groups_streams_a_group_into_batches_of_at_most_size():
    rows = iter([(f"f:{i}", i) for i in range(5)])  # an iterator: read once, in order
    batches = list(ChunkGroups(2).process((3, rows)))
    assert [(b.batch_id, [k for k, _ in b.rows]) for b in batches] == [
        ("f:0", ["f:0", "f:1"]), ("f:2", ["f:2", "f:3"]), ("f:4", ["f:4"])]
    assert list(ChunkGroups(2).process((3, iter([])))) == []


def test_batch_by_references_refuses_sizes_and_groups_below_one():
    for size, groups in ((0, 4), (4, 0)):
        with pytest.raises(ValueError, match="must be >= 1"):
            BatchByReferences(size, groups)


@pytest.mark.slow
def test_rows_with_the_same_references_share_a_batch():
    questions = [(f"answer {q}", f"other {q}") for q in range(6)]
    assert len({reference_group(refs, 64) for refs in questions}) == 6  # one group each
    keyed = [(f"f:{i}", ScoringRow(RowSource("f", i), QAExample(f"system {i % 3}",
                                                                  questions[i // 3])))
             for i in range(18)]  # three systems per question

    def check(batches):
        assert sorted(k for b in batches for k, _ in b.rows) == sorted(k for k, _ in keyed)
        assert all(len(b.rows) <= 3 and b.batch_id == b.rows[0][0] for b in batches)
        assert sorted({tuple(r.example.references) for _, r in b.rows}
                      for b in batches) == sorted({q} for q in questions)

    with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
        batches = pipeline | beam.Create(keyed) | BatchByReferences(size=3, groups=64)
        assert_that(batches | beam.combiners.ToList(), lambda got: check(got[0]))
