"""Length-grouped batch order and padding."""

from __future__ import annotations

import numpy as np
import pytest

from transforms.training.batching import (
    IGNORE_INDEX,
    Features,
    collate,
    epoch_batches,
    eval_batches,
    padding_ratio,
)

LENGTHS = [int(x) for x in np.random.default_rng(0).integers(5, 120, size=1000)]


@pytest.mark.parametrize("block", [0, 1, 20])
def test_every_row_once_per_epoch(block):
    batches = epoch_batches(LENGTHS, 32, block, seed=1, epoch=0)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(LENGTHS)))
    assert all(len(b) <= 32 for b in batches)
    assert len(batches) == -(-len(LENGTHS) // 32)


def test_order_is_a_function_of_seed_and_epoch():
    a = epoch_batches(LENGTHS, 32, 20, seed=1, epoch=0)
    assert a == epoch_batches(LENGTHS, 32, 20, seed=1, epoch=0)
    assert a != epoch_batches(LENGTHS, 32, 20, seed=1, epoch=1)
    assert a != epoch_batches(LENGTHS, 32, 20, seed=2, epoch=0)


def test_grouping_cuts_padding_and_keeps_blocks_random():
    grouped = epoch_batches(LENGTHS, 32, 20, seed=1, epoch=0)
    random_ = epoch_batches(LENGTHS, 32, 1, seed=1, epoch=0)
    assert padding_ratio(LENGTHS, grouped) < 0.6 * padding_ratio(LENGTHS, random_)
    # Batches are shuffled after sorting: batch lengths are not monotone.
    maxima = [max(LENGTHS[i] for i in b) for b in grouped]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)


def test_eval_batches_longest_first():
    batches = eval_batches([3, 9, 5, 7], 2)
    assert batches == [[1, 3], [2, 0]]


def test_bad_batching_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        epoch_batches([1, 2], 0, 20, 0, 0)
    with pytest.raises(ValueError, match="empty"):
        epoch_batches([], 4, 20, 0, 0)


def test_collate_pads_ids_types_and_labels():
    rows = [Features((101, 5, 102), (0, 0, 0), 0.25), Features((101, 102), (0, 0), 1.0)]
    batch = collate(rows, pad_id=0, with_types=True)
    assert batch["input_ids"].tolist() == [[101, 5, 102], [101, 102, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].dtype == np.float32 and batch["labels"].tolist() == [0.25, 1.0]
    assert "token_type_ids" not in collate(rows, pad_id=0, with_types=False)
    tokens = [Features((1, 2, 3), (0, 1, 1), (IGNORE_INDEX, 0, 1)), Features((1,), (0,), (1,))]
    assert collate(tokens, 0, True)["labels"].tolist() == [[IGNORE_INDEX, 0, 1],
                                                           [1, IGNORE_INDEX, IGNORE_INDEX]]
