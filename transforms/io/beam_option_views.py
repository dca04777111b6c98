"""Beam's pipeline-option views remembered: one view per options object and class.

`PipelineOptions.view_as(cls)` builds a new `cls` from the options' flags each time: an
argument parser with every option of the class, and a parse of all the flags. Beam calls it
for every transform it applies (`Pipeline.apply` and the output type's inference read
`TypeOptions`) and for every type-hint check (`is_consistent_with` reads
`TypeOptions.disable_beartype`): about 650 views for the scoring graph, a third of a 5-row
run's time in a profile. A view holds nothing of its own: its values live in the options'
shared `_all_options` dictionary (Beam's `view_as` fills in the class's defaults on the
first view, and every later view of that class reads and writes the same dictionary). So a
view made once serves every later call with the same flags and the same dictionary;
`RememberedViews` keeps it (weakly, by options object) and makes a new one when either has
been replaced or the flags list has changed.

`remember_views` patches `PipelineOptions.view_as` once per process, and importing this
module calls it; `transforms.io.counting`, which every DoFn module of the project imports,
imports it, so the launcher and every worker process use it.
"""

from __future__ import annotations

from typing import Any

from transforms.io.beam_signatures import _APPLIED, KeptWeakly


class RememberedViews(KeptWeakly):
    """`view_as` with each (options object, class) view kept while the options' flags and
    value dictionary are the ones it was made from (`compute`: Beam's
    `PipelineOptions.view_as`)."""

    def __call__(self, options: Any, cls: type) -> Any:
        flags = options.__dict__.get("_flags")
        values = options.__dict__.get("_all_options")
        views = self._kept.setdefault(options, {})
        kept = views.get(cls)
        if kept is not None:
            view, made_from, made_with = kept
            if view._all_options is values and made_with is flags and made_from == flags:
                return view
        view = self.compute(options, cls)
        views[cls] = (view, list(flags) if flags is not None else None, flags)
        return view


def remember_views() -> None:
    """Patches Beam's `PipelineOptions.view_as` (once per process)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    original = PipelineOptions.view_as
    if getattr(original, _APPLIED, False):
        return
    remembered = RememberedViews(original)

    def view_as(self: Any, cls: type) -> Any:
        return remembered(self, cls)

    view_as.__doc__ = original.__doc__
    view_as.__wrapped__ = original
    setattr(view_as, _APPLIED, True)
    PipelineOptions.view_as = view_as


remember_views()
