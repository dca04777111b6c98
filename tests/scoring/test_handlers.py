"""ModelHandlers: construction checks, batch de-duplication, and RunInference runs on the real
packaged MiniLM (keyed and unkeyed, shared across processes)."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import torch
from apache_beam import Create, Map
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.ml.inference.base import (
    KeyedModelHandler,
    ModelHandler,
    PredictionResult,
    RunInference,
)
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.inference import handlers
from transforms.models import predictors

ROWS = [("r1", "it is a man in the video"), ("r2", "yes"), ("r3", "it is a man in the video"),
        ("r4", "the person is a man ."), ("r5", "yes")]


@pytest.fixture(scope="module")
def reference_vectors():
    """Mean-pooled vectors per distinct text, computed without a handler."""
    predictor = predictors.load_predictor(handlers.EncoderModelHandler(output="mean").use)
    texts = sorted({t for _, t in ROWS})
    vectors, _ = predictor.predict(texts)
    return dict(zip(texts, vectors))


@pytest.mark.parametrize("kwargs, message", [
    ({"min_batch_size": 0}, "batch sizes must be >= 1"),
    ({"max_batch_tokens": 0}, "batch sizes must be >= 1"),
    ({"min_batch_size": 8, "max_batch_size": 4}, "min_batch_size 8 > max_batch_size 4"),
    ({"cache_size": -1}, "cache_size must be >= 0"),
    ({"model_copies": 0}, "model_copies must be >= 1"),
    ({"model_copies": 2}, "model_copies needs share_model_across_processes"),
    ({"output": "cls"}, "output must be 'tokens' or 'mean'"),
    ({"layer": 7}, r"layer must be in 0..6"),
    ({"spec_kwargs": {"device": "gpu"}}, "device must be one of"),
])
def test_encoder_handler_validates_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        handlers.EncoderModelHandler(**kwargs)


@pytest.mark.slow
def test_cross_encoder_handler_needs_a_classifier(minilm_path, cross_encoder_path, bem_path):
    with pytest.raises(ValueError, match="not a sequence classifier"):
        handlers.CrossEncoderModelHandler(minilm_path)
    with pytest.raises(ValueError, match="choose an activation"):
        handlers.CrossEncoderModelHandler("org/unknown-cross-encoder")
    with pytest.raises(ValueError, match="softmax needs at least two classes"):
        handlers.CrossEncoderModelHandler(cross_encoder_path, activation="softmax", label=0)
    with pytest.raises(ValueError, match="sigmoid needs a one-logit head"):
        handlers.CrossEncoderModelHandler(bem_path, activation="sigmoid", segments=3)
    with pytest.raises(ValueError, match="label 2 is out of range"):
        handlers.CrossEncoderModelHandler(bem_path, label=2, segments=3)
    handler = handlers.CrossEncoderModelHandler(cross_encoder_path)
    assert (handler.use.activation, handler.use.label) == ("sigmoid", 0)
    assert handlers.CrossEncoderModelHandler(bem_path, segments=3).use.activation == "softmax"


def test_keyphrase_handler_needs_a_token_classifier(cross_encoder_path, keyphrase_path):
    with pytest.raises(ValueError, match="not a token classifier"):
        handlers.KeyphraseModelHandler(cross_encoder_path)
    assert handlers.KeyphraseModelHandler(keyphrase_path).use.label == 0


def test_batching_and_sharing_options():
    handler = handlers.EncoderModelHandler(min_batch_size=4, max_batch_size=64,
                                           share_model_across_processes=True, model_copies=2)
    # windows that double: Beam's estimator without its timing targets or random spread
    assert handler.batch_elements_kwargs() == {
        "min_batch_size": 4, "max_batch_size": 64, "target_batch_overhead": None,
        "target_batch_duration_secs": 1e9, "variance": 0.0}
    # served by processes of its own (model_server.py), not by Beam's large_model
    assert handler.shares_model and handler.copies == 2
    assert not handler.share_model_across_processes()
    default = handlers.EncoderModelHandler()
    assert not default.shares_model and default.copies == 1
    assert default.batch_elements_kwargs() == {
        "min_batch_size": 128, "max_batch_size": 2048, "target_batch_overhead": None,
        "target_batch_duration_secs": 1e9, "variance": 0.0}
    fixed = handlers.EncoderModelHandler(min_batch_size=64, max_batch_size=64)
    assert fixed.batch_elements_kwargs() == {"min_batch_size": 64, "max_batch_size": 64}


class _WindowSizes(handlers.DoublingWindows, ModelHandler):
    """Records the size of each window `RunInference` hands it (in-process runner)."""

    sizes: list[int] = []

    def __init__(self, first: int, largest: int) -> None:
        super().__init__(min_batch_size=first, max_batch_size=largest)

    def load_model(self):
        return None

    def run_inference(self, batch, model, inference_args=None):
        _WindowSizes.sizes.append(len(batch))
        # a cost per input and none per window: Beam's own targets would keep every
        # window at the first size (a fixed cost of 5% of a window's), and spread them
        time.sleep(0.0005 * len(batch))
        return [PredictionResult(x, x) for x in batch]


def _window_sizes(first: int, largest: int, n: int) -> list[int]:
    _WindowSizes.sizes = []
    with test_pipeline.TestPipeline(argv=["--runner=FnApiRunner"]) as pipeline:
        out = pipeline | Create(range(n), reshuffle=False) | RunInference(
            _WindowSizes(first, largest))
        assert_that(out | Map(lambda r: r.inference), equal_to(list(range(n))))
    return _WindowSizes.sizes


def test_windows_double_from_the_first_to_the_largest():
    # one bundle: the first window twice (Beam times the second, not the first), then
    # each twice the last up to the largest, then the bundle's rest
    doubling = [4, 4, 8, 16, *[32] * 11, 16]
    assert _window_sizes(4, 32, 400) == doubling
    assert _window_sizes(4, 32, 400) == doubling  # every run
    assert _window_sizes(8, 8, 20) == [8, 8, 4]  # equal sizes: fixed windows


def _estimator_warnings(quiet: bool) -> list[str]:
    """What Beam's estimator warns when every window it timed but one has the largest
    size (as after a bundle's partial window, or once its thinning of old timings has
    left one window of the ramp): its regression then divides by zero and fits a line to
    about one size."""
    from apache_beam.transforms.util import _BatchSizeEstimator

    ticks = iter(np.cumsum(np.arange(1, 1000) % 3 * 0.01 + 0.1).tolist())  # uneven times
    estimator = _BatchSizeEstimator(min_batch_size=4, max_batch_size=64, record_metrics=False,
                                    clock=lambda: next(ticks), **handlers._DOUBLING)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if quiet:  # what every handler's load_model does in the worker
            assert handlers.load_or_serve(lambda: "model", None, 1) == "model"
        for size in (32, *[64] * 19):
            with estimator.record_time(size):
                pass
            estimator.next_batch_size()
    return sorted({type(w.message).__name__ for w in caught})


def test_the_window_estimator_is_quiet_in_a_worker():
    assert _estimator_warnings(quiet=False) == ["RankWarning", "RuntimeWarning"]
    assert _estimator_warnings(quiet=True) == []


def test_run_inference_computes_each_distinct_input_once(reference_vectors):
    handler = handlers.EncoderModelHandler(output="mean")
    model = handler.load_model()
    predictor = handler.predictor(model)  # the host side, made once per model
    assert handler.predictor(model) is predictor
    calls = []
    original = predictor.predict
    predictor.predict = lambda inputs: calls.append(list(inputs)) or original(inputs)
    batch = [t for _, t in ROWS]
    results = list(handler.run_inference(batch, model))
    assert calls == [["it is a man in the video", "yes", "the person is a man ."]]
    assert [r.example for r in results] == batch
    for r in results:
        assert isinstance(r, PredictionResult)
        np.testing.assert_allclose(r.inference, reference_vectors[r.example], atol=1e-5)
    with pytest.raises(ValueError, match="takes no inference_args"):
        handler.validate_inference_args({"x": 1})


def _close_to(expected: dict, atol: float = 1e-5):
    def check(actual):
        got = {k: v for k, v in actual}
        assert sorted(got) == sorted(expected)
        for key, vector in got.items():
            np.testing.assert_allclose(vector, expected[key], atol=atol)
    return check


def test_keyed_run_inference_with_counters(reference_vectors):
    expected = {k: reference_vectors[t] for k, t in ROWS}
    handler = handlers.EncoderModelHandler(output="mean", min_batch_size=5, max_batch_size=5,
                                           metrics_namespace="test_keyed")
    pipeline = test_pipeline.TestPipeline()
    out = (pipeline | Create(ROWS) | RunInference(KeyedModelHandler(handler))
           | Map(lambda kv: (kv[0], kv[1].inference)))
    assert_that(out, _close_to(expected))
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(
        MetricsFilter().with_namespace("test_keyed"))["counters"]}
    assert counters["inputs"] == 5
    assert counters["duplicate_inputs"] == 2
    assert counters["forward_passes"] == 1


@pytest.mark.slow
def test_unkeyed_cross_encoder_run_inference(cross_encoder_path):
    handler = handlers.CrossEncoderModelHandler(cross_encoder_path)
    pairs = [("a man", "the man"), ("yes", "no"), ("a man", "the man")]
    expected, _ = handler.predictor(handler.load_model()).predict(pairs)
    with test_pipeline.TestPipeline() as pipeline:
        out = (pipeline | Create(pairs) | RunInference(handler)
               | Map(lambda r: (r.example, round(r.inference, 5))))
        assert_that(out, equal_to([(p, round(s, 5)) for p, s in zip(pairs, expected)]))


def test_a_handler_that_served_a_model_pickles_without_it():
    import pickle
    handler = handlers.EncoderModelHandler(output="mean")
    empty = len(pickle.dumps(handler))
    handler.predictor(handler.load_model()).predict(["a man"])
    shipped = pickle.loads(pickle.dumps(handler))
    assert len(pickle.dumps(handler)) == empty  # not the weights (tens of MB)
    assert shipped._host is None and shipped._host_model is None
    assert handler._host is not None  # the launcher's copy keeps serving


def test_token_embeddings_through_run_inference_keep_their_layer(minilm_path):
    """The vectors of hidden state `layer`, as transformers computes them on the packaged
    MiniLM (0 = the embeddings, 1..6 the layers), and of no other."""
    from transformers import AutoModel, AutoTokenizer
    text = "a man in the video"
    model = AutoModel.from_pretrained(minilm_path).eval()
    with torch.inference_mode():
        hidden = model(**AutoTokenizer.from_pretrained(minilm_path)([text], return_tensors="pt"),
                       output_hidden_states=True).hidden_states
    states = [h[0].numpy() for h in hidden]
    assert len(states) == 7
    assert all(np.abs(states[k] - states[2]).max() > 0.1 for k in range(7) if k != 2)
    handler = handlers.EncoderModelHandler(output="tokens", layer=2)
    with test_pipeline.TestPipeline() as pipeline:
        out = (pipeline | Create([("k", text)])
               | RunInference(KeyedModelHandler(handler))
               | Map(lambda kv: (kv[0], kv[1].inference.vectors)))
        assert_that(out, _close_to({"k": states[2]}, atol=2e-5))
    handler = handlers.EncoderModelHandler(output="tokens", layer=4)
    [result] = handler.run_inference([text], handler.load_model())
    np.testing.assert_allclose(result.inference.vectors, states[4], atol=2e-5)


@pytest.mark.slow
def test_model_shared_across_processes(reference_vectors):
    handler = handlers.EncoderModelHandler(output="mean", share_model_across_processes=True)
    expected = {k: reference_vectors[t] for k, t in ROWS[:2]}
    with test_pipeline.TestPipeline() as pipeline:
        out = (pipeline | Create(ROWS[:2]) | RunInference(KeyedModelHandler(handler))
               | Map(lambda kv: (kv[0], kv[1].inference)))
        assert_that(out, _close_to(expected))


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs CUDA (on a GPU machine: bash tests/bench/gpu_call.sh, step 0)")
def test_cuda_handler_matches_cpu_within_half_precision(reference_vectors):
    handler = handlers.EncoderModelHandler(output="mean", spec_kwargs={"device": "cuda"})
    model = handler.load_model()
    assert model.device.type == "cuda"
    results = list(handler.run_inference([t for _, t in ROWS], model))
    for r in results:
        a, b = r.inference, reference_vectors[r.example]
        assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) > 0.99
