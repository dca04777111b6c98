"""Tests for transforms/scoring/reading/read.py: formats, row numbers, sniffing, ReadPredictions."""

from __future__ import annotations

import bz2
import gzip
import io
import json

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileMetadata
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.scoring.reading.formats import input_format_of, iter_csv, iter_jsonl, iter_parquet
from transforms.scoring.reading.inputs import InputFileError
from transforms.scoring.reading.read import ReadPredictions, ReadRowsFn
from transforms.scoring.reading.rows import ColumnMapping, RowError
from transforms.scoring.reading.sniff import sniff_columns


@pytest.mark.parametrize("path, override, expected", [
    ("a/b.jsonl", None, "jsonl"),
    ("a/b.JSON.gz", None, "jsonl"),
    ("b.ndjson", None, "jsonl"),
    ("b.csv.bz2", None, "csv"),
    ("b.parquet", None, "parquet"),
    ("b.txt", "csv", "csv"),
])
def test_input_format_of(path, override, expected):
    assert input_format_of(path, override) == expected


def test_input_format_errors_list_what_is_known():
    with pytest.raises(ValueError, match="--input_format jsonl|csv|parquet"):
        input_format_of("b.txt")
    with pytest.raises(ValueError, match="available"):
        input_format_of("b.csv", "xml")


def test_iter_jsonl_numbers_lines_and_skips_blank_ones():
    data = b'{"a": 1}\n\n   \n{"a": \n[1]\n'
    out = list(iter_jsonl(io.BytesIO(data)))
    assert [(row, line) for row, line, _ in out] == [(1, 1), (4, 4), (5, 5)]
    assert out[0][2] == {"a": 1}
    assert [r.reason for _, _, r in out[1:]] == ["malformed_json", "not_a_json_object"]


def test_iter_csv_rows_lines_and_field_counts():
    data = ('\ufeffprediction,references\n'
            'a,b\n'
            '\n'
            '"two\nlines",c\n'
            'x,y,z\n'
            'd,"[""e"", ""f""]"\n').encode()
    out = list(iter_csv(io.BytesIO(data)))
    assert [(row, line) for row, line, _ in out] == [(1, 2), (2, 4), (3, 6), (4, 7)]
    assert out[0][2] == {"prediction": "a", "references": "b"}
    assert out[1][2] == {"prediction": "two\nlines", "references": "c"}
    assert isinstance(out[2][2], RowError) and out[2][2].reason == "wrong_field_count"
    assert out[3][2] == {"prediction": "d", "references": '["e", "f"]'}


def test_iter_csv_dead_letters_undecodable_records():
    out = list(iter_csv(io.BytesIO(b"prediction,references\na,b\n\xff\xfe,c\nd,e\n")))
    assert out[0][2] == {"prediction": "a", "references": "b"}
    assert out[1][2].reason == "invalid_utf8"
    assert out[2][2] == {"prediction": "d", "references": "e"}


def test_iter_parquet_numbers_rows(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"prediction": ["a", None], "references": [["b"], []]}), path)
    with open(path, "rb") as f:
        out = list(iter_parquet(f))
    assert out == [(1, None, {"prediction": "a", "references": ["b"]}),
                   (2, None, {"prediction": None, "references": []})]


def test_sniff_columns_per_format(tmp_path):
    (tmp_path / "a.jsonl").write_text(
        '{"prediction": "p", "references": ["r"]}\n{"prediction": "q", "human": 1}\n')
    (tmp_path / "b.csv").write_text("prediction,reference1,reference2\np,r,s\n")
    pq.write_table(pa.table({"prediction": ["p"], "id": ["1"]}), tmp_path / "c.parquet")
    assert sniff_columns(str(tmp_path / "a.jsonl"))[1] == ["prediction", "references", "human"]
    assert sniff_columns(str(tmp_path / "b.csv"))[1] == ["prediction", "reference1",
                                                         "reference2"]
    files, columns = sniff_columns(str(tmp_path / "*"))
    assert len(files) == 3 and columns == ["prediction"]
    with pytest.raises(ValueError, match="matches no file"):
        sniff_columns(str(tmp_path / "*.nothing"))


def test_read_predictions_routes_rows_and_dead_letters(tmp_path):
    jsonl = tmp_path / "in.jsonl.gz"
    with gzip.open(jsonl, "wt") as f:
        f.write(json.dumps({"prediction": "a", "references": ["b"], "id": 1}) + "\n")
        f.write("{broken\n")
        f.write(json.dumps({"references": ["b"], "id": 3}) + "\n")
    csv_path = tmp_path / "in.csv"
    csv_path.write_text("prediction,references\nc,d\n")
    mapping = ColumnMapping(id="id")
    pipeline = test_pipeline.TestPipeline()
    out = pipeline | ReadPredictions(str(tmp_path / "in.*"), mapping)
    keys = out["batches"] | "Keys" >> beam.FlatMap(
        lambda batch: [(k, row.example.prediction) for k, row in batch.rows])
    assert_that(keys, equal_to([(f"{jsonl}:1", "a"), (f"{csv_path}:1", "c")]), label="rows")
    reasons = out["dead_letter"] | "Reasons" >> beam.Map(
        lambda d: (d["row"], d["line"], d["reason"], d["id"]))
    assert_that(reasons, equal_to([(2, 2, "malformed_json", None),
                                   (3, 3, "missing_prediction", "3")]), label="dead")
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed
                for c in result.metrics().query(MetricsFilter().with_namespace("read"))[
                    "counters"]}
    assert counters == {"passed": 2, "filtered:malformed_json": 1,
                        "filtered:missing_prediction": 1}


def _rows_json(n: int) -> bytes:
    return b"".join(json.dumps({"id": f"r{i}", "prediction": f"answer {i}",
                                "references": [f"gold {i}", "other"]}).encode() + b"\n"
                    for i in range(n))


def _read_file(path) -> list:
    fn = ReadRowsFn(ColumnMapping())
    return list(fn.process(fileio.ReadableFile(FileMetadata(str(path), path.stat().st_size))))


def test_a_cut_gzip_file_fails_naming_it_instead_of_losing_rows(tmp_path):
    # 3,000 rows, the gzip cut at 60%; Beam's reader reads 1,787 of them and stops silently.
    path = tmp_path / "preds.jsonl.gz"
    data = gzip.compress(_rows_json(3000))
    path.write_bytes(data[: int(len(data) * 0.6)])
    with pytest.raises(InputFileError, match=f"^input file {path}: cannot be read after row "
                                             r"\d+: EOFError.*cut short"):
        _read_file(path)
    complete = tmp_path / "complete.jsonl.gz"
    complete.write_bytes(data)
    assert len(_read_file(complete)) == 3000


def _parquet() -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"prediction": ["a"] * 99, "references": [["b"]] * 99}), sink)
    return sink.getvalue()


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


DAMAGED = {
    "cut.csv.bz2": lambda: _half(bz2.compress(b"prediction,references\n" + b"a,b\n" * 3000)),
    "cut.parquet.gz": lambda: _half(gzip.compress(_parquet())),
    "half.parquet": lambda: _half(_parquet()),
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_every_format_names_a_damaged_file(tmp_path, name):
    # CSV and Parquet too, compressed or not.
    path = tmp_path / name
    path.write_bytes(DAMAGED[name]())
    with pytest.raises(InputFileError, match=f"^input file {path}: cannot be read"):
        _read_file(path)


def test_sniffing_names_a_file_it_cannot_read(tmp_path):
    cut = tmp_path / "cut.jsonl.bz2"
    data = bz2.compress(_rows_json(50))
    cut.write_bytes(data[: len(data) // 2])  # used to sniff as a file with no columns
    with pytest.raises(InputFileError, match=f"^input file {cut}: .*cut short"):
        sniff_columns(str(cut))


def test_a_whole_compressed_parquet_file_reads_its_records(tmp_path):
    """pyarrow seeks in a Parquet file: `ReadSplit.records` of a whole compressed one
    decompresses it to a local file first (a JSONL or CSV one is read as a stream)."""
    from transforms.scoring.reading.read import ReadSplit

    packed = tmp_path / "t.parquet.gz"
    packed.write_bytes(gzip.compress(_parquet()))
    records = list(ReadSplit(str(packed), "parquet").records())
    assert [(row, line) for row, line, _ in records] == [(i, None) for i in range(1, 100)]
    assert records[0][2] == {"prediction": "a", "references": ["b"]}
    jsonl = tmp_path / "t.jsonl.gz"
    jsonl.write_bytes(gzip.compress(_rows_json(3)))
    assert [row for row, _, _ in ReadSplit(str(jsonl), "jsonl").records()] == [1, 2, 3]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_text_over_max_text_chars_is_dead_lettered_when_read_as_columns(tmp_path, fmt):
    """Well-formed rows are read as columns (columnar.py); a text over `max_text_chars`
    still goes to the dead letters, as on the per-row path."""
    from transforms.scoring.reading.read import ReadSplit

    rows = [{"prediction": "short", "references": ["b"]},
            {"prediction": "far too long", "references": ["b"]},
            {"prediction": "c", "references": ["a longer one"]}] * 4
    path = tmp_path / f"in.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    fn = ReadRowsFn(ColumnMapping(), max_text_chars=5)
    fn.start_bundle()
    out = list(fn.process(ReadSplit(str(path), fmt)))
    assert [key for key, _ in (o for o in out if not isinstance(o, beam.pvalue.TaggedOutput))
            ] == [f"{path}:{row}" for row in (1, 4, 7, 10)]
    assert [(o.value["row"], o.value["reason"]) for o in out
            if isinstance(o, beam.pvalue.TaggedOutput)] == [
        (row, "text_too_long") for row in (2, 3, 5, 6, 8, 9, 11, 12)]
