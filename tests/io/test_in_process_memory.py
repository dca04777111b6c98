"""Beam's in-process runner holding a stage's data once (transforms/io/in_process_memory.py)."""

from __future__ import annotations

import math

import apache_beam as beam
import pytest
from apache_beam.coders import coders
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import execution
from apache_beam.runners.worker import data_plane
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core, window

from tests.runners import RUNNER_ARGS
from transforms.io import in_process_memory

Data, Timers = beam_fn_api_pb2.Elements.Data, beam_fn_api_pb2.Elements.Timers


@pytest.fixture
def beams_method(monkeypatch):
    """Beam's own `input_elements` and `partition`, put back on their classes for the test
    (the module's methods are installed for the rest of a process by any run before it);
    returns Beam's `input_elements`."""
    for cls, name in ((data_plane.InMemoryDataChannel, "input_elements"),
                      (execution.GroupingBuffer, "partition")):
        method = getattr(cls, name)
        monkeypatch.setattr(cls, name, getattr(method, "__wrapped__", method))
    return data_plane.InMemoryDataChannel.input_elements


def _written() -> list:
    """What a stage's writer and another instruction's left in one channel: data with
    bytes, empty data, the last data, timers and the last timers, of instructions 1 and 2."""
    return [Data(instruction_id="1", transform_id="t", data=b"a"),
            Data(instruction_id="2", transform_id="t", data=b"other"),
            Data(instruction_id="1", transform_id="t", data=b""),
            Timers(instruction_id="1", transform_id="t", timer_family_id="f", timers=b"x"),
            Data(instruction_id="1", transform_id="u", data=b"b"),
            Timers(instruction_id="1", transform_id="t", timer_family_id="", is_last=True),
            Timers(instruction_id="2", transform_id="t", timer_family_id="f", timers=b"y"),
            Data(instruction_id="1", transform_id="t", is_last=True)]


def _channel(written: list) -> data_plane.InMemoryDataChannel:
    channel = data_plane.InMemoryDataChannel()
    channel._inputs = list(written)
    return channel


def test_it_reads_what_beams_method_reads_and_keeps_the_others(beams_method):
    written = _written()
    expected = list(beams_method(_channel(written), "1", None))
    beams_left = _channel(written)
    list(beams_method(beams_left, "1", None))
    assert in_process_memory.hold_stage_data_once()
    channel = _channel(written)
    assert list(channel.input_elements("1", None)) == expected
    assert expected == [written[0], written[3], written[4], written[7]]
    assert channel._inputs == beams_left._inputs == [written[1], written[6]]
    assert list(channel.input_elements("2", None)) == [written[1], written[6]]
    assert channel._inputs == []


def test_each_element_is_dropped_by_the_channel_as_it_is_read(beams_method):
    assert in_process_memory.hold_stage_data_once()
    written = _written()
    channel = _channel(written)
    reader = channel.input_elements("1", None)
    first = next(reader)
    assert first is written[0]
    assert not any(element is first for element in channel._inputs)
    second = next(reader)
    assert second is written[3]
    assert not any(element is written[2] or element is written[3]
                   for element in channel._inputs)
    assert written[1] in channel._inputs  # another instruction's
    assert written[4] in channel._inputs  # not read yet


def test_installed_once_per_process(beams_method):
    partition = execution.GroupingBuffer.partition
    assert in_process_memory.hold_stage_data_once()
    method = data_plane.InMemoryDataChannel.input_elements
    assert method is not beams_method and method.__wrapped__ is beams_method
    assert execution.GroupingBuffer.partition.__wrapped__ is partition
    installed = execution.GroupingBuffer.partition
    assert in_process_memory.hold_stage_data_once()
    assert data_plane.InMemoryDataChannel.input_elements is method
    assert execution.GroupingBuffer.partition is installed


@pytest.mark.parametrize("changed", ["input_elements", "partition"])
def test_a_beam_that_changed_is_left_alone(beams_method, monkeypatch, changed):
    def method(self, *args, **kwargs):  # reads none of what the patch relies on
        return []

    cls = data_plane.InMemoryDataChannel if changed == "input_elements" else \
        execution.GroupingBuffer
    monkeypatch.setattr(cls, changed, method)
    assert not in_process_memory.hold_stage_data_once()
    assert getattr(cls, changed) is method


@pytest.mark.parametrize("argv", [RUNNER_ARGS["direct_in_process"], [
    *RUNNER_ARGS["direct_in_process"], "--direct_num_workers=2"]], ids=["one", "two_threads"])
def test_a_pipeline_in_process_with_it(beams_method, argv):
    """Beam's in-process runner with both installed (one worker, and two worker threads,
    each given its part of a grouping): groupings of few and of many keys and a side input
    come out whole."""
    assert in_process_memory.hold_stage_data_once()
    n = 5000
    with beam.Pipeline(argv=argv) as p:
        numbers = p | beam.Create(range(n))
        total = numbers | beam.CombineGlobally(sum)
        for keys in (7, 1000):
            grouped = (numbers | f"Key{keys}" >> beam.Map(lambda x, k: (x % k, x), keys)
                       | f"Group{keys}" >> beam.GroupByKey()
                       | f"Sum{keys}" >> beam.MapTuple(lambda k, xs: (k, len(xs), sum(xs)))
                       | f"Total{keys}" >> beam.Map(lambda row, t: (*row, t),
                                                    beam.pvalue.AsSingleton(total)))
            assert_that(grouped, equal_to([
                (k, len(range(k, n, keys)), sum(range(k, n, keys)), sum(range(n)))
                for k in range(keys)]), label=f"Check{keys}")


def test_two_readers_of_one_list_each_get_their_own(beams_method):
    """A reader that starts while another is part-way through the same list skips what
    that one took, and neither fails on it."""
    assert in_process_memory.hold_stage_data_once()
    written = _written()
    channel = _channel(written)
    first = channel.input_elements("1", None)
    assert next(first) is written[0]
    assert list(channel.input_elements("2", None)) == [written[1], written[6]]
    assert list(first) == [written[3], written[4], written[7]]


KV = coders.WindowedValueCoder(coders.TupleCoder([coders.StrUtf8Coder(),
                                                   coders.VarIntCoder()]))
GROUPED = coders.WindowedValueCoder(coders.TupleCoder([
    coders.StrUtf8Coder(), coders.IterableCoder(coders.VarIntCoder())]))


def _grouping(keys: int) -> execution.GroupingBuffer:
    """A grouping of `keys` keys, key i with i % 4 + 1 values, appended in two writes."""
    grouping = execution.GroupingBuffer(KV, GROUPED, core.Windowing(window.GlobalWindows()))
    elements = [(f"key{i}", v) for i in range(keys) for v in range(i % 4 + 1)]
    for half in (elements[::2], elements[1::2]):
        out = create_OutputStream()
        for element in half:
            KV.get_impl().encode_to_stream(
                window.GlobalWindows.windowed_value(element), out, True)
        grouping.append(out.get())
    return grouping


@pytest.mark.parametrize("keys, parts", [(1000, 1), (1000, 3), (130, 4), (3, 3), (2, 1)])
def test_a_grouping_is_encoded_as_beam_encodes_it(beams_method, keys, parts):
    expected = [b"".join(part) for part in execution.GroupingBuffer.partition(
        _grouping(keys), parts)]
    assert in_process_memory.hold_stage_data_once()
    grouping = _grouping(keys)
    encoded = grouping.partition(parts)
    assert [b"".join(part) for part in encoded] == expected
    assert grouping.partition(parts) is encoded  # read again: the same parts
    assert not grouping._table
    assert b"".join(grouping) == b"".join(expected)
    # in runs of keys, each through Beam's method; a table of at most `parts` keys at once
    assert [len(part) for part in encoded] == (
        [math.ceil(keys / parts / math.ceil(keys / (parts * 64)))] * parts
        if keys > parts else [1] * parts)


def test_a_grouping_drops_each_run_of_keys_as_it_is_encoded(beams_method, monkeypatch):
    beams = execution.GroupingBuffer.partition
    monkeypatch.setattr(in_process_memory, "GROUPING_CHUNKS", 10)
    grouping = _grouping(1000)
    outer = grouping._table
    seen = []

    def recorded(self, n):
        seen.append((len(self._table), len(outer)))
        return beams(self, n)

    parts = in_process_memory.encode_in_runs(grouping, 2, recorded)
    assert seen == [(100, 1000 - 100 * (i + 1)) for i in range(10)]
    assert [len(part) for part in parts] == [10, 10] and grouping._table is outer
    assert [b"".join(part) for part in parts] == [
        b"".join(part) for part in beams(_grouping(1000), 2)]
