"""Several models behind one `ModelHandler`: the handler inside the one `RunInference` of
the model branch (batch_model_handler.py's `BatchModelHandler` wraps it), its models by
use tag, and the failure that stands in for an output when a model fails on an input.

Elements are `(use tag, model input)`; a window is split by tag, each part goes to its
own use's handler, and a part that fails is retried input by input so that one bad input
costs one `InferenceFailure`, not its window. With `share_model_across_processes` the
`Models` live in a process of their own (model_server.py) and every worker process calls
them through a proxy (`ModelView`).
"""

import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from transforms.inference import model_server
from transforms.inference.handlers import DoublingWindows, TransformerModelHandler, load_or_serve

logger = logging.getLogger(__name__)

# The model branch's metrics namespace (Beam counters, progress lines).
NAMESPACE = "qa_eval_model_metrics"


class InferenceFailure(NamedTuple):
    """The output of an input the model failed on (in place of a model output)."""

    reason: str


class Models(dict):
    """The loaded models by use tag (a dict subclass: Beam's shared cache holds weak
    references, which a plain dict does not support).

    With `share_model_across_processes` this object lives in a process of its own
    (model_server.py) and the worker processes reach it through a proxy, which forwards
    public method calls only (their arguments and results pickled): `call` runs one
    model's method there, so a handler is given a `ModelView` of its model and never the
    model itself.
    """

    def call(self, tag: str, method: str, *args: Any) -> Any:
        """`self[tag].method(*args)`, for a caller in another process."""
        return getattr(self[tag], method)(*args)


class ModelView:
    """One model of a shared `Models`, as its handler sees it: attribute calls go to the
    process that holds it (`Models.call`)."""

    def __init__(self, models: Any, tag: str) -> None:
        self._models = models
        self._tag = tag

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args: self._models.call(self._tag, method, *args)

    def __repr__(self) -> str:
        return f"ModelView({self._tag})"


class MultiUseModelHandler(DoublingWindows, ModelHandler):
    """One `ModelHandler` over several uses: elements are `(use tag, model input)`.

    Every model of a `ModelMetricsOnBatches` runs inside one `RunInference` (one batching step,
    one DoFn holding every model of the process). A batch is split by use tag and each
    part goes to its own handler. When a part fails, its inputs are retried one by one,
    so one bad input costs one `InferenceFailure`, not its whole batch.

    Args:
        handlers: use tag -> the handler of that use.
    """

    def __init__(self, handlers: Mapping[str, ModelHandler]) -> None:
        if not handlers:
            raise ValueError("MultiUseModelHandler needs at least one handler")
        self._handlers = dict(handlers)
        batching = [h.batch_elements_kwargs() for h in self._handlers.values()]
        sizes = {}
        for key, pick in (("min_batch_size", min), ("max_batch_size", max)):
            values = [b[key] for b in batching if b.get(key) is not None]
            if values:
                sizes[key] = pick(values)
        shared = [h for h in self._handlers.values() if _shares(h)]
        super().__init__(**sizes)
        # one server (or `copies`) for all the models: a worker's windows reach each of
        # its models through one connection
        self._served_as = model_server.new_serving("models") if shared else None
        self._copies = max((_copies(h) for h in shared), default=1)
        self._failures = beam.metrics.Metrics.counter(NAMESPACE, "inference_failures")
        self._retries = beam.metrics.Metrics.counter(NAMESPACE, "failed_parts_retried")
        self._views: dict[str, tuple[Any, ModelView]] = {}

    def _model(self, models: Any, tag: str) -> Any:
        """The model of one use: itself when `models` is here, else a view (one per
        proxy and tag, so its handler keeps its host side between batches)."""
        if isinstance(models, Models):
            return models[tag]
        held = self._views.get(tag)
        if held is None or held[0] is not models:
            held = self._views[tag] = (models, ModelView(models, tag))
        return held[1]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_views"] = {}
        return state

    def load_model(self) -> Any:
        """The `Models`: here, or with sharing a `model_server.ServedModel` of them."""
        return load_or_serve(self._load(), self._served_as, self._copies)

    @property
    def shares_models(self) -> bool:
        """Whether the models are served to the worker processes (model_server.py)."""
        return self._served_as is not None

    def start_serving(self) -> threading.Thread | None:
        """With sharing, starts the shared copies from this process now, in a thread (the
        launcher of a local multi-process run: `model_server.start_serving`), with the
        same load the workers' `load_model` would use; None without sharing."""
        if self._served_as is None:
            return None
        return model_server.start_serving(self._load(), self._served_as, self._copies)

    def _load(self) -> Callable[[], "Models"]:
        """Every model of this handler, loaded where it is called (here, or in a copy)."""
        return functools.partial(load_models, self._handlers)

    def run_inference(self, batch: Sequence[tuple[str, Any]], model: Mapping[str, Any],
                      inference_args: dict[str, Any] | None = None) -> list[PredictionResult]:
        return [PredictionResult(x, value, x[0])
                for x, value in zip(batch, self.inferences(batch, model))]

    def inferences(self, batch: Sequence[tuple[str, Any]], model: Mapping[str, Any]) -> list[Any]:
        """`run_inference`'s inferences alone, in batch order (what `BatchModelHandler`
        needs: no `PredictionResult` per input, two of which cost more per input than
        the rest of the host side of a two-segment cross-encoder)."""
        positions: dict[str, list[int]] = {}
        for i, (tag, _) in enumerate(batch):
            positions.setdefault(tag, []).append(i)
        results: list[Any] = [None] * len(batch)
        for tag, where in positions.items():
            inputs = [batch[i][1] for i in where]
            values = self._run_part(tag, inputs, self._model(model, tag))
            for i, value in zip(where, values):
                results[i] = value
        return results

    def _run_part(self, tag: str, inputs: list[Any], model: Any) -> list[Any]:
        handler = self._handlers[tag]
        try:
            return _values(handler, inputs, model)
        except model_server.ServerGone:
            raise  # no input's fault: the bundle fails
        except Exception as e:  # noqa: BLE001 - isolated below, input by input
            if len(inputs) > 1:
                logger.warning("a batch of %d inputs for %s failed (%s: %s); retrying them "
                               "one by one", len(inputs), handler, type(e).__name__, e)
                self._retries.inc()
            else:
                self._failures.inc()
                return [InferenceFailure(f"{type(e).__name__}: {e}")]
        values = []
        for x in inputs:
            try:
                values += _values(handler, [x], model)
            except model_server.ServerGone:
                raise
            except Exception as e:  # noqa: BLE001 - one input's failure is data, reported
                self._failures.inc()
                values.append(InferenceFailure(f"{type(e).__name__}: {e}"))
        return values

    def get_num_bytes(self, batch: Sequence[tuple[str, Any]]) -> int:
        parts: dict[str, list[Any]] = {}
        for tag, x in batch:
            parts.setdefault(tag, []).append(x)
        return sum(self._handlers[tag].get_num_bytes(xs) for tag, xs in parts.items())

    def get_metrics_namespace(self) -> str:
        return NAMESPACE

    def validate_inference_args(self, inference_args: dict[str, Any] | None) -> None:
        if inference_args:
            raise ValueError(f"model metrics take no inference_args, got {inference_args}")

    def __repr__(self) -> str:
        return f"MultiUseModelHandler({self._handlers})"


def _shares(handler: ModelHandler) -> bool:
    """Whether a handler asks for its model to be shared: ours say so with
    `shares_model`, others (tests' fakes) with Beam's `share_model_across_processes`."""
    if isinstance(handler, TransformerModelHandler):
        return handler.shares_model
    return handler.share_model_across_processes()


def _copies(handler: ModelHandler) -> int:
    if isinstance(handler, TransformerModelHandler):
        return handler.copies
    return handler.model_copies()


def load_models(handlers: Mapping[str, ModelHandler]) -> Models:
    """Every handler's model, loaded in this process (the shared server's constructor,
    or the worker's own models without sharing): ours on their device here (not served
    by a process of their own: these models are, together), others by their own
    `load_model`."""
    return Models({tag: handler.load_device_model()
                   if isinstance(handler, TransformerModelHandler)
                   and type(handler).load_model is TransformerModelHandler.load_model
                   else handler.load_model() for tag, handler in handlers.items()})


def _values(handler: ModelHandler, inputs: list[Any], model: Any) -> list[Any]:
    """A handler's inferences of `inputs`, in order: ours give them without wrapping each
    in a `PredictionResult`, unless a subclass has its own `run_inference`."""
    if (isinstance(handler, TransformerModelHandler)
            and type(handler).run_inference is TransformerModelHandler.run_inference):
        values = handler.inferences(inputs, model)
    else:
        values = [r.inference for r in handler.run_inference(inputs, model)]
    expected = len(inputs)
    if len(values) != expected:
        raise RuntimeError(f"the handler returned {len(values)} results for {expected} inputs")
    return values
