"""One copy of a model per machine, in a process of its own, for the worker processes there.

`--share_model_across_processes` keeps one copy of each model per machine (or
`--model_copies`) and lets every SDK worker process send it padded passes. Beam's own way
(`ModelHandler(large_model=True)`) keeps that copy in the first worker process that asks
for it, served by threads of that process. That process also reads and scores rows, so
its Python holds the GIL nearly all the time, and a torch forward pass gives up and takes
back the GIL at every operator: each time another thread is running Python, taking it
back waits for the switch interval (5 ms). Measured on the 2-core machine: a MiniLM pass
of 24 ms took 648 ms beside one busy Python thread, and a served window of 4 texts 767 ms
from a busy worker against 29 ms from a process of its own
(`tests/bench/bench_model_server.py`). The model every worker waits on ran at a fraction
of its speed.

Here each copy lives in a process that does nothing else: Beam's
`MultiProcessShared(spawn_process=True)` starts it from the first worker that asks (under
a lock between processes; the others wait for its address), and it ends with that worker
(it watches a pipe from it). The launcher of a local multi-process run starts the copies
itself while the runner starts the workers (`start_serving`); then they end with it.
Every worker process, the first included, reaches it through a proxy (public method calls
only, arguments and results pickled); its threads serve one connection each, and nothing
else runs Python there. A copy that goes away is started again once by the call that
finds it gone; a second loss fails the bundle (`ServerGone`).

A daemonic process cannot start processes (a Dask worker under its nanny is one): there
the copy is served the way Beam does it, by threads of the first worker that asks, with a
warning. Each copy's lock file stays in the temporary folder `qa_eval_served_models`
(Beam never removes it): one empty file per copy and run.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import tempfile
import threading
import uuid
from collections.abc import Callable
from typing import Any

from apache_beam.utils import multi_process_shared

logger = logging.getLogger(__name__)


def new_tag(name: str) -> str:
    """A tag for one handler's served model: the same in every worker process of a run
    (the handler is pickled with it), different for every run (runs that overlap on one
    machine each serve their own copy)."""
    return f"qa_eval_{name}_{uuid.uuid4().hex}"


class ServerGone(RuntimeError):
    """A served model's process is gone and could not be started again: not an input's
    fault, so the bundle fails (multi_use.py and run_model_metrics.py let it through)
    instead of its rows being dead-lettered one by one."""


class ServedModel:
    """A model served by `copies` processes of its own, as one object of this process.

    A public method call goes to the next copy in turn (round robin, like Beam's
    `model_copies`), its arguments and result pickled. Made once per worker process (Beam's
    per-process cache of a loaded model holds it). A copy whose connection breaks (its
    process was killed, or the worker that started it, which it does not outlive, ended)
    is started again, once per breakage, and the call repeated (the models' methods keep
    no state between calls); a second breakage raises `ServerGone`.

    A copy lives as long as the process that started it (Beam's exit hook there ends it),
    not as long as this object: in a launcher that runs several pipelines in process
    (tests, a notebook), each run's copies stay until the launcher exits.
    """

    def __init__(self, load: Callable[[], Any], tag: str, copies: int,
                 own_process: bool) -> None:
        if copies < 1:
            raise ValueError(f"copies must be >= 1, got {copies}")
        self._load = load
        self._tags = [f"{tag}-{i}" for i in range(copies)]
        self._own_process = own_process
        self._handles: list[Any] = [None] * copies
        self._proxies: list[Any] = [None] * copies
        self._turn = itertools.cycle(range(copies))
        self._lock = threading.Lock()

    @property
    def copies(self) -> int:
        return len(self._tags)

    def _connect(self, i: int) -> None:
        """Copy i's handle and proxy: started here if no process serves its tag (or the
        one that did is gone: Beam drops an address nobody answers at), else joined."""
        handle = multi_process_shared.MultiProcessShared(
            self._load, tag=self._tags[i], path=folder(), always_proxy=True,
            spawn_process=self._own_process)
        self._proxies[i] = handle.acquire()
        self._handles[i] = handle

    def _next(self) -> int:
        with self._lock:
            return next(self._turn)

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)

        def call(*args: Any, **kwargs: Any) -> Any:
            i = self._next()
            proxy = self._proxies[i]
            try:
                return getattr(proxy, method)(*args, **kwargs)
            except (EOFError, ConnectionError) as e:
                lost = f"{type(e).__name__}: {e}"
            logger.warning("the process serving %s is gone (%s); starting it again",
                           self._tags[i], lost)
            try:
                with self._lock:
                    if self._proxies[i] is proxy:  # not already replaced by another thread
                        self._connect(i)
            except Exception as e:  # noqa: BLE001 - raised as ServerGone, with the cause
                raise ServerGone(
                    f"the process serving the shared model ({self._tags[i]}) is gone "
                    f"({lost}) and could not be started again: {type(e).__name__}: "
                    f"{e}") from e
            try:
                return getattr(self._proxies[i], method)(*args, **kwargs)
            except (EOFError, ConnectionError) as e:
                raise ServerGone(
                    f"the process serving the shared model ({self._tags[i]}) is gone "
                    f"again after a restart ({type(e).__name__}: {e}): killed or crashed; "
                    "its messages are in the log of the worker that started it") from e

        return call

    def __repr__(self) -> str:
        return f"ServedModel({self.copies} copies)"


def serve(load: Callable[[], Any], tag: str, copies: int = 1,
          meanwhile: Callable[[], Any] | None = None) -> ServedModel:
    """The model that `load()` makes, in `copies` processes of its own on this machine
    (started by the first caller; later callers, from any process, connect to them).

    `load` must be picklable by the standard pickle (not Beam's): it is sent to a fresh
    interpreter, so it must be defined in an importable module. `meanwhile` runs in this
    thread while the copies are started or connected to (from another thread, which
    mostly waits for their addresses): the caller's own start-up (importing the
    tokenizer's library takes seconds) overlaps the server's.

    Raises:
        RuntimeError: a server process failed to start (its traceback in the message:
            a missing model, no GPU memory).
    """
    own_process = not _daemonic()
    if not own_process:
        logger.warning(
            "this worker process is daemonic (a Dask worker, for one) and cannot start a "
            "process for the shared model %s: it is served by this process's threads, "
            "slowly while this process scores rows (model_server.py)", tag)
    model = ServedModel(load, tag, copies, own_process)

    def connect() -> None:
        for i in range(copies):
            model._connect(i)

    if meanwhile is None:
        connect()
        return model
    failed: list[BaseException] = []

    def connect_here() -> None:
        try:
            connect()
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread below
            failed.append(e)

    thread = threading.Thread(target=connect_here, name=f"serve {tag}", daemon=True)
    thread.start()
    try:
        meanwhile()
    except BaseException:
        thread.join()
        if failed:
            logger.error("the shared model %s did not start either: %s: %s", tag,
                         type(failed[0]).__name__, failed[0])
        raise
    thread.join()
    if failed:
        raise failed[0]
    return model


# Copies this process started with `start_serving`: kept for its life (each copy ends
# with the process that started it).
_STARTED_HERE: list[ServedModel] = []


def start_serving(load: Callable[[], Any], tag: str, copies: int = 1) -> threading.Thread:
    """Starts the copies of `load()`'s model from this process now, in a thread, and
    returns the thread. For the launcher of a local multi-process run: the copies' fresh
    interpreters import torch and transformers and load the model while the runner
    starts its worker processes (seconds each), and the workers' `serve` finds their
    addresses and connects. The copies live as long as this process. A copy that fails
    to start is logged here; each worker then tries to start it itself and fails the run
    with the server's traceback, as it would have without this."""
    def start() -> None:
        try:
            _STARTED_HERE.append(serve(load, tag, copies))
        except Exception as e:  # noqa: BLE001 - the workers' own attempt reports it
            logger.warning("could not start the shared model %s from the launcher (%s: %s); "
                           "the workers will try", tag, type(e).__name__, e)

    thread = threading.Thread(target=start, name=f"start {tag}", daemon=True)
    thread.start()
    return thread


def folder() -> str:
    """Where the copies' lock and address files go (one folder of the machine's temporary
    directory; every worker of the machine finds a copy's address there by its tag)."""
    folder = os.path.join(tempfile.gettempdir(), "qa_eval_served_models")
    os.makedirs(folder, exist_ok=True)
    return folder


def _daemonic() -> bool:
    """Whether this process is daemonic (then it may not start processes)."""
    return bool(multiprocessing.current_process().daemon)
