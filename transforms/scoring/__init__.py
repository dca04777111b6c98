"""The scoring pipeline: prediction files -> scores, dead letters, summary, report.

One row flow for every run, in rooms by stage (each room's `__init__` draws its part)::

    reading/      --input -> RowBatch (consecutive rows of a split, validated) ──┐
                  dead letters (the row, its reason) ───────────────────────────┐│
    incremental/  (--previous_run) each batch meets its rows' previous values    ││
                  by shard of content key: which rows are old, what they had     ││
    statistics/   corpus statistics: idf as one side input; CIDEr-D document     ││
                  frequencies per n-gram shard, joined with each batch           ││
    score/        model metrics (one RunInference, transforms/inference), then   ││
                  the in-process ones: each row's record finished, or dead-      ││
                  lettered with every reason; carried metrics never recomputed   ││
                                                        scored lists, dead letters
    outputs/      scores (parts merged), dead letters, summary.json, the report
                  (report/), published together once the run's ownership is checked

At the top, beside the rooms: score_predictions.py (`ScorePredictions`, the graph; the
runner policy of the model branch), config.py (`ScoringConfig`, built and validated on
the launcher: `build_config`), score_flags.py (the command line) and column_flags.py
(the column flags resolved against the input's columns). `pipelines/score_predictions.py`
parses the flags, builds the config and runs the graph.

- Every row has a stable row key, `"<file>:<row number>"` (`reading.rows.RowSource.key`),
  independent of runner, sharding and worker count, and a content key (a hash of what its
  scores depend on) that incremental runs carry scores by.
- Rows cross stages only packed in `RowBatch`es (reading/row_batch.py), typed so that a
  runner sizes them without packing them (reading/batch_coder.py); no stage groups rows
  by key, and the scores file is written in parts per bundle and merged, never grouped.
- Counting DoFns are `CountingDoFn`s (transforms/io/counting.py): namespace = the stage,
  `passed` / `filtered:<reason>`. The summary writer checks that every row the reader
  counted reached the outputs.
"""
