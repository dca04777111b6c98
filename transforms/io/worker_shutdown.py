"""The FnApiRunner's worker processes stopped together, not one after another.

At the end of a run, Beam's `WorkerHandlerManager.close_all` closes its worker handlers
in turn, and closing the handler of a `--direct_running_mode=multi_processing` worker
tells that process to stop and then waits for it to exit. A scoring worker with torch
loaded takes a second or more to exit, so the run's last seconds grow with the workers:
on an H200 machine, `qa-score --metrics judge` with 8 workers wrote its summary 13 s
before the launcher could return (docs/benchmarks.md). Closed from one thread each, the
handlers still take Beam's lock in turn for the short part (the stop signal and the end
of the control stream), and the processes exit at the same time.

`stop_workers_together()` installs that on Beam's class, once per process (the method is
marked; it stays for the process: with one handler it is Beam's own). With two or more
handlers, all of them, the in-process one included, are closed from the threads, and then
Beam's own method closes the runner's gRPC servers. A Beam whose `close_all` no longer
reads the attributes this relies on is left as it is.
"""

from __future__ import annotations

import collections
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

logger = logging.getLogger(__name__)

_MARK = "_stops_workers_together"  # set on the method this module installs
_lock = threading.Lock()


def _close(handler) -> BaseException | None:
    try:
        handler.close()
    except Exception as e:  # Beam's own loop logs and goes on: so does this one
        return e
    return None


def close_handlers(handlers) -> None:
    """Closes worker handlers from one thread each; an error closing one is logged (as
    Beam's own loop does) and the others are still closed."""
    handlers = list(handlers)
    with ThreadPoolExecutor(max(len(handlers), 1), thread_name_prefix="stop_worker") as pool:
        errors = list(pool.map(_close, handlers))
    for handler, error in zip(handlers, errors):
        if error is not None:
            logger.error("Error closing worker_handler %s", handler, exc_info=error)


def stop_workers_together() -> bool:
    """Makes the FnApiRunner close its worker handlers concurrently (see the module
    docstring), once per process. Returns whether it is installed."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    manager = worker_handlers.WorkerHandlerManager
    with _lock:
        original = manager.close_all
        if getattr(original, _MARK, False):
            return True
        names = getattr(getattr(original, "__code__", None), "co_names", ())
        if not {"_cached_handlers", "_grpc_server"} <= set(names):
            logger.debug("Beam's WorkerHandlerManager changed: its workers stop in turn")
            return False

        def close_all(self) -> None:
            handlers = {h for hs in self._cached_handlers.values() for h in hs}
            if len(handlers) < 2:
                return original(self)
            try:
                close_handlers(handlers)
            finally:  # whatever happened, Beam's own method closes the gRPC servers
                self._cached_handlers = collections.defaultdict(list)
                original(self)

        close_all.__doc__ = original.__doc__
        setattr(close_all, _MARK, True)
        manager.close_all = close_all
    return True
