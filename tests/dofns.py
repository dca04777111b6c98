"""Beam code without running a pipeline: a DoFn run by hand as one bundle, and the step
names of a built graph. Fast unit tests of what otherwise runs only inside pipelines (and
that mutation testing must reach)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from transforms.io.counting import STATS_TAG


def run_dofn(fn: beam.DoFn, elements: Iterable[Any], **side_inputs: Any
             ) -> tuple[list[Any], dict[str, list[Any]], dict[tuple[str, str], int]]:
    """(main outputs, tagged outputs by tag, counts of a CountingDoFn by (namespace, name))
    of `fn` over `elements` in one bundle; `side_inputs` are passed to every `process`
    call by keyword, as their values."""
    fn.setup()
    fn.start_bundle()
    main: list[Any] = []
    tagged: dict[str, list[Any]] = defaultdict(list)
    for element in elements:
        for out in fn.process(element, **side_inputs) or ():
            if isinstance(out, beam.pvalue.TaggedOutput):
                tagged[out.tag].append(out.value)
            else:
                main.append(out)
    counts: Counter = Counter()
    for out in fn.finish_bundle() or ():
        assert out.tag == STATS_TAG
        key, n = out.value.value
        counts[key] += n
    fn.teardown()
    return main, dict(tagged), dict(counts)


def step_labels(pipeline: beam.Pipeline) -> set[str]:
    """The full label of every transform (composites included) of a built pipeline."""
    labels: set[str] = set()

    class Visitor(beam.pipeline.PipelineVisitor):
        def enter_composite_transform(self, node):
            labels.add(node.full_label)

        def visit_transform(self, node):
            labels.add(node.full_label)
    pipeline.visit(Visitor())
    return {label for label in labels if label}
