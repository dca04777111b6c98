"""Beam's DaskRunner with the faults that stop this project's graphs corrected.

Use it as Beam's: `--runner transforms.io.dask_runner.DaskRunner
--dask_client_address tcp://SCHEDULER:8786` (Beam's `DaskOptions` flags all apply).

Beam 2.77's `apache_beam.runners.dask.dask_runner.DaskRunner` translates a pipeline into
dask bags, one per transform. Five faults of that translation break any graph that uses
the Beam primitives they touch; `docs/repro/dask_runner_faults.py` shows each in a few
lines of plain Beam. This runner keeps Beam's translation (its Create, GroupByKey,
Flatten and overrides) and corrects exactly those:

1. A DoFn's outputs are kept apart by tag: a bag per output PCollection, not one bag of
   every output handed to the consumers of each (Beam's `ParDo` op drops the tags).
2. What `finish_bundle` emits is kept (Beam's op copies the outputs before calling it).
3. Every branch runs: all bags nobody consumes are computed, in one graph, not only the
   last transform's.
4. `beam.io.Read` reads: the source is split at launch and each part read in a task
   (Beam's `_Read` has no translation).
5. Side inputs are computed once, as dependencies of the tasks that read them, instead of
   by a nested compute inside every bundle that reads them (which reran the side input's
   whole upstream graph, side effects included, per bundle).

And with `--dask_npartitions N`, `Reshuffle` spreads the elements over N partitions
(Beam's translation is a no-op, so a graph that starts from a few files stays in one
partition; every GroupByKey keeps its input's partitions). Give N about the cluster's
worker threads: each partition of each grouping is several tasks, so N far above that
only adds scheduling. Counters (`result.metrics()`) are not collected, as in Beam's
runner: this project's outputs (stats.json, summary.json) never depend on them.

Without `--dask_client_address` (or `--dask_scheduler_file`) the runner starts a cluster
on this machine for the run, as Beam's does, but one that only the run can reach
(`LOCAL_CLUSTER`). A cluster named by its address is secured by whoever started it
(dask's `distributed.comm.tls` configuration; SECURITY.md).

Still as in Beam's runner: one global window, no timers or state, no streaming.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from apache_beam import pvalue
from apache_beam.pipeline import PipelineVisitor
from apache_beam.runners.dask import dask_runner as beam_dask

# Bytes per part when a bounded source is split at launch.
READ_SPLIT_BYTES = 64 << 20
# The cluster started on this machine when no scheduler is named (Beam's runner starts a
# plain `LocalCluster`, whose scheduler and workers take any local user's tasks, pickles
# included, over plain TCP): TLS with a key and certificate made in memory for this run
# (`Security.temporary()`, so only the run's own processes can connect), no dashboard and
# no other HTTP pages (served without authentication: task and worker details, logs).
LOCAL_CLUSTER = {"security": True, "dashboard_address": None}
LOCAL_HTTP = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}


def _windowed(value: Any) -> Any:
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.windowed_value import WindowedValue

    return value if isinstance(value, WindowedValue) else WindowedValue(
        value, 0, (GlobalWindow(),))


def _receivers() -> dict:
    """Receivers for every tag a DoFn emits to (None: the main output), collecting
    (tag, value) into one list, `.values`."""
    from apache_beam.runners.common import Receiver

    class TagReceiver(Receiver):
        def __init__(self, tag: str | None, values: list) -> None:
            self.tag = tag
            self.values = values

        def receive(self, windowed_value: Any) -> None:
            self.values.append((self.tag, windowed_value.value))

    class Receivers(dict):
        def __init__(self) -> None:
            super().__init__()
            self.values: list = []

        def __missing__(self, tag: str | None) -> Receiver:
            receiver = self[tag] = TagReceiver(tag, self.values)
            return receiver

    return Receivers()


def _side_input_maps(views: Sequence[tuple[type, dict]], values: Sequence[list]) -> list:
    from apache_beam.transforms.sideinputs import SideInputMap

    return [SideInputMap(view, options, [_windowed(v) for v in vs])
            for (view, options), vs in zip(views, values, strict=True)]


@dataclasses.dataclass(frozen=True)
class _ParDoSpec:
    """What a task needs of a ParDo (not the transform, which holds the pipeline).

    The DoFn travels pickled and every bundle unpickles its own copy, as on any Beam
    runner: dask keeps one deserialised spec per worker and hands that very object to
    each task, so a DoFn's `setup` state (a loaded model, a lexicon with its caches)
    would otherwise live on in the spec and be pickled with it when another worker
    fetches it.
    """

    payload: bytes  # the pickled (DoFn, args, kwargs)
    label: str
    window_fn: Any
    side_inputs: tuple  # (view class, view options) of each


def _run_bundle(items: Iterable[Any], spec: _ParDoSpec, *side_values: list) -> list:
    """One partition through a ParDo's DoFn: (tag, value) of every output, the ones
    `finish_bundle` emits included."""
    from apache_beam.internal import pickler
    from apache_beam.runners.common import (
        DoFnContext,
        DoFnInvoker,
        DoFnSignature,
        _OutputHandler,
    )
    from apache_beam.transforms.core import DoFn

    fn, args, kwargs = pickler.loads(spec.payload)
    receivers = _receivers()
    handler = _OutputHandler(
        window_fn=spec.window_fn, main_receivers=receivers[None],
        tagged_receivers=receivers, per_element_output_counter=None,
        output_batch_converter=None, process_yields_batches=False,
        process_batch_yields_elements=False)
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(fn), handler, context=DoFnContext(spec.label, state=None),
        side_inputs=_side_input_maps(spec.side_inputs, side_values),
        input_args=list(args), input_kwargs=kwargs, user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam())
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(_windowed(item))
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return receivers.values


def _read_parts(parts: Iterable[Any]) -> list:
    out = []
    for part in parts:
        tracker = part.source.get_range_tracker(part.start_position, part.stop_position)
        out.extend(part.source.read(tracker))
    return out


def _concat(*parts: list) -> list:
    return [value for part in parts for value in part]


def _values_of(tagged: Iterable[tuple[str | None, Any]], tag: str | None, label: str) -> list:
    """The values of one tag (`label` names the ParDo: it keeps the bags of different
    ParDos apart in dask's graph, whose keys hash the function and its arguments)."""
    return [value for t, value in tagged if t == tag]


def _count(values: Iterable[Any]) -> list[int]:
    return [sum(1 for _ in values)]


class _BagVisitor(PipelineVisitor):
    """Translates each leaf transform into dask bags, one per output PCollection."""

    def __init__(self, bag_kwargs: dict) -> None:
        self.bag_kwargs = bag_kwargs
        self.bags: dict[pvalue.PCollection, Any] = {}
        self.consumed: set[pvalue.PCollection] = set()

    def visit_transform(self, node: Any) -> None:
        import apache_beam as beam
        from apache_beam.runners.dask import overrides
        from apache_beam.runners.dask.transform_evaluator import TRANSLATIONS, Flatten, NoOp

        inputs = [self.bags.get(i) for i in node.inputs if not isinstance(i, pvalue.PBegin)]
        self.consumed.update(i for i in node.inputs if isinstance(i, pvalue.PCollection))
        self.consumed.update(si.pvalue for si in node.side_inputs)
        transform = node.transform
        if type(transform) is beam.ParDo:
            outputs = self._par_do(node, inputs[0])
        elif type(transform) is overrides._Read:
            outputs = {None: self._read(transform.source)}
        elif type(transform) is overrides._Reshuffle and self.bag_kwargs.get("npartitions"):
            outputs = {None: inputs[0].repartition(npartitions=self.bag_kwargs["npartitions"])}
        else:
            op = TRANSLATIONS.get(type(transform), NoOp)(node, bag_kwargs=self.bag_kwargs)
            if isinstance(op, Flatten):
                bag = op.apply(inputs)
            else:
                bag = op.apply(inputs[0] if inputs else None)
            outputs = {None: bag}
        for tag, pcoll in node.outputs.items():
            if tag in outputs:
                self.bags[pcoll] = outputs[tag]

    def _par_do(self, node: Any, bag: Any) -> dict[str | None, Any]:
        import dask
        from apache_beam.internal import pickler

        transform = node.transform
        main_input = next(iter(node.main_inputs.values()))
        window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
        # the side inputs' places in args hold placeholders; views without their pvalue
        spec = _ParDoSpec(
            pickler.dumps((transform.fn, tuple(transform.args), dict(transform.kwargs))),
            node.full_label, window_fn,
            tuple((type(si), si._view_options()) for si in node.side_inputs))
        # each side input whole, computed once, as a dependency of every partition's task
        # (its partitions' keys, not a copy of its graph: that made graphs of 100+ MB)
        side_values = [
            dask.delayed(_concat, pure=True)(
                *self.bags[si.pvalue].to_delayed(optimize_graph=False))
            for si in node.side_inputs]
        # the spec once in the graph, not once per partition
        tagged = bag.map_partitions(_run_bundle, dask.delayed(spec, pure=True), *side_values)
        return {tag: tagged.map_partitions(_values_of, tag, node.full_label)
                for tag in node.outputs}

    def _read(self, source: Any) -> Any:
        from dask import bag as db

        parts = list(source.split(desired_bundle_size=READ_SPLIT_BYTES))
        return db.from_sequence(parts, npartitions=max(1, len(parts))).map_partitions(
            _read_parts)

    def sinks(self) -> list[Any]:
        """The bags no transform consumes: computing them runs every branch."""
        return [bag for pcoll, bag in self.bags.items()
                if pcoll not in self.consumed and bag is not None]


class _DaskResult(beam_dask.DaskRunnerResult):
    """Beam's result, closing its client once the run has finished (Beam's leaves it
    open: it then logs reconnection errors when the cluster goes away)."""

    def wait_until_finish(self, duration: int | None = None) -> str:
        try:
            return super().wait_until_finish(duration)
        finally:
            if self.state in ("DONE", "FAILED", "CANCELLED"):
                self.client.close()


class DaskRunner(beam_dask.DaskRunner):
    """Beam's DaskRunner, its translation corrected (module doc)."""

    def run_pipeline(self, pipeline: Any, options: Any) -> _DaskResult:
        import dask
        import dask.distributed as ddist

        dask_options = options.view_as(beam_dask.DaskOptions).get_all_options(
            drop_default=True, current_only=True)
        bag_kwargs = beam_dask.DaskOptions._extract_bag_kwargs(dask_options)
        if dask_options.get("address") is None and dask_options.get("scheduler_file") is None:
            with dask.config.set(LOCAL_HTTP):
                client = ddist.Client(**dask_options, **LOCAL_CLUSTER)
        else:
            client = ddist.Client(**dask_options)
        pipeline.replace_all(beam_dask.dask_overrides())
        visitor = _BagVisitor(bag_kwargs)
        pipeline.visit(visitor)
        # a count per sink, not its elements: nothing but numbers comes back to the client
        counts = dask.optimize(*(bag.map_partitions(_count) for bag in visitor.sinks()))
        return _DaskResult(client, client.compute(list(counts)))
