"""`LinkCooccurrence`: the links of each page -> per title, the articles and link texts
most often linked next to it, the candidates of the `article_cooccurrence` and
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

Counting is distributed, as the incoming-link tallies are (tally.py): each bundle
counts its pages' pairs in a dict of at most `max_pending` keys and emits it as one dict
per shard of the first title (`COOCCURRENCE_SHARDS`, crc32), so the shuffle moves a few
thousand elements per bundle, not one per pair (one per pair made the sample's run five
times slower). After the `GroupByKey`, `top_per_title` adds up one shard's counts and
keeps the `per_title` best per (title, kind): a worker holds the pairs of one shard's
titles at a time. Computed once per run, before the corpora; each corpus keeps the
candidates of its own titles.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence

import apache_beam as beam

from transforms.io.counting import CountedParDo, CountingDoFn, in_global_window
from transforms.wes.filters import classify_link
from transforms.wes.tally import tally_shard
from transforms.wiki.links import RawLink

WINDOW = 5                  # links on either side of a link that co-occur with it
MAX_PENDING = 200_000       # distinct pair keys a bundle holds before it emits them
COOCCURRENCE_PER_TITLE = 32  # candidates kept per (title, kind)
COOCCURRENCE_SHARDS = 4096  # keys of the shuffle: shards of the first title
ARTICLE = "article_cooccurrence"
WORD = "word_cooccurrence"


def page_pairs(links: Sequence[tuple[str, str]], window: int = WINDOW) -> set[tuple]:
    """The distinct co-occurrence keys of one page's passing links ((title, text) in page
    order): (ARTICLE, A, B) and (WORD, A, text, B), both directions."""
    keys: set[tuple] = set()
    for i, (a, text_a) in enumerate(links):
        for b, text_b in links[i + 1:i + 1 + window]:
            if a == b:
                continue
            keys.add((ARTICLE, a, b))
            keys.add((ARTICLE, b, a))
            if text_b != b:
                keys.add((WORD, a, text_b, b))
            if text_a != a:
                keys.add((WORD, b, text_a, a))
    return keys


class CountCooccurrenceFn(CountingDoFn):
    """Pages' links -> (co-occurrence key, pages), counted per bundle.

    Args:
        window: see `page_pairs`.
        max_pending: distinct keys held before they are emitted.
        cache_size: bound on the memoised link classifications.
    """

    def __init__(self, window: int = WINDOW, max_pending: int = MAX_PENDING,
                 cache_size: int = 50_000, shards: int = COOCCURRENCE_SHARDS):
        super().__init__("cooccurrence", ["pages", "pair_keys_emitted"])
        if min(window, max_pending, cache_size) < 1:
            raise ValueError("window, max_pending and cache_size must be positive")
        self._window = window
        self._max_pending = max_pending
        self._cache_size = cache_size
        self._shards = shards
        self._pending: dict[tuple, int] = {}
        self._cache: dict[RawLink, tuple[str, str] | str] = {}

    def start_bundle(self):
        super().start_bundle()
        self._pending = {}
        self._cache = {}

    def _passing(self, links: Sequence[RawLink]) -> list[tuple[str, str]]:
        passing = []
        for link in links:
            result = self._cache.get(link)
            if result is None:
                result = classify_link(link)
                if len(self._cache) >= self._cache_size:
                    self._cache.clear()
                self._cache[link] = result
            if not isinstance(result, str):
                passing.append(result)
        return passing

    def _flush(self) -> Iterator[tuple[int, dict[tuple, int]]]:
        pending, self._pending = self._pending, {}
        self.count("pair_keys_emitted", len(pending))
        by_shard: dict[int, dict[tuple, int]] = {}
        for key, n in pending.items():
            by_shard.setdefault(tally_shard(key[1], self._shards), {})[key] = n
        yield from by_shard.items()

    def process(self, links: tuple[RawLink, ...]):
        self.count("pages")
        pending = self._pending
        for key in page_pairs(self._passing(links), self._window):
            pending[key] = pending.get(key, 0) + 1
        if len(pending) >= self._max_pending:
            yield from self._flush()

    def finish_bundle(self):
        for item in self._flush():
            yield in_global_window(item)
        yield from super().finish_bundle()


def top_per_title(shard: int, parts: Iterable[Mapping[tuple, int]],
                  per_title: int = COOCCURRENCE_PER_TITLE) -> Iterator[tuple[str, tuple]]:
    """The counts of one title shard, added up -> (A, (kind, [(rank key, text, B)])),
    the `per_title` best per (A, kind): most pages first, then text and B."""
    total: dict[tuple, int] = {}
    for part in parts:
        for key, n in part.items():
            total[key] = total.get(key, 0) + n
    ranked: dict[tuple[str, str], list] = {}
    for key, n in total.items():
        kind, a, *rest = key
        text, b = (rest[0], rest[0]) if kind == ARTICLE else (rest[0], rest[1])
        ranked.setdefault((a, kind), []).append(((-n, text, b), text, b))
    for (a, kind), candidates in sorted(ranked.items()):
        yield a, (kind, heapq.nsmallest(per_title, candidates))


class LinkCooccurrence(beam.PTransform):
    """Pages' links -> {"candidates": (title, (kind, [Candidate])) for both co-occurrence
    kinds, "stats"}.

    Args:
        window: see `page_pairs`.
        per_title: candidates kept per (title, kind).
        max_pending: see `CountCooccurrenceFn`.
    """

    def __init__(self, window: int = WINDOW, per_title: int = COOCCURRENCE_PER_TITLE,
                 max_pending: int = MAX_PENDING):
        super().__init__()
        if per_title < 1:
            raise ValueError(f"per_title must be positive, got {per_title}")
        self._count = CountedParDo(CountCooccurrenceFn(window, max_pending),
                                   "CountPagePairs", "pairs")
        self._per_title = per_title

    def stat_keys(self):
        return self._count.stat_keys()

    def expand(self, links):
        counted = links | "CountPairs" >> self._count
        candidates = (counted["pairs"]
                      | "GroupPairsPerShard" >> beam.GroupByKey()
                      | "TopPerTitle" >> beam.FlatMapTuple(top_per_title, self._per_title))
        return {"candidates": candidates, "stats": counted["stats"]}
