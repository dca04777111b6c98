"""`BuildCorpus`: synonym clusters -> the rows of one WES corpus (one threshold k)."""

from collections.abc import Mapping, Sequence

import apache_beam as beam

from transforms.io.counting import STATS_TAG, CountedParDo, CountingDoFn, StatKey
from transforms.wes.mixed_negatives import SampleMixedNegatives
from transforms.wes.negative_mix import RANDOM, is_random_only
from transforms.wes.negatives import CorpusTitle, SampleNegatives
from transforms.wes.sampling import assign_split, cluster_id
from transforms.wes.tally import TitleLinks


def is_mixed(mix: Mapping[str, float] | None, link_pairs_cap: int) -> bool:
    """Whether a run builds `SampleMixedNegatives` (and writes `pair_kind`): a mix other
    than random only, or link pairs."""
    return (mix is not None and not is_random_only(mix)) or link_pairs_cap > 0


def corpus_name(k: int) -> str:
    """The folder and stats namespace of the corpus with threshold k."""
    return f"wes-k{k}"


class SelectTitlesFn(CountingDoFn):
    """Keeps titles with >= k incoming links, applies the dictionary filter, splits."""

    def __init__(self, k: int, seed: int, split_fractions: Sequence[float],
                 keep_dropped: bool = False):
        super().__init__(corpus_name(k), [
            "filtered:below_threshold_titles", "filtered:below_threshold_pairs",
            "threshold_titles", "threshold_pairs", "filtered:dictionary_word",
            "filtered:no_positives_left", "corpus_titles", "corpus_pairs"])
        self._k = k
        self._seed = seed
        self._fractions = tuple(split_fractions)
        self._keep_dropped = keep_dropped

    def process(self, cluster: TitleLinks):
        if cluster.incoming < self._k:
            self.count("filtered:below_threshold_titles")
            self.count("filtered:below_threshold_pairs", len(cluster.texts))
            return
        self.count("threshold_titles")
        self.count("threshold_pairs", len(cluster.texts))
        kept = cluster.kept_texts()
        self.count("filtered:dictionary_word", len(cluster.texts) - len(kept))
        if not kept:
            self.count("filtered:no_positives_left")
            return
        self.count("corpus_titles")
        self.count("corpus_pairs", len(kept))
        yield CorpusTitle(
            title=cluster.title,
            cluster_id=cluster_id(cluster.title),
            split=assign_split(self._seed, cluster.title, self._fractions),
            incoming=cluster.incoming,
            positives=kept,
            dropped=tuple(sorted(cluster.dictionary_dropped)) if self._keep_dropped else (),
        )


class BelowAllThresholdsFn(CountingDoFn):
    """Takes out the clusters that no corpus keeps (fewer incoming links than the smallest
    k) and counts them for every corpus, under the keys its `SelectTitlesFn` counts them
    with; passes the others on, one element per cluster. Its input is batches of clusters
    (tuples, `BuildClusters`).

    Most titles of a dump have a link or two (97% of the benchmark dump's are below k = 5),
    so this counts them once, instead of once per corpus and per-element DoFn call.
    `SumStats` adds the two counts of a key, so `stats.json` is the same.
    """

    def __init__(self, thresholds: Sequence[int]):
        self._titles_keys = [(corpus_name(k), "filtered:below_threshold_titles")
                             for k in thresholds]
        self._pairs_keys = [(corpus_name(k), "filtered:below_threshold_pairs")
                            for k in thresholds]
        super().__init__("thresholds", [*self._titles_keys, *self._pairs_keys])
        self._min_k = min(thresholds)
        self._titles = self._pairs = 0

    def start_bundle(self):
        super().start_bundle()
        self._titles = self._pairs = 0

    def process(self, batch: tuple[TitleLinks, ...]):
        min_k = self._min_k
        for cluster in batch:
            if cluster.incoming >= min_k:
                yield cluster
            else:
                self._titles += 1
                self._pairs += len(cluster.texts)

    def finish_bundle(self):
        for titles_key, pairs_key in zip(self._titles_keys, self._pairs_keys):
            self.count(titles_key, self._titles)
            self.count(pairs_key, self._pairs)
        yield from super().finish_bundle()


class DropBelowAllThresholds(CountedParDo):
    """Batches (tuples) of TitleLinks -> {"clusters": each cluster with at least min(k)
    incoming links, "stats"}.

    Args:
        thresholds: the corpora's k.
    """

    def __init__(self, thresholds: Sequence[int]):
        super().__init__(BelowAllThresholdsFn(thresholds), "CountBelowAllThresholds",
                         "clusters")


class BuildCorpus(beam.PTransform):
    """TitleLinks -> {"rows", "clusters", "stats"} of the corpus with threshold k (when
    `mixed`, also "hard": the rows of its WES-hard test split, hard_test.py).

    With the default negatives (random only, no link pairs) the input is the clusters'
    PCollection; otherwise (`mixed`) a dict: {"clusters", "redirects": redirect pages,
    "cooccurrence": this corpus's co-occurrence candidates (cooccurrence.py)}.

    Args:
        k: the threshold.
        seed: seed of splits and negatives.
        split_fractions: train/dev/test fractions.
        mix: `negative_mix.parse_negative_mix` (None: random only).
        link_pairs_cap: link-to-link positive pairs per cluster at most (0: none).
    """

    def __init__(self, k: int, seed: int, split_fractions: Sequence[float],
                 mix: Mapping[str, float] | None = None, link_pairs_cap: int = 0):
        super().__init__()
        if k < 1:
            raise ValueError(f"incoming-link threshold must be >= 1, got {k}")
        self.mixed = is_mixed(mix, link_pairs_cap)
        self._select = SelectTitlesFn(k, seed, split_fractions, keep_dropped=self.mixed)
        self._sample = (SampleMixedNegatives(corpus_name(k), seed, split_fractions,
                                             mix or {RANDOM: 1.0}, link_pairs_cap)
                        if self.mixed else SampleNegatives(corpus_name(k), seed))

    def stat_keys(self) -> list[StatKey]:
        return self._select.stat_keys() + self._sample.stat_keys()

    def expand(self, inputs):
        clusters = inputs["clusters"] if self.mixed else inputs
        selected = clusters | "SelectTitles" >> beam.ParDo(self._select).with_outputs(
            STATS_TAG, main="titles")
        if self.mixed:
            sampled = {**{k: v for k, v in inputs.items() if k != "clusters"},
                       "titles": selected.titles} | "SampleMixedNegatives" >> self._sample
        else:
            sampled = selected.titles | "SampleNegatives" >> self._sample
        stats = (selected[STATS_TAG], sampled["stats"]) | "FlattenCorpusStats" >> beam.Flatten()
        hard = {"hard": sampled["hard"]} if self.mixed else {}
        return {"rows": sampled["rows"], "clusters": sampled["clusters"], "stats": stats, **hard}
