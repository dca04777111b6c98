"""The negative mix's pure parts: the `--negatives` value, each title's quotas, link pairs,
the choice of negatives, the synonym rules, token F1, spans and the donor pools' look-up
(co-occurrence's: test_cooccurrence_units.py; the grouping within a bundle and the joins by
shard: test_gather.py)."""

from __future__ import annotations

import collections
import itertools
import random

import pytest
from apache_beam.pvalue import TaggedOutput

from transforms.wes.candidates import RankTokenGroupFn, best_f1, rank_token_group, title_spans
from transforms.wes.negative_mix import (
    is_random_only,
    kind_quotas,
    link_pairs,
    parse_negative_mix,
    pick_mixed,
)
from transforms.wes.synonyms import TitleSynonyms, normalize_text, synonym_reason, token_f1


@pytest.mark.parametrize("spec, expected", [
    ("random=1", {"random": 1.0}),
    ("random=1,f1=1", {"random": 0.5, "f1": 0.5}),
    ("f1=3, substring=1", {"f1": 0.75, "substring": 0.25}),
    ("word_cooccurrence,random=0,article_cooccurrence=1",
     {"word_cooccurrence": 0.5, "article_cooccurrence": 0.5}),
])
def test_parse_negative_mix(spec, expected):
    assert parse_negative_mix(spec) == pytest.approx(expected)


@pytest.mark.parametrize("spec, message", [
    ("bogus=1", "unknown kind"), ("f1=1,f1=2", "twice"), ("f1=x", "must be a number"),
    ("f1=-1", ">= 0"), ("random=0", "positive weight"), ("", "positive weight"),
    ("f1=nan", ">= 0")])
def test_parse_negative_mix_refuses(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_negative_mix(spec)


def test_random_only_is_the_default_whatever_its_weight():
    assert is_random_only(parse_negative_mix("random=2"))
    assert not is_random_only(parse_negative_mix("random=2,f1=1"))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 50])
def test_quotas_add_up_and_are_seeded_by_title(n):
    mix = parse_negative_mix("random=1,f1=1,substring=1")
    quotas = kind_quotas(5, "Paris", n, mix)
    assert sum(quotas.values()) == n
    assert all(abs(q - n / 3) < 1 for q in quotas.values())
    assert kind_quotas(5, "Paris", n, mix) == quotas


def test_quotas_follow_the_shares_in_expectation():
    mix = parse_negative_mix("random=1,f1=3")
    totals = collections.Counter()
    for i in range(4000):
        totals.update(kind_quotas(1, f"T{i}", 1, mix))
    assert totals["f1"] / 4000 == pytest.approx(0.75, abs=0.03)


@pytest.mark.parametrize("m, cap", [(0, 3), (1, 3), (2, 3), (5, 3), (5, 10), (5, 100), (40, 7)])
def test_link_pairs_are_distinct_pairs_of_distinct_texts(m, cap):
    texts = [f"t{i:02d}" for i in range(m)]
    pairs = link_pairs(3, "T", texts, cap)
    everything = set(itertools.combinations(sorted(texts), 2))
    assert len(pairs) == min(cap, len(everything))
    assert len(set(pairs)) == len(pairs) and set(pairs) <= everything
    if cap >= len(everything):
        assert set(pairs) == everything
    assert link_pairs(3, "T", list(reversed(texts)), cap) == pairs
    assert link_pairs(3, "T", texts, 0) == []


def test_link_pairs_of_a_huge_cluster_cost_the_cap_only():
    texts = [f"text {i}" for i in range(200_000)]  # 2e10 pairs: never listed
    assert len(link_pairs(0, "Big", texts, 5)) == 5


def _no_synonyms(text, source):
    return "own_link_text" if text == "own" else None


def test_pick_mixed_fills_quotas_best_first_then_random():
    chosen, counts = pick_mixed(
        {"f1": 2, "substring": 1, "random": 1},
        {"f1": [(0.1, "b", "B"), (0.0, "own", "A2"), (0.2, "c", "C")],
         "substring": [(1, "far", "Far")]},
        [("D", "d"), ("D", "d2"), ("E", "e")],
        _no_synonyms, lambda source: "other_split" if source == "Far" else None)
    assert chosen == [("f1", "B", "b"), ("f1", "C", "c"), ("random", "D", "d"),
                      ("random", "E", "e")]
    assert counts == {"rejected:own_link_text": 1, "rejected:other_split": 1,
                      "shortfall:substring": 1}


def test_pick_mixed_gives_up_when_random_offers_run_out():
    chosen, _ = pick_mixed({"random": 2}, {}, [("D", "d"), ("D", "d2")], _no_synonyms,
                           lambda s: None)
    assert chosen is None  # one text per donor: D cannot give two


SYN = TitleSynonyms.build("George Washington", ["Washington", "G. Washington", "GW"],
                          redirects_in=["President Washington"], redirect_out=[])


@pytest.mark.parametrize("text, source, reason", [
    ("Washington", "Washington, D.C.", "own_link_text"),
    ("Martha", "George Washington", "same_cluster"),
    ("President Washington", "Other", "redirect"),
    ("president Washington", "Other", "redirect"),  # as a title: first letter upper-cased
    ("Mount Vernon", "President Washington", "redirect"),
    ("george washington", "Other", "normalised_equal"),
    ("G Washington", "Other", "normalised_equal"),
    ("The President Washington!", "Other", "normalised_equal"),
    ("the", "Other", "empty_after_normalisation"),
    ("Martha Washington", "Martha Washington", None),
    ("Washington State", "Washington (state)", None),
])
def test_synonym_rules(text, source, reason):
    assert synonym_reason(SYN, text, source) == reason


def test_a_title_that_is_a_redirect_has_its_target_as_synonym():
    syn = TitleSynonyms.build("USA", [], redirect_out=["United States"])
    assert synonym_reason(syn, "United States", "Canada") == "redirect"
    assert synonym_reason(syn, "America", "United States") == "redirect"


@pytest.mark.parametrize("a, b, f1", [
    ("Spanish Civil War", "civil war", 0.8), ("The Beatles", "beatles", 1.0),
    ("a b c", "d", 0.0), ("", "x", 0.0), ("New York", "York New", 1.0),
    # repeated tokens count as SQuAD's multiset overlap: min(2, 1) + min(1, 2) = 2 of 3
    ("bora bora island", "bora island island", 2 / 3), ("x x x", "x", 0.5)])
def test_token_f1(a, b, f1):
    assert token_f1(a, b) == pytest.approx(f1)


def test_normalize_text():
    assert normalize_text("  The U.S.  Army's  ") == "us armys"


def test_rank_token_group_reads_at_most_the_cap_of_a_common_token():
    pulled = 0

    def entries():
        nonlocal pulled
        for i in range(10_000):
            pulled += 1
            yield f"Common {i}", f"Common {i}"

    ranked, read = rank_token_group(entries(), 50, 3)
    assert ranked is None and read == 51 and pulled == 51


def test_rank_token_group_keeps_the_best_per_title():
    entries = [("Civil war", "Civil war"), ("Spanish Civil War", "Spanish Civil War"),
               ("civil war", "Angolan Civil War"), ("war", "War"), ("War", "War")]
    ranked, read = rank_token_group(iter(entries), 10, 2)
    assert read == 5
    best = collections.defaultdict(list)
    for title, (_, name, owner) in ranked:
        best[title].append((name, owner))
    assert best["Spanish Civil War"] == [("Civil war", "Civil war"),
                                         ("civil war", "Angolan Civil War")]
    assert all(owner != title for title, pairs in best.items() for _, owner in pairs)


@pytest.mark.parametrize("seed", range(5))
def test_rank_token_group_equals_ranking_every_entry(seed):
    """Names shared by several owners (a link text of many titles), ties and repeated
    tokens: the same candidates as scoring every (name, owner) entry of the group."""
    rng = random.Random(seed)
    words = ["war", "civil", "war war", "the", "spanish", "x"]

    def phrase() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))

    owners = sorted({phrase().title() for _ in range(20)})
    entries = [(o, o) for o in owners] + [(phrase(), rng.choice(owners)) for _ in range(60)]
    shared = collections.Counter(name for name, _ in set(entries))
    assert sum(n > 1 for n in shared.values()) > 3  # names of several owners
    rng.shuffle(entries)
    ranked, _ = rank_token_group(iter(entries), 1000, 4)
    expected = []
    for query, owner in sorted({(n, o) for n, o in entries if n == o}):
        every = sorted((-token_f1(query, name), name, other) for name, other in set(entries)
                       if other != owner)[:4]
        expected += [(owner, candidate) for candidate in every]
    assert ranked == expected


@pytest.mark.parametrize("seed", range(6))
def test_rank_token_group_with_numpy_equals_the_loop(seed):
    """Large groups are scored with numpy: the same candidates, floats and order as the
    loop, with names shared by owners, ties, repeated tokens and a query's own names."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(rng.choice([3, 12, 60]))]

    def phrase() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))

    owners = sorted({phrase().title() for _ in range(40)})
    entries = [(o, o) for o in owners]
    entries += [(phrase(), rng.choice(owners)) for _ in range(300)]
    entries += [(name, rng.choice(owners)) for name, _ in rng.sample(entries, 40)]
    rng.shuffle(entries)
    loop, read = rank_token_group(iter(entries), 1000, 5, vector_rows=10_000)
    vectorised, _ = rank_token_group(iter(entries), 1000, 5, vector_rows=1)
    assert loop and vectorised == loop
    assert [type(score) for _, (score, _, _) in vectorised] == [float] * len(loop)


@pytest.mark.parametrize("max_pending", [1, 5, 10_000])
def test_rank_token_group_fn_emits_each_titles_best_of_what_it_held(max_pending):
    """Candidates gathered per title across a bundle's token groups, emitted at
    `max_pending` and at the bundle's end, each title's best 3 of what it held: what
    `best_f1` keeps per title is the same as from every candidate on its own."""
    rng = random.Random(7)
    words = ["war", "civil", "the", "spanish", "x", "y"]
    owners = [f"T{i}" for i in range(8)]
    groups = []
    for token in words:
        entries = [(f"{token} {rng.choice(words)}", rng.choice(owners)) for _ in range(12)]
        entries += [(o, o) for o in owners]  # every title queries every group
        groups.append(((None, token), entries))
    fn = RankTokenGroupFn("wes-k5", 1000, 4, per_title=3, max_pending=max_pending)
    fn.start_bundle()
    # as `GroupInBundleFn` hands a group over: lists of entries
    emitted = [out for key, entries in groups
               for out in fn.process((key, [entries[:5], entries[5:]]))]
    emitted += [out.value for out in fn.finish_bundle() if not isinstance(out, TaggedOutput)]
    assert all(len(candidates) <= 3 for _, candidates in emitted)
    if max_pending == 1:  # emitted after every group
        assert len(emitted) > len(owners)
    every = collections.defaultdict(list)
    for _, entries in groups:
        for title, candidate in rank_token_group(iter(entries), 1000, 4)[0]:
            every[title].append(candidate)
    parts = collections.defaultdict(list)
    for title, candidates in emitted:
        parts[title].append(candidates)
    assert {t: best_f1(t, p, 3) for t, p in parts.items()} == {
        t: best_f1(t, [c], 3) for t, c in every.items()}


@pytest.mark.parametrize("title, spans", [
    ("Paris", []), ("George Washington", ["George", "Washington"]),
    ("Washington, D.C.", ["D.C.", "Washington"]), ('"Weird" Al', ["Al", "Weird"]),
    ("A B C D E", ["A", "A B", "A B C", "B", "B C", "B C D", "C", "C D", "C D E", "D",
                   "D E", "E"])])
def test_title_spans_are_proper_and_short(title, spans):
    assert title_spans(title) == spans


@pytest.mark.parametrize("prefill, max_sources", [(40, 40), (1_000, 5), (30, 1_000), (5, 5)])
def test_pool_memo_says_where_each_source_may_donate(monkeypatch, prefill, max_sources):
    """Against a look-up in every pool, for sources asked again and again, with pools
    replaced midway (a new side input): the memo starts again. Pools of at most
    `PREFILL_TITLES` titles are one dict, kept whole however many sources are asked;
    larger ones are searched, and their memo starts again when full."""
    from transforms.wes.mixed_negatives import PoolMemo
    from transforms.wes.negatives import DonorPool

    monkeypatch.setattr(PoolMemo, "PREFILL_TITLES", prefill)
    monkeypatch.setattr(PoolMemo, "MAX_SOURCES", max_sources)
    rng = random.Random(5)
    memo = PoolMemo()
    first = None  # (pools, the dict made for them)
    for _ in range(2):
        titles = [f"T{i}" for i in rng.sample(range(60), 40)]
        pools = {split: DonorPool(tuple(sorted(titles[k::3])), frozenset())
                 for k, split in enumerate(("train", "dev", "test"))}
        for _ in range(300):
            source, split = f"T{rng.randrange(70)}", rng.choice(["train", "dev", "test"])
            where = [name for name, pool in pools.items() if source in pool.titles]
            expected = ("not_in_corpus" if not where else None if where == [split]
                        else "other_split")
            assert memo.checker(pools, split)(source) == expected
            assert memo._complete == (prefill >= 40)
            if memo._complete:  # made once for these pools, kept whole
                first = first if first is not None and first[0] is pools else (pools, memo._found)
                assert memo._found is first[1] and len(memo._found) == 40
            else:
                assert len(memo._found) <= max_sources
