"""Worker handlers closed together (transforms/io/worker_shutdown.py)."""

from __future__ import annotations

import collections
import logging
import threading

import pytest
from apache_beam.runners.portability.fn_api_runner import worker_handlers

from transforms.io import worker_shutdown


class FakeHandler:
    """Closes only when every other handler is closing at the same time (a barrier):
    closed one after another, the first one's close times out."""

    def __init__(self, barrier: threading.Barrier | None, closed: list, fail: bool = False):
        self.barrier, self.closed, self.fail = barrier, closed, fail

    def close(self) -> None:
        if self.barrier is not None:
            self.barrier.wait()
        self.closed.append(self)
        if self.fail:
            raise RuntimeError("worker gone")


def test_close_handlers_closes_them_at_once():
    closed: list = []
    barrier = threading.Barrier(4, timeout=10)
    handlers = [FakeHandler(barrier, closed) for _ in range(4)]
    worker_shutdown.close_handlers(handlers)
    assert sorted(map(id, closed)) == sorted(map(id, handlers))


def test_close_handlers_logs_an_error_and_closes_the_others(caplog):
    closed: list = []
    barrier = threading.Barrier(3, timeout=10)
    handlers = [FakeHandler(barrier, closed, fail=i == 1) for i in range(3)]
    with caplog.at_level(logging.ERROR, logger=worker_shutdown.__name__):
        worker_shutdown.close_handlers(handlers)
    assert len(closed) == 3
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "worker gone" in str(errors[0].exc_info[1])


def test_close_handlers_one_handler_in_this_thread():
    closed: list = []
    worker_shutdown.close_handlers([FakeHandler(None, closed)])
    assert len(closed) == 1


def _manager(handlers_by_env: dict) -> worker_handlers.WorkerHandlerManager:
    manager = object.__new__(worker_handlers.WorkerHandlerManager)
    manager._cached_handlers = collections.defaultdict(list, handlers_by_env)
    manager._workers_by_id = {}
    manager._grpc_server = None
    return manager


@pytest.fixture
def installed(monkeypatch):
    """The patch on Beam's class for this test only."""
    monkeypatch.setattr(worker_handlers.WorkerHandlerManager, "close_all",
                        worker_handlers.WorkerHandlerManager.close_all)
    monkeypatch.setattr(worker_shutdown, "_installed", False)
    assert worker_shutdown.stop_workers_together()
    assert worker_shutdown.stop_workers_together()  # once per process: a no-op
    return worker_handlers.WorkerHandlerManager


def test_beams_manager_closes_its_workers_together(installed):
    closed: list = []
    barrier = threading.Barrier(3, timeout=10)
    handlers = [FakeHandler(barrier, closed) for _ in range(3)]
    # Beam lists a handler once per environment that uses it: each is closed once
    manager = _manager({"env_a": handlers, "env_b": handlers[:1]})
    manager.close_all()
    assert sorted(map(id, closed)) == sorted(map(id, handlers))
    assert not manager._cached_handlers and manager._workers_by_id == {}


def test_beams_manager_with_one_handler_is_beams_own_loop(installed):
    closed: list = []
    manager = _manager({"env": [FakeHandler(None, closed)]})
    manager.close_all()
    assert len(closed) == 1 and not manager._cached_handlers
