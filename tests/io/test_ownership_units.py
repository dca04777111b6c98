"""transforms/io/ownership.py, part by part: whether a process is alive, the removal of a
stale local lock (and putting back one that is not the stale owner's), the heartbeat of
a lock this run no longer holds, and the messages that name an output's owner."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time

import pytest

from tests.io.test_ownership import _dead_pid, _pid_not_here, _write_owner
from transforms.io import ownership
from transforms.io.ownership import OutputLock, OutputOwnedError, OwnershipLostError, check_owner


def test_a_process_is_alive_until_it_is_gone():
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert ownership._pid_alive(child.pid)
        time.sleep(0.2)
        assert child.poll() is None  # asking sent it no signal
    finally:
        child.kill()
        child.wait()
    assert not ownership._pid_alive(_dead_pid())


def test_another_users_process_is_alive(monkeypatch):
    def refused(pid, sig):
        raise PermissionError(pid)

    monkeypatch.setattr(ownership.os, "kill", refused)
    assert ownership._pid_alive(12345)


def _owner(run_id: str) -> ownership.Owner:
    return ownership.Owner(run_id, "elsewhere", _pid_not_here(), 0.0, 0.0)


def test_a_stale_lock_is_removed_with_a_warning_naming_its_owner(tmp_path, caplog):
    target = str(tmp_path / "run")
    _write_owner(target + ".lock", "old", host="elsewhere", pid=_pid_not_here(), age_s=900)
    holder = ownership._read(target + ".lock")[0]
    lock = OutputLock(target, "new", what="--output run")
    with caplog.at_level(logging.WARNING, logger=ownership.__name__):
        lock._remove_stale_local(holder, "it is old")
    assert os.listdir(tmp_path) == []
    [record] = caplog.records
    assert record.getMessage() == (f"--output run was owned by {holder.describe(time.time())}"
                                   ", taken for dead: it is old; taking it over")


def test_an_unreadable_stale_lock_is_removed(tmp_path, caplog):
    target = str(tmp_path / "run")
    with open(target + ".lock", "wb") as f:
        f.write(b"not json")
    lock = OutputLock(target, "new", what="--output run")
    with caplog.at_level(logging.WARNING, logger=ownership.__name__):
        lock._remove_stale_local(None, "it is old")
    assert os.listdir(tmp_path) == []
    assert [r.getMessage() for r in caplog.records] == [
        "--output run was owned by an unreadable lock, taken for dead: it is old; "
        "taking it over"]


def test_a_lock_of_another_run_than_the_stale_one_is_put_back(tmp_path, caplog):
    """The lock was judged stale for run "old", but by the time it is moved aside it names
    run "fresh" (which took it over meanwhile): it goes back, nothing is logged."""
    target = str(tmp_path / "run")
    _write_owner(target + ".lock", "fresh")
    lock = OutputLock(target, "new")
    with caplog.at_level(logging.WARNING, logger=ownership.__name__):
        lock._remove_stale_local(_owner("old"), "it is old")
    assert os.listdir(tmp_path) == ["run.lock"]
    assert ownership.owner_of(target) == "fresh"
    assert caplog.records == []
    os.remove(target + ".lock")
    lock._remove_stale_local(_owner("old"), "gone meanwhile")  # nothing to move: no error
    assert os.listdir(tmp_path) == []


def _no_longer(target: str) -> str:
    return (f"--output run is no longer owned by this run (its lock {target}.lock was "
            "taken over)")


@pytest.mark.parametrize("lock_now", ["other run", "unreadable", "removed"])
def test_a_heartbeat_leaves_a_lock_this_run_lost_alone(tmp_path, caplog, lock_now):
    target = str(tmp_path / "run")
    lock = OutputLock(target, "mine", what="--output run", heartbeat_s=3600).acquire()
    try:
        if lock_now == "other run":
            _write_owner(target + ".lock", "theirs", age_s=60)
        elif lock_now == "unreadable":
            with open(target + ".lock", "wb") as f:
                f.write(b"\xff")
            os.utime(target + ".lock", (time.time() - 60, time.time() - 60))
        else:
            os.remove(target + ".lock")
        with caplog.at_level(logging.WARNING, logger=ownership.__name__):
            lock.heartbeat()
        assert [r.getMessage() for r in caplog.records] == [_no_longer(target)]
        if lock_now != "removed":
            assert time.time() - os.path.getmtime(target + ".lock") > 50  # not touched
    finally:
        lock.release()


def test_a_heartbeat_of_a_lock_not_taken_refreshes_nothing(tmp_path, caplog):
    """A second lock object of the same run id that never acquired: the file names its
    run, but it holds nothing to refresh."""
    target = str(tmp_path / "run")
    with OutputLock(target, "same", heartbeat_s=3600):
        os.utime(target + ".lock", (time.time() - 60, time.time() - 60))
        with caplog.at_level(logging.WARNING, logger=ownership.__name__):
            OutputLock(target, "same", what="--output run").heartbeat()
        assert [r.getMessage() for r in caplog.records] == [_no_longer(target)]
        assert time.time() - os.path.getmtime(target + ".lock") > 50


def test_the_lost_ownership_message_names_the_lock_and_its_owner(tmp_path):
    folder = str(tmp_path / "wes")
    with pytest.raises(OwnershipLostError) as lost:
        check_owner(folder, "mine", folder=True)
    assert str(lost.value) == (
        f"{folder} is no longer owned by this run (mine; its lock {folder}/.lock names no "
        "run): another run took it over while this one was stalled; nothing was published")


def test_run_ids_are_twelve_hex_digits():
    ids = {ownership.new_run_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 12 and int(i, 16) >= 0 for i in ids)


def test_a_run_that_keeps_finding_a_new_stale_lock_gives_up_after_three_tries(tmp_path,
                                                                            monkeypatch):
    """Each stale lock this run removes is replaced at once by another stale one (runs
    racing for a dead output): after three removals it is refused, naming the last."""
    target = str(tmp_path / "run")
    path = target + ".lock"
    _write_owner(path, "stale0", host="elsewhere", pid=_pid_not_here(), age_s=900)
    removed = []
    remove = OutputLock._remove_stale_local

    def remove_then_another(self, holder, reason):
        remove(self, holder, reason)
        removed.append(holder.run_id)
        _write_owner(path, f"stale{len(removed)}", host="elsewhere", pid=_pid_not_here(),
                     age_s=900)

    monkeypatch.setattr(OutputLock, "_remove_stale_local", remove_then_another)
    with pytest.raises(OutputOwnedError, match=rf"\(run stale3 .*its lock {re.escape(path)} "):
        OutputLock(target, "new", stale_after_s=60).acquire()
    assert removed == ["stale0", "stale1", "stale2"]
    assert os.listdir(tmp_path) == ["run.lock"]  # this run's own claim file is gone


def test_a_lock_released_between_the_link_and_the_read_is_tried_again(tmp_path,
                                                                       monkeypatch):
    target = str(tmp_path / "run")
    _write_owner(target + ".lock", "leaving")
    read = ownership._read

    def released(path):  # the owner gives the output back just as this run reads its lock
        monkeypatch.setattr(ownership, "_read", read)
        os.remove(path)
        return None

    monkeypatch.setattr(ownership, "_read", released)
    with OutputLock(target, "next"):
        assert ownership.owner_of(target) == "next"
