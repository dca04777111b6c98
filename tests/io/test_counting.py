"""transforms/io/counting.py: counts travel as data (stats output) and as Beam counters."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.io.counting import STATS_TAG, CountingDoFn, SumStats


class EvenFn(CountingDoFn):
    def __init__(self):
        super().__init__("even", ["passed", "filtered:odd", "never"])

    def process(self, n):
        if n % 2:
            self.count("filtered:odd")
            return
        self.count("passed")
        yield n


@pytest.mark.slow
def test_counts_as_data_and_as_counters():
    fn = EvenFn()
    p = TestPipeline()
    out = p | beam.Create(range(7)) | beam.ParDo(fn).with_outputs(STATS_TAG, main="kept")
    assert_that(out.kept, equal_to([0, 2, 4, 6]), label="kept")
    assert_that(out[STATS_TAG] | SumStats(fn.stat_keys()), equal_to([{
        "even/passed": 4, "even/filtered:odd": 3, "even/never": 0}]), label="stats")
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace("even"))["counters"]
    assert {c.key.metric.name: c.committed for c in counters} == {
        "passed": 4, "filtered:odd": 3}


def test_declared_keys_appear_even_when_nothing_was_counted():
    fn = EvenFn()
    with TestPipeline() as p:
        out = p | beam.Create([]) | beam.ParDo(fn).with_outputs(STATS_TAG, main="kept")
        assert_that(out[STATS_TAG] | SumStats(fn.stat_keys()), equal_to([{
            "even/passed": 0, "even/filtered:odd": 0, "even/never": 0}]))


class SplitFn(CountingDoFn):
    """Counts some of its exits under another stage's namespace."""

    def __init__(self):
        super().__init__("split", ["small", ("other", "large")])

    def process(self, n):
        self.count("small" if n < 3 else ("other", "large"))
        yield n


def test_counts_under_another_namespace():
    fn = SplitFn()
    assert fn.stat_keys() == [("split", "small"), ("other", "large")]
    p = TestPipeline()
    out = p | beam.Create(range(5)) | beam.ParDo(fn).with_outputs(STATS_TAG, main="kept")
    assert_that(out[STATS_TAG] | SumStats(fn.stat_keys()), equal_to([{
        "split/small": 3, "other/large": 2}]))
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace("other"))["counters"]
    assert {c.key.metric.name: c.committed for c in counters} == {"large": 2}


def test_progress_gets_the_first_count_at_once_and_every_count_by_the_bundle_end(monkeypatch):
    """The progress tally (progress lines) is given a DoFn's counts mid-bundle at most
    every REPORT_EVERY_S, and all of them at the bundle's end."""
    from transforms.io import counting, progress

    now = [100.0]
    monkeypatch.setattr(counting.time, "monotonic", lambda: now[0])
    added = []
    monkeypatch.setattr(progress, "add", lambda key, n=1: added.append((key, n)))
    fn = EvenFn()
    fn.start_bundle()
    for n in range(5):
        list(fn.process(n))
    assert added == [("even/passed", 1)]  # the first count: a run's start-up is over
    now[0] += counting.REPORT_EVERY_S
    list(fn.process(6))
    assert sorted(added[1:]) == [("even/filtered:odd", 2), ("even/passed", 3)]
    list(fn.process(7))
    list(fn.finish_bundle())
    assert added[3:] == [("even/filtered:odd", 1)]


def test_count_all_counts_as_count_does_for_each_name(monkeypatch):
    """`count_all` of a title's tally: the same stats and progress as a `count` per name,
    the clock read once."""
    from transforms.io import counting, progress

    reads = []
    monkeypatch.setattr(counting.time, "monotonic", lambda: reads.append(1) or 100.0)
    added = []
    monkeypatch.setattr(progress, "add", lambda key, n=1: added.append((key, n)))

    def outputs(fn):
        return sorted(out.value.value for out in fn.finish_bundle())

    one, many = EvenFn(), EvenFn()
    for fn in (one, many):
        fn.start_bundle()
    for name, n in (("passed", 2), ("filtered:odd", 3), ("passed", 1), ("never", 0)):
        one.count(name, n)
    added.clear()
    reads.clear()
    many.count_all({"passed": 2, "filtered:odd": 3})
    many.count_all({"passed": 1, "never": 0})
    assert len(reads) == 3  # a check per call, and the report's own
    assert sorted(added) == [("even/filtered:odd", 3), ("even/passed", 2)]  # the first report
    assert outputs(many) == outputs(one) == [(("even", "filtered:odd"), 3), (("even", "passed"), 3)]
