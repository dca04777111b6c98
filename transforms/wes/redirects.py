"""Redirect pages: the redirects output rows, and the optional folding of a redirect
title's links into its target's cluster (`ResolveRedirects`, part of `BuildClusters`).

`ReadPages` routes redirect pages (`Page.redirect` set) to their own output; here they
become `(title, target)` pairs, normalised like link targets, that are both written
(`redirect_rows`, `redirects-*.parquet`) and, with `--resolve_redirects`, joined with
the clusters.
"""

from collections.abc import Iterator

import apache_beam as beam

from transforms.io.counting import STATS_TAG, CountingDoFn, StatKey
from transforms.wes.filters import TITLE_CHARACTER_RULES
from transforms.wes.tally import TitleLinks, merge_title_links
from transforms.wiki.dump import Page
from transforms.wiki.links import normalize_title

# The destination of the redirect rows in `WriteParquetShards` (redirects-*.parquet).
REDIRECTS_DESTINATION = "redirects"


def redirect_pair(page: Page) -> tuple[str, str] | None:
    """(normalised redirect title, normalised target) or None when either is invalid."""
    source, target = normalize_title(page.title), normalize_title(page.redirect or "")
    if source is None or target is None:
        return None
    return source, target


def redirect_row(page: Page) -> Iterator[dict[str, str]]:
    """The redirects output row of a redirect page (none when a title is invalid)."""
    pair = redirect_pair(page)
    if pair is not None:
        yield {"title": pair[0], "target": pair[1]}


def keyed_redirect_rows(page: Page) -> Iterator[tuple[str, dict[str, str]]]:
    """A redirect page -> its row keyed by its destination, for `WriteParquetShards`."""
    for row in redirect_row(page):
        yield REDIRECTS_DESTINATION, row


def _merge_resolved(title: str, parts) -> tuple[str, TitleLinks]:
    return title, merge_title_links(title, parts)


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


class ResolveRedirects(beam.PTransform):
    """{"clusters": (title, TitleLinks), "redirects": redirect pages} ->
    {"clusters": (title, TitleLinks) with each redirect's cluster merged into its
    target's, "stats"}."""

    def __init__(self):
        super().__init__()
        self._resolve = ResolveRedirectsFn()

    def stat_keys(self) -> list[StatKey]:
        return self._resolve.stat_keys()

    def expand(self, inputs):
        targets = (inputs["redirects"]
                   | "NormalizeRedirects" >> beam.Map(redirect_pair)
                   | "DropInvalidRedirects" >> beam.Filter(lambda p: p is not None))
        resolved = (
            {"cluster": inputs["clusters"], "target": targets}
            | "JoinRedirects" >> beam.CoGroupByKey()
            | "ResolveRedirects" >> beam.ParDo(self._resolve).with_outputs(
                STATS_TAG, main="clusters"))
        clusters = (resolved.clusters
                    | "GroupByResolvedTitle" >> beam.GroupByKey()
                    | "MergeResolved" >> beam.MapTuple(_merge_resolved))
        return {"clusters": clusters, "stats": resolved[STATS_TAG]}
