"""Incoming-link counting: per-bundle tallies of the links that pass `FilterLinks`, merged
per title into one `TitleLinks` (the title's incoming-link count and its distinct link
texts).

Two halves, one on each side of the shuffle. `FilterLinksFn` (filters.py) tallies each
bundle's links per title, `{title: [occurrences, {texts}]}`, and emits the tally with
`shard_tallies`: one dict per shard of titles (`tally_shard`), so the shuffle gets a few
thousand elements per bundle instead of one per link or per title, and ample keys to
spread the merge over any number of workers. `BuildClusters` (clusters.py) groups the
tallies per shard and adds them up with `merge_shard`: the incoming-link count
(occurrences, before dedup) and the exact, case-sensitive dedup of link texts. A title
gets one entry per bundle however many links point at it, so a combiner would only repeat
that work before the shuffle. `merge_title_links` adds up whole clusters (a title and its
redirects, redirects.py).
"""

import dataclasses
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence

TALLY_SHARDS = 1024

# A title's pending tally in one bundle: [occurrences, {distinct link texts}].
PendingTallies = dict[str, list]


@dataclasses.dataclass(frozen=True)
class TitleLinks:
    """All links to one title.

    Attributes:
        title: the normalised article title.
        incoming: link occurrences pointing at it (after the character filter, before
            dedup).
        texts: its distinct link texts, sorted.
        dictionary_dropped: the texts the dictionary-word filter removes (a subset).
    """

    title: str
    incoming: int
    texts: tuple[str, ...]
    dictionary_dropped: frozenset[str] = frozenset()

    def kept_texts(self) -> tuple[str, ...]:
        return tuple(t for t in self.texts if t not in self.dictionary_dropped)


def tally_shard(title: str, shards: int = TALLY_SHARDS) -> int:
    """The shard of a title's tally; the same in every process (unlike `hash`)."""
    return zlib.crc32(title.encode("utf-8")) % shards


def shard_tallies(pending: PendingTallies, shards: int = TALLY_SHARDS
                  ) -> Iterator[tuple[int, dict[str, tuple[int, tuple[str, ...]]]]]:
    """A bundle's pending tallies -> `(shard, {title: (occurrences, texts)})`, one per
    shard that holds a title."""
    by_shard: dict[int, dict[str, tuple[int, tuple[str, ...]]]] = {}
    for title, (n, texts) in pending.items():
        shard = tally_shard(title, shards)
        part = by_shard.get(shard)
        if part is None:
            by_shard[shard] = part = {}
        part[title] = (n, tuple(texts))
    yield from by_shard.items()


def merge_shard(shard: int, parts: Iterable[Mapping[str, tuple[int, Sequence[str]]]]
                ) -> tuple[TitleLinks, ...]:
    """`FilterLinks`' partial tallies of one shard -> the cluster of each of its titles:
    occurrences added up, link texts deduplicated exactly (case-sensitive) and sorted.

    One element per shard crosses the stages after the merge (`BuildClusters`): most
    titles of a dump have a link or two and are dropped at the first threshold, so an
    element per title would cost the runner more than the title's work.
    """
    merged: dict[str, list] = {}
    for part in parts:
        for title, (n, texts) in part.items():
            tally = merged.get(title)
            if tally is None:
                merged[title] = [n, set(texts)]
            else:
                tally[0] += n
                tally[1].update(texts)
    return tuple(TitleLinks(title, count, tuple(sorted(texts)))
                 for title, (count, texts) in merged.items())


def merge_tallies(
    shard: int, parts: Iterable[Mapping[str, tuple[int, Sequence[str]]]]
) -> Iterator[tuple[str, TitleLinks]]:
    """`merge_shard`, one `(title, cluster)` per title (keyed for `ResolveRedirects`)."""
    for cluster in merge_shard(shard, parts):
        yield cluster.title, cluster


def merge_title_links(title: str, parts: Iterable[TitleLinks]) -> TitleLinks:
    """Union of several clusters under one title (a title and its redirects)."""
    parts = list(parts)
    return TitleLinks(title, sum(p.incoming for p in parts),
                      tuple(sorted({t for p in parts for t in p.texts})))
