"""Co-occurrence's pure parts: page keys, the keys of wanted titles, the per-bundle counts,
their packed wire forms, the ranking per title and the routing to the corpora."""

from __future__ import annotations

import collections
import random

import pytest
from apache_beam.pvalue import TaggedOutput

from transforms.wes.cooccurrence import (
    ARTICLE,
    WORD,
    CountCooccurrenceFn,
    corpus_candidates,
    decode_key,
    pack_candidates,
    pack_counts,
    page_pairs,
    top_per_title,
    unpack_candidates,
    unpack_counts,
    wanted_keys,
)
from transforms.wes.filters import page_wire, unpack_page
from transforms.wes.tally import tally_shard
from transforms.wes.title_bloom import BuildTitleBloom, TitleBloom


def test_page_pairs_window_and_kinds():
    links = [("A", "a"), ("B", "B"), ("A", "A"), ("C", "see"), ("D", "D")]
    keys = page_pairs(links, window=1)
    assert (ARTICLE, "A", "B") in keys and (ARTICLE, "B", "A") in keys
    assert (ARTICLE, "A", "C") in keys and (ARTICLE, "A", "D") not in keys
    assert (WORD, "A", "see", "C") in keys and (WORD, "C", "a", "A") not in keys
    assert not any(k[0] == WORD and k[2] == k[3] for k in keys)  # a title is the article kind
    assert not any(k[1] == k[-1] for k in keys)


def packed_parts(parts: list[dict]) -> list[dict]:
    """Parts of {A: {rest: pages}} in `CountCooccurrenceFn`'s wire form."""
    return [{a: pack_counts(counts) for a, counts in part.items()} for part in parts]


def unpacked_top(out) -> list:
    return [(a, (kind, unpack_candidates(packed), k)) for a, (kind, packed, k) in out]


def test_top_per_title_adds_up_shards_parts_and_ranks():
    parts = [{"A": {"B": 1, "C": 2, "c\x1fC": 1}, "Z": {"A": 5}}, {"A": {"B": 2}}]
    out = {(a, kind): (cands, k) for a, (kind, cands, k)
           in unpacked_top(top_per_title(0, packed_parts(parts), [("A", 7)], 1, (5,)))}
    assert out[("A", ARTICLE)] == ([(-3, "B", "B")], 5)
    assert out[("A", WORD)] == ([(-1, "c", "C")], 5)
    assert set(out) == {("A", ARTICLE), ("A", WORD)}  # "Z" is no title of the shard


@pytest.mark.parametrize("seed", range(4))
def test_top_per_title_ranks_as_the_decoded_keys_rank(seed):
    """Ranked in wire form, split only at the end: the same candidates as summing and
    ranking every decoded key, with texts that are prefixes of one another, punctuation
    below letters, a space (the lowest character a text holds) and a title shared by parts
    that must not be changed."""
    rng = random.Random(seed)
    texts = ["ab", "ab c", "ab!", "a", "Ab", "b", " x"]
    titles = ["B", "B!", "Ba", "C"]
    parts = []
    for _ in range(3):
        part = {}
        for a in ("A", "Q"):
            counts = {}
            for _ in range(12):
                b = rng.choice(titles)
                rest = b if rng.random() < 0.4 else rng.choice(texts) + "\x1f" + b
                counts[rest] = rng.randint(1, 3)
            part[a] = counts
        parts.append(part)
    wire = packed_parts(parts)
    before = repr(wire)
    got = unpacked_top(top_per_title(0, wire, [("A", 9), ("Q", 4)], 5, (4,)))
    assert repr(wire) == before  # a part is read, never changed
    expected = []
    for a in ("A", "Q"):
        summed = collections.Counter()
        for part in parts:
            summed.update({decode_key(a, rest): n for rest, n in part[a].items()})
        for kind in (ARTICLE, WORD):
            ranked = sorted((-n, key[2], key[-1]) for key, n in summed.items() if key[0] == kind)
            if ranked:
                expected.append((a, (kind, ranked[:5], 4)))
    assert got == expected


def _bloom(titles, bits=1 << 12) -> bytes:
    combine = BuildTitleBloom(bits=bits)
    accumulator = combine.create_accumulator()
    for title in titles:
        accumulator = combine.add_input(accumulator, title)
    return combine.extract_output(accumulator)


def test_top_per_title_ranks_each_corpus_among_its_own_titles():
    """A title of corpora 2 and 5 gets candidates for each: for k = 5 among the keys whose
    B is in corpus 5's filter only, the same as a run of k = 5 alone counts."""
    incoming = {"A": 6, "B": 9, "C": 3, "D": 7, "E": 1}
    blooms = {k: _bloom([t for t, n in incoming.items() if n >= k]) for k in (2, 5)}
    assert "C" not in TitleBloom(blooms[5]) and "E" not in TitleBloom(blooms[2])
    counts = {"C": 5, "B": 2, "see\x1fC": 4, "bee\x1fB": 1, "D": 2}
    parts = packed_parts([{"A": counts}])
    got = unpacked_top(top_per_title(0, parts, [("A", 6)], 2, (2, 5), blooms))
    assert got == [
        ("A", (ARTICLE, [(-5, "C", "C"), (-2, "B", "B")], 2)),
        ("A", (WORD, [(-4, "see", "C"), (-1, "bee", "B")], 2)),
        ("A", (ARTICLE, [(-2, "B", "B"), (-2, "D", "D")], 5)),
        ("A", (WORD, [(-1, "bee", "B")], 5))]
    # the run of k = 5 alone counts the keys whose B is in corpus 5's filter
    alone = packed_parts([{"A": {r: n for r, n in counts.items()
                                 if r.rpartition("\x1f")[2] in TitleBloom(blooms[5])}}])
    assert unpacked_top(top_per_title(0, alone, [("A", 6)], 2, (5,), blooms)) == got[2:]
    # a title below a corpus's k gets nothing for it
    assert all(k == 2 for _, (_, _, k) in unpacked_top(
        top_per_title(0, packed_parts([{"C": {"A": 1}}]), [("C", 3)], 2, (2, 5), blooms)))


@pytest.mark.parametrize("window", [1, 2, 5])
def test_wanted_keys_are_the_page_keys_between_wanted_titles(window):
    links = [("A", "a"), ("B", "B"), ("A", "A"), ("C", "see"), ("D", "D"), ("C", "C"),
             ("E", "e")]
    keys = page_pairs(links, window=window)
    for wanted in ({"C"}, {"A", "E"}, {"A", "C"}, {"B", "C", "D"}, set("ABCDE"), set()):
        flags = [t in wanted for t, _ in links]
        got = [(a, rest) for a, rests
               in wanted_keys(*unpack_page(page_wire(links)), flags, window=window).items()
               for rest in rests]
        # both titles wanted: the second title of a key is its negative's source
        assert {decode_key(*key) for key in got} == {
            k for k in keys if k[1] in wanted and k[-1] in wanted}
        assert len(got) == len({decode_key(*key) for key in got})


def test_cooccurrence_counts_the_keys_of_filtered_titles_within_max_pending():
    bloom = _bloom(["A", "B"])
    assert "C" not in TitleBloom(bloom) and "D" not in TitleBloom(bloom)
    fn = CountCooccurrenceFn(window=1, max_pending=3, shards=4)
    fn.start_bundle()
    pages = [[("A", "a"), ("B", "bee"), ("C", "c")], [("C", "C"), ("A", "A")],
             [("B", "b"), ("D", "D"), ("A", "A")], [("A", "A"), ("B", "B")]]
    # {k: filter}: the smallest k's filter decides
    blooms = {5: bloom, 9: _bloom(["A"])}
    emitted = [list(fn.process(page_wire(page), blooms)) for page in pages]
    # the first page's four keys reach max_pending and are emitted at once; a link next
    # to an unwanted title only (pages 2 and 3) makes no key
    assert [bool(out) for out in emitted] == [True, False, False, False]
    batches, stats = [part for out in emitted for part in out], {}
    for out in fn.finish_bundle():
        if isinstance(out, TaggedOutput):
            stats[out.value.value[0]] = out.value.value[1]
        else:
            batches.append(out.value)
    counted: collections.Counter = collections.Counter()
    for shard, part in batches:
        assert all(tally_shard(a, 4) == shard for a in part)
        for a, counts in part.items():
            counted.update({decode_key(a, rest): n for rest, n in unpack_counts(counts)})
    assert counted == {(ARTICLE, "A", "B"): 2, (WORD, "A", "bee", "B"): 1,
                       (ARTICLE, "B", "A"): 2, (WORD, "B", "a", "A"): 1}
    assert stats == {("cooccurrence", "pages"): 4, ("cooccurrence", "keys_emitted"): 6}


@pytest.mark.parametrize("kind", [ARTICLE, WORD])
def test_packed_counts_and_candidates_round_trip(kind):
    counts = {"B": 3, "c d\x1fC": 2**40, "Ü": 1}
    assert list(unpack_counts(pack_counts(counts))) == list(counts.items())
    rng = random.Random(3)
    ranked = [(-rng.randint(1, 2**35), rest) for rest in (
        ["B", "B B", "É", "x"] if kind == ARTICLE else ["t\x1fB", "t u\x1fB", "É\x1fZ"])]
    expected = [(n, *(rest.split("\x1f") if kind == WORD else (rest, rest)))
                for n, rest in ranked]
    assert unpack_candidates(pack_candidates(kind, ranked)) == expected


def test_corpus_candidates_go_to_their_corpus_when_the_mix_has_the_kind():
    def routed(element, kinds):
        return [(out.tag, out.value) for out in corpus_candidates(element, kinds)]

    assert routed(("A", (ARTICLE, [(-1, "B", "B")], 10)), frozenset({ARTICLE})) == [
        ("k10", ("A", (ARTICLE, [(-1, "B", "B")])))]
    assert not routed(("A", (ARTICLE, [(-1, "B", "B")], 5)), frozenset({WORD}))
