"""`BuildClusters`: partial link tallies -> one synonym cluster per title.

A GroupByKey per title shard and `merge_tallies` add up `FilterLinks`' partial tallies
`(shard, {title: (occurrences, texts)})`: the incoming-link count (occurrences, before
dedup) and the exact, case-sensitive dedup of link texts. `FilterLinks` already tallies
each bundle's links per title, so a title gets one entry per bundle however many links
point at it, and a combiner would only repeat that work before the shuffle. Optional
redirect resolution folds a redirect's cluster into its target's. The dictionary-word
filter is evaluated here, once per pair, so that every threshold k reuses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence

import apache_beam as beam

from transforms.io.counting import STATS_TAG, CountingDoFn, StatKey
from transforms.wes.filters import TITLE_CHARACTER_RULES
from transforms.wiki.dump import Page
from transforms.wiki.links import normalize_title


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


def merge_tallies(
    shard: int, parts: Iterable[Mapping[str, tuple[int, Sequence[str]]]]
) -> Iterator[tuple[str, TitleLinks]]:
    """`FilterLinks`' partial tallies of one shard -> `(title, cluster)` for each of its
    titles: occurrences added up, link texts deduplicated exactly (case-sensitive) and
    sorted."""
    merged: dict[str, list] = {}
    for part in parts:
        for title, (n, texts) in part.items():
            tally = merged.get(title)
            if tally is None:
                merged[title] = [n, set(texts)]
            else:
                tally[0] += n
                tally[1].update(texts)
    for title, (count, texts) in merged.items():
        yield title, TitleLinks(title, count, tuple(sorted(texts)))


def merge_title_links(title: str, parts: list[TitleLinks]) -> TitleLinks:
    """Union of several clusters under one title (a title and its redirects)."""
    return TitleLinks(title, sum(p.incoming for p in parts),
                      tuple(sorted({t for p in parts for t in p.texts})))


def redirect_pair(page: Page) -> tuple[str, str] | None:
    """(normalised redirect title, normalised target) or None when either is invalid."""
    source, target = normalize_title(page.title), normalize_title(page.redirect or "")
    if source is None or target is None:
        return None
    return source, target


class ResolveRedirectsFn(CountingDoFn):
    """Re-keys a cluster to its redirect target, when its title is a redirect."""

    def __init__(self):
        super().__init__("resolve_redirects", [
            "titles_resolved", "filtered:target_title_character"])

    def process(self, element):
        title, grouped = element
        targets = sorted(grouped["target"])
        for cluster in grouped["cluster"]:
            if not targets:
                yield title, cluster
                continue
            target = targets[0]
            if any(char in target for char, _ in TITLE_CHARACTER_RULES):
                self.count("filtered:target_title_character")
                continue
            self.count("titles_resolved")
            yield target, cluster


class AnnotateDictionaryFn(CountingDoFn):
    """`(title, cluster)` -> the cluster, with the texts the dictionary-word filter drops
    marked (when it is on)."""

    def __init__(self, dictionary_filter: bool):
        super().__init__("dedup", ["titles", "pairs", "incoming_links",
                                   "pairs:dictionary_word_text"])
        self._dictionary_filter = dictionary_filter
        self._lexicon = None

    def setup(self):
        if self._dictionary_filter:
            from transforms.wes.lexicon import load_lexicon

            self._lexicon = load_lexicon()

    def process(self, keyed: tuple[str, TitleLinks]):
        _, cluster = keyed
        self.count("titles")
        self.count("pairs", len(cluster.texts))
        self.count("incoming_links", cluster.incoming)
        if self._lexicon is None or self._lexicon.is_dictionary_word(cluster.title):
            yield cluster
            return
        dropped = frozenset(t for t in cluster.texts if self._lexicon.is_dictionary_word(t))
        if not dropped:
            yield cluster
            return
        self.count("pairs:dictionary_word_text", len(dropped))
        yield dataclasses.replace(cluster, dictionary_dropped=dropped)


class BuildClusters(beam.PTransform):
    """{"pairs", "redirects"} -> {"clusters": TitleLinks, "stats"}.

    Args:
        resolve_redirects: fold each redirect title's links into its target's cluster.
        dictionary_filter: mark dictionary-word link texts of non-dictionary titles.
    """

    def __init__(self, resolve_redirects: bool, dictionary_filter: bool):
        super().__init__()
        self._resolve_redirects = resolve_redirects
        self._annotate = AnnotateDictionaryFn(dictionary_filter)
        self._resolve = ResolveRedirectsFn()

    def stat_keys(self) -> list[StatKey]:
        return self._annotate.stat_keys() + self._resolve.stat_keys()

    def expand(self, inputs):
        clusters = (
            inputs["pairs"]
            | "GroupTalliesPerShard" >> beam.GroupByKey()
            | "CountAndDedupPerTitle" >> beam.FlatMapTuple(merge_tallies)
        )
        stats = []
        if self._resolve_redirects:
            targets = (inputs["redirects"]
                       | "NormalizeRedirects" >> beam.Map(redirect_pair)
                       | "DropInvalidRedirects" >> beam.Filter(lambda p: p is not None))
            resolved = (
                {"cluster": clusters, "target": targets}
                | "JoinRedirects" >> beam.CoGroupByKey()
                | "ResolveRedirects" >> beam.ParDo(self._resolve).with_outputs(
                    STATS_TAG, main="clusters"))
            stats.append(resolved[STATS_TAG])
            clusters = (
                resolved.clusters
                | "GroupByResolvedTitle" >> beam.GroupByKey()
                | "MergeResolved" >> beam.MapTuple(lambda t, parts: (t, merge_title_links(t, list(parts)))))
        annotated = (
            clusters
            | "AnnotateDictionaryWords" >> beam.ParDo(self._annotate).with_outputs(
                STATS_TAG, main="clusters"))
        stats.append(annotated[STATS_TAG])
        return {"clusters": annotated.clusters,
                "stats": stats | "FlattenClusterStats" >> beam.Flatten()}
