"""transforms/io/dask_runner.py: the Beam primitives that Beam 2.77's DaskRunner gets
wrong (docs/repro/dask_runner_faults.py) give the Beam model's results on a real
dask.distributed cluster of 2 worker processes."""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from tests.runners import dask_cluster

pytestmark = pytest.mark.slow

try:
    import dask  # noqa: F401
    import distributed  # noqa: F401
    _MISSING = None
except ImportError as e:
    _MISSING = f"dask.distributed is not installed ({e}); `make setup` installs it"


@pytest.fixture(scope="module")
def cluster_args(worker_site, tmp_path_factory):
    if _MISSING:
        pytest.skip(_MISSING)
    with dask_cluster(worker_site, str(tmp_path_factory.mktemp("dask"))) as args:
        yield args


# DoFns are defined in the tests: the workers import the project from its wheel, not
# this test module, so what they run must pickle by value.


def _check(folder: str, pcoll, expected: list, label: str) -> None:
    """`assert_that`, whose matcher also leaves a file named `label` in `folder` once the
    check has passed: a check the runner never computes is then missing, not passed."""
    def matcher(actual):
        equal_to(expected)(actual)
        with open(os.path.join(folder, label), "w"):
            pass

    assert_that(pcoll, matcher, label=label)


def test_outputs_by_tag_finish_bundle_and_side_inputs(cluster_args, tmp_path):
    class Split(beam.DoFn):
        def process(self, n):
            yield n if n % 2 == 0 else beam.pvalue.TaggedOutput("odd", n)

    class SumBundle(beam.DoFn):
        def start_bundle(self):
            self._total = 0

        def process(self, n):
            self._total += n

        def finish_bundle(self):
            from apache_beam.transforms.window import GlobalWindow
            from apache_beam.utils.windowed_value import WindowedValue

            yield WindowedValue(self._total, 0, [GlobalWindow()])

    checked = str(tmp_path)
    with beam.Pipeline(options=PipelineOptions(cluster_args)) as p:
        numbers = p | beam.Create(list(range(1, 11)))
        parts = numbers | beam.ParDo(Split()).with_outputs("odd", main="even")
        _check(checked, parts.odd, [1, 3, 5, 7, 9], "Odd")
        _check(checked, parts.even, [2, 4, 6, 8, 10], "Even")
        low, high = numbers | beam.Partition(lambda n, _: int(n > 5), 2)
        _check(checked, high, [6, 7, 8, 9, 10], "High")
        totals = numbers | beam.ParDo(SumBundle()) | beam.CombineGlobally(sum)
        _check(checked, totals, [55], "FinishBundle")
        # side inputs from tagged outputs, as the graphs use them
        named = (parts.odd | beam.Map(lambda n: (n, str(n)))
                 | beam.Map(lambda kv, odd: (kv[1], sorted(odd)), beam.pvalue.AsList(parts.odd)))
        _check(checked, named | beam.Map(lambda kv: (kv[0], len(kv[1]))),
               [(str(n), 5) for n in (1, 3, 5, 7, 9)], "SideInput")
        grouped = (numbers | beam.Map(lambda n: (n % 3, n)) | beam.GroupByKey()
                   | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
        _check(checked, grouped, [(0, [3, 6, 9]), (1, [1, 4, 7, 10]), (2, [2, 5, 8])],
               "Grouped")
        _ = low
    # every check ran (a branch the runner does not compute would skip its check)
    assert sorted(os.listdir(checked)) == [
        "Even", "FinishBundle", "Grouped", "High", "Odd", "SideInput"]


def test_every_branch_runs_and_sources_read(cluster_args, tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("x\ny\nz\n")
    folder = str(tmp_path)

    def touch(name: str) -> None:
        with open(os.path.join(folder, name), "w"):
            pass

    with beam.Pipeline(options=PipelineOptions(cluster_args)) as p:
        numbers = p | beam.Create([1, 2, 3])
        _ = numbers | "First" >> beam.Map(lambda n: touch(f"a{n}"))
        _ = numbers | "Second" >> beam.Map(lambda n: touch(f"b{n}"))
        _check(folder, p | beam.io.ReadFromText(str(path)), ["x", "y", "z"], "Read")
    assert {f"{c}{n}" for c in "ab" for n in (1, 2, 3)} | {"Read"} <= set(os.listdir(folder))
