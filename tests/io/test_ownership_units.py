"""transforms/io/ownership.py and transforms/io/lock_owner.py, part by part: process
liveness, stale locks and claims, the heartbeat and release of a lock, and the messages
that name an output's owner."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from tests.io.test_ownership import _dead_pid, _pid_not_here, _write_owner
from transforms.io import lock_owner, ownership
from transforms.io.ownership import OutputLock, OutputOwnedError, OwnershipLostError, check_owner


def _failing(error: Exception):
    def fail(*args):
        raise error
    return fail


def test_a_process_is_alive_until_it_is_gone():
    # SIGHUP as a process started normally has it (a parent run under nohup ignores it)
    child = subprocess.Popen(["sleep", "30"], preexec_fn=lambda: signal.signal(
        signal.SIGHUP, signal.SIG_DFL))
    try:
        assert lock_owner._pid_alive(child.pid)
        time.sleep(0.2)
        assert child.poll() is None  # asking sent it no signal
    finally:
        child.kill()
        child.wait()
    assert not lock_owner._pid_alive(_dead_pid())


def test_another_users_process_is_alive(monkeypatch):
    monkeypatch.setattr(lock_owner.os, "kill", _failing(PermissionError(12345)))
    assert lock_owner._pid_alive(12345)


def _owner(run_id: str) -> lock_owner.Owner:
    return lock_owner.Owner(run_id, "elsewhere", _pid_not_here(), 0.0, 0.0)


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
    return f"--output run is no longer owned by this run (its lock {target}.lock was taken over)"


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
    assert len(ids) == 50 and all(len(i) == 12 and int(i, 16) >= 0 for i in ids)


@pytest.mark.parametrize("last", [True, False])
def test_a_run_that_keeps_finding_a_new_stale_lock_gives_up_after_three_tries(
        tmp_path, monkeypatch, last):
    """Each stale lock this run removes is replaced at once by another stale one (runs
    racing for a dead output): after three removals it is refused, naming the last (or,
    when the third is not replaced, an owner it cannot read)."""
    target = str(tmp_path / "run")
    path = target + ".lock"
    _write_owner(path, "stale0", host="elsewhere", pid=_pid_not_here(), age_s=900)
    removed = []
    remove = OutputLock._remove_stale_local

    def remove_then_another(self, holder, reason):
        remove(self, holder, reason)
        removed.append(holder.run_id)
        if last or len(removed) < 3:
            _write_owner(path, f"stale{len(removed)}", host="elsewhere",
                         pid=_pid_not_here(), age_s=900)

    monkeypatch.setattr(OutputLock, "_remove_stale_local", remove_then_another)
    holder = "run stale3 " if last else "an owner whose lock cannot be read"
    with pytest.raises(OutputOwnedError, match=rf"\({holder}.*its lock {re.escape(path)} "):
        OutputLock(target, "new", stale_after_s=60).acquire()
    assert removed == ["stale0", "stale1", "stale2"]
    # this run's own claim file is gone
    assert os.listdir(tmp_path) == (["run.lock"] if last else [])


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


def _claim(target: str, run_id: str, heartbeat_age_s: float = 0.0, started_age_s=None,
           modified_age_s=None) -> str:
    """A claim file of the claim protocol on a local disk, `<target>.lock-<run id>`."""
    path = f"{target}.lock-{run_id}"
    now = time.time()
    started = now - (heartbeat_age_s if started_age_s is None else started_age_s)
    owner = lock_owner.Owner(run_id, "elsewhere", _pid_not_here(), started,
                            now - heartbeat_age_s, "qa-score", target)
    with open(path, "wb") as f:
        f.write(owner.to_json())
    age = heartbeat_age_s if modified_age_s is None else modified_age_s
    os.utime(path, (now - age, now - age))
    return path


def _claims_lock(target: str, **kwargs) -> OutputLock:
    return OutputLock(target, "me", what="--output run", atomic_create=False, **kwargs)


def test_a_claim_is_alive_by_its_heartbeat_or_its_modification_time(tmp_path):
    target = str(tmp_path / "run")
    # an old heartbeat in the claim, but the file was written a moment ago: alive
    _claim(target, "touched", heartbeat_age_s=900, modified_age_s=0)
    with pytest.raises(OutputOwnedError, match="run touched"):
        _claims_lock(target).acquire()
    os.remove(f"{target}.lock-touched")
    # 120 s old: stale by this lock's bound of 60 s, not by the default 300 s
    _claim(target, "old", heartbeat_age_s=120)
    with _claims_lock(target, stale_after_s=60):
        assert ownership.owner_of(target) == "me"


def test_stale_claims_are_removed_with_a_warning_even_after_a_live_one(tmp_path, caplog):
    target = str(tmp_path / "run")
    _claim(target, "a-live", started_age_s=900)
    old = _claim(target, "b-old", heartbeat_age_s=900)
    unreadable = f"{target}.lock-c-bad"
    with open(unreadable, "wb") as f:
        f.write(b"not json")
    os.utime(unreadable, (time.time() - 900, time.time() - 900))
    with caplog.at_level(logging.WARNING, logger=ownership.__name__):
        with pytest.raises(OutputOwnedError,
                           match=rf"\(run a-live .*its lock {re.escape(target)}\.lock-a-live "):
            _claims_lock(target, stale_after_s=60).acquire()
    assert os.listdir(tmp_path) == ["run.lock-a-live"]  # both dead claims removed
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith("--output run was claimed by run b-old (qa-score), pid ")
    assert messages[0].endswith(f", taken for dead: its last heartbeat was 900 s ago (more "
                                f"than 60 s); removing its claim {old}")
    assert messages[1] == ("--output run was claimed by an unreadable claim, taken for dead: "
                           "its last heartbeat was 900 s ago (more than 60 s); removing its "
                           f"claim {unreadable}")


def test_a_claim_gone_before_it_is_read_is_skipped(tmp_path, monkeypatch):
    target = str(tmp_path / "run")
    _claim(target, "b-live", started_age_s=900)
    claims = OutputLock._claims
    monkeypatch.setattr(OutputLock, "_claims", lambda self: [
        f"{target}.lock-a-withdrawn", *claims(self)])
    with pytest.raises(OutputOwnedError, match="run b-live"):
        _claims_lock(target).acquire()


def test_a_live_claim_that_cannot_be_read_refuses_at_once(tmp_path, monkeypatch):
    target = str(tmp_path / "run")
    with open(f"{target}.lock-bad", "wb") as f:
        f.write(b"not json")
    monkeypatch.setattr(ownership.time, "sleep", lambda s: pytest.fail("retried"))
    with pytest.raises(OutputOwnedError, match=r"an owner whose lock cannot be read\).*"
                                               rf"its lock {re.escape(target)}\.lock "):
        _claims_lock(target).acquire()


@pytest.mark.parametrize("started_age_s, sleeps", [(0, 3), (900, 0)])
def test_a_run_backs_off_from_a_contender_and_not_from_an_owner(tmp_path, monkeypatch,
                                                                 started_age_s, sleeps):
    """A claim that started a moment ago is a contender: this run withdraws and tries
    again after a random 0.5-2 s, CLAIM_TRIES times in all; an older live claim is an
    owner: refused at once."""
    target = str(tmp_path / "run")
    _claim(target, "other", started_age_s=started_age_s)
    waits = []
    monkeypatch.setattr(ownership.random, "uniform", lambda a, b: waits.append((a, b)) or b)
    monkeypatch.setattr(ownership.time, "sleep", lambda s: None)
    with pytest.raises(OutputOwnedError, match="run other"):
        _claims_lock(target).acquire()
    assert waits == [(0.5, 2.0)] * sleeps
    assert os.listdir(tmp_path) == ["run.lock-other"]  # its own claim withdrawn


def test_a_claims_heartbeat_is_written_into_it(tmp_path):
    target = str(tmp_path / "run")
    with _claims_lock(target, heartbeat_s=3600) as lock:
        before = ownership._read(f"{target}.lock-me")[0].heartbeat_at
        time.sleep(0.05)
        lock.heartbeat()
        assert ownership._read(f"{target}.lock-me")[0].heartbeat_at > before


def test_an_owner_described_and_judged_by_its_times():
    owner = lock_owner.Owner("r1", "elsewhere", 5, 0.0, 100.0)
    assert owner.describe(160.0) == ("run r1, pid 5 on elsewhere, started "
                                     "1970-01-01T00:00:00+00:00, last heartbeat 60 s ago")
    with_command = lock_owner.Owner("r1", "elsewhere", 5, 0.0, 100.0, "qa-score")
    assert with_command.describe(40.0).startswith("run r1 (qa-score), pid 5")
    assert with_command.describe(40.0).endswith("last heartbeat 0 s ago")  # clocks apart
    stale = lock_owner.stale_reason
    assert stale(owner, None, 400.0, 300.0) is None  # exactly the bound: still alive
    assert stale(owner, None, 401.0, 300.0) == (
        "its last heartbeat was 301 s ago (more than 300 s)")
    assert stale(owner, 350.0, 600.0, 300.0) is None  # the file's time is the later beat
    assert stale(None, None, 1000.0, 300.0) == (
        "its last heartbeat was 1000 s ago (more than 300 s)")


def test_the_refusal_says_how_to_free_the_output(tmp_path):
    target = str(tmp_path / "run")
    with OutputLock(target, "first"):
        with pytest.raises(OutputOwnedError) as refused:
            OutputLock(target, "second", what="--output run", stale_after_s=60).acquire()
    assert str(refused.value).endswith(
        f"): this run is refused and changed nothing. Wait for it to end; if it is dead, "
        f"its lock {target}.lock counts as stale 60 s after its last heartbeat (or at once "
        "on its own host), or delete that file")


def test_the_owner_of_an_output_with_unreadable_locks_or_claims(tmp_path):
    target = str(tmp_path / "run")
    with open(target + ".lock", "wb") as f:
        f.write(b"not json")
    assert ownership.owner_of(target) is None  # a lock nobody can be read from
    os.remove(target + ".lock")
    _claim(target, "a")
    with open(f"{target}.lock-bad", "wb") as f:
        f.write(b"not json")
    assert ownership.owner_of(target) == "a"  # the one readable claim
    _claim(target, "b")
    assert ownership.owner_of(target) is None  # two runs claim it: no owner


def test_a_failing_heartbeat_is_logged_and_tried_again(tmp_path, caplog, monkeypatch):
    target = str(tmp_path / "run")
    tries = []

    def failing(self):
        tries.append(1)
        raise OSError("disk full")

    monkeypatch.setattr(OutputLock, "heartbeat", failing)
    with caplog.at_level(logging.WARNING, logger=ownership.__name__):
        with OutputLock(target, "me", heartbeat_s=0.05):
            deadline = time.time() + 10
            while len(tries) < 2 and time.time() < deadline:
                time.sleep(0.05)
    assert len(tries) >= 2
    assert caplog.records[0].getMessage() == f"could not refresh the lock {target}.lock: disk full"


def test_release_gives_the_output_back_once_and_logs_a_failed_removal(tmp_path, caplog,
                                                                      monkeypatch):
    target = str(tmp_path / "run")
    OutputLock(target, "never").release()  # never acquired: nothing to give back
    lock = OutputLock(target, "me").acquire()
    assert lock.held

    monkeypatch.setattr(ownership.FileSystems, "delete",
                        _failing(OSError("read-only")))
    with caplog.at_level(logging.WARNING, logger=ownership.__name__):
        lock.release()
        lock.release()
    assert not lock.held
    assert [r.getMessage() for r in caplog.records] == [
        f"could not remove the lock {target}.lock: read-only"]


def test_the_lock_file_records_the_owner(tmp_path, caplog):
    owner = lock_owner.Owner("r1", "h", 5, 0.0, 60.0, "qa-score", "out")
    assert owner.to_json() == (
        b'{\n "run_id": "r1",\n "host": "h",\n "pid": 5,\n "started_at": 0.0,\n'
        b' "heartbeat_at": 60.0,\n "command": "qa-score",\n "output": "out",\n'
        b' "started": "1970-01-01T00:00:00+00:00",\n'
        b' "heartbeat": "1970-01-01T00:01:00+00:00"\n}')
    target = str(tmp_path / "new" / "folders" / "run")  # its folder is made
    with caplog.at_level(logging.DEBUG, logger=ownership.__name__):
        lock = OutputLock(target, "me", what="--output run", command="qa-score").acquire()
    try:
        found = ownership._read(target + ".lock")[0]
        assert (found.run_id, found.host, found.pid, found.command, found.output) == (
            "me", socket.gethostname(), os.getpid(), "qa-score", target)
        assert lock._thread.name == f"heartbeat {target}.lock" and lock._thread.daemon
        assert [r.getMessage() for r in caplog.records] == [
            f"this run (me) owns --output run until it ends ({target}.lock)"]
    finally:
        lock.release()


def test_a_folder_made_meanwhile_by_another_run_is_used(tmp_path, monkeypatch):
    target = str(tmp_path / "new" / "run")

    def raced(path):  # another run makes the folder first
        os.makedirs(path)
        raise OSError("exists")

    monkeypatch.setattr(ownership.FileSystems, "mkdirs", raced)
    with OutputLock(target, "me"):
        assert ownership.owner_of(target) == "me"

    monkeypatch.setattr(ownership.FileSystems, "mkdirs",
                        _failing(OSError("read-only")))
    with pytest.raises(OSError, match="read-only"):
        OutputLock(str(tmp_path / "other" / "run"), "me").acquire()
