"""The model branch's `RunInference` handler over batches of rows, and the elements it
runs.

`ExpandModelRequestsFn` (run_model_metrics.py) turns each batch of rows into one
`BatchRequests`: per row a `RowRequests` with every model input its metrics ask for.
`BatchModelHandler` runs a Beam batch of such elements through a `MultiUseModelHandler`
(multi_use.py) and returns one `BatchResult` per element, the row's outputs in request
order, for `FoldModelMetricsFn`. `BatchElements` weighs each element by `request_count`,
its number of model inputs, so `--model_batch_size` counts model inputs. The edges that
carry `BatchRequests` and `BatchResult` are typed with them, so they get
`batch_coder.BatchCoder`.
"""

import dataclasses
import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.ml.inference.base import ModelHandler

from transforms.inference.handlers import DoublingWindows
from transforms.inference.model_server import ServerGone
from transforms.inference.multi_use import (
    NAMESPACE,
    InferenceFailure,
    Models,
    MultiUseModelHandler,
)

logger = logging.getLogger(__name__)
# model inputs `BatchModelHandler.get_num_bytes` measures before scaling to the window
_SIZE_SAMPLE = 64


@dataclasses.dataclass(frozen=True)
class RowRequests:
    """One row's model inputs, the element `RunInference` batches.

    Attributes:
        row_key: the row's key.
        row: the row (a `QAExample`, or a value with an `.example`).
        requests: (metric index, slot, use tag, model input) for every model input the
            row's metrics ask for, in metric and slot order.
        rejected: (metric index, reason) for every metric that cannot score the row.
        carried: the metric indices not computed for the row (an incremental run
            carries their values from the previous run).
    """

    row_key: Hashable
    row: Any
    requests: tuple[tuple[int, int, str, Any], ...]
    rejected: tuple[tuple[int, str], ...] = ()
    carried: tuple[int, ...] = ()


class BatchRequests(NamedTuple):
    """A batch of rows with their model inputs, the element `RunInference` batches.

    Attributes:
        batch: the rows as they came, a `RowBatch`.
        rows: one `RowRequests` per row, in the batch's order.
    """

    batch: Any
    rows: tuple[RowRequests, ...]


class BatchResult(NamedTuple):
    """What `BatchModelHandler` returns for one `BatchRequests`: the element, and per row
    the list of its model outputs in request order (the fields of Beam's
    `PredictionResult`; a class of our own so that the edge gets `BatchCoder` without a
    coder registered for a Beam class, see transforms/scoring/reading/batch_coder.py)."""

    example: BatchRequests
    inference: list


def request_count(element: BatchRequests) -> int:
    """An element's weight for `BatchElements`: its number of model inputs (at least 1),
    so that `--model_batch_size` counts model inputs. (An element heavier than the batch
    target makes `BatchElements` emit an empty batch first; `BatchModelHandler` accepts
    those.)"""
    return max(1, sum(len(row.requests) for row in element.rows))


class BatchModelHandler(DoublingWindows, ModelHandler):
    """Runs `BatchRequests` (batches of rows with their model inputs) through a
    `MultiUseModelHandler`.

    The elements of a Beam batch are flattened into their model inputs, run by the
    multi-use handler (which splits them by model, computes identical inputs once,
    groups them by length and isolates failing inputs) and cut back into one list of
    outputs per row, in the row's request order. `BatchElements` weighs each element by
    its number of inputs, so `max_batch_size` counts model inputs: it is the window in
    which inputs are de-duplicated and sorted by length. Keeping a row's outputs with the
    row means the fold step runs in the same stage, with no shuffle of token embeddings
    and no join.
    """

    def __init__(self, inner: MultiUseModelHandler) -> None:
        sizes = inner.batch_elements_kwargs()
        super().__init__(min_batch_size=sizes.get("min_batch_size"),
                         max_batch_size=sizes.get("max_batch_size"),
                         element_size_fn=request_count)
        self._inner = inner
        self._failed_windows = beam.metrics.Metrics.counter(NAMESPACE, "failed_windows")

    def load_model(self) -> Models:
        return self._inner.load_model()

    @staticmethod
    def _inputs(batch: Sequence[BatchRequests]) -> list[tuple[str, Any]]:
        return [(tag, model_input) for element in batch for row in element.rows
                for _i, _s, tag, model_input in row.requests]

    def run_inference(self, batch: Sequence[BatchRequests], model: Mapping[str, Any],
                      inference_args: dict[str, Any] | None = None) -> list[BatchResult]:
        flat = self._inputs(batch)
        try:
            values = self._inner.inferences(flat, model) if flat else []
            if len(values) != len(flat):
                raise RuntimeError(f"{len(values)} model outputs for {len(flat)} inputs")
        except ServerGone:
            raise  # the shared model's process is gone: the bundle fails, rows are not at fault
        except Exception as e:  # noqa: BLE001 - the window's rows are dead-lettered, counted
            # (the multi-use handler already isolates a failing input; what is left is a
            # window that failed as a whole)
            logger.warning("a window of %d model inputs failed as a whole: %s: %s",
                           len(flat), type(e).__name__, e)
            self._failed_windows.inc()
            values = [InferenceFailure(f"{type(e).__name__}: {e}")] * len(flat)
        results, at = [], 0
        for element in batch:
            outputs = []
            for row in element.rows:
                outputs.append(values[at:at + len(row.requests)])
                at += len(row.requests)
            results.append(BatchResult(element, outputs))
        return results

    def get_num_bytes(self, batch: Sequence[BatchRequests]) -> int:
        """The window's model inputs' size (text characters), from the inputs of its
        first rows (whole rows, until `_SIZE_SAMPLE` inputs or more) scaled to their
        number: Beam calls this on every window for its byte count, and measuring every
        input cost a tenth of a two-segment cross-encoder's host side."""
        sample: list[tuple[str, Any]] = []
        count = 0
        for element in batch:
            for row in element.rows:
                count += len(row.requests)
                if len(sample) < _SIZE_SAMPLE:
                    sample += [(tag, x) for _i, _s, tag, x in row.requests]
        if not sample:
            return 0
        return round(self._inner.get_num_bytes(sample) * count / len(sample))

    def get_metrics_namespace(self) -> str:
        return NAMESPACE

    def validate_inference_args(self, inference_args: dict[str, Any] | None) -> None:
        self._inner.validate_inference_args(inference_args)

    def __repr__(self) -> str:
        return f"BatchModelHandler({self._inner!r})"
