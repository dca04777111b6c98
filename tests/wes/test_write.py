"""`WriteParquetShards`: every output of a run in one write, named when all are done;
`replace_outputs` / `publish_run`: a run's files in place of an earlier run's."""

from __future__ import annotations

import io
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystem import BeamIOError, FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems

from tests.runners import RUNNER_ARGS
from transforms.wes.write import (
    REDIRECT_SCHEMA,
    PublishRun,
    WriteParquetShards,
    _NameShardsFn,
    _WriteTempShardsFn,
    publish_run,
    replace_outputs,
    run_files,
    temp_dirs,
)

NUMBERS = pa.schema([pa.field("n", pa.int64(), nullable=False)])
MARKER = "stats.json"


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (temporary folders included) -> its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _write(out, keyed_rows, schemas, runner="direct_in_process", overwrite=False):
    with beam.Pipeline(argv=RUNNER_ARGS[runner]) as p:
        write = WriteParquetShards(str(out), schemas)
        marker = p | "Marker" >> beam.Create([None]) | beam.Map(
            _write_marker, write.temp_dir, str(out))
        shards = (p | beam.Create(keyed_rows, reshuffle=False) | write)
        _ = (shards, marker) | beam.Flatten() | PublishRun(str(out), write.temp_dir, MARKER,
                                                           overwrite)
    return sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file())


def _write_marker(_, temp_dir, out):
    temp = FileSystems.join(temp_dir, MARKER)
    with FileSystems.create(temp) as f:
        f.write(b"{}")
    return temp, FileSystems.join(out, MARKER)


@pytest.mark.slow
def test_rows_go_to_their_destination_and_empty_ones_get_a_shard(tmp_path):
    rows = [("a/numbers", {"n": i}) for i in range(25_000)]
    rows += [("redirects", {"title": "UK", "target": "United Kingdom"})]
    files = _write(tmp_path, rows, {"a/numbers": NUMBERS, "a/none": NUMBERS,
                                    "redirects": REDIRECT_SCHEMA})
    assert files == ["a/none-00000-of-00001.parquet", "a/numbers-00000-of-00001.parquet",
                     "redirects-00000-of-00001.parquet", MARKER]
    numbers = pq.read_table(tmp_path / files[1])
    assert numbers.schema == NUMBERS and sorted(numbers["n"].to_pylist()) == list(range(25_000))
    assert numbers.num_rows == 25_000 and pq.ParquetFile(tmp_path / files[1]).num_row_groups == 3
    empty = pq.read_table(tmp_path / files[0])
    assert empty.num_rows == 0 and empty.schema == NUMBERS


def test_several_bundles_give_numbered_shards(tmp_path):
    temp = tmp_path / ".temp-x"
    writer = _WriteTempShardsFn(str(temp), {"d": NUMBERS})
    written = []
    for bundle in ([1, 2], [3]):
        writer.start_bundle()
        for n in bundle:
            list(writer.process(("d", {"n": n})) or [])
        written += [wv.value for wv in writer.finish_bundle()]
    (temp / "d-from-a-failed-attempt.parquet").write_bytes(b"partial")
    name = _NameShardsFn(str(tmp_path), str(temp), {"d": NUMBERS})
    moves = list(name.process(None, written))
    assert [final.rsplit("/", 1)[1] for _, final in moves] == ["d-00000-of-00002.parquet",
                                                               "d-00001-of-00002.parquet"]
    assert list(name.process(None, written)) == moves  # a retry gives the same names
    assert not list(tmp_path.glob("d-*")), "nothing is moved before the last step"
    finals = publish_run(moves + [_write_marker(None, str(temp), str(tmp_path))],
                         str(tmp_path), str(temp), MARKER, overwrite=False)
    assert sorted(n for f in finals[:2] for n in pq.read_table(f)["n"].to_pylist()) == [1, 2, 3]
    assert not temp.exists()  # the failed attempt's file went with the folder
    assert sorted(_files(tmp_path)) == ["d-00000-of-00002.parquet", "d-00001-of-00002.parquet",
                                        MARKER]


def test_unknown_destination_fails(tmp_path):
    writer = _WriteTempShardsFn(str(tmp_path), {"d": NUMBERS})
    writer.start_bundle()
    with pytest.raises(ValueError, match="unknown output destination 'e'"):
        writer.process(("e", {"n": 1}))


@pytest.mark.slow
def test_same_files_on_the_multiprocess_runner(tmp_path):
    rows = [("x/y", {"n": i}) for i in range(100)]
    files = _write(tmp_path, rows, {"x/y": NUMBERS}, runner="direct_multi_processing")
    shards = [f for f in files if f != MARKER]
    assert all(f.startswith("x/y-0000") for f in shards) and shards
    assert sorted(n for f in shards for n in pq.read_table(tmp_path / f)["n"].to_pylist()) == \
        list(range(100))


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
    publish_run(reversed(moves), str(out), str(temp), MARKER, overwrite=True)
    assert _files(out) == NEW | {"notes.txt": EARLIER["notes.txt"]}
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["dataset_card.md", "notes.txt", "redirects-00000-of-00001.parquet", "stats.json",
         "wes-k5", "wes-k5-clusters"])
    with pytest.raises(ValueError, match="no stats.json to publish"):
        publish_run(moves[:-1], str(out), str(temp), MARKER, overwrite=True)


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
        publish_run(moves, out, temp, MARKER, overwrite=True)
    assert ObjectStore.objects == before
    monkeypatch.setattr(ObjectStore, "rename", rename)
    publish_run(moves, out, temp, MARKER, overwrite=True)
    assert ObjectStore.objects == {f"{out}/{n}": d for n, d in NEW.items()} | {
        f"{out}/notes.txt": EARLIER["notes.txt"]}
