"""One owner per output: a run takes its output prefix (scoring), its output folder
(mining) and its saved statistics file before it builds a pipeline, holds them while it
runs and publishes, and gives them back at the end; a second run that finds one owned
fails at once (`OutputOwnedError`, a `UsageError`: exit status 2) and touches nothing.

The owner is written in a lock file beside the output: `<prefix>.lock` for a file prefix
or a file, `<folder>/.lock` for a folder. It holds the owner's host, process id, run id,
start time and a heartbeat, which a thread of the launcher refreshes every
`HEARTBEAT_S` seconds. An owner is stale, and its lock taken over with a warning, when it
is on this host and its process is gone (killed), or when its heartbeat is older than
`STALE_AFTER_S` (a machine lost, a process on another host).

How the lock is created atomically:
- On a local (or mounted) disk: the owner is written to a file of the run's own, then
  hard-linked to the lock's name (`os.link` fails when the name exists: two runs cannot
  both create it, and the lock never exists half-written).
- On object stores (GCS, S3, ...: Beam's `FileSystems` offers no create-if-absent) each
  run writes a claim of its own, `<lock>-<run id>`, then lists the claims: it owns the
  output only when its claim is the one live claim listed. Both GCS and S3 list
  strongly consistently, so two runs cannot both list only their own claim (each wrote
  its claim before listing: whichever lists second sees the other's). Two runs that start
  within the same moment may both see two claims; both withdraw, wait a random second or
  two and try again, so one of them gets the output (after `CLAIM_TRIES` tries the run
  is refused, never let in).

A run that was stalled past the stale bound (a suspended machine) may find its output
taken over; the publishing step checks ownership (`check_owner`) just before it moves
anything, so such a run fails instead of publishing over the new owner's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import socket
import threading
import time
import uuid
from typing import Any

from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem

from transforms.io.cli import UsageError
from transforms.io.lock_owner import STALE_AFTER_S, Owner, stale_reason

logger = logging.getLogger(__name__)

HEARTBEAT_S = 30.0
# Object stores: claims of two runs started together; tries before a run is refused.
CLAIM_TRIES = 4
# Object stores: a claim younger than this (by its start) is a contender, not an owner.
CONTENDER_S = 10.0


class OutputOwnedError(UsageError):
    """The output is owned by another run that is alive: this run is refused (exit 2)."""


class OwnershipLostError(RuntimeError):
    """The output is no longer owned by this run (taken over as stale while it ran)."""


def lock_path(target: str, folder: bool = False) -> str:
    """The lock file of an output: `<target>.lock`, or `<target>/.lock` for a folder."""
    if folder:
        return FileSystems.join(target.rstrip("/") or target, ".lock")
    return f"{target}.lock"


def _is_local(path: str) -> bool:
    return isinstance(FileSystems.get_filesystem(path), LocalFileSystem)


def file_metadata(path: str) -> Any | None:
    """`FileSystems`' metadata of one file (size, modification time), or None when it does
    not exist."""
    try:
        matched = FileSystems.match([path])[0].metadata_list
    except Exception:  # noqa: BLE001 - a missing file is "no match" on some stores
        return None
    return matched[0] if matched else None


def _read(path: str) -> tuple[Owner | None, float | None] | None:
    """(owner, modification time) of a lock or claim; None when it does not exist."""
    found = file_metadata(path)
    if found is None:
        return None
    modified = getattr(found, "last_updated_in_seconds", None) or None
    try:
        with FileSystems.open(path) as f:  # .lock, -<hex run id>: no compressed name
            data = f.read()
    except (FileNotFoundError, OSError):
        return None if not FileSystems.exists(path) else (None, modified)
    try:
        return Owner.from_json(data), modified
    except (ValueError, TypeError, UnicodeDecodeError):
        return None, modified


def _write(path: str, owner: Owner) -> None:
    with FileSystems.create(path, mime_type="application/json") as f:
        f.write(owner.to_json())


class OutputLock:
    """The ownership of one output for one run: `acquire` (or `with`), `release`.

    Args:
        target: the output (a file prefix, a file or a folder).
        run_id: the run's id (also in its temporary file names).
        folder: the target is a folder (the lock goes inside it).
        what: how error messages name the output (e.g. "--output out/run").
        command: the program, recorded in the lock.
        stale_after_s, heartbeat_s: see the module docstring.
        atomic_create: None to choose by file system (local disk: create-if-absent by
            hard link; elsewhere the claim protocol); False forces the claim protocol.
    """

    def __init__(self, target: str, run_id: str, folder: bool = False, what: str = "",
                 command: str = "", stale_after_s: float = STALE_AFTER_S,
                 heartbeat_s: float = HEARTBEAT_S, atomic_create: bool | None = None):
        self.target = target
        self.run_id = run_id
        self.path = lock_path(target, folder)
        self.what = what or target
        self._command = command
        self._stale_after_s = stale_after_s
        self._heartbeat_s = heartbeat_s
        self._atomic = _is_local(self.path) if atomic_create is None else atomic_create
        self._claim = self.path if self._atomic else f"{self.path}-{run_id}"
        self._owner: Owner | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._owner is not None

    def _new_owner(self) -> Owner:
        now = time.time()
        return Owner(self.run_id, socket.gethostname(), os.getpid(), now, now,
                     self._command, self.target)

    def _refuse(self, owner: Owner | None, path: str) -> OutputOwnedError:
        now = time.time()
        holder = owner.describe(now) if owner else "an owner whose lock cannot be read"
        return OutputOwnedError(
            f"{self.what} is in use by another run ({holder}): this run is refused and "
            f"changed nothing. Wait for it to end; if it is dead, its lock {path} counts "
            f"as stale {self._stale_after_s:.0f} s after its last heartbeat (or at once "
            "on its own host), or delete that file")

    def acquire(self) -> OutputLock:
        """Takes the output, or raises `OutputOwnedError` naming its live owner."""
        parent = FileSystems.split(self.path)[0]
        if parent and not FileSystems.exists(parent):
            try:
                FileSystems.mkdirs(parent)
            except OSError:
                if not FileSystems.exists(parent):
                    raise
        if self._atomic:
            self._acquire_local()
        else:
            self._acquire_by_claims()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat {self.path}",
                                        daemon=True)
        self._thread.start()
        logger.debug("this run (%s) owns %s until it ends (%s)", self.run_id, self.what,
                     self.path)
        return self

    def _acquire_local(self) -> None:
        owner = self._new_owner()
        own = f"{self.path}.claim-{self.run_id}"
        _write(own, owner)
        try:
            for _ in range(3):  # a stale lock taken over by another run meanwhile: again
                try:
                    os.link(own, self.path)
                    self._owner = owner
                    return
                except FileExistsError:
                    pass
                found = _read(self.path)
                if found is None:
                    continue  # released meanwhile
                holder, modified = found
                reason = stale_reason(holder, modified, time.time(), self._stale_after_s)
                if reason is None:
                    raise self._refuse(holder, self.path)
                self._remove_stale_local(holder, reason)
            found = _read(self.path)
            raise self._refuse(found[0] if found else None, self.path)
        finally:
            os.unlink(own)

    def _remove_stale_local(self, holder: Owner | None, reason: str) -> None:
        """Moves a stale lock out of the way (a rename: one run succeeds), and puts it back
        if what was moved turns out to be another run's fresh lock."""
        moved = f"{self.path}.stale-{self.run_id}"
        try:
            os.rename(self.path, moved)
        except FileNotFoundError:
            return
        found = _read(moved)
        taken = found[0] if found else None
        if holder is not None and (taken is None or taken.run_id != holder.run_id):
            try:  # a lock created after we judged the old one: not ours to remove
                os.link(moved, self.path)
            except FileExistsError:
                pass
            os.unlink(moved)
            return
        os.unlink(moved)
        logger.warning("%s was owned by %s, taken for dead: %s; taking it over",
                       self.what, holder.describe(time.time()) if holder else
                       "an unreadable lock", reason)

    def _claims(self) -> list[str]:
        matched = FileSystems.match([f"{self.path}-*"])[0].metadata_list
        return sorted(m.path for m in matched)

    def _acquire_by_claims(self) -> None:
        for attempt in range(CLAIM_TRIES):
            owner = self._new_owner()
            _write(self._claim, owner)
            live: list[Owner | None] = []
            for claim in self._claims():
                if claim == self._claim:
                    continue
                found = _read(claim)
                if found is None:
                    continue
                holder, modified = found
                reason = stale_reason(holder, modified, time.time(), self._stale_after_s)
                if reason is None:
                    live.append(holder)
                    continue
                logger.warning("%s was claimed by %s, taken for dead: %s; removing its "
                               "claim %s", self.what, holder.describe(time.time())
                               if holder else "an unreadable claim", reason, claim)
                FileSystems.delete([claim])
            if not live:
                self._owner = owner
                return
            FileSystems.delete([self._claim])
            contenders = [h for h in live if h is not None
                          and time.time() - h.started_at < CONTENDER_S]
            if len(contenders) < len(live) or attempt == CLAIM_TRIES - 1:
                raise self._refuse(live[0], f"{self.path}-{live[0].run_id}"
                                   if live[0] else self.path)
            time.sleep(random.uniform(0.5, 2.0))  # both withdrew: try again, apart
        raise AssertionError("unreachable")

    def _beat(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            try:
                self.heartbeat()
            except Exception as e:  # noqa: BLE001 - a missed beat is retried; publish checks
                logger.warning("could not refresh the lock %s: %s", self._claim, e)

    def heartbeat(self) -> None:
        """Refreshes the lock's heartbeat, if it still names this run."""
        found = _read(self._claim)
        if self._owner is None or found is None or found[0] is None or \
                found[0].run_id != self.run_id:
            logger.warning("%s is no longer owned by this run (its lock %s was taken over)",
                           self.what, self._claim)
            return
        self._owner = dataclasses.replace(self._owner, heartbeat_at=time.time())
        if self._atomic:
            os.utime(self._claim)
        else:
            _write(self._claim, self._owner)

    def release(self) -> None:
        """Gives the output back (removes the lock if it still names this run)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._owner is None:
            return
        self._owner = None
        found = _read(self._claim)
        if found is not None and found[0] is not None and found[0].run_id == self.run_id:
            try:
                FileSystems.delete([self._claim])
            except Exception as e:  # noqa: BLE001 - a leftover lock goes stale on its own
                logger.warning("could not remove the lock %s: %s", self._claim, e)

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


def owner_of(target: str, folder: bool = False) -> str | None:
    """The run id that owns an output now (None: none, or more than one claim)."""
    path = lock_path(target, folder)
    found = _read(path)
    if found is not None:
        return found[0].run_id if found[0] else None
    claims = [m.path for m in FileSystems.match([f"{path}-*"])[0].metadata_list]
    owners = {found[0].run_id for c in claims if (found := _read(c)) and found[0]}
    return owners.pop() if len(owners) == 1 else None


def check_owner(target: str, run_id: str, folder: bool = False) -> None:
    """Raises `OwnershipLostError` unless the run `run_id` owns `target` (the publishing
    steps call it just before they move anything)."""
    now = owner_of(target, folder)
    if now != run_id:
        raise OwnershipLostError(
            f"{target} is no longer owned by this run ({run_id}; its lock "
            f"{lock_path(target, folder)} names {now or 'no run'}): another run took it "
            "over while this one was stalled; nothing was published")


class OutputLocks:
    """Several outputs owned together (a run's prefix and its statistics file): all or
    none. `locks`: `OutputLock`s, taken in order and given back in reverse."""

    def __init__(self, locks: list[OutputLock]):
        seen: dict[str, OutputLock] = {}
        for lock in locks:
            seen.setdefault(lock.path, lock)
        self.locks = list(seen.values())

    def __enter__(self) -> OutputLocks:
        taken = []
        try:
            for lock in self.locks:
                taken.append(lock.acquire())
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for lock in reversed(self.locks):
            lock.release()


def new_run_id() -> str:
    """A run id (12 hex digits): names the run's lock claim and temporary files."""
    return uuid.uuid4().hex[:12]
