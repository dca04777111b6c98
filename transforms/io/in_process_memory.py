"""Beam's in-process runner holding a stage's data once, not two or three times.

Beam's in-process runner (FnApiRunner, in-memory mode) moves a stage's data in two places
where it keeps every copy until the last element has gone through:

- **The data channel.** Data goes to the worker and back through an `InMemoryDataChannel`:
  every write appends an `Elements` message to a list, and the reader (the worker, or the
  runner gathering a stage's output) takes them with `input_elements`, which keeps that
  whole list until it has read the last message. The reader copies each message's bytes as
  it reads it (into the runner's buffers, or decoded by the worker), so at the end of a
  stage its whole output is held twice.
- **A grouping read by the next stage.** `GroupingBuffer.partition` encodes the whole
  grouped table into one stream, copies the stream into one `bytes` and only then clears
  the table: the decoded table and two encoded copies at once.

On a million `long` rows scored with `em,f1,bleu1,bleu4,rougeL,cider` in process, the stage
that reads the input outputs about 1.4 GB (the rows, CIDEr-D's requests and partial
frequencies), and the groupings its frequencies and rows cross are 0.4 and 1 GB: those
copies set the run's peak (docs/benchmarks.md, Scale).

`hold_stage_data_once()` installs, once per process:

- an `input_elements` that yields the same messages in the same order and drops the list's
  reference to each message it takes as it yields it, so that a message is freed once its
  reader is done with it. Messages of other instructions are kept for their readers, as
  Beam's method does; a reader of the same list skips the messages another has taken;
- a `partition` that encodes the table in `GROUPING_CHUNKS` runs of keys, each through
  Beam's own method, and drops each run's values from the table as it goes: the same
  elements in the same parts and order, as several `bytes` per part instead of one.

A Beam whose methods no longer read the attributes this relies on is left as it is.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)

# A grouping is encoded in about this many runs of keys (each one part's keys in turn).
GROUPING_CHUNKS = 64
_MARK = "_holds_stage_data_once"  # set on the methods this module installs
_lock = threading.Lock()


def hold_stage_data_once() -> bool:
    """Installs both methods of the module docstring on Beam's classes, once per process.
    Returns whether both are installed."""
    with _lock:
        channel = _release_elements_as_read()
        grouping = _encode_groupings_in_chunks()
    return channel and grouping


def _patch(cls: type, name: str, reads: set[str], make: Any) -> bool:
    """Replaces `cls.name` by `make(Beam's method)`, once per process; leaves a method that
    no longer reads the attribute names `reads` as it is (False)."""
    original = getattr(cls, name)
    if getattr(original, _MARK, False):
        return True
    if not reads <= set(getattr(getattr(original, "__code__", None), "co_names", ())):
        logger.debug("Beam's %s.%s changed: left as it is", cls.__name__, name)
        return False
    method = make(original)
    method.__doc__ = original.__doc__
    method.__wrapped__ = original
    setattr(method, _MARK, True)
    setattr(cls, name, method)
    return True


def _release_elements_as_read() -> bool:
    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.worker import data_plane

    data, timers = beam_fn_api_pb2.Elements.Data, beam_fn_api_pb2.Elements.Timers

    def make(original: Any) -> Any:
        def input_elements(self, instruction_id: str, unused_expected_inputs: Any,
                           abort_callback: Any = None) -> Iterator[Any]:
            others = []
            inputs = self._inputs
            for at, element in enumerate(inputs):
                if element is None:  # taken by another reader of this list
                    continue
                if element.instruction_id != instruction_id:
                    others.append(element)
                    continue
                inputs[at] = None  # the reader's copy is the only one left
                if isinstance(element, timers):
                    if not element.is_last:
                        yield element
                elif isinstance(element, data) and (element.data or element.is_last):
                    yield element
            self._inputs = others
        return input_elements

    return _patch(data_plane.InMemoryDataChannel, "input_elements",
                  {"_inputs", "instruction_id", "is_last", "data"}, make)


def _encode_groupings_in_chunks() -> bool:
    from apache_beam.runners.portability.fn_api_runner import execution

    def make(original: Any) -> Any:
        def partition(self, n: int) -> list[list[bytes]]:
            if self._grouped_output or len(self._table) <= n:
                return original(self, n)
            return encode_in_runs(self, n, original)
        return partition

    return _patch(execution.GroupingBuffer, "partition",
                  {"_grouped_output", "_table", "clear"}, make)


def encode_in_runs(grouping: Any, n: int, encode: Any) -> list[list[bytes]]:
    """`grouping`'s table encoded into `n` parts by `encode` (Beam's `partition`) in about
    `GROUPING_CHUNKS` runs of keys, each run's values dropped from the table as it is
    encoded: the parts `encode` makes of the whole table, as a `bytes` per run."""
    table = grouping._table
    keys = list(table)
    step = n * math.ceil(len(keys) / (n * GROUPING_CHUNKS))  # a part's keys stay in turn
    parts: list[list[bytes]] = [[] for _ in range(n)]
    try:
        for start in range(0, len(keys), step):
            grouping._table = defaultdict(list, ((key, table.pop(key))
                                                 for key in keys[start:start + step]))
            grouping._grouped_output = None
            for part, encoded in zip(parts, encode(grouping, n), strict=True):
                part.extend(encoded)
    finally:
        grouping._table = table
    grouping._grouped_output = parts
    return parts

