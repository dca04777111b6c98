"""Only the run reaches its served models (model_channel.py, io/private_folder.py): a
connection with Beam's fixed key, with a wrong key or with no handshake runs nothing and
the copy goes on answering; a planted address file is not used and nothing from the
server it names is unpickled; a folder another user could reach is refused; what dead
runs left is swept. Copies here are served by threads of the test process (fast); the
same in real processes is in test_model_server.py."""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import socket
import tempfile
import threading
import time
from multiprocessing import connection as mpc

import pytest

from tests.scoring.payloads import Planted
from transforms.inference import model_channel
from transforms.inference.model_channel import Channel, CopyFiles, Serving
from transforms.io import cli
from transforms.io.private_folder import PrivateFolderError, check_private, private_folder


class Echo:
    def add(self, a: int, b: int = 0) -> int:
        return a + b

    def fails(self) -> None:
        raise KeyError("inside the model")


@pytest.fixture
def folder():
    """A private folder with a short path (a socket's path is limited; pytest's own
    temporary folders can be longer)."""
    parent = tempfile.mkdtemp(prefix="qa")
    yield private_folder("served", parent=parent)
    shutil.rmtree(parent)


@pytest.fixture
def copy(folder):
    """A copy of `Echo` served by threads of this process: (files, key, server)."""
    files = CopyFiles.of(folder, "qa_eval_test_0-0")
    key = Serving("test").key
    server = model_channel.ChannelServer(Echo(), key, files)
    server.publish()
    threading.Thread(target=server.serve_forever, args=(server.close,), daemon=True).start()
    yield files, key, server
    server.close()


class Models:
    """A served object with methods named like a channel's own."""

    def call(self, tag: str) -> str:
        return f"call {tag}"

    def open(self) -> str:
        return "open"


def test_a_caller_with_the_key_calls_public_methods(copy):
    files, key, _ = copy
    channel = model_channel.join(files, key)
    assert channel.add(2, b=3) == 5 and channel._call("add", 1) == 1
    with pytest.raises(KeyError, match="inside the model"):
        channel.fails()  # the model's own exception, raised here
    with pytest.raises(AttributeError, match="no public method '__class__'"):
        channel._call("__class__")
    with pytest.raises(AttributeError, match="'Echo' object has no attribute 'missing'"):
        channel._call("missing")
    assert os.stat(files.socket).st_mode & 0o777 == 0o600
    assert os.stat(files.address).st_mode & 0o777 == 0o600
    assert json.loads(open(files.address).read())["pid"] == os.getpid()
    other = CopyFiles.of(os.path.dirname(files.address), "qa_eval_test_9-0")
    server = model_channel.ChannelServer(Models(), key, other)
    server.publish()
    threading.Thread(target=server.serve_forever, args=(server.close,), daemon=True).start()
    models = model_channel.join(other, key)
    assert models.call("use0") == "call use0" and models.open() == "open"  # not the channel's
    server.close()
    serving = Serving("x")
    assert repr(serving) == f"Serving({serving.tag!r})" and serving.tag.startswith("qa_eval_x_")


@pytest.mark.parametrize("authkey", [b"mps", b"0" * 32, None], ids=["beam_key", "wrong_key",
                                                                    "no_handshake"])
def test_a_connection_without_the_runs_key_runs_nothing(copy, tmp_path, authkey, caplog):
    caplog.set_level(logging.WARNING, logger=model_channel.__name__)
    files, key, server = copy
    marker = str(tmp_path / "payload_ran")
    address = model_channel.read_address(files)
    payload = pickle.dumps(("add", (Planted(marker),), {}))
    outcome: list[BaseException | str] = []

    def attack() -> None:
        try:
            if authkey is None:  # a bare connection that sends the payload straight away
                conn = mpc.Client(address.address, address.family)
                conn.send_bytes(payload)
                while True:  # its challenge, its "failure", then the copy closes it
                    conn.recv_bytes()
            mpc.Client(address.address, address.family, authkey=authkey)
            outcome.append("connected")
        except BaseException as e:  # noqa: BLE001 - looked at below
            outcome.append(e)

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    attacker.join(timeout=10)
    assert not attacker.is_alive(), "the copy neither refused the connection nor closed it"
    (refusal,) = outcome
    assert isinstance(refusal, (mpc.AuthenticationError, AssertionError, EOFError,
                                ConnectionError)), refusal
    deadline = time.monotonic() + 5
    while server.refused < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.refused == 1
    assert not os.path.exists(marker)
    assert "refused a connection that did not prove this run's key" in caplog.text
    assert model_channel.join(files, key).add(20, 22) == 42  # the run goes on


def _hostile_listener(marker: str, key: bytes | None) -> tuple[str, tuple[str, int]]:
    """A server of someone else's: sends a payload instead of a challenge, or (with a
    key that is not the run's) completes a handshake of its own and then the payload."""
    listener = mpc.Listener(("127.0.0.1", 0), "AF_INET")
    payload = pickle.dumps(("ok", Planted(marker)))

    def serve() -> None:
        conn = listener.accept()
        try:
            if key is not None:
                mpc.deliver_challenge(conn, key)
                mpc.answer_challenge(conn, key)
            conn.send_bytes(payload)
            conn.recv_bytes()
        except (OSError, EOFError, mpc.AuthenticationError):
            pass

    threading.Thread(target=serve, daemon=True).start()
    return "AF_INET", listener.address


@pytest.mark.parametrize("hostile_key", [None, b"mps"], ids=["payload_first", "own_key"])
def test_a_planted_address_is_not_used(folder, tmp_path, hostile_key, caplog):
    caplog.set_level(logging.WARNING, logger=model_channel.__name__)
    files = CopyFiles.of(folder, "qa_eval_test_1-0")
    marker = str(tmp_path / "payload_ran")
    family, address = _hostile_listener(marker, hostile_key)
    with open(files.address, "w") as f:
        json.dump({"family": family, "address": address, "pid": os.getpid()}, f)
    assert model_channel.join(files, Serving("test").key) is None
    assert not os.path.exists(marker)
    assert not os.path.exists(files.address)  # removed: the run starts its own copy
    assert "names a server that does not hold this run's key" in caplog.text


def test_an_address_outside_the_copys_socket_is_ignored(folder):
    files = CopyFiles.of(folder, "qa_eval_test_2-0")
    with open(files.address, "w") as f:
        json.dump({"family": "AF_UNIX", "address": "/tmp/elsewhere.sock", "pid": 1}, f)
    assert model_channel.read_address(files) is None and not os.path.exists(files.address)


def test_a_lost_copy_is_reported_as_lost_not_as_the_models_error(copy):
    files, key, server = copy
    channel = model_channel.join(files, key)
    assert channel.add(1) == 1
    server.close()  # its socket goes with it
    other = Channel(channel._address, key)  # a thread that never connected
    with pytest.raises(model_channel.CopyLost, match="FileNotFoundError"):
        other.add(1)


def test_the_folder_must_be_this_users_and_closed(tmp_path, monkeypatch):
    path = private_folder("served", parent=str(tmp_path))
    assert os.stat(path).st_mode & 0o777 == 0o700
    assert private_folder("served", parent=str(tmp_path)) == path  # found again, checked
    os.chmod(path, 0o755)
    with pytest.raises(PrivateFolderError, match=r"its permissions are drwxr-xr-x: others "
                                                  r"may reach it \(it must be drwx------\)"):
        private_folder("served", parent=str(tmp_path))
    os.chmod(path, 0o700)
    real_uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real_uid + 4242)  # made first by someone else
    planted = os.path.join(str(tmp_path), f"served-{real_uid + 4242}")
    os.mkdir(planted, 0o700)
    with pytest.raises(PrivateFolderError, match=f"refusing to use {planted}: it belongs to "
                                                 f"user id {real_uid}, not to this user"):
        private_folder("served", parent=str(tmp_path))
    monkeypatch.undo()
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(PrivateFolderError, match="it is a symbolic link"):
        check_private(str(link))
    (tmp_path / "file").write_text("")
    with pytest.raises(PrivateFolderError, match="it is not a folder"):
        check_private(str(tmp_path / "file"))
    # one line, exit status 2 on the command line, even from inside a running pipeline
    wrapped = RuntimeError(f"Traceback ...\nPrivateFolderError: refusing to use {path}: "
                           "it is a symbolic link; remove it")
    assert cli.file_error_message(wrapped).startswith(f"refusing to use {path}")


def _dead_pid() -> int:
    """A process id that exists on no process here."""
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 1


def test_sweep_removes_what_dead_runs_left(folder, copy):
    live_files, _, _ = copy
    dead = CopyFiles.of(folder, "qa_eval_dead_0-0")
    with open(dead.address, "w") as f:
        json.dump({"family": "AF_UNIX", "address": dead.socket, "pid": _dead_pid()}, f)
    for path in (dead.socket, dead.lock):
        open(path, "w").close()
    orphan = CopyFiles.of(folder, "qa_eval_orphan_0-0")  # a copy that never started
    for path in (orphan.lock, orphan.error):
        open(path, "w").close()
        os.utime(path, (time.time() - model_channel.STALE_S - 1,) * 2)
    young = CopyFiles.of(folder, "qa_eval_young_0-0")  # maybe starting right now
    open(young.lock, "w").close()
    assert model_channel.sweep(folder) == 2
    assert sorted(os.listdir(folder)) == sorted(
        os.path.basename(p) for p in (live_files.address, live_files.socket, young.lock))


def test_a_socket_path_too_long_listens_on_loopback_behind_the_key(tmp_path, monkeypatch):
    monkeypatch.setattr(model_channel, "MAX_SOCKET_PATH", 10)
    folder = private_folder("served", parent=str(tmp_path))
    files = CopyFiles.of(folder, "qa_eval_test_3-0")
    key = Serving("test").key
    server = model_channel.ChannelServer(Echo(), key, files)
    server.publish()
    threading.Thread(target=server.serve_forever, args=(server.close,), daemon=True).start()
    try:
        address = model_channel.read_address(files)
        assert address.family == "AF_INET" and address.address[0] == "127.0.0.1"
        assert model_channel.join(files, key).add(1, 2) == 3
        with pytest.raises(mpc.AuthenticationError):
            mpc.Client(address.address, address.family, authkey=b"mps")
        with socket.create_connection(address.address):  # a bare connection is refused too
            pass
        deadline = time.monotonic() + 5
        while server.refused < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.refused == 2
    finally:
        server.close()
