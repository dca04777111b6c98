"""`LinkCooccurrence`: the passing links of each page -> per title, the articles and link
texts most often linked next to it, the candidates of the `article_cooccurrence` and
`word_cooccurrence` negatives.

Co-occurrence here: two links that pass the filters (filters.classify_link) co-occur on
a page when at most `window` links lie between them in the page's order (a
neighbourhood about a sentence or two wide: a whole page would make every pair of a
long page's links co-occur) and they point at different titles. A pair counts once per
page. For a title A:

- `article_cooccurrence`: a title B linked next to A on many pages; the negative text is
  B's title.
- `word_cooccurrence`: a link text t of a link to B next to a link to A, on many pages;
  t must differ from B's title (that would be the article kind again).

Only the titles that a corpus can hold need candidates: those with at least the smallest
k incoming links (`DropBelowAllThresholds`' clusters, about 3% of a dump's titles, and
about 12% of its pair keys on the benchmark dump). Counting is distributed, as the
incoming-link tallies are (tally.py): `FilterLinks` hands over each page's passing links
(filters.py), each bundle counts its pages' pairs in a `Counter` of at most
`max_pending` keys and emits the keys whose first title is in a Bloom filter of those
titles (title_bloom.py, a side input of fixed size) as one dict per shard of the first
title (`COOCCURRENCE_SHARDS`, crc32), so the shuffle moves a few thousand elements per
bundle, not one per pair. After the shuffle each shard is joined with its titles, and
`top_per_title` adds up the counts of those titles only and keeps the `per_title` best
per (title, kind): a worker holds the pairs of one shard's titles at a time. Computed
once per run, before the corpora; each corpus keeps the candidates of its own titles.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

import apache_beam as beam

from transforms.io.counting import STATS_TAG, CountingDoFn, StatKey, in_global_window
from transforms.wes.tally import tally_shard
from transforms.wes.title_bloom import BuildTitleBloom, TitleBloom

WINDOW = 5                  # links on either side of a link that co-occur with it
MAX_PENDING = 200_000       # distinct pair keys a bundle holds before it emits them
COOCCURRENCE_PER_TITLE = 32  # candidates kept per (title, kind)
COOCCURRENCE_SHARDS = 4096  # keys of the shuffle: shards of the first title
ARTICLE = "article_cooccurrence"
WORD = "word_cooccurrence"


def page_pairs(links: Sequence[tuple[str, str]], window: int = WINDOW) -> set[tuple]:
    """The distinct co-occurrence keys of one page's passing links ((title, text) in page
    order): (ARTICLE, A, B) and (WORD, A, text, B), both directions."""
    pairs, words, _ = split_page_pairs(links, [False] * len(links), window)
    return ({(ARTICLE, a, b) for a, b in pairs} | {(ARTICLE, b, a) for a, b in pairs}
            | {(WORD, *key) for key in words})


def split_page_pairs(links: Sequence[tuple[str, str]], wanted: Sequence[bool],
                     window: int = WINDOW) -> tuple[set[tuple], set[tuple], set[tuple]]:
    """The keys of `page_pairs(links, window)` in three sets: the pairs of titles, each
    once as (A, B) with A < B (the two ARTICLE keys of each); the WORD keys as (A, text,
    B); and, as `page_pairs` writes them, the keys whose first title's link is `wanted`
    (one flag per link). The first two count the page's keys with fewer objects."""
    pairs: set[tuple] = set()
    words: set[tuple] = set()
    kept: set[tuple] = set()
    rows = list(zip(links, wanted))
    for i, ((a, text_a), want_a) in enumerate(rows):
        for (b, text_b), want_b in rows[i + 1:i + 1 + window]:
            if a == b:
                continue
            pairs.add((a, b) if a < b else (b, a))
            if text_b != b:
                words.add((a, text_b, b))
            if text_a != a:
                words.add((b, text_a, a))
            if want_a:
                kept.add((ARTICLE, a, b))
                if text_b != b:
                    kept.add((WORD, a, text_b, b))
            if want_b:
                kept.add((ARTICLE, b, a))
                if text_a != a:
                    kept.add((WORD, b, text_a, a))
    return pairs, words, kept


class CountCooccurrenceFn(CountingDoFn):
    """Pages' passing links, with the titles' Bloom filter as a side input ->
    `(shard, {co-occurrence key: pages})`, counted per bundle.

    A bundle holds the distinct keys of its pages (as `split_page_pairs`' pairs and word
    keys, for `max_pending` and the `pair_keys_emitted` count, the number of distinct keys
    of each emitted batch) and the page counts of the keys whose first title passes the
    filter, the only ones emitted.

    Args:
        window: see `page_pairs`.
        max_pending: distinct keys held before they are emitted.
        shards: number of title shards (keys of the shuffle).
    """

    def __init__(self, window: int = WINDOW, max_pending: int = MAX_PENDING,
                 shards: int = COOCCURRENCE_SHARDS):
        super().__init__("cooccurrence", ["pages", "pair_keys_emitted"])
        if min(window, max_pending, shards) < 1:
            raise ValueError("window, max_pending and shards must be positive")
        self._window = window
        self._max_pending = max_pending
        self._shards = shards
        self._pairs: set[tuple] = set()
        self._words: set[tuple] = set()
        self._pending: Counter = Counter()
        self._filter: tuple[bytes, TitleBloom] | None = None

    def start_bundle(self):
        super().start_bundle()
        self._pairs, self._words = set(), set()
        self._pending = Counter()

    def _distinct_keys(self) -> int:
        return 2 * len(self._pairs) + len(self._words)

    def _flush(self) -> Iterator[tuple[int, dict[tuple, int]]]:
        self.count("pair_keys_emitted", self._distinct_keys())
        pending, self._pending = self._pending, Counter()
        self._pairs, self._words = set(), set()
        shard_of: dict[str, int] = {}
        by_shard: dict[int, dict[tuple, int]] = {}
        for key, n in pending.items():
            a = key[1]
            shard = shard_of.get(a)
            if shard is None:
                shard = shard_of[a] = tally_shard(a, self._shards)
            part = by_shard.get(shard)
            if part is None:
                by_shard[shard] = part = {}
            part[key] = n
        yield from by_shard.items()

    def process(self, links: Sequence[tuple[str, str]], wanted: bytes):
        if self._filter is None or self._filter[0] is not wanted:
            self._filter = wanted, TitleBloom(wanted)
        bloom = self._filter[1]
        self.count("pages")
        pairs, words, kept = split_page_pairs(links, [a in bloom for a, _ in links],
                                              self._window)
        self._pairs.update(pairs)
        self._words.update(words)
        self._pending.update(kept)
        if self._distinct_keys() >= self._max_pending:
            yield from self._flush()

    def finish_bundle(self):
        for item in self._flush():
            yield in_global_window(item)
        yield from super().finish_bundle()


def top_per_title(shard: int, parts: Iterable[Mapping[tuple, int]],
                  titles: Iterable[tuple[str, int]], per_title: int = COOCCURRENCE_PER_TITLE
                  ) -> Iterator[tuple[str, tuple]]:
    """The counts of one title shard, added up for its `titles` ((title, incoming links))
    -> (A, (kind, [(rank key, text, B)], A's incoming links)), the `per_title` best per
    (A, kind): most pages first, then text and B."""
    incoming = dict(titles)
    total: dict[tuple, int] = {}
    for part in parts:
        for key, n in part.items():
            if key[1] in incoming:
                total[key] = total.get(key, 0) + n
    ranked: dict[tuple[str, str], list] = {}
    for key, n in total.items():
        kind, a, *rest = key
        text, b = (rest[0], rest[0]) if kind == ARTICLE else (rest[0], rest[1])
        ranked.setdefault((a, kind), []).append(((-n, text, b), text, b))
    for (a, kind), candidates in sorted(ranked.items()):
        yield a, (kind, heapq.nsmallest(per_title, candidates), incoming[a])


def top_of_shard(element: tuple[int, Mapping[str, Iterable]], per_title: int
                 ) -> Iterator[tuple[str, tuple]]:
    """`top_per_title` of a shard joined with its titles."""
    shard, grouped = element
    yield from top_per_title(shard, grouped["pairs"], grouped["titles"], per_title)


def title_of(cluster) -> str:
    return cluster.title


def shard_key(cluster, shards: int) -> tuple[int, tuple[str, int]]:
    """A cluster -> (its title's shard, (title, incoming links))."""
    return tally_shard(cluster.title, shards), (cluster.title, cluster.incoming)


def corpus_candidates(candidates: tuple[str, tuple], kinds: frozenset[str], k: int
                      ) -> Iterator[tuple[str, tuple]]:
    """`LinkCooccurrence`'s (title, (kind, [Candidate], incoming)) -> (title, (kind,
    [Candidate])) for the corpus with threshold `k` and the mix's `kinds`: none for a
    title with fewer than k incoming links (no title of that corpus)."""
    title, (kind, listed, incoming) = candidates
    if kind in kinds and incoming >= k:
        yield title, (kind, listed)


class LinkCooccurrence(beam.PTransform):
    """{"pages": each page's passing links (`FilterLinks`' "page_links"), "titles": the
    clusters a corpus can hold (`DropBelowAllThresholds`)} -> {"candidates": (title, (kind,
    [Candidate], incoming links)) for both co-occurrence kinds (`corpus_candidates` keeps
    a corpus's), "stats"}.

    Args:
        window: see `page_pairs`.
        per_title: candidates kept per (title, kind).
        max_pending: see `CountCooccurrenceFn`.
        shards: see `CountCooccurrenceFn`.
    """

    def __init__(self, window: int = WINDOW, per_title: int = COOCCURRENCE_PER_TITLE,
                 max_pending: int = MAX_PENDING, shards: int = COOCCURRENCE_SHARDS):
        super().__init__()
        if per_title < 1:
            raise ValueError(f"per_title must be positive, got {per_title}")
        self._count = CountCooccurrenceFn(window, max_pending, shards)
        self._per_title = per_title
        self._shards = shards

    def stat_keys(self) -> list[StatKey]:
        return self._count.stat_keys()

    def expand(self, inputs):
        titles = inputs["titles"] | "CooccurrenceTitles" >> beam.Map(title_of)
        bloom = titles | "TitleBloom" >> beam.CombineGlobally(BuildTitleBloom())
        counted = inputs["pages"] | "CountPagePairs" >> beam.ParDo(
            self._count, wanted=beam.pvalue.AsSingleton(bloom)).with_outputs(
                STATS_TAG, main="pairs")
        keyed_titles = inputs["titles"] | "KeyTitlesByShard" >> beam.Map(
            shard_key, self._shards)
        candidates = (
            {"pairs": counted.pairs, "titles": keyed_titles}
            | "JoinPairsWithTitles" >> beam.CoGroupByKey()
            | "TopPerTitle" >> beam.FlatMap(top_of_shard, self._per_title))
        return {"candidates": candidates, "stats": counted[STATS_TAG]}
