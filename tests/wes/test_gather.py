"""Gathering within a bundle and joins by shard (transforms/wes/gather.py): nothing lost,
nothing doubled, and a join by shard hands each key what a join by key would."""

from __future__ import annotations

import collections
import random

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from transforms.wes.gather import GroupInBundleFn, JoinByShard, per_key


def _by_key(pairs):
    grouped = collections.defaultdict(list)
    for key, value in pairs:
        grouped[key].append(value)
    return grouped


def _entries(n):
    return [(k % 3, (n, k)) for k in range(n)]


def _run_bundle(fn, elements):
    fn.start_bundle()
    out = [x for e in elements for x in fn.process(e)]
    return out + [x.value for x in fn.finish_bundle()]


@pytest.mark.parametrize("max_pending", [1, 4, 1000])
def test_group_in_bundle_gathers_each_key_s_values_and_loses_none(max_pending):
    out = _run_bundle(GroupInBundleFn(_entries, max_pending=max_pending), range(6))
    grouped = collections.defaultdict(list)
    for key, values in out:
        assert values and all(k % 3 == key for _, k in values)
        grouped[key].extend(values)
    assert {k: sorted(v) for k, v in grouped.items()} == {
        k: sorted(v) for k, v in _by_key(e for n in range(6) for e in _entries(n)).items()}
    if max_pending == 1000:  # one list per key: every value held to the bundle's end
        assert len(out) == 3


@pytest.mark.parametrize("max_pending", [1, 5, 1000])
def test_group_in_bundle_by_shard_emits_each_shard_s_keys_together(max_pending):
    def shard(key):
        return key % 2

    out = _run_bundle(GroupInBundleFn(_entries, max_pending, shard), range(8))
    grouped = collections.defaultdict(list)
    for s, part in out:
        assert part and all(shard(key) == s and values for key, values in part.items())
        for key, values in part.items():
            grouped[key].extend(values)
    assert {k: sorted(v) for k, v in grouped.items()} == {
        k: sorted(v) for k, v in _by_key(e for n in range(8) for e in _entries(n)).items()}
    if max_pending == 1000:
        assert sorted(s for s, _ in out) == [0, 1]


def test_per_key_names_every_tag_and_keeps_each_key_s_values_in_order():
    groups = {"a": [{"x": [1, 2]}, {"y": [3], "x": [4]}], "b": [{"z": [5]}], "c": []}
    got = dict(per_key(groups))
    assert list(got) == ["x", "y", "z"]  # the order first met
    assert got["x"] == {"a": [1, 2, 4], "b": (), "c": ()}
    assert got["y"] == {"a": [3], "b": (), "c": ()}
    assert got["z"] == {"a": (), "b": [5], "c": ()}
    assert groups["a"][0]["x"] == [1, 2]  # the input's lists are left as they were


@pytest.mark.parametrize("cap", [0, 2, 3, 10])
def test_per_key_with_a_cap_keeps_enough_to_tell_a_large_group(cap):
    groups = {"a": [{"x": [1, 2]}, {"x": [3, 4]}, {"y": [9]}], "b": [{"x": [5, 6]}]}
    got = dict(per_key(groups, cap))
    for key, full in (("x", {"a": [1, 2, 3, 4], "b": [5, 6]}), ("y", {"a": [9], "b": []})):
        for tag, values in full.items():
            kept = list(got[key][tag])
            assert kept == values[:cap + 1]
            # a group larger than the cap is still seen to be larger
            assert (len(kept) > cap) == (len(values) > cap)


def test_join_by_shard_hands_each_key_what_a_join_by_key_would():
    rng = random.Random(7)
    inputs = {tag: [(f"t{rng.randrange(60)}", (tag, i)) for i in range(n)]
              for tag, n in (("title", 50), ("offers", 120), ("edges", 0))}
    expected = {}
    for tag, pairs in inputs.items():
        for key, value in pairs:
            expected.setdefault(key, {t: [] for t in inputs})[tag].append(value)
    expected_rows = [(key, {t: sorted(v) for t, v in g.items()}) for key, g in expected.items()]

    def regroup(element):
        for key, grouped in per_key(element[1]):
            yield key, {t: sorted(v) for t, v in grouped.items()}

    with beam.Pipeline(runner=FnApiRunner()) as p:
        pcolls = {tag: p | f"Create[{tag}]" >> beam.Create(pairs, reshuffle=False)
                  for tag, pairs in inputs.items()}
        joined = pcolls | JoinByShard(lambda key: int(key[1:]) % 7, max_pending=16)
        assert_that(joined | beam.FlatMap(regroup), equal_to(expected_rows))
