"""`MineWes`: the whole mining graph, dump files -> published WES corpora (see the map in
transforms/wes/__init__.py); `parse_thresholds`: the `--min_incoming_links` value.

`pipelines/mine_wes.py` parses the flags, checks the output directory and applies
`MineWes` to its pipeline.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam

from transforms.io.counting import SumStats
from transforms.io.publish import PublishRun
from transforms.wes.clusters import BuildClusters
from transforms.wes.cooccurrence import ARTICLE, WORD, LinkCooccurrence
from transforms.wes.corpus import BuildCorpus, DropBelowAllThresholds, corpus_name, is_mixed
from transforms.wes.filters import PAGE_LINKS_TAG, FilterLinks
from transforms.wes.hard_test import has_hard_test
from transforms.wes.redirects import REDIRECTS_DESTINATION, keyed_redirect_rows
from transforms.wes.stats import STATS_FILE, WriteStats
from transforms.wes.write import REDIRECT_SCHEMA, WriteParquetShards, corpus_outputs, run_files
from transforms.wiki.extract import ExtractLinks
from transforms.wiki.read import ReadPages


def parse_thresholds(spec: str) -> list[int]:
    """`--min_incoming_links` ("5,10,20") -> the thresholds k, sorted, each once.

    Raises:
        ValueError: not integers, or one below 1.
    """
    try:
        values = sorted({int(v) for v in spec.split(",") if v.strip()})
    except ValueError as e:
        raise ValueError(f"--min_incoming_links must be integers like 5,10,20, got {spec!r}") from e
    if not values or values[0] < 1:
        raise ValueError(f"--min_incoming_links needs integers >= 1, got {spec!r}")
    return values


class MineWes(beam.PTransform):
    """The pipeline's root -> the published run's final paths (stats.json last).

    Args:
        paths: the dump files (matched already, `wiki.read.match_inputs`).
        output_dir: the output directory.
        temp_dir: the run's temporary folder in it (`io.publish.new_temp_dir`).
        thresholds: the thresholds k (`parse_thresholds`): one corpus each.
        seed: seed of splits and negatives.
        fractions: train/dev/test fractions (`sampling.parse_splits`).
        config: the run's configuration, written to stats.json.
        overwrite: replace an earlier run in `output_dir`.
        resolve_redirects, dictionary_filter: see `BuildClusters`.
        skip_bad_files, split_mb: see `ReadPages`.
        full_parse_timeout_s, max_page_mb: see `ExtractLinks`.
        negatives: the negative mix (`negative_mix.parse_negative_mix`; None: random).
        link_pairs: link-to-link positive pairs per cluster at most (0: none).
    """

    def __init__(self, paths: Sequence[str], output_dir: str, temp_dir: str,
                 thresholds: Sequence[int], seed: int, fractions: Sequence[float],
                 config: Mapping[str, Any], *, overwrite: bool, resolve_redirects: bool,
                 dictionary_filter: bool, skip_bad_files: bool, split_mb: float,
                 full_parse_timeout_s: float, max_page_mb: float, owner: str | None = None,
                 negatives: Mapping[str, float] | None = None, link_pairs: int = 0):
        super().__init__()
        self._owner = owner  # the run id that owns output_dir, checked before publishing
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._thresholds = list(thresholds)
        self._config = dict(config)
        self._overwrite = overwrite
        self._read = ReadPages(paths, skip_bad_files=skip_bad_files, split_mb=split_mb)
        self._extract = ExtractLinks(full_parse_timeout_s, max_page_mb)
        cooccurrence = any(kind in (negatives or {}) for kind in (ARTICLE, WORD))
        self._filter_links = FilterLinks(page_links=cooccurrence)
        self._build_clusters = BuildClusters(resolve_redirects, dictionary_filter)
        self._below_all = DropBelowAllThresholds(self._thresholds)
        self._corpora = {k: BuildCorpus(k, seed, fractions, negatives, link_pairs)
                         for k in self._thresholds}
        self._mixed = is_mixed(negatives, link_pairs)
        self._hard = has_hard_test(negatives)
        self._cooccurrence = (LinkCooccurrence(
            self._thresholds, [kind for kind in (ARTICLE, WORD) if kind in negatives])
            if cooccurrence else None)

    def stat_keys(self):
        """Every count a stage can make: each appears in stats.json, 0 when none."""
        stages = (self._read, self._extract, self._filter_links, self._build_clusters,
                  self._below_all, self._cooccurrence, *self._corpora.values())
        return [key for stage in stages if stage is not None for key in stage.stat_keys()]

    def expand(self, p):
        dump = p | "ReadPages" >> self._read
        links = dump["pages"] | "ExtractLinks" >> self._extract
        pairs = links["links"] | "FilterLinks" >> self._filter_links
        clusters = {"pairs": pairs["pairs"], "redirects": dump["redirects"]} | (
            "BuildClusters" >> self._build_clusters)
        # Clusters that no corpus keeps are counted once here, not in every corpus.
        kept = clusters["clusters"] | "DropBelowAllThresholds" >> self._below_all
        stats = [dump["stats"], links["stats"], pairs["stats"], clusters["stats"],
                 kept["stats"]]
        outputs = [dump["redirects"] | "RedirectRows" >> beam.FlatMap(keyed_redirect_rows)]
        schemas = {REDIRECTS_DESTINATION: REDIRECT_SCHEMA}
        corpus_inputs = dict.fromkeys(self._thresholds, kept["clusters"])
        if self._mixed:
            corpus_inputs = {k: {"clusters": kept["clusters"], "redirects": dump["redirects"]}
                             for k in self._thresholds}
            if self._cooccurrence is not None:
                cooccurrence = {"pages": pairs[PAGE_LINKS_TAG], "titles": kept["clusters"]} | (
                    "LinkCooccurrence" >> self._cooccurrence)
                for k in self._thresholds:
                    corpus_inputs[k]["cooccurrence"] = cooccurrence["candidates"][k]
                stats.append(cooccurrence["stats"])
        for k in self._thresholds:
            name = corpus_name(k)
            corpus = corpus_inputs[k] | f"BuildCorpus[{name}]" >> self._corpora[k]
            keyed, corpus_schemas = corpus_outputs(name, corpus, self._mixed, self._hard)
            outputs += keyed
            schemas.update(corpus_schemas)
            stats.append(corpus["stats"])
        shards = (outputs | "FlattenOutputRows" >> beam.Flatten()
                  | "WriteParquet" >> WriteParquetShards(self._output_dir, schemas,
                                                         self._temp_dir))
        report = {
            "counts": (stats | "FlattenStats" >> beam.Flatten()
                       | "SumStats" >> SumStats(self.stat_keys())),
            "files": shards,
            "bad_files": dump["bad_files"],
        } | "WriteStats" >> WriteStats(self._output_dir, self._temp_dir, self._config)
        return ((shards, report) | "FlattenRunFiles" >> beam.Flatten()
                | "PublishRun" >> PublishRun(self._output_dir, self._temp_dir, STATS_FILE,
                                             self._overwrite, run_files, self._owner))
