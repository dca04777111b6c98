"""transforms/io/publish.py: `replace_outputs`, the swap of a run's files in place of an
earlier run's (on a local disk and on an object store): what it replaces and leaves, the
earlier run put back when a move fails, what a reader of the folder sees after every move,
retries, refusals, and the clean-up of the earlier run's files and folders."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

import pytest
from apache_beam.io.filesystem import BeamIOError, FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems

from tests.io.publish_runs import (
    EARLIER,
    EARLIER_RUN,
    MARKER,
    NEW,
    _files,
    _make,
    _replace,
    _run_in,
    _stage,
)
from transforms.io import publish
from transforms.io.publish import publish_run, replace_outputs
from transforms.wes.write import run_files


def test_run_files_lists_each_file_of_a_run_once(tmp_path):
    # `wes-k*/*.parquet` also matches the clusters folders: listed twice, the earlier
    # --overwrite deleted them twice and failed with the run half deleted.
    _make(tmp_path, EARLIER)
    assert run_files(str(tmp_path)) == sorted(
        str(tmp_path / name) for name in EARLIER if name != "notes.txt")


def test_replacing_a_run_leaves_only_the_new_one(tmp_path):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)
    assert _replace(out, temp, moves) == [final for _, final in moves]
    assert _files(out) == NEW | {"notes.txt": EARLIER["notes.txt"]}
    assert not (out / "wes-k2").exists() and not (out / "wes-k2-clusters").exists()
    assert not (temp / "previous").exists()


def test_replacing_into_an_empty_folder(tmp_path):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    moves = _stage(out, temp)
    _replace(out, temp, moves, overwrite=False)
    assert _files(out) == NEW


@pytest.mark.parametrize("name, nth", [
    ("stats.json", 1),  # the earlier marker, moved aside first
    ("wes-k2/train-00000-of-00001.parquet", 1),  # an earlier file, moved aside
    ("wes-k5/train-00001-of-00002.parquet", 1),  # a new file, moved in
    ("stats.json", 2),  # the new marker, moved in last
])
def test_a_swap_that_fails_midway_puts_the_earlier_run_back(tmp_path, monkeypatch, name, nth):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)
    before_new = _files(temp)
    rename = FileSystems.rename
    seen = []

    def failing_rename(sources, destinations):
        if str(out / name) in (sources[0], destinations[0]):
            seen.append(sources[0])
            if len(seen) == nth:
                raise OSError("disk on fire")
        return rename(sources, destinations)

    monkeypatch.setattr(FileSystems, "rename", staticmethod(failing_rename))
    with pytest.raises(RuntimeError, match=re.escape(f"replacing the outputs in {out} failed (")
                       + r".*disk on fire.*\); the earlier outputs were put back as they were"):
        _replace(out, temp, moves)
    monkeypatch.undo()
    assert len(seen) >= nth  # the failure happened (then the moves back)
    assert _files(out) == EARLIER | {f".temp-new/{n}": d for n, d in before_new.items()}
    # The new files are back under their temporary names, from where the swap can be
    # tried again.
    _replace(out, temp, moves)
    assert _files(out) == NEW | {"notes.txt": EARLIER["notes.txt"]}


def test_a_failure_to_put_back_says_where_the_earlier_files_are(tmp_path, monkeypatch):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)
    rename = FileSystems.rename

    def failing_rename(sources, destinations):
        # The new marker's move in fails, and so does every move back: the new files to
        # their temporary names, the earlier ones from the aside folder.
        if sources[0].startswith(str(temp / "previous")) or destinations[0].startswith(
                str(temp / "staged")) or destinations[0].endswith(
                "stats.json") and sources[0].startswith(str(temp / "staged")):
            raise OSError("disk on fire")
        return rename(sources, destinations)

    monkeypatch.setattr(FileSystems, "rename", staticmethod(failing_rename))
    with pytest.raises(RuntimeError, match="and so did putting the earlier ones back") as e:
        _replace(out, temp, moves)
    # Every move back that failed, the last move first.
    failed_back = [f"{final} -> {staged}: disk on fire" for staged, final in moves[-2::-1]]
    aside = [MARKER, *sorted(set(EARLIER_RUN) - {MARKER})]  # the order moved aside
    failed_back += [f"{temp}/previous/{name} -> {out}/{name}: disk on fire"
                    for name in reversed(aside)]
    assert str(e.value).startswith(
        f"replacing the outputs in {out} failed (disk on fire), and so did putting the "
        f"earlier ones back: {'; '.join(failed_back)}. ")
    assert f"are in {temp / 'previous'}" in str(e.value)
    assert "holds no complete run" in str(e.value)
    assert not (out / "stats.json").exists()  # never a folder that looks complete
    assert (temp / "previous" / "stats.json").read_bytes() == EARLIER["stats.json"]


def test_nothing_is_touched_when_a_new_file_is_missing_or_a_run_appeared(tmp_path):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)
    before = _files(out)
    with pytest.raises(RuntimeError, match="missing; nothing was replaced"):
        _replace(out, temp, [(str(temp / "gone"), str(out / "x.parquet")), *moves])
    refusal = (f"{out} holds the outputs of another run (8 files, e.g. {out / MARKER}), "
               "written while this one ran: two runs into one folder at once are not "
               "supported; nothing was replaced")
    with pytest.raises(FileExistsError, match=f"^{re.escape(refusal)}$"):
        _replace(out, temp, moves, overwrite=False)
    with pytest.raises(ValueError, match="^no files to move in: a run has at least its "
                                         "completeness marker$"):
        _replace(out, temp, [])
    assert _files(out) == before


def test_a_retried_swap_skips_what_is_done(tmp_path):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)
    # An attempt that died after moving the earlier run aside and two new files in.
    for name in EARLIER:
        if name != "notes.txt":
            (temp / "previous" / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).rename(temp / "previous" / name)
    for temp_name, final in moves[:2]:
        Path(temp_name).rename(final)
    _replace(out, temp, moves, overwrite=False)  # the files it finds are its own
    assert _files(out) == NEW | {"notes.txt": EARLIER["notes.txt"]}
    assert not (out / "wes-k2").exists() and not (temp / "previous").exists()


class ObjectStore(FileSystem):
    """An object store in memory, `memstore://`: no folders, a rename is a copy and a
    delete, as on GCS."""

    objects: dict[str, bytes] = {}

    @classmethod
    def scheme(cls):
        return "memstore"

    def join(self, basepath, *paths):
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path):
        head, _, tail = path.rpartition("/")
        return head, tail

    def mkdirs(self, path):
        pass

    def has_dirs(self):
        return False

    def _list(self, prefix):
        for path, data in list(self.objects.items()):
            if path.startswith(prefix):
                yield FileMetadata(path, len(data))

    def create(self, path, mime_type=None, compression_type=None):
        objects = self.objects

        class Upload(io.BytesIO):
            def close(self):
                objects[path] = self.getvalue()
                super().close()

        return Upload()

    def open(self, path, mime_type=None, compression_type=None):
        return io.BytesIO(self.objects[path])

    def _missing(self, paths):
        missing = [p for p in paths if p not in self.objects]
        if missing:
            raise BeamIOError("not found", {p: FileNotFoundError(p) for p in missing})

    def copy(self, sources, destinations):
        self._missing(sources)
        for source, destination in zip(sources, destinations):
            self.objects[destination] = self.objects[source]

    def rename(self, sources, destinations):
        self.copy(sources, destinations)
        self.delete(sources)

    def exists(self, path):
        return path in self.objects

    def size(self, path):
        return len(self.objects[path])

    def last_updated(self, path):
        return 0.0

    def checksum(self, path):
        return str(len(self.objects[path]))

    def metadata(self, path):
        self._missing([path])
        return FileMetadata(path, len(self.objects[path]))

    def delete(self, paths):
        self._missing(paths)
        for path in paths:
            del self.objects[path]


def test_replacing_a_run_on_an_object_store(monkeypatch):
    monkeypatch.setattr(ObjectStore, "objects", {})
    out, temp = "memstore://bucket/out", "memstore://bucket/out/.temp-new"
    ObjectStore.objects.update({f"{out}/{n}": d for n, d in EARLIER.items()})
    ObjectStore.objects[f"{out}/.temp-dead/x.parquet"] = b"partial"
    moves = []
    for i, (name, data) in enumerate(NEW.items()):
        ObjectStore.objects[f"{temp}/staged-{i}"] = data
        moves.append((f"{temp}/staged-{i}", f"{out}/{name}"))
    before = dict(ObjectStore.objects)
    rename = ObjectStore.rename

    def failing_rename(self, sources, destinations):
        if destinations == [f"{out}/stats.json"] and "previous" not in sources[0]:
            raise BeamIOError("rename failed", {sources[0]: OSError("quota")})
        return rename(self, sources, destinations)

    monkeypatch.setattr(ObjectStore, "rename", failing_rename)
    with pytest.raises(RuntimeError, match="put back as they were"):
        publish_run(moves, out, temp, MARKER, True, run_files)
    assert ObjectStore.objects == before
    monkeypatch.setattr(ObjectStore, "rename", rename)
    publish_run(moves, out, temp, MARKER, True, run_files)
    assert ObjectStore.objects == {f"{out}/{n}": d for n, d in NEW.items()} | {
        f"{out}/notes.txt": EARLIER["notes.txt"]}


N_MOVES = len(EARLIER_RUN) + len(NEW)  # of a swap that succeeds


@pytest.mark.parametrize("fail_at", range(N_MOVES + 1))  # the last one: no failure
def test_a_reader_never_finds_the_marker_beside_a_mix_of_runs(tmp_path, monkeypatch, fail_at):
    """After every single move of a swap that fails at move `fail_at`, and of its putting
    back: a folder holding stats.json holds exactly one run's files, the earlier or the
    new one. So the earlier marker leaves first, the new one comes in last, and the
    earlier one is put back last."""
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)
    rename = FileSystems.rename
    calls = []

    def checked_rename(sources, destinations):
        calls.append((sources[0], destinations[0]))
        if len(calls) == fail_at + 1:
            raise OSError("disk on fire")
        rename(sources, destinations)
        run = _run_in(out)
        if MARKER in run:
            assert run in (EARLIER_RUN, NEW), (calls, sorted(run))

    monkeypatch.setattr(FileSystems, "rename", staticmethod(checked_rename))
    if fail_at < N_MOVES:
        with pytest.raises(RuntimeError, match="the earlier outputs were put back as they "
                                               "were"):
            _replace(out, temp, moves)
        assert _run_in(out) == EARLIER_RUN
    else:
        _replace(out, temp, moves)
        assert _run_in(out) == NEW
        assert len(calls) == N_MOVES


def test_the_log_of_a_swap(tmp_path, caplog):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    caplog.set_level(logging.INFO, logger=publish.__name__)
    _replace(out, temp, _stage(out, temp))
    assert caplog.messages == [f"replaced 8 files of an earlier run in {out}"]
    caplog.clear()
    out, temp = tmp_path / "empty", tmp_path / "empty" / ".temp-new"
    _replace(out, temp, _stage(out, temp))
    assert caplog.messages == []  # nothing replaced, nothing failed


def test_files_at_final_names_are_taken_for_the_earlier_runs_even_unlisted(tmp_path):
    """A caller's list of the earlier run that misses files (here: lists none) does not
    let a file at a final name be overwritten unseen."""
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, {MARKER: EARLIER[MARKER]})
    moves = _stage(out, temp)
    with pytest.raises(FileExistsError, match=re.escape(
            f"{out} holds the outputs of another run (1 files, e.g. {out / MARKER})")):
        replace_outputs(moves, [], str(out), str(temp / "previous"), overwrite=False)
    assert _run_in(out) == {MARKER: EARLIER[MARKER]}


def test_only_folders_the_earlier_run_leaves_empty_are_removed(tmp_path):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, {MARKER: b"old", "deep/er/x.parquet": b"x", "deep/notes.txt": b"mine",
                "kept/y.parquet": b"y"})
    _make(temp, {"staged": b"new"})
    replace_outputs([(str(temp / "staged"), str(out / MARKER))],
                    [str(out / MARKER), str(out / "deep/er/x.parquet")], str(out),
                    str(temp / "previous"))
    assert _files(out) == {MARKER: b"new", "deep/notes.txt": b"mine", "kept/y.parquet": b"y"}
    assert not (out / "deep" / "er").exists()


def test_parent_folders_made_meanwhile_by_another_process_are_no_failure(tmp_path,
                                                                       monkeypatch):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    moves = _stage(out, temp)
    mkdirs = FileSystems.mkdirs

    def racing_mkdirs(path):
        mkdirs(path)  # another process made it first
        raise OSError(f"{path} exists")

    def failing_mkdirs(path):
        raise OSError("read-only file system")

    monkeypatch.setattr(FileSystems, "mkdirs", staticmethod(failing_mkdirs))
    with pytest.raises(RuntimeError, match=r"failed \(read-only file system\); the earlier"):
        _replace(out, temp, moves, overwrite=False)
    monkeypatch.setattr(FileSystems, "mkdirs", staticmethod(racing_mkdirs))
    _replace(out, temp, moves, overwrite=False)
    assert _files(out) == NEW


def test_a_failure_to_remove_the_earlier_run_is_logged_the_new_one_stays(tmp_path,
                                                                        monkeypatch, caplog):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)

    def failing_delete(paths):
        raise BeamIOError("delete failed", {paths[0]: OSError("permission denied")})

    monkeypatch.setattr(FileSystems, "delete", staticmethod(failing_delete))
    caplog.set_level(logging.WARNING, logger=publish.__name__)
    assert _replace(out, temp, moves) == [final for _, final in moves]
    assert _run_in(out) == NEW
    [message] = caplog.messages
    assert message.startswith(f"the new outputs are in place in {out}, but removing the "
                              "earlier ones failed: ")
    assert "permission denied" in message
