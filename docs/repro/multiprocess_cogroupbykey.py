"""Reproduction of an open fault: rows missing from CoGroupByKey groups on the
multi-process DirectRunner (Beam 2.77, Python 3.11, 2 cores).

    .venv/bin/python docs/repro/multiprocess_cogroupbykey.py

The graph has the shape of the scoring pipeline's model branch, with no project code:
1,000 keyed rows are expanded into 34 requests each, batched (BatchElements, 2,048),
turned into 34 outputs of 18 KB (an array of 12 x 384 float32), keyed back by row, and
joined with the rows by CoGroupByKey. Each group must hold one row and 34 outputs.

Observed here: 1 of 3 runs failed with "<key>: 0 rows, 34 outputs" (a group with the
outputs but not the row); with a second branch joined later, as in the scoring pipeline,
3 of 3 failed. In process (`... in_memory`) 2 of 2 runs were right. Giving the joined inputs explicit `Tuple[...]` output
types made two runs pass, but the real pipeline still failed with every input retyped,
so a key-coder mismatch is not the whole story. Root cause not found.
"""

import sys
import time

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

N, K = 1000, 34


def expand(kv):
    key, i = kv
    for j in range(K):
        yield (key, j % 5, j), (f"use{j % 5}", f"text {i} {j}")


def infer(batch):
    time.sleep(0.002 * len(batch))  # stands in for a forward pass
    return [(k, np.ones((12, 384), dtype=np.float32)) for k, _ in batch]


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
