"""`BuildClusters`: partial link tallies -> one synonym cluster per title, travelling in
batches (a tuple of clusters per element).

The stage ties three files together: the tallies of `FilterLinks` are grouped per title
shard and added up (`merge_shard`, tally.py: the incoming-link count and the exact dedup
of link texts); optionally a redirect's cluster is folded into its target's
(`ResolveRedirects`, redirects.py); and the dictionary-word filter marks the texts it
drops (`AnnotateDictionaryFn`, dictionary.py), once per pair, so that every threshold k
reuses it.

A batch is one tally shard's clusters (a few hundred on a 100 MB dump), or a single
cluster after `ResolveRedirects`, which joins per title. Per-title elements cost the
runner more than the titles' own work, and most of them are dropped at the first
threshold (`DropBelowAllThresholds`, corpus.py, which passes the rest on one by one).
"""

import apache_beam as beam

from transforms.io.counting import STATS_TAG, StatKey
from transforms.wes.dictionary import AnnotateDictionaryFn
from transforms.wes.redirects import ResolveRedirects
from transforms.wes.tally import merge_shard, merge_tallies


class BuildClusters(beam.PTransform):
    """{"pairs", "redirects"} -> {"clusters": tuples of TitleLinks, "stats"}.

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
        grouped = inputs["pairs"] | "GroupTalliesPerShard" >> beam.GroupByKey()
        stats = []
        if self._resolve_redirects:
            per_title = grouped | "CountAndDedupPerTitle" >> beam.FlatMapTuple(merge_tallies)
            resolved = {"clusters": per_title, "redirects": inputs["redirects"]} | (
                "ResolveRedirects" >> self._resolve)
            stats.append(resolved["stats"])
            batches = resolved["clusters"] | "OneClusterBatches" >> beam.Map(
                lambda keyed: (keyed[1],))
        else:
            batches = grouped | "CountAndDedupPerShard" >> beam.MapTuple(merge_shard)
        annotated = (
            batches
            | "AnnotateDictionaryWords" >> beam.ParDo(self._annotate).with_outputs(
                STATS_TAG, main="clusters"))
        stats.append(annotated[STATS_TAG])
        return {"clusters": annotated.clusters,
                "stats": stats | "FlattenClusterStats" >> beam.Flatten()}
