"""Incremental runs (`--previous_run`): carry scores over from an earlier complete run.

    launcher: previous_run.load_previous_run (its summary and scores file, checked)
              plan.plan_carry -> CarryPlan: which metrics carry, why the others do not
    graph:    previous_shards.ReadPreviousShards: the previous scores as one table per
                  shard of content key
              carry.AttachPrevious: each RowBatch looks its rows' keys up in the tables
                  of their shards (a side input) -> the batch with its `Carry`: which
                  rows are old, their previous values, the first row of each content

The scoring room then computes only what is not carried (score/). Imports reading and
outputs (the previous run's file names) only.
"""
