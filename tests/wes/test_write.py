"""`WriteParquetShards`: every output of a run in one write, named when all are done;
written through `publish_run` (its own tests: tests/io/test_publish.py and
tests/io/test_publish_folders.py)."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems

from tests.runners import RUNNER_ARGS
from transforms.io.publish import PublishRun, publish_run
from transforms.wes.write import (
    REDIRECT_SCHEMA,
    WriteParquetShards,
    _NameShardsFn,
    _WriteTempShardsFn,
    run_files,
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
                                                           overwrite, run_files)
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
                         str(tmp_path), str(temp), MARKER, False, run_files)
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
