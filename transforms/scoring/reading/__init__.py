"""Reading: prediction files -> `RowBatch`es of validated rows, and dead letters.

    --input glob ─ inputs.py (open, decompress; an unreadable file is an InputFileError
        │          naming it) and formats.py (JSONL, CSV, Parquet: (row, line, record))
        v
    read.ReadPredictions: files planned into splits (JSONL byte ranges, Parquet row
        │   groups, compressed files and CSV whole), read on the workers
        v
    row_validation.to_scoring_row: each record checked -> rows.ScoringRow, or a dead
        │   letter with its reason, row and line (rows.REASONS)
        v
    row_batch.RowBatch: consecutive rows of a split as one element (packed when pickled;
        batch_coder.BatchCoder sizes it without packing)

Also here: parquet_parts.py (Parquet files read by row group on the workers, errors
naming the file: the input, a previous run, a statistics file) and sniff.py (the input's
columns, on the launcher). Imports nothing else of transforms/scoring.
"""
