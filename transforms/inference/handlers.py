"""Beam `ModelHandler`s for the model-backed metrics.

Usable directly with `RunInference`, and with `KeyedModelHandler` to carry row ids:

    handler = CrossEncoderModelHandler("path/to/sas-checkpoint")
    scores = (pairs                                   # PCollection[(key, (pred, ref))]
              | RunInference(KeyedModelHandler(handler)))  # -> (key, PredictionResult)

Each handler's `load_model` loads the model on its device (`device.DeviceModel`);
`run_inference` prepares a batch on the host side (`predictors.Predictor`, built once per
worker process around the loaded model): each distinct input of the batch computed once
(and outputs still in the per-process LRU cache reused), the inputs encoded in one
tokenizer call, grouped by length into forward passes of at most `max_batch_tokens`
padded tokens, each padded to its own longest row (see predictors.py). Counters,
namespace `metrics_namespace`: `inputs`, `duplicate_inputs`, `cache_hits`,
`forward_passes`, `real_tokens`, `padded_tokens` (padding overhead = padded / real).

GPU workers: `--device auto` (default) takes CUDA with bfloat16 (float16 on older GPUs).
`share_model_across_processes=True` keeps one copy of the model per machine (or
`model_copies`), each in a process of its own (model_server.py; not Beam's
`large_model`, which keeps it inside a worker process): every worker process tokenizes
and pads its own batches and sends the padded arrays to that copy, so several processes
keep one GPU busy (runners that start one SDK process per core: Dataflow, Flink, the
DirectRunner's multi-processing mode). Beam sees an unshared handler (its
`share_model_across_processes()` is False); `shares_model` tells.
"""

import functools
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from transforms.inference import model_server
from transforms.models import predictors
from transforms.models import uses as model_uses
from transforms.models.device import DeviceModel
from transforms.models.loading import ModelSpec
from transforms.models.uses import ModelUse

DEFAULT_NAMESPACE = "qa_eval_inference"
# The first window is this share of the largest (`first_window`).
FIRST_WINDOW_SHARE = 16
# `BatchElements`' batch-size targets made moot: no overhead target, a duration no window
# reaches, no random spread; what is left of its estimator is its growth rule.
_DOUBLING = {"target_batch_overhead": None, "target_batch_duration_secs": 1e9,
             "variance": 0.0}


def first_window(max_batch_size: int) -> int:
    """The default size of a worker's first window: 1/16 of the largest (at least 1)."""
    return max(1, max_batch_size // FIRST_WINDOW_SHARE)


def quiet_window_estimator() -> None:
    """Silences, in this process, what Beam's batch-size estimator says at every window
    when all its timed windows but one have the largest size (after a bundle's partial
    window, or once its thinning of old timings leaves one window of the ramp): its
    regression of time on size divides by zero and fits a line to about one size, and
    numpy warns that the fit is poorly conditioned (a warning numpy shows every time).
    The sizes do not depend on that fit (`DoublingWindows`). Only these two categories,
    only from Beam's module (a filter added again replaces itself)."""
    import numpy as np

    for category in (np.exceptions.RankWarning, RuntimeWarning):
        warnings.filterwarnings("ignore", category=category,
                                module=r"apache_beam\.transforms\.util$")


class DoublingWindows:
    """A `ModelHandler` mix-in: the windows `RunInference` forms (`BatchElements`) start at
    `min_batch_size` and double, window by window, up to `max_batch_size`, the same sizes
    on every run of the same bundles (Beam's batch-size estimator with its timing targets
    and random spread turned off: its growth rule, at most twice the last window, is what
    is left). Beam times the second window, not the first, so the first size comes twice;
    a window holds whole elements, so one heavier than the first size makes the first
    window that element alone (after an empty one). A bundle that ends with a partial
    window starts the next at twice that partial (at least the first size, twice). Equal
    sizes: fixed windows, as Beam forms them. Not with `max_batch_duration_secs`
    (streaming): Beam's stateful batching there counts elements and flushes on a timer.

    Why: each worker's first rows reach the model after a small window, not a whole one,
    so the device starts at once, and several workers sharing one copy reach it one
    after another instead of all with their first whole window at the same moment
    (docs/decisions.md, "Windows that double")."""

    def batch_elements_kwargs(self) -> Mapping[str, Any]:
        kwargs = dict(super().batch_elements_kwargs())
        if kwargs.get("min_batch_size", 1) != kwargs.get("max_batch_size", 1):
            kwargs.update(_DOUBLING)
        return kwargs


class TransformerModelHandler(DoublingWindows, ModelHandler[Hashable, PredictionResult, Any]):
    """A `ModelHandler` for one `ModelUse` (see the module docstring).

    Args:
        use: the model and the output wanted from it.
        min_batch_size: the first batch (window) `BatchElements` forms (or the first
            element, if heavier); later ones double up to `max_batch_size`
            (`DoublingWindows`); None = `first_window(max)`;
            equal to `max_batch_size`: fixed-size windows (bundles still end with a
            partial one). A window is sorted by length into forward passes.
        max_batch_size: largest batch (rows) `BatchElements` forms; also the most rows per
            forward pass.
        max_batch_tokens: most padded tokens per forward pass (None: by device, see
            `predictors.Predictor`).
        max_batch_duration_secs: buffer batches across bundles (streaming).
        cache_size: LRU outputs kept per process (0 = none; None = per-task default).
        share_model_across_processes: one model per machine instead of per process, in
            a process of its own (model_server.py).
        model_copies: with sharing, how many copies (processes) per machine.
        metrics_namespace: namespace of this handler's counters.

    Raises:
        ValueError: a non-positive size, or min_batch_size > max_batch_size.
    """

    def __init__(self, use: ModelUse, *, min_batch_size: int | None = None,
                 max_batch_size: int = predictors.DEFAULT_MAX_BATCH_ROWS,
                 max_batch_tokens: int | None = None,
                 max_batch_duration_secs: int | None = None, cache_size: int | None = None,
                 share_model_across_processes: bool = False, model_copies: int | None = None,
                 metrics_namespace: str = DEFAULT_NAMESPACE) -> None:
        if min_batch_size is None:
            min_batch_size = first_window(max_batch_size)
        tokens = 1 if max_batch_tokens is None else max_batch_tokens  # None: by device
        if min(min_batch_size, max_batch_size, tokens) < 1:
            raise ValueError(
                f"batch sizes must be >= 1, got min_batch_size={min_batch_size}, "
                f"max_batch_size={max_batch_size}, max_batch_tokens={max_batch_tokens}")
        if min_batch_size > max_batch_size:
            raise ValueError(f"min_batch_size {min_batch_size} > max_batch_size {max_batch_size}")
        if cache_size is not None and cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        if model_copies is not None and model_copies < 1:
            raise ValueError(f"model_copies must be >= 1, got {model_copies}")
        if model_copies is not None and not share_model_across_processes:
            raise ValueError("model_copies needs share_model_across_processes")
        super().__init__(min_batch_size=min_batch_size, max_batch_size=max_batch_size,
                         max_batch_duration_secs=max_batch_duration_secs)
        self._use = use
        self._served_as = (model_server.new_serving(use.task) if share_model_across_processes
                           else None)
        self._copies = model_copies or 1
        self._max_batch_tokens = max_batch_tokens
        self._max_batch_rows = max_batch_size
        self._cache_size = cache_size
        self._namespace = metrics_namespace
        self._counters = {name: Metrics.counter(metrics_namespace, name)
                          for name in (*predictors.STAT_NAMES, "duplicate_inputs")}
        self._host: predictors.Predictor | None = None
        self._host_model: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # The host side and the model it wraps belong to one process: a handler that has
        # served a model (in the launcher, as tests and benchmarks do) is pickled into
        # the pipeline without them, not with the model's weights (90 MB for MiniLM,
        # minutes of compression).
        state = dict(self.__dict__)
        state["_host"] = state["_host_model"] = None
        return state

    @property
    def use(self) -> ModelUse:
        return self._use

    @property
    def shares_model(self) -> bool:
        """Whether the model is served to this machine's worker processes by processes
        of its own (`share_model_across_processes`)."""
        return self._served_as is not None

    @property
    def copies(self) -> int:
        """With sharing, the model's copies (processes) per machine."""
        return self._copies

    def load_model(self) -> Any:
        """The model on its device: here, or with sharing a `model_server.ServedModel`
        (the copies started by the first process that asks)."""
        return load_or_serve(functools.partial(DeviceModel, self._use), self._served_as,
                             self._copies)

    def load_device_model(self) -> DeviceModel:
        """The model on its device, in this process."""
        return DeviceModel(self._use)

    def predictor(self, model: Any) -> predictors.Predictor:
        """The host side around a loaded model (or a proxy to it), made once per process
        and model: the tokenizer, the segment memo and the output cache live here."""
        if self._host is None or self._host_model is not model:
            self._host = predictors.Predictor(
                self._use, model, max_batch_rows=self._max_batch_rows,
                max_batch_tokens=self._max_batch_tokens, cache_size=self._cache_size)
            self._host_model = model
        return self._host

    def run_inference(self, batch: Sequence[Hashable], model: Any,
                      inference_args: dict[str, Any] | None = None) -> Iterable[PredictionResult]:
        model_id = self._use.spec.model
        return [PredictionResult(x, value, model_id)
                for x, value in zip(batch, self.inferences(batch, model))]

    def inferences(self, batch: Sequence[Hashable], model: Any) -> list[Any]:
        """`run_inference`'s inferences alone, in batch order (the multi-use handler's
        path: no `PredictionResult` per input)."""
        keys = [_hashable(x) for x in batch]
        unique = list(dict.fromkeys(keys))
        outputs, stats = self.predictor(model).predict(unique)
        by_key = dict(zip(unique, outputs))
        for name, value in stats.items():
            if name != "inputs":
                self._counters[name].inc(value)
        self._counters["inputs"].inc(len(batch))
        self._counters["duplicate_inputs"].inc(len(batch) - len(unique))
        return [by_key[k] for k in keys]

    def validate_inference_args(self, inference_args: dict[str, Any] | None) -> None:
        if inference_args:
            raise ValueError(f"{type(self).__name__} takes no inference_args, got {inference_args}")

    def get_num_bytes(self, batch: Sequence[Hashable]) -> int:
        # Text length, not pickle size: this runs on every batch.
        return sum(len(s) for x in batch for s in ((x,) if isinstance(x, str) else x) if s)

    def get_metrics_namespace(self) -> str:
        return self._namespace

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._use.task}, {self._use.spec.model})"


def load_or_serve(load: Callable[[], Any], served_as: str | None, copies: int) -> Any:
    """`load()` in this process, or with a tag (sharing) a `model_server.ServedModel` of
    it, while this worker imports what its tokenizer needs (transformers' tokenizer
    modules, torch with them: seconds), so the two start-ups overlap. Every handler's
    `load_model` comes here, in the process whose `RunInference` forms the windows: the
    estimator's warnings are silenced there (`quiet_window_estimator`)."""
    quiet_window_estimator()
    if served_as is None:
        return load()
    return model_server.serve(load, served_as, copies, meanwhile=_import_tokenizers)


def _import_tokenizers() -> None:
    from transformers import AutoTokenizer  # noqa: F401


def _hashable(x: Any) -> Hashable:
    return tuple(x) if isinstance(x, list) else x


class EncoderModelHandler(TransformerModelHandler):
    """Encoder outputs for strings: token embeddings of a layer, or mean-pooled vectors.

    Args:
        model: model name, local path or Hub id (None = the packaged all-MiniLM-L6-v2).
        output: `tokens` (`TokenEmbeddings` of hidden state `layer`, for BERTScore) or
            `mean` (a float32 vector, for bi-encoder cosine).
        layer: hidden state index (0 = embeddings); None = the last layer.
        spec_kwargs: `ModelSpec` fields (revision, device, dtype, max_length).
        **kwargs: `TransformerModelHandler` batching/sharing options.
    """

    def __init__(self, model: str | None = None, *, output: str = "tokens",
                 layer: int | None = None, spec_kwargs: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        if output not in ("tokens", "mean"):
            raise ValueError(f"output must be 'tokens' or 'mean', got {output!r}")
        spec = ModelSpec.of(model, **(spec_kwargs or {}))
        super().__init__(model_uses.encoder_use(spec, layer, pooled=output == "mean"), **kwargs)


class CrossEncoderModelHandler(TransformerModelHandler):
    """One score per cross-encoder input: a tuple of 1..3 strings (layouts.py).

    (prediction, reference) pairs for SAS/WES; (candidate, reference, question) for BEM
    with segment ids 0/1/2; a one-element tuple for SQuArE. BERT-style checkpoints have
    two token types: a three-segment input on such a model fails (default) or, with
    `segment_overflow="clamp"`, gives the question segment id 1; a model fine-tuned for
    BEM should have `type_vocab_size >= 3` (torch_models.ensure_token_types).

    Args:
        model: a sequence-classification checkpoint (path or Hub id).
        activation: `auto` (sigmoid for one logit, else softmax of class `label`),
            `sigmoid`, `softmax` or `none`; fixed here, never per call.
        label: class read by softmax/none.
        segments: most segments per input (validated against the model's token types).
        segment_overflow: `error` or `clamp`.
        spec_kwargs: `ModelSpec` fields (revision, device, dtype, max_length).
        **kwargs: `TransformerModelHandler` batching/sharing options.
    """

    def __init__(self, model: str, *, activation: str = "auto", label: int = 1,
                 segments: int = 2, segment_overflow: str = "error",
                 spec_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        spec = ModelSpec.of(model, **(spec_kwargs or {}))
        use = model_uses.cross_encoder_use(spec, activation=activation, label=label,
                                           segments=segments, segment_overflow=segment_overflow)
        super().__init__(use, **kwargs)


class KeyphraseModelHandler(TransformerModelHandler):
    """KPQA keyphrase weights: `TokenScores` for (question or None, answer) inputs.

    Args:
        model: a token-classification checkpoint (path or Hub id).
        label: the keyphrase class; None = from id2label (K/KEY/KEYPHRASE), else 0.
        spec_kwargs: `ModelSpec` fields (revision, device, dtype, max_length).
        **kwargs: `TransformerModelHandler` batching/sharing options.
    """

    def __init__(self, model: str, *, label: int | None = None,
                 spec_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        spec = ModelSpec.of(model, **(spec_kwargs or {}))
        super().__init__(model_uses.token_classifier_use(spec, label=label), **kwargs)


def build_handler(use: ModelUse, **kwargs: Any) -> TransformerModelHandler:
    """The handler for a metric's `ModelUse` (kwargs: batching/sharing options)."""
    return TransformerModelHandler(use, **kwargs)
