"""Scoring: each RowBatch scored by every metric, each row's record finished.

    RowBatch ─> run_model_metrics.ScoreModelBatches (model metrics: one RunInference
        │   over every model through batch_model_handler.BatchModelHandler; each row's
        │   results attached to its batch; the carried metrics of an incremental run's
        │   old rows never asked)
        v
    in_process.ScoreBatches (in-process metrics; CIDEr-D's frequencies from statistics/:
        │   the sharded join's answers, or table files on this machine)
        v
    batches.ScoreRowsFn -> per batch, a list of scored records (every metric's columns,
        an old row's carried values) and the dead letters (every reason)

The model machinery that knows nothing of rows is transforms/inference. Imports reading,
statistics and incremental.
"""
