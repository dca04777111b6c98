"""Fewer, larger elements across a shuffle: entries gathered per key over a bundle
(`GroupInBundleFn`), and joins whose elements are shards of keys (`JoinByShard`).

The local runner's cost at a shuffle is per element (coding, grouping, calling the next
step), and a multi-input `Flatten` before a `GroupByKey` (what `CoGroupByKey` is) is a
stage of its own there, so every element of a join crosses twice. A join by title of
several inputs, each one element per title, moves a few elements per title; gathered
per shard of the key and bundle, it moves at most a shard's worth of keys per element
and a few thousand elements. The consumer regroups a shard by key (`per_key`): it holds
one shard at a time, about 1/`shards` of the keys.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any

import apache_beam as beam

from transforms.io.counting import HoldingDoFn
from transforms.wes.tally import tally_shard

MAX_PENDING_ENTRIES = 200_000     # entries a bundle groups before emitting
JOIN_SHARDS = 1024                # the shards of a `JoinByShard`
JOIN_PENDING = 20_000             # values a bundle of one input holds before a join emits


class GroupInBundleFn(HoldingDoFn):
    """An element -> its `entries(element)`, (key, value) pairs, gathered per key over a
    bundle and emitted as (key, [values]) once `max_pending` values are held and at the
    bundle's end; with `shard` (key -> int), as (shard, {key: [values]}) per shard
    instead. Before a `GroupByKey` whose consumer chains the lists (or regroups a
    shard's dicts by key: `per_key`)."""

    def __init__(self, entries: Callable[[Any], Iterable[tuple[Hashable, Any]]],
                 max_pending: int = MAX_PENDING_ENTRIES,
                 shard: Callable[[Any], int] | None = None):
        super().__init__("group_in_bundle", [], max_pending)
        self._entries = entries
        self._shard = shard

    def _drain(self, pending: dict, held: int) -> Iterator[tuple[Any, Any]]:
        if self._shard is None:
            yield from pending.items()
            return
        by_shard: dict[int, dict] = {}
        for key, values in pending.items():
            shard = self._shard(key)
            of_shard = by_shard.get(shard)
            if of_shard is None:
                by_shard[shard] = {key: values}
            else:
                of_shard[key] = values
        yield from by_shard.items()

    def process(self, element):
        self._hold_grouped(self._entries(element))
        yield from self._emit_when_full()


def as_entry(element: tuple[Hashable, Any]) -> tuple[tuple[Hashable, Any]]:
    """A (key, value) element as its only entry."""
    return (element,)


def title_shard(title: str) -> int:
    return tally_shard(title, JOIN_SHARDS)


def text_shard(key: tuple[str, str]) -> int:
    """The shard of a (split, text) key: its text's."""
    return tally_shard(key[1], JOIN_SHARDS)


class JoinByShard(beam.PTransform):
    """{tag: (key, value)} -> (shard, {tag: [{key: [values]}]}): a `CoGroupByKey` whose
    elements are the shards of the keys (`shard`), each input's values gathered per key
    and bundle, at most `max_pending` held by a bundle. `per_key` turns an element into
    what the `CoGroupByKey` by key would have handed over, key by key.

    Args:
        shard: key -> its shard.
        max_pending: values a bundle of one input holds before it emits them.
        entries: {tag: element -> its (key, value) entries} for inputs whose elements
            are not (key, value) pairs already.
    """

    def __init__(self, shard: Callable[[Any], int], max_pending: int = JOIN_PENDING,
                 entries: Mapping[str, Callable[[Any], Iterable[tuple[Hashable, Any]]]]
                 | None = None):
        super().__init__()
        self._shard = shard
        self._max_pending = max_pending
        self._entries = dict(entries or {})

    def expand(self, inputs):
        gathered = {tag: pcoll | f"Gather[{tag}]" >> beam.ParDo(GroupInBundleFn(
                        self._entries.get(tag, as_entry), self._max_pending, self._shard))
                    for tag, pcoll in inputs.items()}
        return gathered | "CoGroupByShard" >> beam.CoGroupByKey()


def per_key(groups: Mapping[str, Iterable[Mapping[Hashable, list]]], cap: int | None = None
            ) -> Iterator[tuple[Hashable, dict[str, list]]]:
    """A `JoinByShard` element's {tag: dicts of {key: [values]}} -> (key, {tag: [values]})
    per key in the order first met, every tag named (an empty tuple when the key has no
    value there). With `cap`, a key keeps at most `cap` + 1 values of a tag: enough to
    tell a group larger than `cap`, and no more held."""
    grouped: dict[Hashable, dict[str, Any]] = {}
    empty = dict.fromkeys(groups, ())
    for tag, dicts in groups.items():
        for part in dicts:
            for key, values in part.items():
                inputs = grouped.get(key)
                if inputs is None:
                    inputs = grouped[key] = {**empty}
                held = inputs[tag]
                if not held:
                    held = inputs[tag] = list(values)
                else:
                    held += values
                if cap is not None and len(held) > cap + 1:
                    del held[cap + 1:]
    return iter(grouped.items())
