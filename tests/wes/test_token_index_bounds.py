"""The F1 token index in its worst case, every title sharing one token: what a worker holds
and what it keeps stays bounded by the caps, whatever the number of titles N.

The index is `index_entries` (a title -> ((split, token), (name, owner)) entries), the
runner's group by key, and `rank_token_group` on each group. Here the grouping is a
dict of lazy iterators, as a runner hands a group over: the test counts how many entries
the ranking pulls and measures (tracemalloc) what it allocates, for N and 10 N titles.
"""

from __future__ import annotations

import collections
import itertools
import tracemalloc

import pytest

from transforms.wes.candidates import (
    F1_PER_TITLE,
    MAX_TOKEN_ENTRIES,
    PER_TOKEN,
    best_f1,
    index_entries,
    rank_token_group,
)
from transforms.wes.negatives import CorpusTitle

SHARED = "river"


def _titles(n: int) -> list[CorpusTitle]:
    """n titles that all hold the token "river" (and "the", which the SQuAD normalisation
    drops), each with one rare token of its own and a link text."""
    return [CorpusTitle(f"The River Wyx{i}", i, "train", 5, (f"wyx{i} river",))
            for i in range(n)]


def _index(titles):
    groups = collections.defaultdict(list)
    for title in titles:
        for key, entry in index_entries(title):
            groups[key].append(entry)
    return groups


def _counting(entries):
    """A lazy iterator over `entries` and a counter of those pulled from it."""
    pulled = [0]

    def gen():
        for entry in entries:
            pulled[0] += 1
            yield entry
    return gen(), pulled


def test_every_title_sharing_one_token_indexes_it_once_per_name():
    n = 3 * MAX_TOKEN_ENTRIES
    groups = _index(_titles(n))
    assert ("train", "the") not in groups  # an article is never a token
    # the shared token's group: each title's two names (title, link text)
    assert len(groups[("train", SHARED)]) == 2 * n
    assert max(len(g) for k, g in groups.items() if k[1] != SHARED) == 2


@pytest.mark.parametrize("n", [MAX_TOKEN_ENTRIES, 10 * MAX_TOKEN_ENTRIES])
def test_the_shared_token_is_read_up_to_the_cap_and_keeps_nothing(n):
    entries = itertools.chain.from_iterable(
        (entry for _, entry in index_entries(t)) for t in _titles(n))
    lazy, pulled = _counting(entries)
    ranked, read = rank_token_group(lazy, MAX_TOKEN_ENTRIES, PER_TOKEN)
    assert ranked is None
    assert read == pulled[0] == MAX_TOKEN_ENTRIES + 1  # not 2 N


def _peak_bytes(n: int) -> int:
    """The peak allocation of ranking the shared token's group of n titles."""
    entries = ((f"The River Wyx{i}", f"The River Wyx{i}") for i in range(n))
    tracemalloc.start()
    try:
        ranked, _ = rank_token_group(entries, MAX_TOKEN_ENTRIES, PER_TOKEN)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ranked is None
    return peak


def test_the_memory_of_the_shared_token_does_not_grow_with_n():
    small, large = _peak_bytes(2 * MAX_TOKEN_ENTRIES), _peak_bytes(50 * MAX_TOKEN_ENTRIES)
    # held: the capped head only (about 1,001 short tuples), not 50,000 entries
    assert large < 1.5 * small
    assert large < 1_000 * (MAX_TOKEN_ENTRIES + 1)


def test_a_group_at_the_cap_keeps_per_token_candidates_per_title():
    # The largest group the index ranks: exactly the cap, every name a title (query).
    cap = 200
    entries = [(f"River Wyx{i}", f"River Wyx{i}") for i in range(cap)]
    ranked, read = rank_token_group(iter(entries), cap, PER_TOKEN)
    assert read == cap
    per_title = collections.Counter(title for title, _ in ranked)
    assert len(per_title) == cap and set(per_title.values()) == {PER_TOKEN}
    assert len(ranked) == cap * PER_TOKEN  # a bounded list per token, not cap * (cap - 1)
    # over all of its tokens' groups, a title keeps F1_PER_TITLE
    many = [(-0.5, f"name {i}", f"Owner {i}")
            for i in range(10 * F1_PER_TITLE)]
    _, (kind, kept) = best_f1("River Wyx0", [many[:F1_PER_TITLE], many[F1_PER_TITLE:]])
    assert kind == "f1" and len(kept) == F1_PER_TITLE
