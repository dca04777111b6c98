"""Faults of Beam 2.77's DaskRunner, each in a few lines of plain Beam (no project code).

Run (dask and distributed installed, as requirements.txt pins them):

    python docs/repro/dask_runner_faults.py

It starts a dask.distributed LocalCluster of 2 worker processes on 127.0.0.1, runs each
case on Beam's DaskRunner and on the FnApiRunner, and prints per case what each gave.
A case is a FAULT when the DaskRunner's result differs from the FnApiRunner's (which
agrees with the Beam model). Found while running this project's pipelines on Dask
(transforms/io/dask_runner.py corrects them); the causes, in apache_beam/runners/dask/:

1. multi_output: `transform_evaluator.ParDo` puts every output of a DoFn, main and
   tagged, into one bag (`apply_dofn_to_bundle` returns `v.value` of each, the tag is
   dropped) and the visitor hands that bag to the consumer of every output
   (`bags[input.producer]`): each output PCollection holds all of them. `beam.Partition`
   is such a ParDo. This is the `TypeError: not all arguments converted during string
   formatting` of the scoring graph (a row batch's string key reached the partition
   function of the n-gram requests) and the `TypeCheckError: Input to GroupByKey must be
   a PCollection with elements compatible with KV[A, B]` of the mining graph (a
   `DumpRange`, main output of the read planner, reached the statistics' GroupByKey).
2. finish_bundle: `apply_dofn_to_bundle` copies the outputs before it calls
   `finish_bundle`, so whatever `finish_bundle` emits is lost (`BatchElements` emits its
   last batch there; so does every DoFn that tallies a bundle).
3. two_sinks: `run_pipeline` computes only the bag of the last transform visited (and
   what it depends on): a branch that ends elsewhere never runs.
4. read: `beam.io.Read` is replaced by `_Read`, which has no translation (a no-op whose
   bag is None): `ReadFromText`, `ReadFromParquet`... read nothing, or fail.
5. metrics: `DaskRunnerResult.metrics()` raises NotImplementedError.
"""

from __future__ import annotations

import os
import tempfile

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to


class _Split(beam.DoFn):
    def process(self, n):
        yield n if n % 2 == 0 else beam.pvalue.TaggedOutput("odd", n)


class _SumBundle(beam.DoFn):
    def start_bundle(self):
        self._total = 0

    def process(self, n):
        self._total += n

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindow
        from apache_beam.utils.windowed_value import WindowedValue

        yield WindowedValue(self._total, 0, [GlobalWindow()])


def multi_output(p):
    parts = p | beam.Create([1, 2, 3, 4]) | beam.ParDo(_Split()).with_outputs("odd", main="even")
    assert_that(parts.odd, equal_to([1, 3]), label="odd")
    assert_that(parts.even, equal_to([2, 4]), label="even")


def finish_bundle(p):
    totals = p | beam.Create([1, 2, 3, 4]) | beam.ParDo(_SumBundle())
    assert_that(totals | beam.CombineGlobally(sum), equal_to([10]))


def two_sinks(p, folder):
    numbers = p | beam.Create([1, 2, 3])
    numbers | "First" >> beam.Map(lambda n: open(os.path.join(folder, f"a{n}"), "w").close())
    numbers | "Second" >> beam.Map(lambda n: open(os.path.join(folder, f"b{n}"), "w").close())


def read(p, folder):
    path = os.path.join(folder, "lines.txt")
    with open(path, "w") as f:
        f.write("x\ny\n")
    assert_that(p | beam.io.ReadFromText(path), equal_to(["x", "y"]))


def _run(case, runner_args):
    with tempfile.TemporaryDirectory() as folder:
        try:
            with beam.Pipeline(options=PipelineOptions(runner_args)) as p:
                if case in (two_sinks, read):
                    case(p, folder)
                else:
                    case(p)
            if case is two_sinks:
                return f"files written: {sorted(os.listdir(folder))}"
            return "passed"
        except Exception as e:  # noqa: BLE001 - a repro reports whatever the runner raised
            return f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"


def _metrics(runner_args):
    with beam.Pipeline(options=PipelineOptions(runner_args)) as p:
        p | beam.Create([1]) | beam.Map(lambda n: n)
    try:
        p.result.metrics().query()
        return "passed"
    except NotImplementedError as e:
        return f"NotImplementedError: {e}"


def main():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0", silence_logs=40) as cluster:
        dask_args = ["--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                     f"--dask_client_address={cluster.scheduler_address}"]
        fnapi_args = ["--runner=FnApiRunner"]
        for case in (multi_output, finish_bundle, two_sinks, read):
            fnapi, dask = _run(case, fnapi_args), _run(case, dask_args)
            verdict = "ok" if fnapi == dask else "FAULT"
            print(f"{case.__name__:14s} {verdict:5s} FnApiRunner: {fnapi} | DaskRunner: {dask}")
        fnapi, dask = _metrics(fnapi_args), _metrics(dask_args)
        verdict = "ok" if fnapi == dask else "FAULT"
        print(f"{'metrics':14s} {verdict:5s} FnApiRunner: {fnapi} | DaskRunner: {dask}")


if __name__ == "__main__":
    main()
