"""Reproduction of an open fault: rows missing from CoGroupByKey groups on the
multi-process DirectRunner (Beam 2.77, Python 3.11, 2 cores).

    .venv/bin/python docs/repro/multiprocess_cogroupbykey.py

The graph has the shape of the scoring pipeline's model branch, with no project code:
1,000 keyed rows are expanded into 34 requests each, batched (BatchElements, 2,048),
turned into 34 outputs of 18 KB (an array of 12 x 384 float32, `ROWS`), keyed back by row, and
joined with the rows by CoGroupByKey. Each group must hold one row and 34 outputs.

Observed on a 2-core machine: 1 of 3 runs failed with "<key>: 0 rows, 34 outputs" (a group
with the outputs but not the row); with a second branch joined later, as in the scoring
pipeline, 3 of 3 failed. In process (`... in_memory`) 2 of 2 runs were right. Giving the
joined inputs explicit `Tuple[...]` output types made two runs pass, but the real
pipeline still failed with every input retyped, so a key-coder mismatch is not the whole
story.

Counting group shapes instead of stopping at the first: 3 of the first 5 runs
were wrong, each in whole chunks of data, never single elements: once the "rows" stream
of one of the two workers was missing entirely (500 groups "0 rows, 34 outputs"), once
one batch's outputs (68 rows with no outputs, a few partial). The runner's side is
guarded where one would look first: `BundleContextManager.get_buffer` and the buffer
appends run under `BundleManager._lock`, and bundle ids are unique. Whether the data
plane discarded chunks for an instruction it had already cleaned up (it logs that at
INFO) could not be seen: every instrumented run came out right. With outputs
of 1.5 KB (`ROWS=1` below: 26 MB per worker bundle instead of 313 MB) 5 of 5 runs were
right, and so were 6 of 6 and 3 of 3 runs with instrumentation on the runner's side,
which makes the fault timing-dependent and, here, tied to large data volumes between a
worker and the runner (data-plane chunks of 10 MB, a 100 MB send queue). Root cause not
found; it is Beam's (the graph has no project code), and only its local multi-process
mode shows it. The scoring pipeline fails loudly when it happens and warns when model
metrics are run in that mode.

    ROWS=1 .venv/bin/python docs/repro/multiprocess_cogroupbykey.py   # small outputs
"""

import os
import sys
import time

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

N, K = 1000, 34
ROWS = int(os.environ.get("ROWS", 12))  # output rows of 384 float32 per request


def expand(kv):
    key, i = kv
    for j in range(K):
        yield (key, j % 5, j), (f"use{j % 5}", f"text {i} {j}")


def infer(batch):
    time.sleep(0.002 * len(batch))  # stands in for a forward pass
    return [(k, np.ones((ROWS, 384), dtype=np.float32)) for k, _ in batch]


def to_row(kv):
    (key, index, slot), value = kv
    return key, (index, slot, value)


def fold(kv):
    key, groups = kv
    rows, outputs = list(groups["rows"]), list(groups["outputs"])
    if len(rows) != 1 or len(outputs) != K:
        raise RuntimeError(f"{key}: {len(rows)} rows, {len(outputs)} outputs")
    return key


def main(mode: str = "multi_processing") -> None:
    options = PipelineOptions(["--runner=DirectRunner", f"--direct_running_mode={mode}",
                               "--direct_num_workers=2"])
    with beam.Pipeline(options=options) as p:
        rows = (p | beam.Create([f"/f.csv:{i}" for i in range(N)]) | beam.Reshuffle()
                | beam.Map(lambda k: (k, int(k.split(":")[1]))))
        outputs = (rows | beam.FlatMap(expand)
                   | beam.BatchElements(min_batch_size=2048, max_batch_size=2048)
                   | beam.FlatMap(infer) | beam.Map(to_row))
        _ = ({"rows": rows, "outputs": outputs} | beam.CoGroupByKey() | beam.Map(fold)
             | beam.combiners.Count.Globally() | beam.Map(lambda n: print("groups", n)))


if __name__ == "__main__":
    main(*sys.argv[1:])
