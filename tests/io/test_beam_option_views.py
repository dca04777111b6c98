"""transforms/io/beam_option_views.py: a remembered view behaves as Beam's own, shares
the options' values, and is made again when the options' flags or values are replaced."""

from __future__ import annotations

import gc

from apache_beam.options.pipeline_options import (
    DebugOptions,
    PipelineOptions,
    StandardOptions,
    TypeOptions,
)

from transforms.io import beam_option_views
from transforms.io.beam_option_views import RememberedViews

FLAGS = ["--runner=FnApiRunner", "--experiments=a", "--pipeline_type_check"]


def test_beam_uses_the_remembering_view_as():
    applied = PipelineOptions.view_as
    assert getattr(applied, "_qa_eval_remembered", False)
    beam_option_views.remember_views()  # a second call changes nothing
    assert PipelineOptions.view_as is applied


def test_a_view_is_made_once_and_equals_beams():
    original = PipelineOptions.view_as.__wrapped__
    remembered = RememberedViews(original)
    options = PipelineOptions(FLAGS)
    for cls in (StandardOptions, TypeOptions, DebugOptions):
        view = remembered(options, cls)
        assert remembered(options, cls) is view
        fresh = original(PipelineOptions(FLAGS), cls)
        assert view.get_all_options() == fresh.get_all_options()
    assert remembered(options, StandardOptions).runner == "FnApiRunner"


def test_views_share_the_options_values():
    remembered = RememberedViews(PipelineOptions.view_as.__wrapped__)
    options = PipelineOptions(FLAGS)
    remembered(options, StandardOptions).streaming = True
    assert remembered(options, StandardOptions).streaming is True
    assert options.view_as(StandardOptions).streaming is True  # Beam's patched method too
    debug = remembered(options, DebugOptions)
    debug.experiments.append("b")
    assert remembered(options, DebugOptions).experiments == ["a", "b"]


def test_replaced_flags_or_values_make_a_new_view():
    remembered = RememberedViews(PipelineOptions.view_as.__wrapped__)
    options = PipelineOptions(FLAGS)
    view = remembered(options, StandardOptions)
    options._flags.append("--streaming")  # changed in place
    changed = remembered(options, StandardOptions)
    assert changed is not view
    options._all_options = dict(options._all_options, runner="Other")
    assert remembered(options, StandardOptions).runner == "Other"
    options._flags = ["--runner=Third"]
    assert remembered(options, StandardOptions) is not changed


def test_views_of_dropped_options_are_dropped():
    remembered = RememberedViews(PipelineOptions.view_as.__wrapped__)
    options = PipelineOptions(FLAGS)
    remembered(options, StandardOptions)
    assert len(remembered._kept) == 1
    del options
    gc.collect()
    assert len(remembered._kept) == 0
