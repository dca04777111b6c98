"""A shared model in processes of its own (model_server.py): calls to its copies in turn, a
copy that goes away started again once, a constructor that fails, the caller's start-up
overlapping the server's; where the copy really runs (slow: each copy is a fresh
interpreter), from one process and from two, and in a daemonic worker."""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import threading
import time

import pytest

from transforms.scoring import model_server


class Echo:
    """A stand-in model: says which process it lives in."""

    def __init__(self, fail: str | None = None, load_s: float = 0.0) -> None:
        if fail:
            raise ValueError(fail)
        time.sleep(load_s)  # a model that takes a while to load

    def pid(self) -> int:
        return os.getpid()

    def add(self, a: int, b: int = 0) -> int:
        return a + b


class _Proxy:
    """A copy's proxy: answers from its `Echo`, or breaks as a dead server's does."""

    def __init__(self, name: str, broken: bool = False) -> None:
        self.name, self.broken, self.calls = name, broken, 0

    def which(self) -> str:
        self.calls += 1
        if self.broken:
            raise BrokenPipeError(32, "Broken pipe")
        return self.name


@pytest.fixture
def fake_copies(monkeypatch):
    """`ServedModel._connect` gives fake proxies, from a list per copy (a reconnect takes
    the next one; an exception in the list is raised by the connect)."""
    made: dict[int, list] = {}

    def connect(self, i):
        proxy = made[i].pop(0)
        if isinstance(proxy, Exception):
            raise proxy
        self._proxies[i] = proxy

    monkeypatch.setattr(model_server.ServedModel, "_connect", connect)
    monkeypatch.setattr(model_server, "_daemonic", lambda: False)
    return made


def test_copies_answer_in_turn(fake_copies):
    fake_copies.update({0: [_Proxy("a")], 1: [_Proxy("b")]})
    model = model_server.serve(Echo, "t", copies=2)
    assert model.copies == 2
    assert [model.which() for _ in range(5)] == ["a", "b", "a", "b", "a"]
    with pytest.raises(AttributeError):
        model._private  # noqa: B018 - only public methods are forwarded
    with pytest.raises(ValueError, match="copies must be >= 1"):
        model_server.serve(Echo, "t", copies=0)


def test_a_copy_that_is_gone_is_started_again_once(fake_copies, caplog):
    fake_copies[0] = [_Proxy("first", broken=True), _Proxy("second")]
    model = model_server.serve(Echo, "qa_eval_x")
    assert model.which() == "second"  # started again, the call repeated
    assert "qa_eval_x-0 is gone (BrokenPipeError" in caplog.text
    # gone again right after its restart: the bundle must fail, not dead-letter its rows
    fake_copies[0] = [_Proxy("third", broken=True), _Proxy("fourth", broken=True)]
    model = model_server.serve(Echo, "qa_eval_y")
    with pytest.raises(model_server.ServerGone,
                       match=r"\(qa_eval_y-0\) is gone again after a restart \(BrokenPipeError"):
        model.which()


def test_a_copy_that_cannot_start_again_names_both_causes(fake_copies):
    fake_copies[0] = [_Proxy("first", broken=True),
                      RuntimeError("Shared Server Process crashed: CUDA out of memory")]
    model = model_server.serve(Echo, "qa_eval_z")
    with pytest.raises(model_server.ServerGone,
                       match=r"\(qa_eval_z-0\) is gone \(BrokenPipeError: .*\) and could not "
                             r"be started again: RuntimeError: .*CUDA out of memory"):
        model.which()


def test_meanwhile_runs_in_the_callers_thread_and_its_error_wins(fake_copies, caplog):
    fake_copies[0] = [_Proxy("a")]
    ran = []
    model = model_server.serve(Echo, "t", meanwhile=lambda: ran.append(
        threading.current_thread()))
    assert ran == [threading.current_thread()] and model.which() == "a"

    def fails():
        raise KeyError("the caller's own start-up failed")

    fake_copies[0] = [RuntimeError("Shared Server Process crashed: no such checkpoint")]
    with pytest.raises(KeyError, match="own start-up failed"):
        model_server.serve(Echo, "qa_eval_w", meanwhile=fails)
    assert "qa_eval_w did not start either: RuntimeError" in caplog.text
    fake_copies[0] = [RuntimeError("Shared Server Process crashed: no such checkpoint")]
    with pytest.raises(RuntimeError, match="no such checkpoint"):
        model_server.serve(Echo, "t", meanwhile=lambda: None)


def test_a_model_server_gone_fails_the_window_instead_of_dead_lettering_it():
    from transforms.scoring.multi_use import MultiUseModelHandler

    class Handler:
        def batch_elements_kwargs(self):
            return {}

        def share_model_across_processes(self):
            return False

        def run_inference(self, inputs, model):
            raise model_server.ServerGone("the process serving the shared model is gone")

    handler = MultiUseModelHandler({"use": Handler()})
    with pytest.raises(model_server.ServerGone):
        handler.inferences([("use", "a"), ("use", "b")], {"use": None})


# Real processes: each copy is a fresh interpreter (seconds).

@pytest.fixture
def served():
    """`serve` whose copies are stopped after the test (a run's end with its worker)."""
    made = []

    def serve(*args, **kwargs):
        model = model_server.serve(*args, **kwargs)
        made.append(model)
        return model

    yield serve
    stopped = set()
    for model in made:
        for tag, handle in zip(model._tags, model._handles):
            if handle is not None and tag not in stopped:
                stopped.add(tag)
                with contextlib.suppress(EOFError, ConnectionError):  # it exits at once
                    handle.unsafe_hard_delete()


def _pid_from_another_process(tag: str, queue) -> None:
    queue.put(model_server.serve(Echo, tag).pid())


def _serve_in_a_daemon(tag: str, queue) -> None:
    model = model_server.serve(Echo, tag)
    queue.put((os.getpid(), model.pid()))
    for handle in model._handles:
        with contextlib.suppress(EOFError, ConnectionError):
            handle.unsafe_hard_delete()


@pytest.mark.slow
def test_the_model_lives_in_a_process_of_its_own(served):
    tag = model_server.new_tag("test")
    address = os.path.join(model_server.folder(), f"{tag}-0.address")
    seen = []
    model = served(Echo, tag, meanwhile=lambda: seen.append(os.path.exists(address)))
    assert seen == [False]  # the caller's start-up ran before the copy was up
    server = model.pid()
    assert server != os.getpid() and os.path.exists(address)
    assert model.add(2, b=3) == 5
    # another worker of the run (another process, the same tag) reaches the same copy
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    other = ctx.Process(target=_pid_from_another_process, args=(tag, queue))
    other.start()
    assert queue.get(timeout=120) == server
    other.join()
    # another run's tag gets a copy of its own
    assert served(Echo, model_server.new_tag("test")).pid() != server


@pytest.mark.slow
def test_the_launcher_starts_a_copy_that_the_workers_join(caplog):
    """`start_serving` (the launcher of a local multi-process run) starts the copy in a
    thread; a worker that asks while it is still loading waits for it and reaches that
    copy, not one of its own. A copy that cannot start is logged there, not raised: the
    workers try again."""
    tag = model_server.new_tag("test")
    before = len(model_server._STARTED_HERE)
    starting = model_server.start_serving(functools.partial(Echo, load_s=3.0), tag)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    worker = ctx.Process(target=_pid_from_another_process, args=(tag, queue))
    worker.start()  # while the launcher's copy loads
    try:
        worker_saw = queue.get(timeout=120)
        starting.join(timeout=120)
        (started,) = model_server._STARTED_HERE[before:]
        assert worker_saw == started.pid() != os.getpid()
    finally:
        worker.join(timeout=30)
        if worker.is_alive():  # it started a copy of its own, which it waits on at exit
            worker.kill()
        for model in model_server._STARTED_HERE[before:]:
            with contextlib.suppress(EOFError, ConnectionError):
                model._handles[0].unsafe_hard_delete()
    model_server.start_serving(functools.partial(Echo, "no such checkpoint: /m"),
                               model_server.new_tag("test")).join(timeout=120)
    assert len(model_server._STARTED_HERE) == before + 1
    assert "could not start the shared model" in caplog.text
    assert "no such checkpoint: /m" in caplog.text


@pytest.mark.slow
def test_a_killed_copy_is_started_again(served):
    model = served(Echo, model_server.new_tag("test"), copies=2)
    first = [model.pid(), model.pid()]
    assert len(set(first)) == 2 and os.getpid() not in first
    with contextlib.suppress(EOFError, ConnectionError):
        model._handles[0].unsafe_hard_delete()
    restarted = model.pid()  # copy 0 again: a new process
    assert restarted not in first and model.pid() == first[1]


@pytest.mark.slow
def test_a_model_that_cannot_load_fails_the_caller_with_its_reason():
    with pytest.raises(RuntimeError, match="no such checkpoint: /models/missing"):
        model_server.serve(functools.partial(Echo, "no such checkpoint: /models/missing"),
                           model_server.new_tag("test"))


@pytest.mark.slow
def test_a_daemonic_worker_serves_the_model_from_its_own_threads():
    # a Dask worker is daemonic, and multiprocessing lets no daemon start a process
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    worker = ctx.Process(target=_serve_in_a_daemon, args=(model_server.new_tag("test"), queue),
                         daemon=True)
    worker.start()
    worker_pid, server_pid = queue.get(timeout=120)
    worker.join()
    assert server_pid == worker_pid
