"""transforms/wes/corpus.py: the threshold prefilter changes no count and no row."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from transforms.io.counting import SumStats
from transforms.wes.corpus import BuildCorpus, DropBelowAllThresholds
from transforms.wes.tally import TitleLinks

CLUSTERS = [TitleLinks(f"Title {i}", incoming=i % 7,
                       texts=tuple(f"t{i}-{j}" for j in range(i % 3 + 1)))
            for i in range(60)]
THRESHOLDS = (2, 4)


def _corpora(p, prefilter: bool):
    clusters = p | "Clusters" >> beam.Create(CLUSTERS)
    stats, keys, rows = [], [], []
    if prefilter:
        below = DropBelowAllThresholds(THRESHOLDS)
        kept = (clusters | "Batch" >> beam.Map(lambda c: (c,))) | "Prefilter" >> below
        clusters = kept["clusters"]
        stats.append(kept["stats"])
        keys += below.stat_keys()
    for k in THRESHOLDS:
        build = BuildCorpus(k, seed=3, split_fractions=(0.5, 0.3, 0.2))
        corpus = clusters | f"Corpus{k}" >> build
        stats.append(corpus["stats"])
        keys += build.stat_keys()
        rows.append(corpus["rows"] | f"Key{k}" >> beam.Map(lambda r, k=k: (k, sorted(r.items()))))
    summed = stats | "FlattenStats" >> beam.Flatten() | SumStats(keys)
    return summed, rows | "FlattenRows" >> beam.Flatten()


def _write(path, items) -> None:
    path.write_text(json.dumps({
        "stats": next(v for k, v in items if k == "stats"),
        "rows": sorted(v for k, v in items if k == "rows")}))


def _collect(prefilter: bool, folder) -> dict:
    """Runs the corpora; their summed stats and sorted rows, through a file (a DoFn's
    side effects on test objects are lost: the runner works on copies)."""
    path = folder / f"out-{prefilter}.json"
    with TestPipeline() as p:
        stats, rows = _corpora(p, prefilter)
        _ = ((stats | "StatsOut" >> beam.Map(lambda d: ("stats", d)),
              rows | "RowsOut" >> beam.Map(lambda r: ("rows", repr(r))))
             | "FlattenOut" >> beam.Flatten()
             | "All" >> beam.combiners.ToList()
             | "Write" >> beam.Map(lambda items: _write(path, items)))
    return json.loads(path.read_text())


@pytest.mark.slow
def test_prefilter_gives_the_same_counts_and_rows(tmp_path):
    plain, prefiltered = _collect(False, tmp_path), _collect(True, tmp_path)
    assert prefiltered["stats"] == plain["stats"]
    assert prefiltered["rows"] == plain["rows"] and plain["rows"]
    below = sum(1 for c in CLUSTERS if c.incoming < 2)
    assert plain["stats"]["wes-k2/filtered:below_threshold_titles"] == below
    assert plain["stats"]["wes-k4/filtered:below_threshold_titles"] == sum(
        1 for c in CLUSTERS if c.incoming < 4)
