"""One copy of a model per machine, in a process of its own, for the worker processes there.

`--share_model_across_processes` keeps one copy of each model per machine (or
`--model_copies`) and lets every SDK worker process send it padded passes. Beam's own way
(`ModelHandler(large_model=True)`) keeps that copy in the first worker process that asks
for it, served by threads of that process. That process also reads and scores rows, so
its Python holds the GIL nearly all the time, and a torch forward pass gives up and takes
back the GIL at every operator: each time another thread is running Python, taking it
back waits for the switch interval (5 ms). Measured on the 2-core machine
(`tests/bench/bench_model_server.py`): a MiniLM pass of 24 ms took 648 ms with one busy
Python thread beside it. The model every worker waits on ran at a fraction of its speed.

Here each copy lives in a process that does nothing else: Beam's
`MultiProcessShared(spawn_process=True)` starts it from the first worker that asks (under
a lock between processes; the others wait for its address), and it ends with that worker
(it watches a pipe from it). Every worker process, the first included, reaches it through
a proxy (public method calls only, arguments and results pickled); its threads serve one
connection each, and nothing else runs Python there.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
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
    """A served model's process is no longer there (a call's connection broke)."""


class ServedModel:
    """A model served by `copies` processes of its own, as one object of this process.

    A public method call goes to the next copy in turn (round robin, like Beam's
    `model_copies`), its arguments and result pickled. Made once per worker process (Beam's
    per-process cache of a loaded model holds it), and it keeps the handles whose pipe
    keeps a server alive.
    """

    def __init__(self, handles: list[Any], proxies: list[Any]) -> None:
        if not proxies:
            raise ValueError("a served model needs at least one copy")
        self._handles = handles
        self._proxies = proxies
        self._turn = itertools.cycle(proxies)
        self._lock = threading.Lock()

    @property
    def copies(self) -> int:
        return len(self._proxies)

    def _next(self) -> Any:
        with self._lock:
            return next(self._turn)

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)

        def call(*args: Any) -> Any:
            proxy = self._next()
            try:
                return getattr(proxy, method)(*args)
            except (EOFError, ConnectionError) as e:  # the server went away mid-run
                tag = self._handles[self._proxies.index(proxy)]._tag
                raise ServerGone(f"the process serving the shared model ({tag}) is gone "
                                 f"({type(e).__name__}: {e}): killed or crashed; its "
                                 "messages are in the log of the worker that started it") from e

        return call

    def __repr__(self) -> str:
        return f"ServedModel({self.copies} copies)"


def serve(load: Callable[[], Any], tag: str, copies: int = 1,
          meanwhile: Callable[[], Any] | None = None) -> ServedModel:
    """The model that `load()` makes, in `copies` processes of its own on this machine
    (started by the first caller; later callers, from any process, connect to them).

    `load` must be picklable: it runs in a fresh interpreter. `meanwhile` runs in this
    thread while the copies are started or connected to (from another thread, which
    mostly waits for their addresses): the caller's own start-up (importing the
    tokenizer's library takes seconds) overlaps the server's.

    Raises:
        RuntimeError: a server process failed to start (its traceback in the message:
            a missing model, no GPU memory).
    """
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    own_process = not _daemonic()
    if not own_process:
        logger.warning(
            "this worker process is daemonic (a Dask worker, for one) and cannot start a "
            "process for the shared model %s: it is served by this process's threads, "
            "slowly while this process scores rows (model_server.py)", tag)
    handles = [multi_process_shared.MultiProcessShared(
        load, tag=f"{tag}-{i}", always_proxy=True, spawn_process=own_process)
        for i in range(copies)]
    if meanwhile is None:
        return ServedModel(handles, [h.acquire() for h in handles])
    got: dict[str, Any] = {}

    def acquire() -> None:
        try:
            got["proxies"] = [h.acquire() for h in handles]
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread below
            got["error"] = e

    thread = threading.Thread(target=acquire, name=f"serve {tag}", daemon=True)
    thread.start()
    try:
        meanwhile()
    finally:
        thread.join()
    if "error" in got:
        raise got["error"]
    return ServedModel(handles, got["proxies"])


def _daemonic() -> bool:
    """Whether this process is daemonic (then it may not start processes)."""
    return bool(multiprocessing.current_process().daemon)
