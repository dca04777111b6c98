"""The owner a lock file names, and whether it is taken for dead: `Owner` (the run's id,
host, process id, start time and heartbeat, as the lock file's JSON) and `stale_reason`
(its process gone on this host, or its heartbeat older than `STALE_AFTER_S`). The locks
themselves, their creation and their heartbeat are transforms/io/ownership.py's.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket

# An owner whose heartbeat is older than this is taken for dead (ten missed heartbeats of
# `ownership.HEARTBEAT_S`).
STALE_AFTER_S = 300.0


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(
        timespec="seconds")


@dataclasses.dataclass(frozen=True)
class Owner:
    """What a lock file says about the run that holds it."""

    run_id: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    command: str = ""
    output: str = ""

    def to_json(self) -> bytes:
        return json.dumps({**dataclasses.asdict(self), "started": _iso(self.started_at),
                           "heartbeat": _iso(self.heartbeat_at)}, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Owner:
        document = json.loads(data.decode("utf-8"))
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in document.items() if k in fields})

    def describe(self, now: float) -> str:
        return (f"run {self.run_id}{f' ({self.command})' if self.command else ''}, pid "
                f"{self.pid} on {self.host}, started {_iso(self.started_at)}, last "
                f"heartbeat {max(0.0, now - self.heartbeat_at):.0f} s ago")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def stale_reason(owner: Owner | None, modified: float | None, now: float,
                 stale_after_s: float = STALE_AFTER_S) -> str | None:
    """Why a lock's owner is taken for dead, or None when it is taken for alive.

    Args:
        owner: what the lock says (None: it cannot be read, e.g. damaged by hand).
        modified: the lock file's modification time, if known (a heartbeat touches it).
        now: the current time (seconds since the epoch).
        stale_after_s: the heartbeat age beyond which an owner is dead.
    """
    beat = max(owner.heartbeat_at if owner else 0.0, modified or 0.0)
    if owner is not None and owner.host == socket.gethostname() and \
            owner.pid != os.getpid() and not _pid_alive(owner.pid):
        return f"its process {owner.pid} on this host is gone"
    if now - beat > stale_after_s:
        return (f"its last heartbeat was {now - beat:.0f} s ago (more than "
                f"{stale_after_s:.0f} s)")
    return None
