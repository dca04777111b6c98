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

Only the titles that a corpus can hold need candidates, and only they can be a negative's
source: those with at least the smallest k incoming links (`DropBelowAllThresholds`'
clusters, about 3% of a dump's titles; the keys between two of them are about 3% of the
100 MB benchmark dump's pair keys, 225,000 of 7.6 million). Counting is distributed, as the
incoming-link tallies are (tally.py): `FilterLinks` hands over each page's passing links
(filters.py), each bundle counts its pages' keys whose two titles are in the Bloom filter
of the smallest k's titles (title_bloom.py, a side input of fixed size, one filter per
corpus; only the neighbourhoods of those links are visited), holds at most `max_pending`
keys and emits them as one dict per shard of the first title (`COOCCURRENCE_SHARDS`,
crc32), keys in a wire form of one string each, so the shuffle moves a few thousand
elements per bundle, not one per pair. After the shuffle each shard is joined with its
titles, and `top_per_title` adds up the counts of those titles only and keeps the
`per_title` best per (title, kind) for each corpus that holds the title, among the keys
whose B is in that corpus's filter: a worker holds the pairs of one shard's titles at a
time. Computed once per run, before the corpora; a corpus's candidates do not depend on
the run's other thresholds.
"""

from __future__ import annotations

import collections
import functools
import heapq
import itertools
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import neg

import apache_beam as beam

from transforms.io.counting import STATS_TAG, HoldingDoFn, StatKey
from transforms.wes.filters import US, unpack_page
from transforms.wes.gather import GroupInBundleFn
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
    order): (ARTICLE, A, B) and (WORD, A, text, B), both directions. The definition that
    `wanted_keys` computes for wanted titles only."""
    keys: set[tuple] = set()
    for i, (a, text_a) in enumerate(links):
        for b, text_b in links[i + 1:i + 1 + window]:
            if a == b:
                continue
            keys |= {(ARTICLE, a, b), (ARTICLE, b, a)}
            if text_b != b:
                keys.add((WORD, a, text_b, b))
            if text_a != a:
                keys.add((WORD, b, text_a, a))
    return keys


# A key's wire form, (A, rest): rest is B for (ARTICLE, A, B) and "text<US>B" for (WORD,
# A, text, B), with the US no title or text holds (filters.py). One string per key, and A
# once per batch, is what crosses the shuffle.
# Between the keys, texts or titles of one title's list on the wire (RS, U+001E: no text
# holds it either, filters.py), with their counts as the bytes of an int64 array: three
# objects a list for the coder instead of two or three an entry.
_RS = "\x1e"


def _int64s(data: bytes) -> array:
    values = array("q")
    values.frombytes(data)
    return values


def pack_counts(counts: Mapping[str, int]) -> tuple[str, bytes]:
    """A title's {rest: pages} -> its wire form (the rests joined, their counts)."""
    return _RS.join(counts), array("q", counts.values()).tobytes()


def unpack_counts(packed: tuple[str, bytes]) -> Iterator[tuple[str, int]]:
    """`pack_counts`' form -> (rest, pages) in their order."""
    rests, pages = packed
    return zip(rests.split(_RS), _int64s(pages))


def pack_candidates(kind: str, ranked: Sequence[tuple[int, str]]) -> tuple[bytes, str, bool]:
    """A title's best keys of one kind, (-pages, rest) in order -> the wire form of their
    candidates: (-pages as int64 bytes, the rests joined by RS, whether they are word
    rests). A word rest's US becomes RS too, so that texts and titles alternate: no rest
    is split here, and unpacking is two slices."""
    scores, rests = zip(*ranked)
    joined = _RS.join(rests)
    word = kind == WORD
    return array("q", scores).tobytes(), joined.replace(US, _RS) if word else joined, word


def unpack_candidates(packed: tuple[bytes, str, bool]) -> list[tuple[int, str, str]]:
    """`pack_candidates`' form -> [(-pages, text, B)], the Candidates, in order (an
    article candidate's text is B)."""
    scores, joined, word = packed
    values = _int64s(scores)
    parts = joined.split(_RS)
    if word:
        return list(zip(values, parts[0::2], parts[1::2]))
    return list(zip(values, parts, parts))


def split_rest(rest: str) -> tuple[str, str, str]:
    """A key's wire-form rest -> (kind, negative text, B)."""
    text, sep, b = rest.partition(US)
    return (WORD, text, b) if sep else (ARTICLE, rest, rest)


def decode_key(a: str, rest: str) -> tuple:
    """A key's wire form -> the key as `page_pairs` writes it."""
    kind, text, b = split_rest(rest)
    return (kind, a, text, b) if kind == WORD else (kind, a, b)


def wanted_keys(titles: Sequence[str], texts: Sequence[str], wanted: Sequence[bool],
                window: int = WINDOW) -> dict[str, set[str]]:
    """The keys of `page_pairs(links, window)` whose two links are both `wanted` (one flag
    per link), in their wire form, as {A: {rest}}: only the neighbourhoods of wanted links
    are visited. A key's second title B is the source of its negative, which must be a
    title of the corpus as much as A (the join's consumer rejects any other as
    `not_in_corpus`), so a key with an unwanted B is never counted. The links as
    `filters.unpack_page` gives them: titles, and texts with "" for a text equal to its
    title."""
    keys: dict[str, set[str]] = {}
    rests: list[tuple[str, str | None] | None] = [None] * len(titles)
    for i, want in enumerate(wanted):
        if not want:
            continue
        a = titles[i]
        of_a = keys.get(a)
        if of_a is None:
            of_a = keys[a] = set()
        for j in range(max(0, i - window), min(len(titles), i + 1 + window)):
            b = titles[j]
            if a == b or not wanted[j]:
                continue
            rest = rests[j]
            if rest is None:  # link j's rests, made once however many neighbours it has
                text_b = texts[j]
                rest = rests[j] = (b, text_b + US + b if text_b else None)
            of_a.add(rest[0])
            if rest[1] is not None:
                of_a.add(rest[1])
    return {a: of_a for a, of_a in keys.items() if of_a}


class CountCooccurrenceFn(HoldingDoFn):
    """Pages' passing links (`filters.page_wire`), with the Bloom filters of each corpus's
    titles as a side input ({k: filter}; the smallest k's holds every corpus's titles) ->
    `(shard, {A: pack_counts({rest: pages})})` (keys in their wire form), counted per
    bundle.

    A bundle holds the page counts of the keys whose two titles pass the filter (the
    only ones emitted), at most `max_pending` of them; `keys_emitted` counts the keys of
    each emitted batch, the elements' contents that cross the shuffle.

    Args:
        window: see `page_pairs`.
        max_pending: distinct keys held before they are emitted.
        shards: number of title shards (keys of the shuffle).
    """

    def __init__(self, window: int = WINDOW, max_pending: int = MAX_PENDING,
                 shards: int = COOCCURRENCE_SHARDS):
        super().__init__("cooccurrence", ["pages", "keys_emitted"], max_pending)
        if min(window, shards) < 1:
            raise ValueError("window and shards must be positive")
        self._window = window
        self._shards = shards
        self._filter: tuple[bytes, TitleBloom] | None = None

    def _drain(self, pending: dict[str, collections.Counter[str]], held: int
               ) -> Iterator[tuple[int, dict[str, tuple[str, bytes]]]]:
        self.count("keys_emitted", held)
        by_shard: dict[int, dict[str, tuple[str, bytes]]] = {}
        for a, counts in pending.items():
            by_shard.setdefault(tally_shard(a, self._shards), {})[a] = pack_counts(counts)
        yield from by_shard.items()

    def process(self, page: tuple[str, str], blooms: Mapping[int, bytes]):
        self.count("pages")
        if not blooms:  # no title any corpus can hold
            return
        wanted = blooms[min(blooms)]  # the smallest k's titles: every corpus's
        if self._filter is None or self._filter[0] is not wanted:
            self._filter = wanted, TitleBloom(wanted)
        titles, texts = unpack_page(page)
        flags = self._filter[1].flags(titles)
        pending = self._pending  # {A: Counter of rests}; _held: the distinct keys in it
        for a, rests in wanted_keys(titles, texts, flags, self._window).items():
            counts = pending.get(a)
            if counts is None:
                counts = pending[a] = collections.Counter()
            before = len(counts)
            counts.update(rests)  # each key once per page
            self._held += len(counts) - before
        yield from self._emit_when_full()


def top_per_title(shard: int, parts: Iterable[Mapping[str, tuple[str, bytes]]],
                  titles: Iterable[tuple[str, int]], per_title: int = COOCCURRENCE_PER_TITLE,
                  thresholds: Sequence[int] = (0,), blooms: Mapping[int, bytes] | None = None
                  ) -> Iterator[tuple[str, tuple]]:
    """The counts of one title shard ({A: pack_counts({rest: pages})}), added up for its
    `titles` ((title, incoming links)) -> (A, (kind, pack_candidates(...), k)) for each
    corpus threshold k (sorted `thresholds`) that A's incoming links reach: the
    `per_title` best per (A, kind), most pages first, then text and B, among the keys
    whose B may be a title of corpus k. The counts hold the keys whose B is in the
    smallest k's filter; for a larger k, B must be in `blooms[k]` too, the filter of that
    corpus's titles. Each filter's bits are a subset of the smallest k's (its titles are a
    subset), so a corpus's candidates are the same whatever other thresholds the run has.

    Keys are ranked in their wire form, (-pages, rest), and never split (`pack_candidates`
    joins the best as they are): a rest orders as its (text, B) does, since US sorts below
    every character a text or a title can hold (none below U+0020: XML 1.0 and the
    filters leave none).
    """
    incoming = dict(titles)
    total: dict[str, dict[str, int]] = {}
    for part in parts:
        for a, packed in part.items():
            if a not in incoming:
                continue
            summed = total.get(a)
            if summed is None:
                total[a] = dict(unpack_counts(packed))
                continue
            for rest, n in unpack_counts(packed):
                summed[rest] = summed.get(rest, 0) + n
    filters = {k: TitleBloom(blooms[k]) for k in thresholds[1:] if blooms and k in blooms}
    for a in sorted(total):
        counts = total[a]
        keys = list(zip(map(neg, counts.values()), counts))
        for k in thresholds:
            if incoming[a] < k:
                break
            if k != thresholds[0]:  # B a title of corpus k (its filter has A, so it exists)
                flags = filters[k].flags([rest.rpartition(US)[2] for _, rest in keys])
                keys = [key for key, flag in zip(keys, flags) if flag]
            articles = _best(per_title, [key for key in keys if US not in key[1]])
            if articles:
                yield a, (ARTICLE, pack_candidates(ARTICLE, articles), k)
            words = _best(per_title, [key for key in keys if US in key[1]])
            if words:
                yield a, (WORD, pack_candidates(WORD, words), k)


def _best(n: int, items: list) -> list:
    """The n smallest items in order: `heapq.nsmallest` (a loop in Python over the items)
    for long lists, a sort in C for short ones; the same items either way."""
    return heapq.nsmallest(n, items) if len(items) > 256 else sorted(items)[:n]


def top_of_shard(element: tuple[int, Mapping[str, Iterable]], per_title: int,
                 thresholds: Sequence[int], blooms: Mapping[int, bytes]
                 ) -> Iterator[tuple[str, tuple]]:
    """`top_per_title` of a shard joined with its titles (lists of them per bundle)."""
    shard, grouped = element
    titles = itertools.chain.from_iterable(grouped["titles"])
    yield from top_per_title(shard, grouped["pairs"], titles, per_title, thresholds, blooms)


def titles_by_threshold(cluster, thresholds: Sequence[int]) -> Iterator[tuple[int, str]]:
    """A cluster -> (k, its title) for each corpus threshold k its incoming links reach."""
    for k in thresholds:
        if cluster.incoming >= k:
            yield k, cluster.title


def shard_entry(cluster, shards: int) -> tuple[tuple[int, tuple[str, int]]]:
    """A cluster -> its entry (its title's shard, (title, incoming links))."""
    return ((tally_shard(cluster.title, shards), (cluster.title, cluster.incoming)),)


def corpus_tag(k: int) -> str:
    """The output of `LinkCooccurrence`'s "candidates" for the corpus with threshold k."""
    return f"k{k}"


def corpus_candidates(candidates: tuple[str, tuple], kinds: frozenset[str]
                      ) -> Iterator[beam.pvalue.TaggedOutput]:
    """(title, (kind, candidates, k)) -> (title, (kind, candidates)) to the output of the
    corpus with threshold k, when the mix has the kind. One step for every corpus: each
    reads only its own titles' candidates, instead of every title's."""
    title, (kind, listed, k) = candidates
    if kind in kinds:
        yield beam.pvalue.TaggedOutput(corpus_tag(k), (title, (kind, listed)))


class LinkCooccurrence(beam.PTransform):
    """{"pages": each page's passing links (`FilterLinks`' "page_links"), "titles": the
    clusters a corpus can hold (`DropBelowAllThresholds`)} -> {"candidates": {k: (title,
    (kind, candidates in `pack_candidates`' form)) of the corpus with threshold k, for the
    kinds asked for}, "stats"}.

    Args:
        thresholds: the corpora's k.
        kinds: the co-occurrence kinds of the mix (either or both of ARTICLE and WORD).
        window: see `page_pairs`.
        per_title: candidates kept per (title, kind).
        max_pending: see `CountCooccurrenceFn`.
        shards: see `CountCooccurrenceFn`.
    """

    def __init__(self, thresholds: Sequence[int], kinds: Iterable[str] = (ARTICLE, WORD),
                 window: int = WINDOW, per_title: int = COOCCURRENCE_PER_TITLE,
                 max_pending: int = MAX_PENDING, shards: int = COOCCURRENCE_SHARDS):
        super().__init__()
        if per_title < 1:
            raise ValueError(f"per_title must be positive, got {per_title}")
        self._thresholds = sorted(thresholds)
        self._kinds = frozenset(kinds)
        self._count = CountCooccurrenceFn(window, max_pending, shards)
        self._per_title = per_title
        self._shards = shards

    def stat_keys(self) -> list[StatKey]:
        return self._count.stat_keys()

    def expand(self, inputs):
        blooms = beam.pvalue.AsDict(
            inputs["titles"]
            | "TitlesByThreshold" >> beam.FlatMap(titles_by_threshold, self._thresholds)
            | "TitleBlooms" >> beam.CombinePerKey(BuildTitleBloom()))
        counted = inputs["pages"] | "CountPagePairs" >> beam.ParDo(
            self._count, blooms=blooms).with_outputs(STATS_TAG, main="pairs")
        keyed_titles = inputs["titles"] | "KeyTitlesByShard" >> beam.ParDo(GroupInBundleFn(
            functools.partial(shard_entry, shards=self._shards)))
        candidates = (
            {"pairs": counted.pairs, "titles": keyed_titles}
            | "JoinPairsWithTitles" >> beam.CoGroupByKey()
            | "TopPerTitle" >> beam.FlatMap(
                top_of_shard, self._per_title, self._thresholds, blooms=blooms)
            | "ToCorpora" >> beam.FlatMap(corpus_candidates, self._kinds).with_outputs(
                *(corpus_tag(k) for k in self._thresholds)))
        return {"candidates": {k: candidates[corpus_tag(k)] for k in self._thresholds},
                "stats": counted[STATS_TAG]}
