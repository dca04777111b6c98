"""`WriteParquetShards`: every output of a run in one write, renamed when all are done."""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.runners import RUNNER_ARGS
from transforms.wes.write import (
    REDIRECT_SCHEMA,
    WriteParquetShards,
    _FinalizeShardsFn,
    _WriteTempShardsFn,
)

NUMBERS = pa.schema([pa.field("n", pa.int64(), nullable=False)])


def _write(out, keyed_rows, schemas, runner="direct_in_process"):
    with beam.Pipeline(argv=RUNNER_ARGS[runner]) as p:
        files = (p | beam.Create(keyed_rows, reshuffle=False)
                 | WriteParquetShards(str(out), schemas))
        _ = files | beam.Map(lambda f: None)
    return sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file())


def test_rows_go_to_their_destination_and_empty_ones_get_a_shard(tmp_path):
    rows = [("a/numbers", {"n": i}) for i in range(25_000)]
    rows += [("redirects", {"title": "UK", "target": "United Kingdom"})]
    files = _write(tmp_path, rows, {"a/numbers": NUMBERS, "a/none": NUMBERS,
                                    "redirects": REDIRECT_SCHEMA})
    assert files == ["a/none-00000-of-00001.parquet", "a/numbers-00000-of-00001.parquet",
                     "redirects-00000-of-00001.parquet"]
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
    finalize = _FinalizeShardsFn(str(tmp_path), str(temp), {"d": NUMBERS})
    finals = list(finalize.process(None, written))
    assert [f.rsplit("/", 1)[1] for f in finals] == ["d-00000-of-00002.parquet",
                                                     "d-00001-of-00002.parquet"]
    assert sorted(n for f in finals for n in pq.read_table(f)["n"].to_pylist()) == [1, 2, 3]
    assert not temp.exists()  # the failed attempt's file went with the folder
    # A retried finalize finds its renames done and gives the same names.
    assert list(finalize.process(None, written)) == finals


def test_unknown_destination_fails(tmp_path):
    writer = _WriteTempShardsFn(str(tmp_path), {"d": NUMBERS})
    writer.start_bundle()
    with pytest.raises(ValueError, match="unknown output destination 'e'"):
        writer.process(("e", {"n": 1}))


def test_same_files_on_the_multiprocess_runner(tmp_path):
    rows = [("x/y", {"n": i}) for i in range(100)]
    files = _write(tmp_path, rows, {"x/y": NUMBERS}, runner="direct_multi_processing")
    assert all(f.startswith("x/y-0000") for f in files) and files
    assert sorted(n for f in files for n in pq.read_table(tmp_path / f)["n"].to_pylist()) == \
        list(range(100))
