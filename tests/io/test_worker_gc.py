"""The collector's thresholds: raised once per process, never lowered, never switched on
or off."""

from __future__ import annotations

import gc

import pytest

from transforms.io import worker_gc


@pytest.fixture
def fresh(monkeypatch):
    saved, enabled = gc.get_threshold(), gc.isenabled()
    monkeypatch.setattr(worker_gc, "_tuned", False)
    yield
    gc.set_threshold(*saved)
    (gc.enable if enabled else gc.disable)()


def test_the_defaults_are_raised_once(fresh):
    gc.set_threshold(700, 10, 10)
    worker_gc.tune_gc()
    assert gc.get_threshold() == worker_gc.THRESHOLDS
    gc.set_threshold(700, 10, 10)
    worker_gc.tune_gc()  # once per process: a later change is the caller's
    assert gc.get_threshold() == (700, 10, 10)


def test_higher_settings_and_no_automatic_collection_are_left_alone(fresh):
    gc.set_threshold(500_000, 5, 1_000)
    worker_gc.tune_gc()
    assert gc.get_threshold() == (500_000, 5, 1_000)
    worker_gc._tuned = False
    gc.set_threshold(0, 10, 10)  # a first threshold of 0: no automatic collection
    worker_gc.tune_gc()
    assert gc.get_threshold() == (0, 10, 10)


def test_a_collector_switched_off_stays_off_with_the_thresholds_raised(fresh):
    """The command line's in-process run switches the collector off until its first
    rows are read, after its first bundle has started (progress.py): the collector it
    switches on again must have the raised thresholds."""
    gc.set_threshold(700, 10, 10)
    gc.disable()
    worker_gc.tune_gc()
    assert gc.get_threshold() == worker_gc.THRESHOLDS and not gc.isenabled()
    gc.enable()
    worker_gc.tune_gc()
    assert gc.get_threshold() == worker_gc.THRESHOLDS and gc.isenabled()


def test_a_counting_dofn_tunes_the_collector_at_its_first_bundle(fresh):
    from transforms.io.counting import CountingDoFn

    gc.set_threshold(700, 10, 10)
    CountingDoFn("stage", ["passed"]).start_bundle()
    assert gc.get_threshold() == worker_gc.THRESHOLDS
