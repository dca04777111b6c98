"""Batch shaping: de-duplication, length-sorted passes under row and token caps, padding."""

from __future__ import annotations

import numpy as np
import pytest

from transforms.models import batching


@pytest.mark.parametrize("items, unique, inverse", [
    ([], [], []),
    (["a"], ["a"], [0]),
    (["b", "a", "b", "c", "a"], ["b", "a", "c"], [0, 1, 0, 2, 1]),
    ([("p", "r"), ("p", "r"), ("r", "p")], [("p", "r"), ("r", "p")], [0, 0, 1]),
])
def test_dedup(items, unique, inverse):
    assert batching.dedup(items) == (unique, inverse)


@pytest.mark.parametrize("lengths, max_rows, max_tokens, expected", [
    ([], 4, 100, []),
    # longest first; rows cap
    ([3, 9, 5, 7], 2, 1000, [[1, 3], [2, 0]]),
    # tokens cap: 9+9 > 16 so 9 is alone; then 7,5 (2*7=14 <= 16); then 3
    ([3, 9, 5, 7], 10, 16, [[1], [3, 2], [0]]),
    # a row longer than the budget still gets its own pass
    ([50, 2, 2], 10, 8, [[0], [1, 2]]),
    # equal lengths keep input order (stable sort)
    ([4, 4, 4], 2, 100, [[0, 1], [2]]),
])
def test_plan_batches(lengths, max_rows, max_tokens, expected):
    assert batching.plan_batches(lengths, max_rows, max_tokens) == expected


def test_plan_batches_covers_every_position_once_within_caps():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=500).tolist()
    plan = batching.plan_batches(lengths, max_rows=32, max_tokens=512)
    assert sorted(i for b in plan for i in b) == list(range(500))
    for b in plan:
        assert len(b) <= 32
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 512


@pytest.mark.parametrize("rows, tokens", [(0, 10), (1, 0)])
def test_plan_batches_rejects_empty_caps(rows, tokens):
    with pytest.raises(ValueError, match="must be >= 1"):
        batching.plan_batches([1], rows, tokens)


def test_pad_to_longest_with_types():
    out = batching.pad([(101, 7, 102), (101, 102)], [(0, 0, 0), (0, 1)], pad_id=0)
    np.testing.assert_array_equal(out.input_ids, [[101, 7, 102], [101, 102, 0]])
    np.testing.assert_array_equal(out.attention_mask, [[1, 1, 1], [1, 1, 0]])
    np.testing.assert_array_equal(out.token_type_ids, [[0, 0, 0], [0, 1, 0]])


def test_pad_without_types():
    out = batching.pad([(5,), (5, 6)], [None, None], pad_id=1)
    np.testing.assert_array_equal(out.input_ids, [[5, 1], [5, 6]])
    assert out.token_type_ids is None
