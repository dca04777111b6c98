"""The WES half of the mining pipeline: filtered links -> the corpora, stats and files.

Flow (`MineWes` in mine.py wires it after transforms/wiki/; `pipelines/mine_wes.py`
runs it)::

    ExtractLinks (wiki/) ─links─> FilterLinks ─per-bundle tallies─> BuildClusters
                                  filters.py    (tally.py)          clusters.py
                                                                      ├ merge_shard (tally.py)
      ReadPages (wiki/) ─redirects─┬───────────────────────────────── ├ ResolveRedirects
                                   │                                  │   (redirects.py, optional)
                                   │                                  └ AnnotateDictionaryFn
                                   │                                      (dictionary.py, lexicon.py,
                                   │                                       lexicon_assembly.py)
                                   │         TitleLinks batches ──> DropBelowAllThresholds
                                   │                                      (corpus.py)
                                   │                     per k ───────> BuildCorpus[wes-k<k>]
                                   │                                      thresholds (corpus.py),
                                   │                                      splits and ids (sampling.py),
                                   │                                      SampleNegatives (negatives.py)
                                   └─ keyed_redirect_rows (redirects.py)
                                                 └────────> WriteParquetShards (write.py)
                                                               └─> WriteStats (stats.py: stats.json,
                                                                     dataset_card.md, README.md)
                                                                     └─> PublishRun (transforms/io/)

With `--negatives` other than random only, or `--link_pairs`, `BuildCorpus` runs
`SampleMixedNegatives` (mixed_negatives.py) instead of `SampleNegatives`: the random
donors as before, plus candidates from `F1Candidates` and `SubstringCandidates`
(candidates.py, per corpus) and `LinkCooccurrence` (cooccurrence.py, once per run, from
FilterLinks' passing links per page, for the titles of DropBelowAllThresholds' clusters,
trimmed by a Bloom filter of them, title_bloom.py), checked against the synonym rules
(synonyms.py) and mixed by kind (negative_mix.py); rows then carry `pair_kind`
(write.PAIR_KIND_SCHEMA). A mix with an adversarial kind also writes each corpus's
WES-hard test split (hard_test.py).

- Every counting stage is a `CountingDoFn` (transforms/io/counting.py): its counts go to
  Beam counters and, as data, to `stats.json` (`SumStats`), zero-filled from each stage's
  `stat_keys()`.
- Incoming links are counted in one place, tally.py: `FilterLinks` tallies each bundle's
  passing links per title, `BuildClusters` adds the tallies up after the shuffle.
- Everything is written into the run's `.temp-<uuid>/` folder and published last, with
  stats.json (the completeness marker) after every other file.
"""
