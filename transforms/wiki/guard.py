"""A time limit for calls that may never return (the parser on a pathological page).

`mwparserfromhell`'s C tokenizer holds the GIL, so a thread cannot interrupt it; the
guarded call runs in a child process that is killed when the limit passes. The child is
started on first use and reused, so only pages that take the guarded path pay for it. A
child that dies during a call is replaced and the call raises `CallCrashed`, so that a page
that crashes the parser costs that page only; unless a fresh child cannot run at all,
which is no fault of the page and raises.
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class CallTimedOut(TimeoutError):
    """The guarded call did not finish within its time limit."""


class CallCrashed(RuntimeError):
    """The child process died during the guarded call (a crash in the parser's C code, or
    killed by the system, e.g. for memory)."""


def _alive() -> bool:
    return True


class TimeLimitedCaller:
    """Runs a module-level function in a reusable child process with a time limit.

    Args:
        timeout_s: the limit per call, in seconds.
    Raises:
        ValueError: `timeout_s` is not positive.
    """

    def __init__(self, timeout_s: float):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self._timeout_s = timeout_s
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def __getstate__(self):
        return {"_timeout_s": self._timeout_s, "_pool": None}

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            # spawn: a forked copy of a multi-threaded Beam worker is not safe.
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Returns `fn(*args)`, re-raising its exception.

        Raises:
            CallTimedOut: the call took longer than the limit (the child is killed).
            CallCrashed: the child died during the call (a fresh one serves the next).
            RuntimeError: the child died, and a fresh one cannot run a trivial call
                either: the fault is not the call's, and must not be blamed on it.
        """
        future = self._executor().submit(fn, *args)
        try:
            return future.result(timeout=self._timeout_s)
        except concurrent.futures.TimeoutError as e:
            self.close(kill=True)
            raise CallTimedOut(f"call did not finish within {self._timeout_s} s") from e
        except concurrent.futures.process.BrokenProcessPool as e:
            self.close(kill=True)
            self._check_a_child_runs()
            raise CallCrashed(f"the child process died during the call: {e}") from e

    def _check_a_child_runs(self, timeout_s: float = 120.0) -> None:
        try:
            self._executor().submit(_alive).result(timeout=timeout_s)
        except (concurrent.futures.TimeoutError,
                concurrent.futures.process.BrokenProcessPool) as e:
            self.close(kill=True)
            raise RuntimeError(
                "the time guard's child process cannot run a trivial call") from e

    def close(self, kill: bool = False) -> None:
        """Stops the child process (killing it when `kill`)."""
        if self._pool is None:
            return
        if kill:
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.kill()
        self._pool.shutdown(wait=not kill, cancel_futures=True)
        self._pool = None
