"""A shared model in processes of its own (model_server.py): where it runs, its copies in
turn, a constructor that fails, and the caller's start-up overlapping the server's."""

from __future__ import annotations

import contextlib
import os
import threading
import time

import pytest

from transforms.scoring import model_server

pytestmark = pytest.mark.slow  # each copy is a fresh interpreter


class Echo:
    """A stand-in model: says which process it lives in."""

    def __init__(self, fail: str | None = None) -> None:
        if fail:
            raise ValueError(fail)

    def pid(self) -> int:
        return os.getpid()

    def add(self, a: int, b: int) -> int:
        return a + b


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
        for handle in model._handles:
            if handle._tag not in stopped:  # the server exits before it answers
                stopped.add(handle._tag)
                with contextlib.suppress(EOFError, ConnectionError):
                    handle.unsafe_hard_delete()


def test_the_model_lives_in_a_process_of_its_own(served):
    tag = model_server.new_tag("test")
    model = served(Echo, tag)
    assert model.copies == 1
    server = model.pid()
    assert server != os.getpid()
    assert model.add(2, 3) == 5
    # another caller with the same tag (another worker of the run) reaches the same copy
    assert served(Echo, tag).pid() == server
    # another run's tag gets a copy of its own
    assert served(Echo, model_server.new_tag("test")).pid() != server
    with pytest.raises(AttributeError):
        model._private  # noqa: B018 - only public methods are forwarded


def test_a_server_that_is_gone_is_named_in_the_error(served):
    model = served(Echo, model_server.new_tag("test"))
    assert model.add(1, 2) == 3
    with contextlib.suppress(EOFError, ConnectionError):
        model._handles[0].unsafe_hard_delete()  # the server exits before it answers
    with pytest.raises(model_server.ServerGone, match=r"process serving the shared model "
                       r"\(qa_eval_test_\w+-0\) is gone \((EOFError|\w+Error)"):
        model.add(1, 2)


def test_a_daemonic_worker_serves_the_model_from_its_own_threads(served, monkeypatch, caplog):
    # a daemonic process may not start processes (multiprocessing refuses): Beam's way
    monkeypatch.setattr(model_server, "_daemonic", lambda: True)
    model = served(Echo, model_server.new_tag("test"))
    assert model.pid() == os.getpid() and model.add(2, 2) == 4
    assert "daemonic" in caplog.text


def test_copies_answer_in_turn(served):
    model = served(Echo, model_server.new_tag("test"), copies=2)
    pids = [model.pid() for _ in range(4)]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert pids[0] == pids[2] and pids[1] == pids[3]
    with pytest.raises(ValueError, match="copies must be >= 1"):
        model_server.serve(Echo, model_server.new_tag("test"), copies=0)


def test_a_model_that_cannot_load_fails_the_caller_with_its_reason():
    import functools
    with pytest.raises(RuntimeError, match="no such checkpoint: /models/missing"):
        model_server.serve(functools.partial(Echo, "no such checkpoint: /models/missing"),
                           model_server.new_tag("test"))
    # the same with the caller's own start-up running meanwhile
    with pytest.raises(RuntimeError, match="no such checkpoint"):
        model_server.serve(functools.partial(Echo, "no such checkpoint"),
                           model_server.new_tag("test"), meanwhile=lambda: None)


def test_meanwhile_runs_here_while_the_copy_starts(served):
    seen = {}

    def meanwhile():
        seen["thread"] = threading.current_thread()
        # the server is being started by the other thread: its address is not there yet
        seen["started"] = time.monotonic()

    started = time.monotonic()
    model = served(Echo, model_server.new_tag("test"), meanwhile=meanwhile)
    assert seen["thread"] is threading.current_thread()
    assert seen["started"] - started < 1.0  # did not wait for the copy (seconds to start)
    assert model.add(1, 1) == 2

    def fails():
        raise KeyError("the caller's own start-up failed")

    with pytest.raises(KeyError, match="own start-up failed"):
        served(Echo, model_server.new_tag("test"), meanwhile=fails)
