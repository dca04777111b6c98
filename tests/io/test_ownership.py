"""transforms/io/ownership.py: one owner per output, on a local disk (create-if-absent by
hard link) and on an object store (the claim protocol); stale owners; the check the
publishing steps make."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time

import pytest

from tests.io.test_publish import ObjectStore
from transforms.io import lock_owner, ownership
from transforms.io.ownership import (
    OutputLock,
    OutputLocks,
    OutputOwnedError,
    OwnershipLostError,
    check_owner,
    owner_of,
)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _pid_not_here() -> int:
    """A process id no process on this host has (above the kernel's largest): an owner on
    another host with this pid is alive only by its heartbeat, never by a pid that
    happens to exist here (pid 1 always does)."""
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            pid = int(f.read()) + 1
    except OSError:
        pid = 1 << 22  # the largest pid_max Linux allows
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


def _write_owner(path, run_id, host=None, pid=None, age_s=0.0, started_age_s=None):
    now = time.time()
    owner = lock_owner.Owner(run_id, host or socket.gethostname(),
                            os.getpid() if pid is None else pid,
                            now - (age_s if started_age_s is None else started_age_s),
                            now - age_s, "qa-score", "out")
    with open(path, "wb") as f:
        f.write(owner.to_json())
    if age_s:
        os.utime(path, (now - age_s, now - age_s))


def test_a_second_run_is_refused_until_the_owner_releases(tmp_path):
    target = str(tmp_path / "run")
    first = OutputLock(target, "aaa", what=f"--output {target}").acquire()
    assert json.loads(open(target + ".lock").read())["run_id"] == "aaa"
    assert owner_of(target) == "aaa"
    with pytest.raises(OutputOwnedError, match=rf"--output {target} is in use by another "
                       rf"run \(run aaa.*pid {os.getpid()} on .*\).*{target}\.lock"):
        OutputLock(target, "bbb", what=f"--output {target}").acquire()
    assert owner_of(target) == "aaa"
    check_owner(target, "aaa")
    with pytest.raises(OwnershipLostError, match="no longer owned by this run"):
        check_owner(target, "bbb")
    first.release()
    assert not os.path.exists(target + ".lock")
    with OutputLock(target, "bbb"):
        assert owner_of(target) == "bbb"
    assert sorted(os.listdir(tmp_path)) == []  # no claim or lock left behind


def test_a_killed_owner_on_this_host_is_taken_over_at_once(tmp_path, caplog):
    target = str(tmp_path / "run")
    _write_owner(target + ".lock", "killed", pid=_dead_pid())
    with OutputLock(target, "next"):
        assert owner_of(target) == "next"
    assert "taken for dead: its process" in caplog.text


def test_an_owner_on_another_host_is_stale_only_after_the_bound(tmp_path):
    target = str(tmp_path / "run")
    _write_owner(target + ".lock", "remote", host="elsewhere", pid=_pid_not_here(),
                 age_s=10)
    with pytest.raises(OutputOwnedError, match="run remote"):
        OutputLock(target, "next", stale_after_s=60).acquire()
    _write_owner(target + ".lock", "remote", host="elsewhere", pid=_pid_not_here(),
                 age_s=120)
    with OutputLock(target, "next", stale_after_s=60):
        assert owner_of(target) == "next"


def test_the_heartbeat_keeps_a_long_run_alive(tmp_path):
    target = str(tmp_path / "run")
    with OutputLock(target, "long", heartbeat_s=0.1):
        time.sleep(1.5)  # without heartbeats the lock would be 1.5 s old: stale below
        assert time.time() - os.path.getmtime(target + ".lock") < 1.0
        with pytest.raises(OutputOwnedError):
            OutputLock(target, "other", stale_after_s=1.0).acquire()


def test_folder_outputs_keep_their_lock_inside(tmp_path):
    folder = str(tmp_path / "wes")
    with OutputLock(folder, "m1", folder=True):
        assert os.listdir(folder) == [".lock"]
        assert owner_of(folder, folder=True) == "m1"
        with pytest.raises(OutputOwnedError):
            OutputLock(folder + "/", "m2", folder=True).acquire()


def test_several_outputs_are_taken_all_or_none(tmp_path):
    prefix, stats = str(tmp_path / "run"), str(tmp_path / "stats.parquet")
    with OutputLock(stats, "holder"):
        with pytest.raises(OutputOwnedError, match="stats.parquet"):
            with OutputLocks([OutputLock(prefix, "r"), OutputLock(stats, "r")]):
                pass
        assert not os.path.exists(prefix + ".lock")  # the first was given back


@pytest.mark.parametrize("atomic", [True, False])
def test_of_many_runs_started_together_exactly_one_owns_the_output(tmp_path, monkeypatch,
                                                                   atomic):
    """Eight runs take one output in the same moment, on a local disk by hard link and
    with the claim protocol of object stores (forced here on a local disk): exactly one
    owns it, the other seven are refused.

    The moment is made exact: on its first try each run waits for all the others right
    after it writes its claim and right after it lists the claims, so that all eight take
    the first of these steps before any takes the second, whichever order they come in.
    With the claim protocol every run then lists all eight claims on its first try: the
    runs withdraw and back off (the real random wait) until one of them gets the
    output."""
    target = str(tmp_path / "run")
    n = 8
    barrier = threading.Barrier(n, timeout=60)
    waits = threading.local()  # a contender's steps still to meet the others at
    write, claims = ownership._write, OutputLock._claims

    def meet(step):
        if step in getattr(waits, "steps", ()):
            waits.steps.remove(step)
            barrier.wait()

    def write_then_meet(path, owner):
        write(path, owner)
        meet("wrote")

    def claims_then_meet(self):
        listed = claims(self)
        meet("listed")
        return listed

    monkeypatch.setattr(ownership, "_write", write_then_meet)
    monkeypatch.setattr(OutputLock, "_claims", claims_then_meet)
    won, refused, failed = [], [], []

    def attempt(i):
        waits.steps = {"wrote", "listed"}
        try:
            won.append(OutputLock(target, f"r{i}", atomic_create=atomic).acquire())
        except OutputOwnedError:
            refused.append(i)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            failed.append(e)
            barrier.abort()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == []
    assert len(won) == 1 and len(refused) == n - 1
    assert owner_of(target) == won[0].run_id
    won[0].release()
    assert os.listdir(tmp_path) == []


def test_claims_on_an_object_store(monkeypatch, caplog):
    """GCS and S3 have no create-if-absent in Beam's FileSystems: each run writes a claim
    and owns the output when its claim is the only live one listed."""
    monkeypatch.setattr(ObjectStore, "objects", {})
    monkeypatch.setattr(ownership.time, "sleep", lambda s: None)
    target = "memstore://bucket/scores/run"
    with OutputLock(target, "first") as first:
        assert list(ObjectStore.objects) == [f"{target}.lock-first"]
        assert owner_of(target) == "first"
        with pytest.raises(OutputOwnedError, match="run first"):
            OutputLock(target, "second").acquire()
        assert list(ObjectStore.objects) == [f"{target}.lock-first"]  # withdrawn
        first.heartbeat()
    assert ObjectStore.objects == {}
    # A claim whose heartbeat is old is removed; a contender that keeps its claim (it
    # started a moment ago) makes the run give up after its tries, never both owners.
    old = lock_owner.Owner("gone", "elsewhere", _pid_not_here(), time.time() - 900,
                          time.time() - 900)
    ObjectStore.objects[f"{target}.lock-gone"] = old.to_json()
    with OutputLock(target, "third", stale_after_s=60):
        assert owner_of(target) == "third"
    assert "taken for dead" in caplog.text and ObjectStore.objects == {}
    fresh = lock_owner.Owner("racer", "elsewhere", _pid_not_here(), time.time(), time.time())
    ObjectStore.objects[f"{target}.lock-racer"] = fresh.to_json()
    with pytest.raises(OutputOwnedError, match="run racer"):
        OutputLock(target, "fourth").acquire()
    assert list(ObjectStore.objects) == [f"{target}.lock-racer"]


def test_a_lock_taken_over_while_its_run_stalled_fails_the_publish(tmp_path):
    target = str(tmp_path / "run")
    stalled = OutputLock(target, "stalled", stale_after_s=0.1, heartbeat_s=3600).acquire()
    time.sleep(0.3)
    _write_owner(target + ".lock", "stalled", host="elsewhere", pid=_pid_not_here(),
                 age_s=5)
    with OutputLock(target, "next", stale_after_s=1):
        with pytest.raises(OwnershipLostError, match="names next"):
            check_owner(target, "stalled")
        stalled.release()  # does not remove the new owner's lock
        assert owner_of(target) == "next"


def test_a_lock_by_default_names_its_target_and_records_no_command(tmp_path):
    from transforms.io.ownership import lock_path

    target = str(tmp_path / "run")
    assert lock_path(target) == target + ".lock"
    assert lock_path(target + "/", folder=True) == os.path.join(target, ".lock")
    with OutputLock(target, "r1") as lock:
        assert lock.what == target
        with open(target + ".lock", "rb") as f:
            owner = lock_owner.Owner.from_json(f.read())
        assert owner.run_id == "r1" and owner.command == ""
