"""`BuildClusters`: partial link tallies -> one synonym cluster per title.

The stage ties three files together: the tallies of `FilterLinks` are grouped per title
shard and added up (`merge_tallies`, tally.py: the incoming-link count and the exact
dedup of link texts); optionally a redirect's cluster is folded into its target's
(`ResolveRedirects`, redirects.py); and the dictionary-word filter marks the texts it
drops (`AnnotateDictionaryFn`, dictionary.py), once per pair, so that every threshold k
reuses it.
"""

import apache_beam as beam

from transforms.io.counting import STATS_TAG, StatKey
from transforms.wes.dictionary import AnnotateDictionaryFn
from transforms.wes.redirects import ResolveRedirects
from transforms.wes.tally import merge_tallies


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
        self._resolve = ResolveRedirects()

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
            resolved = {"clusters": clusters, "redirects": inputs["redirects"]} | (
                "ResolveRedirects" >> self._resolve)
            stats.append(resolved["stats"])
            clusters = resolved["clusters"]
        annotated = (
            clusters
            | "AnnotateDictionaryWords" >> beam.ParDo(self._annotate).with_outputs(
                STATS_TAG, main="clusters"))
        stats.append(annotated[STATS_TAG])
        return {"clusters": annotated.clusters,
                "stats": stats | "FlattenClusterStats" >> beam.Flatten()}
