"""The scoring pipeline's transforms: read, validate, score, join, summarise, report, write.

Row flow (`ScorePredictions` in score_predictions.py; `pipelines/score_predictions.py`
runs it with the `ScoringConfig` of config.py). A run without a previous run is scored on
the reader's batches, in one row flow, with no join::

    ReadPredictions ──batches: RowBatch (consecutive rows of a split)──> Reshuffle (only
         │ dead_letter        │   where the splits cannot spread the work over the workers:
         │                    │   `ScorePredictions._plan_spread`)
         │                    v
         │      ScoreModelBatches (run_model_metrics.py: one RunInference for every
         │        model; each batch comes back with each row's model scores attached)
         │                    v
         │      ScoreBatches (in-process metrics; CIDEr-D: batches joined with their
         │        n-grams' frequencies, corpus_stats.py; each row's record finished:
         │        scored by every metric, or dead-lettered with every reason)
         │                    │scored: a list per batch   │dead_letter
         └──────── Flatten ───┼───────────────────────────┘
                              v
            WriteScores, WriteDeadLetters, SummarizeScores+WriteSummary, WriteReport
                  -> FinalizeOutputs (finalize.py, with transforms/io/publish.py: the
                     earlier run's files and statistics file replaced by the new ones,
                     summary last, once the run's ownership of them is checked:
                     transforms/io/ownership.py)

An incremental run (`--previous_run`) keys its rows, groups them by content and joins its
branches (incremental.py; the previous run is found and checked on the launcher by
previous_run.py)::

    ReadPredictions ──rows: (row_key, ScoringRow)──┬─> ComputeCorpusStatistics ─(AsSingleton)┐
         │                                         ├─> ScoreMetrics (in-process, lexical) ───┤
         │ dead_letter                             │     (row_key, ScoreResult)              │
         │                                         ├─> RunModelMetrics (rows gathered into   │
         │                                         │    batches, the same model branch;      │
         │                                         │    row_key, ScoreResult)                │
         │                                         └──────────────> JoinScores (CoGroupByKey)
         │                                                           │scored   │dead_letter
         └──────────────────────── Flatten ──────────────────────────┼─────────┘
                                                                     v
                                                            (the same writers)

- Every row is keyed when it is read by a stable row key, `"<file>:<row number>"`
  (`rows.RowSource.key`), independent of runner, sharding and worker count.
- Every metric says one `score.ScoreResult` per row: `ScoreResult(scores={column:
  value})` or `ScoreResult(None, reason, kind)`. The in-process metrics (EM/F1, BLEU,
  ROUGE-L, CIDEr, METEOR) are scored by `score.ScoreBatches`; the model-backed metrics by
  `run_model_metrics` (one `RunInference` over batches of rows for every model, each
  row's outputs folded in the same stage). `score.merge_branch_results` makes each row's
  record: scored by every metric, or one dead-letter record with every reason (the
  first one's kind); rows are never half-scored. In one flow it runs where the batch's
  in-process metrics are scored; in the keyed graph, in `join.JoinScores` after the
  branches are grouped by row key.
- Corpus-level statistics bounded by the vocabulary (BERTScore idf) are one
  `CombineGlobally` over all rows (global_statistics.py), handed to every batch as a
  singleton side input.
  CIDEr-D's document frequencies grow with the corpus: they are summed per n-gram shard
  and each batch of rows is joined with the frequencies of its own n-grams
  (corpus_stats.py, inside `ScoreMetrics`, whose keyed rows are batched by their
  references for it: reference_batches.py; the n-grams' hashes, shards and tables, also
  read by statistics_file.py, are ngram_hashes.py).
- Build-time modules, imported by config.py without the writers or the plotting:
  sniff.py (the input's columns), column_flags.py (the column flags and
  `--keep_input_columns` resolved against the input's columns), outputs.py (the output
  names at the prefix), report_spec.py (`--report_subsets`, `--accuracy_threshold`,
  `--report_min_n`, thresholds saved with checkpoints); the report itself is report.py
  (the statistics per scope), report_render.py (markdown tables, PNG) and bootstrap.py
  (vectorised intervals and the paired test; its cells and resample weights:
  bootstrap_cells.py), run once all rows are gathered; the model flags are one table,
  `model_flags.MODEL_FLAG_TABLE`, that gives both the command line and where each value
  goes.
- Counting DoFns (`ReadRowsFn`, `ScoreRowsFn`, `MergeScoresFn`) are `CountingDoFn`s
  (transforms/io/counting.py): namespace = the stage, `passed` / `filtered:<reason>`.
  The summary writer checks that every row the reader counted reached the outputs.
- On the in-process runner every collection that crosses a stage stays in memory until
  the run ends: rows cross stages only packed in `RowBatch`es (row_batch.py;
  row_validation.py makes each row from its record, as the types of rows.py), and the
  scores file is written in parts per bundle and merged (write.py), never grouped.
- The model branch (run_model_metrics.py) runs every model through one `RunInference`
  whose handler, batch_model_handler.py's `BatchModelHandler`, wraps multi_use.py's
  `MultiUseModelHandler` (one handler per model use, failures isolated input by input,
  models shareable across processes).
- The edges that carry batches (`RowBatch`, the model branch's `BatchRequests` and
  `BatchResult`) are typed, so they get `batch_coder.BatchCoder`: the same pickle
  payload as before, but sized for the runner's size sampling from their texts, without
  being packed or pickled.
"""
