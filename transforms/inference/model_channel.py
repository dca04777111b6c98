"""The wire between a served model and the processes of its run (model_server.py).

Each served copy listens on a Unix socket in this user's private folder
(`transforms/io/private_folder.py`: mode 0700, so no other user can even connect), or on
127.0.0.1 where the socket's path would be too long. Every connection proves the run's
key before anything else is read from it, both ways: the copy sends a random challenge
and checks the HMAC the caller returns with the key, then answers the caller's own
challenge (`multiprocessing.connection`'s handshake, raw bytes, no pickle). A connection
that fails is closed and counted, and nothing it sent is unpickled; a caller that finds
a copy which cannot prove the key (a planted address file) does not use it. The key is
32 random bytes (`secrets`) made with the handler in the launcher and carried to the
workers inside the pickled handler (`Serving`); it never appears in a log, a file name
or a command line.

After the handshake a caller sends `(method, args, kwargs)` and gets `("ok", result)` or
`("error", exception)`, pickled; only public methods are called.

Files of copy `<tag>-<i>` in the folder: `.address` (JSON: family, address, pid of the
serving process; written whole, mode 0600), `.sock`, `.lock` (held while a copy starts),
`.error` (a copy's traceback when it could not start). `sweep` removes what a dead run
left: the files of a copy whose serving process is gone, and files no live process uses.
"""

from __future__ import annotations

import functools
import json
import logging
import multiprocessing
import os
import secrets
import threading
import time
import uuid
from multiprocessing import connection as mpc
from typing import Any, NamedTuple

import fasteners

from transforms.io.private_folder import remove_quietly, write_private

logger = logging.getLogger(__name__)

KEY_BYTES = 32
# Longest Unix socket path used (Linux allows 107 bytes, macOS 103); past it, TCP on
# 127.0.0.1, still behind the key.
MAX_SOCKET_PATH = 100
# A copy's files untouched this long, with no process serving or starting it, are a dead
# run's (a copy being started holds its lock; a served one names its live process).
STALE_S = 600.0
STOP = "__stop__"


class Serving:
    """One handler's served model in one run: the tag that names its copies' files and
    the key every connection to them must prove. Made in the launcher, pickled into the
    pipeline with its handler; the key never shows in `repr`."""

    def __init__(self, name: str) -> None:
        self.tag = f"qa_eval_{name}_{uuid.uuid4().hex}"
        self.key = secrets.token_bytes(KEY_BYTES)

    def __repr__(self) -> str:
        return f"Serving({self.tag!r})"


class CopyFiles(NamedTuple):
    """The paths of one copy's files."""

    address: str
    socket: str
    lock: str
    error: str

    @classmethod
    def of(cls, folder: str, name: str) -> CopyFiles:
        base = os.path.join(folder, name)
        return cls(f"{base}.address", f"{base}.sock", f"{base}.lock", f"{base}.error")

    def remove(self) -> None:
        remove_quietly(self.address, self.socket, self.error)


class Address(NamedTuple):
    """Where a copy listens, and the process that serves it."""

    family: str
    address: Any
    pid: int


def read_address(files: CopyFiles) -> Address | None:
    """The copy's address, or None when there is none (or it is not one of ours: the
    file is then removed)."""
    try:
        with open(files.address, "rb") as f:
            fields = json.loads(f.read())
        family, address, pid = fields["family"], fields["address"], int(fields["pid"])
        if family == "AF_INET":
            address = (str(address[0]), int(address[1]))
        elif family != "AF_UNIX" or address != files.socket:
            raise ValueError(f"unexpected address {family} {address!r}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        logger.warning("ignoring the unreadable address file %s (%s: %s)", files.address,
                       type(e).__name__, e)
        remove_quietly(files.address)
        return None
    return Address(family, address, pid)


def alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


class ChannelServer:
    """Serves `obj`'s public methods to the connections that prove `key`."""

    def __init__(self, obj: Any, key: bytes, files: CopyFiles) -> None:
        self._obj, self._key, self._files = obj, key, files
        remove_quietly(files.socket)
        if len(files.socket) <= MAX_SOCKET_PATH:
            self._family = "AF_UNIX"
            self._listener = mpc.Listener(files.socket, self._family, backlog=64)
            os.chmod(files.socket, 0o600)
        else:
            self._family = "AF_INET"
            self._listener = mpc.Listener(("127.0.0.1", 0), self._family, backlog=64)
        self.refused = 0
        self._closed = False

    def publish(self) -> None:
        """Writes the address file (after which callers find this copy)."""
        fields = {"family": self._family, "address": self._listener.address,
                  "pid": os.getpid()}
        write_private(self._files.address, json.dumps(fields).encode())

    def serve_forever(self, on_stop: Any) -> None:
        """Accepts connections until `close`, each served by a thread of its own;
        `on_stop()` runs when a caller with the key asks this copy to stop."""
        while True:
            try:
                conn = self._listener.accept()
            except OSError:
                return
            if self._closed:
                conn.close()
                return
            threading.Thread(target=self._serve, args=(conn, on_stop), daemon=True,
                             name="served connection").start()

    def close(self) -> None:
        """Stops accepting connections (those open are served to their end)."""
        if self._closed:
            return
        self._closed = True
        address = self._listener.address
        self._listener.close()
        try:  # wakes `accept`, which closing the socket does not interrupt
            mpc.Client(address, self._family).close()
        except OSError:
            pass

    def _serve(self, conn: mpc.Connection, on_stop: Any) -> None:
        with conn:
            try:
                mpc.deliver_challenge(conn, self._key)
                mpc.answer_challenge(conn, self._key)
            except (mpc.AuthenticationError, AssertionError, EOFError, OSError) as e:
                # (before Python 3.12 a message that is no challenge fails an assert)
                logger.warning("%s: refused a connection that did not prove this run's key "
                               "(%s: %s); nothing it sent was read", self._files.address,
                               type(e).__name__, e)
                self.refused += 1
                return
            while True:
                try:
                    method, args, kwargs = conn.recv()
                except (EOFError, OSError):
                    return
                except Exception as e:  # noqa: BLE001 - a caller's bad message: its end
                    logger.warning("closing a connection that sent a bad message (%s: %s)",
                                   type(e).__name__, e)
                    return
                if method == STOP:
                    conn.send(("ok", None))
                    on_stop()
                    return
                self._answer(conn, method, args, kwargs)

    def _answer(self, conn: mpc.Connection, method: Any, args: Any, kwargs: Any) -> None:
        try:
            if not isinstance(method, str) or method.startswith("_"):
                raise AttributeError(f"no public method {method!r}")
            reply: tuple[str, Any] = ("ok", getattr(self._obj, method)(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - the caller's exception, raised there
            reply = ("error", e)
        try:
            conn.send(reply)
        except (OSError, EOFError):
            raise
        except Exception as e:  # noqa: BLE001 - an answer that cannot be pickled
            conn.send(("error", RuntimeError(
                f"the served model's answer to {method} could not be sent: "
                f"{type(e).__name__}: {e}")))


class CopyLost(ConnectionError):
    """A copy's connection failed: its process is gone (not an error of the call)."""


class Channel:
    """A caller's end of one copy: one authenticated connection per thread. Every public
    attribute is a method of the served object (this class's own are private)."""

    def __init__(self, address: Address, key: bytes) -> None:
        self._address = address
        self._key = key
        self._local = threading.local()

    def _open(self) -> None:
        """Connects this thread (proving the key both ways) unless it is connected.

        Raises:
            AuthenticationError (AssertionError before Python 3.12): whatever listens
                there does not hold the key.
            OSError, EOFError: nothing listens there any more.
        """
        if getattr(self._local, "conn", None) is None:
            self._local.conn = mpc.Client(self._address.address, self._address.family,
                                          authkey=self._key)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """`method(*args, **kwargs)` on the served object; its exception is raised here.

        Raises:
            CopyLost: the copy's process is gone (or went away during the call).
        """
        try:
            self._open()
        except (OSError, EOFError) as e:
            raise CopyLost(f"{type(e).__name__}: {e}") from e
        conn = self._local.conn
        try:
            conn.send((method, args, kwargs))
            status, value = conn.recv()
        except BaseException as e:
            self._local.conn = None
            conn.close()
            if isinstance(e, (OSError, EOFError)):
                raise CopyLost(f"{type(e).__name__}: {e}") from e
            raise
        if status == "error":
            raise value
        return value

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)
        return functools.partial(self._call, method)


def join(files: CopyFiles, key: bytes, wait_s: float = 5.0) -> Channel | None:
    """A channel to the copy that `files` names, connected in this thread, or None when
    there is no live copy there (its files are then removed) or it cannot prove the key
    (a planted or foreign address: removed, with a warning)."""
    address = read_address(files)
    if address is None:
        return None
    channel = Channel(address, key)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            channel._open()
            return channel
        except (mpc.AuthenticationError, AssertionError) as e:
            # (before Python 3.12 a message that is no challenge fails an assert)
            logger.warning("%s names a server that does not hold this run's key (%s); "
                           "not used, and removed", files.address, e)
        except (OSError, EOFError) as e:
            multiprocessing.active_children()  # a copy this process started and lost: reaped
            if alive(address.pid) and time.monotonic() < deadline:
                time.sleep(0.05)  # a live copy that is busy accepting
                continue
            logger.info("no copy answers at %s (%s: %s)", files.address, type(e).__name__, e)
        files.remove()
        return None


def sweep(folder: str) -> int:
    """Removes what dead runs left in `folder`: the files of copies whose serving
    process is gone, and files older than `STALE_S` that no process serves or is
    starting (their lock is free). Returns how many copies were swept."""
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    swept = 0
    now = time.time()
    for base in sorted({n.rsplit(".", 1)[0] for n in names if not n.startswith(".")}):
        files = CopyFiles.of(folder, base)
        address = read_address(files)
        if address is not None:
            if alive(address.pid):
                continue
            files.remove()
            remove_quietly(files.lock)
            swept += 1
            continue
        paths = [os.path.join(folder, n) for n in names if n.rsplit(".", 1)[0] == base]
        if any(_age(p, now) < STALE_S for p in paths):
            continue
        lock = fasteners.InterProcessLock(files.lock)
        if lock.acquire(blocking=False):
            try:
                remove_quietly(*paths)
            finally:
                lock.release()
            swept += 1
    return swept


def _age(path: str, now: float) -> float:
    try:
        return now - os.lstat(path).st_mtime
    except OSError:
        return float("inf")
