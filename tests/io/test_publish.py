"""transforms/io/publish.py: `replace_outputs` / `publish_run`, a run's files in place of an
earlier run's (on a local disk and on an object store)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from apache_beam.io.filesystem import BeamIOError, FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems

from transforms.io.publish import publish_run, replace_outputs, temp_dirs
from transforms.wes.write import run_files

MARKER = "stats.json"


# An earlier run's files: a complete run with k = 2 and 5, and a file of someone else.
EARLIER = {
    "stats.json": b'{"run": "earlier"}',
    "dataset_card.md": b"# earlier",
    "redirects-00000-of-00001.parquet": b"r",
    "wes-k2/train-00000-of-00001.parquet": b"k2 train",
    "wes-k2-clusters/clusters-00000-of-00001.parquet": b"k2 clusters",
    "wes-k5/train-00000-of-00001.parquet": b"k5 train",
    "wes-k5/dev-00000-of-00001.parquet": b"k5 dev",
    "wes-k5-clusters/clusters-00000-of-00001.parquet": b"k5 clusters",
    "notes.txt": b"not a run file",
}
# A new run with k = 5 only.
NEW = {
    "redirects-00000-of-00001.parquet": b"new r",
    "wes-k5/train-00000-of-00002.parquet": b"new k5 train 0",
    "wes-k5/train-00001-of-00002.parquet": b"new k5 train 1",
    "wes-k5-clusters/clusters-00000-of-00001.parquet": b"new k5 clusters",
    "dataset_card.md": b"# new",
    "stats.json": b'{"run": "new"}',  # the marker, last
}


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (temporary folders included) -> its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _make(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def _stage(out: Path, temp: Path) -> list[tuple[str, str]]:
    """The new run's files under temporary names; its (temporary, final) moves."""
    moves = []
    for i, (name, data) in enumerate(NEW.items()):
        _make(temp, {f"staged-{i}": data})
        moves.append((str(temp / f"staged-{i}"), str(out / name)))
    return moves


def _replace(out: Path, temp: Path, moves, overwrite=True):
    return replace_outputs(moves, run_files(str(out)), str(out), str(temp / "previous"),
                           overwrite)


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
    with pytest.raises(RuntimeError, match=r"failed \(.*disk on fire.*\); the earlier "
                                           "outputs were put back as they were"):
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
        if sources[0].startswith(str(temp / "previous")) or destinations[0].endswith(
                "stats.json") and sources[0].startswith(str(temp / "staged")):
            raise OSError("disk on fire")
        return rename(sources, destinations)

    monkeypatch.setattr(FileSystems, "rename", staticmethod(failing_rename))
    with pytest.raises(RuntimeError, match="and so did putting the earlier ones back") as e:
        _replace(out, temp, moves)
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
    with pytest.raises(FileExistsError, match="two runs into one folder at once"):
        _replace(out, temp, moves, overwrite=False)
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


def test_publish_run_removes_temporary_folders_of_runs_that_died(tmp_path):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    _make(out, {".temp-dead/wes-k5__train-abc.parquet": b"partial",
                ".temp-dead/previous/stats.json": b"{}"})
    (out / ".temp-empty").mkdir()
    assert [Path(d).name for d in temp_dirs(str(out))] == [".temp-dead", ".temp-empty"]
    moves = _stage(out, temp)
    publish_run(reversed(moves), str(out), str(temp), MARKER, True, run_files)
    assert _files(out) == NEW | {"notes.txt": EARLIER["notes.txt"]}
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["dataset_card.md", "notes.txt", "redirects-00000-of-00001.parquet", "stats.json",
         "wes-k5", "wes-k5-clusters"])
    with pytest.raises(ValueError, match="no stats.json to publish"):
        publish_run(moves[:-1], str(out), str(temp), MARKER, True, run_files)


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
