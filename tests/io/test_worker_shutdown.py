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
    barrier = threading.Barrier(4, timeout=5)
    handlers = [FakeHandler(barrier, closed) for _ in range(4)]
    worker_shutdown.close_handlers(handlers)
    assert sorted(map(id, closed)) == sorted(map(id, handlers))


def test_close_handlers_logs_an_error_and_closes_the_others(caplog):
    closed: list = []
    barrier = threading.Barrier(3, timeout=5)
    handlers = [FakeHandler(barrier, closed, fail=i == 1) for i in range(3)]
    with caplog.at_level(logging.ERROR, logger=worker_shutdown.__name__):
        worker_shutdown.close_handlers(handlers)
    assert len(closed) == 3
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "worker gone" in str(errors[0].exc_info[1])


def test_close_handlers_one_handler():
    closed: list = []
    worker_shutdown.close_handlers([FakeHandler(None, closed)])
    assert len(closed) == 1


class FakeServer:
    def __init__(self, events: list) -> None:
        self.events = events

    def close(self) -> None:
        self.events.append("grpc_server")


def _manager(handlers_by_env: dict, events: list) -> worker_handlers.WorkerHandlerManager:
    manager = object.__new__(worker_handlers.WorkerHandlerManager)
    manager._cached_handlers = collections.defaultdict(list, handlers_by_env)
    manager._workers_by_id = {"worker_1": object()}
    manager._grpc_server = FakeServer(events)
    return manager


@pytest.fixture
def installed(monkeypatch):
    """The patch on Beam's class, restored after the test."""
    monkeypatch.setattr(worker_handlers.WorkerHandlerManager, "close_all",
                        worker_handlers.WorkerHandlerManager.close_all)
    assert worker_shutdown.stop_workers_together()
    method = worker_handlers.WorkerHandlerManager.close_all
    assert worker_shutdown.stop_workers_together()  # once per process: not wrapped twice
    assert worker_handlers.WorkerHandlerManager.close_all is method
    return worker_handlers.WorkerHandlerManager


def test_beams_manager_closes_its_workers_together_then_its_servers(installed):
    events: list = []
    barrier = threading.Barrier(3, timeout=5)
    handlers = [FakeHandler(barrier, events) for _ in range(3)]
    manager = _manager({"env_a": handlers[:2], "env_b": handlers[2:]}, events)
    manager.close_all()
    assert sorted(map(id, events[:3])) == sorted(map(id, handlers))
    assert events[3:] == ["grpc_server"]
    assert not manager._cached_handlers and manager._workers_by_id == {}
    assert manager._grpc_server is None


def test_beams_manager_closes_its_servers_when_closing_a_worker_is_interrupted(
        installed, monkeypatch):
    def interrupted(handlers):
        raise KeyboardInterrupt

    monkeypatch.setattr(worker_shutdown, "close_handlers", interrupted)
    events: list = []
    manager = _manager({"env": [FakeHandler(None, events), FakeHandler(None, events)]}, events)
    with pytest.raises(KeyboardInterrupt):
        manager.close_all()
    assert events == ["grpc_server"] and manager._grpc_server is None


def test_beams_manager_with_one_handler_is_beams_own_loop(installed, monkeypatch):
    threaded: list = []
    monkeypatch.setattr(worker_shutdown, "close_handlers", threaded.append)
    events: list = []
    manager = _manager({"env": [FakeHandler(None, events)]}, events)
    manager.close_all()
    assert len(events) == 2 and events[1] == "grpc_server" and not manager._cached_handlers
    assert threaded == []  # no threads for the in-process runner's one handler


def test_a_beam_that_changed_is_left_alone(monkeypatch):
    def close_all(self):  # reads none of what the patch relies on
        pass

    monkeypatch.setattr(worker_handlers.WorkerHandlerManager, "close_all", close_all)
    assert not worker_shutdown.stop_workers_together()
    assert worker_handlers.WorkerHandlerManager.close_all is close_all


@pytest.mark.slow
def test_a_multi_process_pipeline_stops_its_workers_before_its_servers(installed, monkeypatch):
    """Beam's own classes: two worker processes, the patch installed; both workers stopped
    before the runner's gRPC servers close, and the pipeline's result is whole."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from tests.runners import RUNNER_ARGS

    events: list = []

    def recording(original, name):
        def record(self):
            original(self)
            events.append(name)
        return record

    for cls, method, name in ((worker_handlers.SubprocessSdkWorkerHandler, "stop_worker", "worker"),
                              (worker_handlers.GrpcServer, "close", "grpc_server")):
        monkeypatch.setattr(cls, method, recording(getattr(cls, method), name))
    with beam.Pipeline(options=PipelineOptions(RUNNER_ARGS["direct_multi_processing"])) as p:
        counted = (p | beam.Create(range(100)) | beam.Reshuffle()
                   | beam.Map(lambda x: x * 2) | beam.combiners.Count.Globally())
        assert_that(counted, equal_to([100]))
    assert events == ["worker", "worker", "grpc_server"]
