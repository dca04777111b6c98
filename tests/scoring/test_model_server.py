"""A shared model in processes of its own (model_server.py): calls to its copies in turn, a
copy that goes away started again once, a constructor that fails, the caller's start-up
overlapping the server's; where the copy really runs (slow: each copy is a fresh
interpreter), from one process and from two, and in a daemonic worker."""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
import signal
import threading
import time

import pytest

from tests.scoring.payloads import Planted
from transforms.inference import model_server


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


def _serving(tag: str) -> model_server.Serving:
    """A served model's identity with a tag the test names."""
    serving = model_server.new_serving("test")
    serving.tag = tag
    return serving


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
    model = model_server.serve(Echo, _serving("t"), copies=2)
    assert model.copies == 2
    assert [model.which() for _ in range(5)] == ["a", "b", "a", "b", "a"]
    with pytest.raises(AttributeError):
        model._private  # noqa: B018 - only public methods are forwarded
    with pytest.raises(ValueError, match="copies must be >= 1"):
        model_server.serve(Echo, _serving("t"), copies=0)


def test_a_copy_that_is_gone_is_started_again_once(fake_copies, caplog):
    fake_copies[0] = [_Proxy("first", broken=True), _Proxy("second")]
    model = model_server.serve(Echo, _serving("qa_eval_x"))
    assert model.which() == "second"  # started again, the call repeated
    assert "qa_eval_x-0 is gone (BrokenPipeError" in caplog.text
    # gone again right after its restart: the bundle must fail, not dead-letter its rows
    fake_copies[0] = [_Proxy("third", broken=True), _Proxy("fourth", broken=True)]
    model = model_server.serve(Echo, _serving("qa_eval_y"))
    with pytest.raises(model_server.ServerGone,
                       match=r"\(qa_eval_y-0\) is gone again after a restart \(BrokenPipeError"):
        model.which()


def test_a_copy_that_cannot_start_again_names_both_causes(fake_copies):
    fake_copies[0] = [_Proxy("first", broken=True),
                      RuntimeError("Shared Server Process crashed: CUDA out of memory")]
    model = model_server.serve(Echo, _serving("qa_eval_z"))
    with pytest.raises(model_server.ServerGone,
                       match=r"\(qa_eval_z-0\) is gone \(BrokenPipeError: .*\) and could not "
                             r"be started again: RuntimeError: .*CUDA out of memory"):
        model.which()


def test_meanwhile_runs_in_the_callers_thread_and_its_error_wins(fake_copies, caplog):
    fake_copies[0] = [_Proxy("a")]
    ran = []
    model = model_server.serve(Echo, _serving("t"), meanwhile=lambda: ran.append(
        threading.current_thread()))
    assert ran == [threading.current_thread()] and model.which() == "a"

    def fails():
        raise KeyError("the caller's own start-up failed")

    fake_copies[0] = [RuntimeError("Shared Server Process crashed: no such checkpoint")]
    with pytest.raises(KeyError, match="own start-up failed"):
        model_server.serve(Echo, _serving("qa_eval_w"), meanwhile=fails)
    assert "qa_eval_w did not start either: RuntimeError" in caplog.text
    fake_copies[0] = [RuntimeError("Shared Server Process crashed: no such checkpoint")]
    with pytest.raises(RuntimeError, match="no such checkpoint"):
        model_server.serve(Echo, _serving("t"), meanwhile=lambda: None)


def test_a_model_server_gone_fails_the_window_instead_of_dead_lettering_it():
    from transforms.inference.multi_use import MultiUseModelHandler

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

def _wait_gone(pid: int, timeout_s: float = 30.0) -> None:
    """Waits until process `pid` has ended (gone, or a zombie nobody has reaped yet)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except FileNotFoundError:
            return
        multiprocessing.active_children()  # reaps a copy this process started
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still exists after {timeout_s} s")


@pytest.fixture
def served():
    """`serve` whose copies are stopped after the test (a run's end with its worker)."""
    made = []

    def serve(*args, **kwargs):
        model = model_server.serve(*args, **kwargs)
        made.append(model)
        return model

    yield serve
    for model in made:
        model.stop()


def _pid_from_another_process(serving, queue) -> None:
    queue.put(model_server.serve(Echo, serving).pid())


def _serve_in_a_daemon(serving, queue) -> None:
    model = model_server.serve(Echo, serving)
    queue.put((os.getpid(), model.pid()))
    model.stop()


@pytest.mark.slow
def test_the_model_lives_in_a_process_of_its_own(served):
    serving = model_server.new_serving("test")
    address = os.path.join(model_server.folder(), f"{serving.tag}-0.address")
    seen = []
    model = served(Echo, serving, meanwhile=lambda: seen.append(os.path.exists(address)))
    assert seen == [False]  # the caller's start-up ran before the copy was up
    server = model.pid()
    assert server != os.getpid() and os.path.exists(address)
    assert model.add(2, b=3) == 5
    # another worker of the run (another process, the same tag) reaches the same copy
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    other = ctx.Process(target=_pid_from_another_process, args=(serving, queue))
    other.start()
    assert queue.get(timeout=120) == server
    other.join()
    # another run's tag gets a copy of its own
    assert served(Echo, model_server.new_serving("test")).pid() != server


@pytest.mark.slow
def test_the_launcher_starts_a_copy_that_the_workers_join(caplog):
    """`start_serving` (the launcher of a local multi-process run) starts the copy in a
    thread; a worker that asks while it is still loading waits for it and reaches that
    copy, not one of its own. A copy that cannot start is logged there, not raised: the
    workers try again."""
    serving = model_server.new_serving("test")
    before = len(model_server._STARTED_HERE)
    starting = model_server.start_serving(functools.partial(Echo, load_s=3.0), serving)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    worker = ctx.Process(target=_pid_from_another_process, args=(serving, queue))
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
            model.stop()
    model_server.start_serving(functools.partial(Echo, "no such checkpoint: /m"),
                               model_server.new_serving("test")).join(timeout=120)
    assert len(model_server._STARTED_HERE) == before + 1
    assert "could not start the shared model" in caplog.text
    assert "no such checkpoint: /m" in caplog.text


@pytest.mark.slow
def test_a_killed_copy_is_started_again(served):
    model = served(Echo, model_server.new_serving("test"), copies=2)
    first = [model.pid(), model.pid()]
    assert len(set(first)) == 2 and os.getpid() not in first
    os.kill(first[0], signal.SIGKILL)
    _wait_gone(first[0])
    restarted = model.pid()  # copy 0 again: a new process
    assert restarted not in first and model.pid() == first[1]


@pytest.mark.slow
def test_a_model_that_cannot_load_fails_the_caller_with_its_reason():
    with pytest.raises(RuntimeError, match="no such checkpoint: /models/missing"):
        model_server.serve(functools.partial(Echo, "no such checkpoint: /models/missing"),
                           model_server.new_serving("test"))


@pytest.mark.slow
def test_a_daemonic_worker_serves_the_model_from_its_own_threads():
    # a Dask worker is daemonic, and multiprocessing lets no daemon start a process
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    worker = ctx.Process(target=_serve_in_a_daemon, args=(model_server.new_serving("test"), queue),
                         daemon=True)
    worker.start()
    worker_pid, server_pid = queue.get(timeout=120)
    worker.join()
    assert server_pid == worker_pid


@pytest.mark.slow
@pytest.mark.parametrize("authkey", [b"mps", b"not the run's key"])
def test_a_served_copy_runs_nothing_sent_without_the_runs_key(served, tmp_path, authkey):
    """Another local process that reads the copy's address and connects with Beam's
    fixed key (or any other) gets no further than the handshake: the pickle it sends is
    never loaded, and the copy goes on answering the run."""
    from multiprocessing import connection as mpc

    from transforms.inference import model_channel

    serving = model_server.new_serving("test")
    model = served(Echo, serving)
    files = model_channel.CopyFiles.of(model_server.folder(), f"{serving.tag}-0")
    address = model_channel.read_address(files)
    marker = str(tmp_path / "payload_ran")
    with pytest.raises((mpc.AuthenticationError, AssertionError)):
        mpc.Client(address.address, address.family, authkey=authkey)
    bare = mpc.Client(address.address, address.family)  # no handshake: the payload at once
    bare.send_bytes(pickle.dumps(("pid", (Planted(marker),), {})))
    with pytest.raises((EOFError, ConnectionError)):
        while True:
            bare.recv_bytes()
    assert model.add(2, b=3) == 5 and model.pid() == address.pid
    assert not os.path.exists(marker)


def _start_and_report(serving, queue) -> None:
    model = model_server.serve(Echo, serving)
    queue.put(model.pid())
    time.sleep(600)  # killed by the test


@pytest.mark.slow
def test_a_copy_ends_with_the_killed_run_that_started_it():
    from transforms.inference import model_channel

    serving = model_server.new_serving("test")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    starter = ctx.Process(target=_start_and_report, args=(serving, queue))
    starter.start()
    copy_pid = queue.get(timeout=120)
    files = model_channel.CopyFiles.of(model_server.folder(), f"{serving.tag}-0")
    assert model_channel.read_address(files).pid == copy_pid
    os.kill(starter.pid, signal.SIGKILL)  # no exit hook runs
    starter.join()
    _wait_gone(copy_pid)
    assert not os.path.exists(files.address) and not os.path.exists(files.socket)
