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

Here each copy lives in a process that does nothing else, started from the first worker
that asks (under a lock between processes; the others wait for its address), and it ends
with that worker (it watches a pipe from it). The launcher of a local multi-process run
starts the copies itself while the runner starts the workers (`start_serving`); then they
end with it. Every worker process, the first included, reaches a copy through a
`model_channel.Channel` (public method calls only, arguments and results pickled, one
connection per thread); the copy's threads serve one connection each, and nothing else
runs Python there. A copy that goes away is started again once by the call that finds it
gone; a second loss fails the bundle (`ServerGone`).

Only the run reaches its copies: they listen in this user's private folder (0700) and
every connection proves the run's random key before anything it sends is unpickled
(model_channel.py; Beam's `MultiProcessShared` listens on a TCP port with a fixed key and
writes its address to a folder every user can read, so it is not used). Two runs never
share a copy. A copy's files are removed when it or the process that started it ends, and
the next run on the machine removes what a killed one left (`model_channel.sweep`).

A daemonic process cannot start processes (a Dask worker under its nanny is one): there
the copy is served the way Beam does it, by threads of the first worker that asks, with a
warning.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import fasteners

from transforms.inference import model_channel
from transforms.inference.model_channel import Channel, CopyFiles, Serving
from transforms.io.private_folder import private_folder, remove_quietly, write_private

logger = logging.getLogger(__name__)

FOLDER_NAME = "qa_eval_served_models"


def new_serving(name: str) -> Serving:
    """A served model's tag and key: the same in every worker process of a run (the
    handler is pickled with it), different for every run and handler."""
    return Serving(name)


class ServerGone(RuntimeError):
    """A served model's process is gone and could not be started again: not an input's
    fault, so the bundle fails (multi_use.py and batch_model_handler.py let it through)
    instead of its rows being dead-lettered one by one."""


class ServedModel:
    """A model served by `copies` processes of its own, as one object of this process.

    A public method call goes to the next copy in turn (round robin, like Beam's
    `model_copies`), its arguments and result pickled. Made once per worker process (Beam's
    per-process cache of a loaded model holds it). A copy whose connection breaks (its
    process was killed, or the worker that started it, which it does not outlive, ended)
    is started again, once per breakage, and the call repeated (the models' methods keep
    no state between calls); a second breakage raises `ServerGone`.

    A copy lives as long as the process that started it (an exit hook there ends it),
    not as long as this object: in a launcher that runs several pipelines in process
    (tests, a notebook), each run's copies stay until the launcher exits.
    """

    def __init__(self, load: Callable[[], Any], serving: Serving, copies: int,
                 own_process: bool) -> None:
        if copies < 1:
            raise ValueError(f"copies must be >= 1, got {copies}")
        self._load = load
        self._serving = serving
        self._tags = [f"{serving.tag}-{i}" for i in range(copies)]
        self._own_process = own_process
        self._proxies: list[Any] = [None] * copies
        self._turn = itertools.cycle(range(copies))
        self._lock = threading.Lock()

    @property
    def copies(self) -> int:
        return len(self._tags)

    def _connect(self, i: int) -> None:
        """Copy i's channel: joined if a live copy that proves the run's key serves its
        tag, else started here (in a process of its own, or in this one's threads)."""
        files = CopyFiles.of(folder(), self._tags[i])
        key = self._serving.key
        with _STARTING, fasteners.InterProcessLock(files.lock):
            channel = model_channel.join(files, key)
            if channel is None:
                if self._own_process:
                    _start_process(files, self._load, key)
                else:
                    _serve_in_threads(files, self._load, key)
                channel = model_channel.join(files, key)
            if channel is None:
                raise RuntimeError(f"the shared model {self._tags[i]} started but does not "
                                   "answer at its address")
        self._proxies[i] = channel

    def stop(self) -> None:
        """Asks every copy to end now (each removes its files); one already gone is
        skipped. The copies otherwise end with the process that started them."""
        for tag, proxy in zip(self._tags, self._proxies):
            if isinstance(proxy, Channel):
                try:
                    proxy._call(model_channel.STOP)
                except (EOFError, OSError) as e:
                    logger.debug("%s already gone: %s", tag, e)

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
            except (EOFError, ConnectionError) as e:  # the copy's process is gone
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


def serve(load: Callable[[], Any], serving: Serving, copies: int = 1,
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
            "slowly while this process scores rows (model_server.py)", serving.tag)
    model = ServedModel(load, serving, copies, own_process)

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

    thread = threading.Thread(target=connect_here, name=f"serve {serving.tag}", daemon=True)
    thread.start()
    try:
        meanwhile()
    except BaseException:
        thread.join()
        if failed:
            logger.error("the shared model %s did not start either: %s: %s", serving.tag,
                         type(failed[0]).__name__, failed[0])
        raise
    thread.join()
    if failed:
        raise failed[0]
    return model


# Copies this process started with `start_serving`: kept for its life (each copy ends
# with the process that started it).
_STARTED_HERE: list[ServedModel] = []


def start_serving(load: Callable[[], Any], serving: Serving,
                  copies: int = 1) -> threading.Thread:
    """Starts the copies of `load()`'s model from this process now, in a thread, and
    returns the thread. For the launcher of a local multi-process run: the copies' fresh
    interpreters import torch and transformers and load the model while the runner
    starts its worker processes (seconds each), and the workers' `serve` finds their
    addresses and connects. The copies live as long as this process. A copy that fails
    to start is logged here; each worker then tries to start it itself and fails the run
    with the server's traceback, as it would have without this."""
    def start() -> None:
        try:
            _STARTED_HERE.append(serve(load, serving, copies))
        except Exception as e:  # noqa: BLE001 - the workers' own attempt reports it
            logger.warning("could not start the shared model %s from the launcher (%s: %s); "
                           "the workers will try", serving.tag, type(e).__name__, e)

    thread = threading.Thread(target=start, name=f"start {serving.tag}", daemon=True)
    thread.start()
    return thread


def folder() -> str:
    """This user's private folder for the copies' files (`private_folder`), made if
    missing and checked at every call; what dead runs left there is swept once per
    process.

    Raises:
        PrivateFolderError: the folder exists and is a link, another user's, or open to
            others.
    """
    path = private_folder(FOLDER_NAME)
    global _SWEPT
    if not _SWEPT:
        _SWEPT = True
        swept = model_channel.sweep(path)
        if swept:
            logger.info("removed the files of %d shared model copies that dead runs left "
                        "in %s", swept, path)
    return path


_SWEPT = False
# One thread of this process at a time starts or joins a copy (the file lock between
# processes is not one between threads).
_STARTING = threading.Lock()
# How long a starting copy may take to write its address (loading a large model from a
# slow disk; each half minute without it is logged).
_START_LOG_S = 30.0


def _start_process(files: CopyFiles, load: Callable[[], Any], key: bytes) -> None:
    """Starts a copy in a fresh interpreter that ends with this process (it watches a
    pipe from it) and waits for its address.

    Raises:
        RuntimeError: the copy could not start (its traceback in the message: a
            missing model, no GPU memory) or died starting.
    """
    files.remove()
    ctx = multiprocessing.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_run_copy, args=(files, load, key, reader), daemon=False,
                          name=f"served {os.path.basename(files.lock)[:-5]}")
    process.start()
    reader.close()
    atexit.register(_end_copy, process, writer, files)
    started, logged = time.monotonic(), time.monotonic()
    while not os.path.exists(files.address):
        if os.path.exists(files.error):
            with open(files.error) as f:
                message = f.read()
            remove_quietly(files.error)
            process.join(timeout=5)
            raise RuntimeError(f"Shared Server Process crashed:\n{message}")
        if not process.is_alive():
            raise RuntimeError(f"Shared Server Process died unexpectedly with exit code "
                               f"{process.exitcode}")
        if time.monotonic() - logged > _START_LOG_S:
            logged = time.monotonic()
            logger.info("still waiting for %s to load (%.0f s)", files.address,
                        logged - started)
        time.sleep(0.05)
    multiprocessing.active_children()  # reaps copies that ended earlier


def _end_copy(process: Any, life_line: Any, files: CopyFiles) -> None:
    """At this process's exit: the copy it started ends, and its files go."""
    life_line.close()
    if process.is_alive():
        process.terminate()
        process.join(timeout=10)
    files.remove()
    remove_quietly(files.lock)


def _run_copy(files: CopyFiles, load: Callable[[], Any], key: bytes, life_line: Any) -> None:
    """A copy's process: loads the model, listens, and serves until the process that
    started it ends (or a caller with the key asks it to stop)."""
    def end(status: int = 0) -> None:
        files.remove()
        os._exit(status)

    def watch() -> None:
        try:
            life_line.recv_bytes()
        except (EOFError, OSError):
            pass
        end()

    threading.Thread(target=watch, daemon=True, name="watch the starter").start()
    try:
        server = model_channel.ChannelServer(load(), key, files)
        server.publish()
    except BaseException:  # noqa: BLE001 - reported to the starter, which raises it
        write_private(files.error, traceback.format_exc().encode())
        os._exit(1)
    server.serve_forever(on_stop=end)


def _serve_in_threads(files: CopyFiles, load: Callable[[], Any], key: bytes) -> None:
    """Serves a copy from threads of this process (one that may not start processes);
    it lives as long as this process."""
    files.remove()
    server = model_channel.ChannelServer(load(), key, files)

    def stop() -> None:
        server.close()
        files.remove()

    server.publish()
    atexit.register(files.remove)
    threading.Thread(target=server.serve_forever, args=(stop,), daemon=True,
                     name=f"serve {files.address}").start()


def _daemonic() -> bool:
    """Whether this process is daemonic (then it may not start processes)."""
    return bool(multiprocessing.current_process().daemon)
