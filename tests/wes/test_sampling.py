from __future__ import annotations

import collections

import pytest

from transforms.wes.sampling import (
    assign_split,
    cluster_id,
    donor_offer,
    donor_ranks,
    eligible_titles,
    parse_splits,
    pick_negatives,
    stable_hash,
    stable_hash_with,
)


def test_stable_hash_is_fixed_across_processes():
    # A literal: Python's salted hash() would change between runs, this must not.
    assert stable_hash("cluster", "Paris") == cluster_id("Paris") == 6731219294064950561


@pytest.mark.parametrize("spec, expected", [
    ("75,15,10", (0.75, 0.15, 0.10)),
    ("3,1,0", (0.75, 0.25, 0.0)),
])
def test_parse_splits(spec, expected):
    assert parse_splits(spec) == pytest.approx(expected)


@pytest.mark.parametrize("spec", ["75,25", "a,b,c", "0,0,0", "80,-10,30"])
def test_parse_splits_rejects(spec):
    with pytest.raises(ValueError, match="--splits"):
        parse_splits(spec)


def test_split_proportions_and_determinism():
    titles = [f"Title {i}" for i in range(20_000)]
    splits = [assign_split(7, t, (0.75, 0.15, 0.10)) for t in titles]
    assert splits == [assign_split(7, t, (0.75, 0.15, 0.10)) for t in titles]
    shares = collections.Counter(splits)
    assert shares["train"] / 20_000 == pytest.approx(0.75, abs=0.01)
    assert shares["dev"] / 20_000 == pytest.approx(0.15, abs=0.01)
    assert shares["test"] / 20_000 == pytest.approx(0.10, abs=0.01)
    assert splits != [assign_split(8, t, (0.75, 0.15, 0.10)) for t in titles]
    assert {assign_split(7, t, (1.0, 0.0, 0.0)) for t in titles[:100]} == {"train"}


def test_donor_ranks_distinct_never_own_and_seeded():
    ranks = donor_ranks(1, "T", own_index=3, pool_size=10, want=9)
    assert sorted(ranks) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert donor_ranks(1, "T", 3, 1000, 5) == donor_ranks(1, "T", 3, 1000, 5)
    assert donor_ranks(1, "T", 3, 1000, 5) != donor_ranks(2, "T", 3, 1000, 5)
    with pytest.raises(ValueError, match="pool of 10"):
        donor_ranks(1, "T", 3, pool_size=10, want=10)


@pytest.mark.parametrize("sizes, eligible, dropped", [
    ([("a", 1), ("b", 1)], ["a", "b"], []),
    ([("a", 3), ("b", 1), ("c", 1)], ["b", "c"], ["a"]),
    ([("a", 2), ("b", 2), ("c", 2)], ["a", "b", "c"], []),
    ([("a", 1)], [], ["a"]),
    ([], [], []),
])
def test_eligible_titles(sizes, eligible, dropped):
    assert eligible_titles(sizes) == (eligible, dropped)


def test_donor_offer_is_a_seeded_order_of_the_texts():
    texts = [f"t{i}" for i in range(10)]
    offer = donor_offer(3, "T", "D", texts, 4)
    assert len(offer) == 4 and set(offer) <= set(texts)
    assert offer == donor_offer(3, "T", "D", list(reversed(texts)), 4)


@pytest.mark.parametrize("positives, wanted, offers, expected", [
    ({"a"}, 2, [(1, "D2", ["y"]), (0, "D1", ["x"])], [("D1", "x"), ("D2", "y")]),
    ({"x"}, 1, [(0, "D1", ["x", "z"])], [("D1", "z")]),
    ({"x"}, 1, [(0, "D1", ["x"]), (1, "D2", ["w"])], [("D2", "w")]),
    ({"a"}, 2, [(0, "D1", ["x"]), (1, "D2", ["x", "v"])], [("D1", "x"), ("D2", "v")]),
    ({"x"}, 1, [(0, "D1", ["x"])], None),
    ({"a"}, 2, [(0, "D1", ["x"])], None),
])
def test_pick_negatives(positives, wanted, offers, expected):
    assert pick_negatives(frozenset(positives), wanted, offers) == expected


@pytest.mark.parametrize("prefix", [(1,), (7, "Title", "a text"), ("x\x1fy", 0, "É")])
def test_stable_hash_with_a_prefix_is_the_stable_hash_of_the_prefix_and_the_last_part(prefix):
    hash_of = stable_hash_with(*prefix)
    for last in ("", "B", "a\x1fb", 3, "Ünïcode"):
        assert hash_of(last) == stable_hash(*prefix, last)
