"""The model branch's windows: how RunInference's windows of model inputs are formed
(doubling from the smallest first window), sized in bytes, split among the uses, and what
happens when an input or a whole window fails. Fakes from test_run_model_metrics."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam import Create
from apache_beam.ml.inference.base import ModelHandler, PredictionResult, RunInference
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.scoring.test_run_model_metrics import (
    PAIR_USE,
    ROWS,
    TEXT_USE,
    FakeHandler,
    OverlapMetric,
    batch_of,
)
from transforms.inference.handlers import TransformerModelHandler
from transforms.inference.model_server import ServerGone
from transforms.inference.multi_use import InferenceFailure, MultiUseModelHandler
from transforms.metrics.base import QAExample
from transforms.scoring.score.batch_model_handler import (
    BatchModelHandler,
    BatchRequests,
    RowRequests,
    request_count,
)
from transforms.scoring.score.run_model_metrics import ExpandModelRequestsFn, plan_uses


def test_multi_use_handler_routes_by_tag_and_isolates_a_failing_input():
    handler = MultiUseModelHandler({"use0": FakeHandler(PAIR_USE), "use1": FakeHandler(TEXT_USE)})
    kwargs = handler.batch_elements_kwargs()  # the smallest first window, the largest window
    assert (kwargs["min_batch_size"], kwargs["max_batch_size"], kwargs["variance"]) == (1, 2, 0)
    models = handler.load_model()
    batch = [("use0", ("a b", "a")), ("use1", ("BOOM", "x")), ("use0", ("c", "d")),
             ("use1", ("x y", "x y"))]
    results = handler.run_inference(batch, models)
    assert [r.example for r in results] == batch
    assert [r.model_id for r in results] == ["use0", "use1", "use0", "use1"]
    values = [r.inference for r in results]
    assert values[0] == 0.5 and values[2] == 0.0 and values[3] == 1.0
    assert isinstance(values[1], InferenceFailure) and "exploded" in values[1].reason
    # `inferences` (what BatchModelHandler calls): the same values, without the wrappers
    assert handler.inferences(batch, models) == values


class SizedHandler(FakeHandler):
    """A use's handler with its own first and largest window."""

    def __init__(self, use, first: int, largest: int):
        ModelHandler.__init__(self, min_batch_size=first, max_batch_size=largest)


class RecordingWindows(BatchModelHandler):
    """Records the inputs of each window `RunInference` forms (module level: pickled by
    reference, so the in-process runner's copy appends to this module's list)."""

    sizes: list[int] = []

    def run_inference(self, batch, model, inference_args=None):
        RecordingWindows.sizes.append(sum(request_count(e) for e in batch))
        return super().run_inference(batch, model, inference_args)


def test_the_branch_windows_double_from_the_smallest_first_window():


    # the smallest first window of the uses, the largest window
    multi = MultiUseModelHandler({"use0": SizedHandler(PAIR_USE, 3, 64),
                                  "use1": SizedHandler(TEXT_USE, 2, 32)})
    handler = RecordingWindows(multi)
    assert handler.batch_elements_kwargs() == {
        "min_batch_size": 2, "max_batch_size": 64, "element_size_fn": request_count,
        "target_batch_overhead": None, "target_batch_duration_secs": 1e9, "variance": 0.0}
    example = QAExample("a b", ("a",))
    elements = [BatchRequests([(k, example)], (RowRequests(k, example, tuple(
        (0, j, "use0", ("a b", "a")) for j in range(4))),)) for k in range(40)]
    RecordingWindows.sizes = []
    with test_pipeline.TestPipeline(argv=["--runner=FnApiRunner"]) as pipeline:
        results = (pipeline | Create(elements, reshuffle=False) | RunInference(handler)
                   | beam.Map(lambda r: (r.example.rows[0].row_key, r.inference)))
        assert_that(results, equal_to([(k, [[0.5] * 4]) for k in range(40)]))
    # an element of 4 inputs is heavier than the first window (2): an empty window, then
    # the first element alone, twice (Beam times the second), then doubling to 64
    assert RecordingWindows.sizes == [0, 4, 4, 8, 16, 32, 64, 32]


def test_a_window_that_fails_as_a_whole_dead_letters_its_rows():
    class Broken(MultiUseModelHandler):
        def inferences(self, batch, model):  # what BatchModelHandler calls
            raise RuntimeError("CUDA out of memory")

    uses, roles = plan_uses([OverlapMetric("f1")])
    handler = BatchModelHandler(Broken({t: FakeHandler(u) for t, u in uses.items()}))
    [element] = ExpandModelRequestsFn([OverlapMetric("f1")], roles).process(batch_of(ROWS[:2]))
    [result] = handler.run_inference([element], None)
    assert [len(v) for v in result.inference] == [2, 1]
    assert all(isinstance(v, InferenceFailure) and "CUDA out of memory" in v.reason
               for row in result.inference for v in row)

    # the shared model's process gone for good is no fault of these rows: the bundle fails

    class Gone(MultiUseModelHandler):
        def inferences(self, batch, model):
            raise ServerGone("the process serving the shared model (qa_eval_x-0) is gone")

    handler = BatchModelHandler(Gone({t: FakeHandler(u) for t, u in uses.items()}))
    with pytest.raises(ServerGone, match="qa_eval_x-0"):
        handler.run_inference([element], None)


def test_window_size_in_bytes_is_its_texts_from_a_sample():
    """`get_num_bytes` (Beam's byte count of each window): the inputs' characters, exact
    up to `_SIZE_SAMPLE` inputs, and from the first ones scaled to the window's number
    of inputs beyond; 0 for a window without inputs."""
    class Sized(FakeHandler):
        def get_num_bytes(self, batch):
            return sum(len(a) + len(b) for a, b in batch)

    metric = OverlapMetric("f1")
    uses, roles = plan_uses([metric])
    handler = BatchModelHandler(MultiUseModelHandler(
        {t: Sized(u) for t, u in uses.items()}))
    expand = ExpandModelRequestsFn([metric], roles)

    def window(rows):
        return list(expand.process(batch_of(rows)))

    few = window([(1, QAExample("a man", ("the man", "a man here")))])
    assert handler.get_num_bytes(few) == len("a man") * 2 + len("the man") + len("a man here")
    # 100 rows of 2 inputs each of 5 + 5 characters: the sample (64 inputs) scales exactly
    many = window([(i, QAExample("abcde", ("fghij", "klmno"))) for i in range(100)])
    assert handler.get_num_bytes(many) == 200 * 10
    # uneven lengths: an estimate, near the sum
    uneven = window([(i, QAExample("x" * (i % 7 + 1), ("y" * (i % 5 + 1),)))
                     for i in range(300)])
    exact = sum(i % 7 + 1 + i % 5 + 1 for i in range(300))
    assert abs(handler.get_num_bytes(uneven) - exact) < 0.1 * exact
    assert handler.get_num_bytes([]) == 0


def test_our_handlers_are_asked_for_values_and_a_failing_part_is_retried_input_by_input():
    """Inside the multi-use handler, a `TransformerModelHandler` is asked for its values
    (`inferences`, no `PredictionResult` each), in input order; a part that fails is
    retried input by input the same way, the bad input alone failing. A subclass with its
    own `run_inference` is called through it."""
    calls = []

    class Plain(TransformerModelHandler):
        def inferences(self, batch, model):
            calls.append(len(batch))
            if any("BOOM" in x for x in batch):
                raise RuntimeError("the model exploded")
            return [len(x) for x in batch]

    class Wrapping(Plain):  # its own run_inference: called through it
        def run_inference(self, batch, model, inference_args=None):
            return [PredictionResult(x, -len(x)) for x in batch]

    handler = MultiUseModelHandler({"u0": Plain(TEXT_USE), "u1": Wrapping(TEXT_USE)})
    batch = [("u0", "abc"), ("u1", "de"), ("u0", "f"), ("u1", "ghij")]
    assert handler.inferences(batch, {"u0": None, "u1": None}) == [3, -2, 1, -4]
    assert calls == [2]
    calls.clear()
    values = handler.inferences([("u0", "ab"), ("u0", "xBOOM"), ("u0", "c")],
                                {"u0": None, "u1": None})
    assert values[0] == 2 and values[2] == 1
    assert isinstance(values[1], InferenceFailure) and "exploded" in values[1].reason
    assert calls == [3, 1, 1, 1]  # the part, then input by input
