"""ReadRowsFn, ReadSplit and plan_splits without a pipeline, ReadPredictions' step names
and one small pipeline with every option (tests/scoring/test_read.py and
test_read_splits.py cover the formats and the splitting)."""

from __future__ import annotations

import io
import json
import logging
import os

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileMetadata
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.dofns import run_dofn, step_labels
from tests.runners import RUNNER_ARGS
from transforms.metrics.base import QAExample
from transforms.scoring.reading.read import (
    DEAD_LETTER,
    ReadPredictions,
    ReadRowsFn,
    ReadSplit,
    SplitPlan,
    count_newlines,
    plan_splits,
)
from transforms.scoring.reading.rows import REASONS, ColumnMapping, RowSource, ScoringRow
from transforms.scoring.reading.sniff import sniff_columns

LINES = [{"prediction": "a", "references": ["b"], "id": 1, "system": "s"},
         "{broken",
         {"references": ["b"], "id": 3, "system": "t"},
         {"prediction": "long answer", "references": ["b"], "id": 4},
         {"prediction": "c", "references": ["d", "e"]},
         {"prediction": "f", "references": ["g"]}]


def _jsonl(tmp_path, name="in.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
                            for line in LINES))
    return str(path)


def _dead(path, row, reason, detail, row_id=None, system=None):
    return {"file": path, "row": row, "line": row, "row_key": f"{path}:{row}", "id": row_id,
            "system": system, "reason": reason, "detail": detail}


def _row(path, row, prediction, references, row_id=None, system=None):
    return (f"{path}:{row}", ScoringRow(RowSource(path, row, row),
                                        QAExample(prediction, tuple(references)),
                                        id=row_id, system=system))


def test_read_rows_fn_rows_dead_letters_and_counts(tmp_path, caplog):
    path = _jsonl(tmp_path)
    fn = ReadRowsFn(ColumnMapping(id="id", system="system"), max_text_chars=5)
    assert fn.stat_keys() == [("read", "passed"), *(("read", f"filtered:{r}") for r in REASONS)]
    caplog.set_level(logging.DEBUG, logger="transforms.scoring.reading.read")
    main, tagged, counts = run_dofn(fn, [ReadSplit(path, "jsonl")])
    assert main == [_row(path, 1, "a", ["b"], "1", "s"), _row(path, 5, "c", ["d", "e"]),
                    _row(path, 6, "f", ["g"])]
    dead = tagged[DEAD_LETTER]
    assert [(d["row"], d["reason"], d["id"], d["system"]) for d in dead] == [
        (2, "malformed_json", None, None), (3, "missing_prediction", "3", "t"),
        (4, "text_too_long", "4", None)]
    assert dead[0] == _dead(path, 2, "malformed_json", "Expecting property name enclosed in "
                            "double quotes: line 1 column 2 (char 1)")
    assert dead[1] == _dead(path, 3, "missing_prediction", "no column 'prediction'", "3", "t")
    assert counts == {("read", "passed"): 3, ("read", "filtered:malformed_json"): 1,
                      ("read", "filtered:missing_prediction"): 1,
                      ("read", "filtered:text_too_long"): 1}
    assert f"reading {path} as jsonl (whole file)" in caplog.messages
    assert [m for m in caplog.messages if m.startswith("dead-lettered")] == [
        f"dead-lettered {path}:3: missing_prediction: no column 'prediction'",
        f"dead-lettered {path}:4: text_too_long: {dead[2]['detail']}"]


@pytest.mark.parametrize("batch_rows", [None, 7])
def test_read_rows_fn_counts_every_row_past_its_count_step(tmp_path, batch_rows):
    """`passed` is counted every `_COUNT_EVERY` rows and at the end: 300 rows with a bad
    one every 50 count 294 passed (across several steps and a remainder) and 6 filtered,
    in batches or not."""
    from transforms.scoring.reading import read

    assert 300 > 2 * read._COUNT_EVERY
    path = tmp_path / "many.jsonl"
    path.write_text("".join(
        ("{bad\n" if i % 50 == 0 else json.dumps({"prediction": "a", "references": ["b"]})
         + "\n") for i in range(300)))
    kwargs = {} if batch_rows is None else {"batch_rows": batch_rows}
    fn = ReadRowsFn(ColumnMapping(), **kwargs)
    steps, counted = [], fn.count

    def count(name, n=1):
        if name == "passed":
            steps.append(n)
        counted(name, n)
    fn.count = count
    main, tagged, counts = run_dofn(fn, [ReadSplit(str(path), "jsonl")])
    assert steps == [read._COUNT_EVERY, read._COUNT_EVERY, 294 - 2 * read._COUNT_EVERY]
    assert counts == {("read", "passed"): 294, ("read", "filtered:malformed_json"): 6}
    assert sum(1 if batch_rows is None else len(b) for b in main) == 294
    assert len(tagged[DEAD_LETTER]) == 6


def test_read_rows_fn_batches_consecutive_rows(tmp_path):
    path = _jsonl(tmp_path)
    with pytest.raises(ValueError, match=r"^batch_rows must be >= 1, got 0$"):
        ReadRowsFn(ColumnMapping(), batch_rows=0)
    main, tagged, _ = run_dofn(ReadRowsFn(ColumnMapping(), batch_rows=2),
                               [ReadSplit(path, "jsonl")])
    assert [(b.batch_id, [k for k, _ in b.rows]) for b in main] == [
        (f"{path}:1", [f"{path}:1", f"{path}:4"]), (f"{path}:5", [f"{path}:5", f"{path}:6"])]
    assert [d["row"] for d in tagged[DEAD_LETTER]] == [2, 3]
    main, _, _ = run_dofn(ReadRowsFn(ColumnMapping(), batch_rows=3), [ReadSplit(path, "jsonl")])
    assert [(b.batch_id, len(b)) for b in main] == [(f"{path}:1", 3), (f"{path}:6", 1)]
    main, _, _ = run_dofn(ReadRowsFn(ColumnMapping(), batch_rows=1), [ReadSplit(path, "jsonl")])
    assert [len(b) for b in main] == [1, 1, 1, 1]


def test_read_rows_fn_reads_a_whole_matched_file_in_its_format(tmp_path, caplog):
    path = tmp_path / "in.txt"  # no known suffix: the format is given
    path.write_text(json.dumps(LINES[0]) + "\n")
    caplog.set_level(logging.INFO, logger="transforms.scoring.reading.read")
    file = fileio.ReadableFile(FileMetadata(str(path), path.stat().st_size))
    main, _, _ = run_dofn(ReadRowsFn(ColumnMapping(), input_format="jsonl"), [file])
    assert main == [_row(str(path), 1, "a", ["b"])]
    assert f"reading {path} as jsonl (whole file)" in caplog.messages


def test_read_rows_fn_reads_csv_cells_as_text(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text('prediction,references,id\na,"[""x"", ""y""]",\nb,z,7\n,z,\n')
    main, tagged, _ = run_dofn(ReadRowsFn(ColumnMapping(id="id")),
                               [ReadSplit(str(path), "csv")])
    assert [(r.example.references, r.id) for _, r in main] == [(("x", "y"), None),
                                                                (("z",), "7")]
    # an empty cell is a missing value, in a dead letter's id too
    assert [(d["row"], d["reason"], d["id"]) for d in tagged[DEAD_LETTER]] == [
        (3, "empty_prediction", None)]


def test_splits_describe_themselves(tmp_path, caplog):
    path = _jsonl(tmp_path)
    size = len(open(path, "rb").read())
    caplog.set_level(logging.INFO, logger="transforms.scoring.reading.read")
    run_dofn(ReadRowsFn(ColumnMapping()), [ReadSplit(path, "jsonl", 0, size, size=size)])
    table = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"prediction": ["p"], "references": [["r"]]}), table)
    run_dofn(ReadRowsFn(ColumnMapping()), plan_splits(table, 0, None, 1))
    assert caplog.messages == [f"reading {path} as jsonl (bytes 0-{size})",
                               f"reading {table} as parquet (row groups [0])"]


def test_plan_splits_exactly(tmp_path):
    path = _jsonl(tmp_path)
    size = len(open(path, "rb").read())
    assert plan_splits(path, size, None, size) == [ReadSplit(path, "jsonl")]
    half = size // 2 + 1
    modified = os.path.getmtime(path)  # a split checks the file's size and time
    assert plan_splits(path, size, None, half) == [
        ReadSplit(path, "jsonl", 0, half, size=size, modified=modified),
        ReadSplit(path, "jsonl", half, size, size=size, modified=modified)]
    assert plan_splits(str(tmp_path / "x.txt"), size, "jsonl", 1)[0].fmt == "jsonl"
    empty = str(tmp_path / "empty.parquet")
    pq.ParquetWriter(empty, pa.schema([("prediction", pa.string())])).close()
    assert pq.ParquetFile(empty).metadata.num_row_groups == 0
    assert plan_splits(empty, 0, None, 1) == [ReadSplit(empty, "parquet")]  # no group


def test_a_compressed_parquet_file_is_read_whole(tmp_path):
    import gzip

    sink = tmp_path / "t.parquet"
    pq.write_table(pa.table({"prediction": ["p", "q"], "references": [["r"], ["s"]]}), sink,
                   row_group_size=1)
    packed = tmp_path / "t.parquet.gz"
    packed.write_bytes(gzip.compress(sink.read_bytes()))
    splits = plan_splits(str(packed), packed.stat().st_size, None, 1)
    assert splits == [ReadSplit(str(packed), "parquet")]
    main, _, _ = run_dofn(ReadRowsFn(ColumnMapping()), splits)
    assert [(k, r.example.prediction) for k, r in main] == [(f"{packed}:1", "p"),
                                                           (f"{packed}:2", "q")]


def test_count_newlines_reads_only_its_range(tmp_path):
    # more than one 4 MiB block, a newline every 10 bytes
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"123456789\n" * 900_000)
    size = 9_000_000
    assert count_newlines(ReadSplit(str(path), "jsonl", 0, size, size=size)) == (
        str(path), (0, 900_000))
    assert count_newlines(ReadSplit(str(path), "jsonl", 5, 5_000_005, size=size)) == (
        str(path), (5, 500_000))
    assert count_newlines(ReadSplit(str(path), "jsonl", 9, 10, size=size))[1] == (9, 1)
    assert count_newlines(ReadSplit(str(path), "jsonl", 0, 9, size=size))[1] == (0, 0)


def test_sniff_columns_looks_into_as_many_files_and_rows_as_told(tmp_path, caplog):
    for name, rows in (("a.jsonl", [{"prediction": 1, "x": 1}, {"y": 2}]),
                       ("b.jsonl", [{"prediction": 1, "x": 1, "y": 2}]),
                       ("c.jsonl", [{"z": 1}])):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    caplog.set_level(logging.INFO, logger="transforms.scoring.reading.sniff")
    pattern = str(tmp_path / "*.jsonl")
    files, columns = sniff_columns(pattern, max_files=2)
    assert files == [str(tmp_path / n) for n in ("a.jsonl", "b.jsonl", "c.jsonl")]
    assert columns == ["prediction", "x", "y"]
    assert caplog.messages == [f"input {pattern}: 3 file(s), columns "
                               "['prediction', 'x', 'y']"]
    assert sniff_columns(pattern, max_files=2, max_json_rows=1)[1] == ["prediction", "x"]
    assert sniff_columns(pattern)[1] == []
    other = tmp_path / "a.txt"  # no known suffix: read in the format given
    other.write_text((tmp_path / "a.jsonl").read_text())
    assert sniff_columns(str(other), input_format="jsonl")[1] == ["prediction", "x", "y"]


def test_sniff_columns_defaults_and_compressed_parquet(tmp_path):
    import gzip

    # the first 20 files and 100 rows of each are looked into
    for i in range(21):
        keys = ["prediction", "x"] if i < 20 else ["prediction"]
        rows = [dict.fromkeys(keys, 1)] * 100 + [{"late": 1}]
        (tmp_path / f"f{i:02}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert sniff_columns(str(tmp_path / "*.jsonl"))[1] == ["prediction", "x"]
    # a compressed Parquet file is decompressed to be read (pyarrow seeks)
    sink = tmp_path / "t.parquet"
    pq.write_table(pa.table({"prediction": ["p"], "id": ["1"]}), sink)
    packed = tmp_path / "t.parquet.gz"
    packed.write_bytes(gzip.compress(sink.read_bytes()))
    assert sniff_columns(str(packed))[1] == ["prediction", "id"]


def test_a_changed_file_is_named_with_both_sizes():
    import io

    from transforms.scoring.reading.inputs import FileChangedError, check_unchanged

    check_unchanged(io.BytesIO(b"abc"), None)
    check_unchanged(io.BytesIO(b"abc"), 3)
    with pytest.raises(FileChangedError, match=r"^it is 3 bytes now and was 1,005 when the "
                                               r"run planned its parts \(a file must not be "
                                               r"written while it is scored: rerun once it "
                                               r"is complete\)$"):
        check_unchanged(io.BytesIO(b"abc"), 1005)


def test_read_predictions_checks_split_bytes():
    with pytest.raises(ValueError, match=r"^split_bytes must be >= 1, got 0$"):
        ReadPredictions("x", ColumnMapping(), split_bytes=0)
    ReadPredictions("x", ColumnMapping(), split_bytes=1)


def test_read_predictions_step_names(tmp_path):
    pipeline = test_pipeline.TestPipeline()
    out = pipeline | "Read" >> ReadPredictions(_jsonl(tmp_path), ColumnMapping(), batch_rows=2)
    assert set(out) == {"batches", "dead_letter", "stats"}
    expected = {"Read", *(f"Read/{s}" for s in (
        "MatchInputFiles", "PlanSplits", "ByteRanges", "KeyRangesByFile", "CountNewlines",
        "RangesAndCounts", "GroupByFile", "NumberLines", "WholeOrRowGroups", "AllSplits",
        "SpreadSplitsOverWorkers", "ReadAndValidateRows"))}
    assert {label for label in step_labels(pipeline) if label.count("/") <= 1} == expected


@pytest.mark.slow
@pytest.mark.mutation
def test_read_predictions_with_every_option(tmp_path, caplog, monkeypatch):
    """Byte ranges of a file without a known suffix read as JSONL, text length checked,
    rows batched; the same rows, keys and dead letters as the file read whole. The
    ranges carry the modification time of the match (no file is looked up again); 512
    rows a batch by default."""
    from transforms.scoring.reading import read

    path = _jsonl(tmp_path, "in.txt")
    size = os.path.getsize(path)
    many = tmp_path / "many.jsonl"
    many.write_text("".join(json.dumps(LINES[0]) + "\n" for _ in range(513)))
    monkeypatch.setattr(read, "modified_time", _looked_up_again)
    caplog.set_level(logging.INFO, logger="transforms.scoring.reading.read")
    with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
        default = pipeline | "Default" >> ReadPredictions(str(many), ColumnMapping())
        assert_that(default["batches"] | "DefaultSizes" >> beam.Map(len), equal_to([512, 1]),
                    label="default")
        out = pipeline | ReadPredictions(path, ColumnMapping(id="id", system="system"),
                                         input_format="jsonl", max_text_chars=5,
                                         split_bytes=40, batch_rows=2)
        keys = out["batches"] | beam.FlatMap(lambda b: [(k, r.id) for k, r in b.rows])
        assert_that(keys, equal_to([(f"{path}:1", "1"), (f"{path}:5", None),
                                    (f"{path}:6", None)]), label="rows")
        dead = out["dead_letter"] | beam.Map(lambda d: (d["row"], d["line"], d["reason"]))
        assert_that(dead, equal_to([(2, 2, "malformed_json"), (3, 3, "missing_prediction"),
                                    (4, 4, "text_too_long")]), label="dead")
        sizes = out["batches"] | beam.Map(len)
        assert_that(sizes, lambda got: _check(all(n <= 2 for n in got), got), label="batched")
    assert sorted(m for m in caplog.messages if m.startswith(f"reading {path} ")) == sorted(
        f"reading {path} as jsonl (bytes {start}-{min(start + 40, size)})"
        for start in range(0, size, 40))


def _looked_up_again(path):
    raise AssertionError(f"{path} looked up again")


def _check(ok, got):
    if not ok:
        raise AssertionError(got)


def test_a_byte_order_mark_at_the_start_of_a_jsonl_file_is_not_part_of_its_first_row(
        tmp_path):
    """Editors and Windows tools write a UTF-8 byte-order mark; JSON's own parser rejects
    it, so the first row was dead-lettered. It is skipped, whole file or byte ranges, and
    only at the start of the file."""
    from transforms.scoring.reading.formats import iter_jsonl, iter_jsonl_range

    body = (b'\xef\xbb\xbf{"prediction": "a", "references": ["b"]}\n'
            b'{"prediction": "c", "references": ["d"]}\n'
            b'\xef\xbb\xbf{"prediction": "e", "references": ["f"]}\n')
    whole = [(row, record) for row, _, record in iter_jsonl(io.BytesIO(body))]
    assert whole[0] == (1, {"prediction": "a", "references": ["b"]})
    assert whole[1][1] == {"prediction": "c", "references": ["d"]}
    assert whole[2][1].reason == "malformed_json"  # a mark inside the file stays an error
    ranged = [(row, record) for row, _, record in iter_jsonl_range(
        io.BytesIO(body), 0, 10, 1)]
    assert ranged == whole[:1]
    path = tmp_path / "bom.jsonl"
    path.write_bytes(body)
    fn = ReadRowsFn(ColumnMapping())
    fn.start_bundle()
    rows = [out for out in fn.process(ReadSplit(str(path), "jsonl"))
            if not isinstance(out, beam.pvalue.TaggedOutput)]
    assert [key for key, _ in rows] == [f"{path}:1", f"{path}:2"]


def _split_inputs(tmp_path) -> dict[str, tuple[str, list[ReadSplit]]]:
    """A JSONL file in two byte ranges and a Parquet file of two row groups, as planned."""
    jsonl = _jsonl(tmp_path)
    size = os.path.getsize(jsonl)
    table = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"prediction": ["p", "q"], "references": [["r"], ["s"]]}), table,
                   row_group_size=1)
    return {"jsonl": (jsonl, plan_splits(jsonl, size, None, size // 2 + 1)),
            "parquet": (table, plan_splits(table, os.path.getsize(table), None, 1))}


@pytest.mark.parametrize("fmt, read", [("jsonl", "records"), ("jsonl", "lines"),
                                       ("parquet", "records"), ("parquet", "parquet_batches")])
@pytest.mark.parametrize("change", ["grown", "rewritten"])
def test_each_part_reader_refuses_a_file_changed_since_it_was_planned(tmp_path, fmt, read,
                                                                      change):
    path, splits = _split_inputs(tmp_path)[fmt]
    assert len(splits) == 2 and all(s.size is not None for s in splits)
    # as planned: each part reads rows; a Parquet part its own row group's, numbered after
    # the part before (a JSONL range's line numbers wait for `count_lines`)
    firsts = [[item[0] for item in getattr(split, read)()] for split in splits]
    assert firsts[0] and firsts[1]
    if fmt == "parquet":
        assert firsts == [[1], [2]]  # rows are numbered from 1
    if read == "parquet_batches":  # one row group's rows each
        assert [sum(b.num_rows for _, b in split.parquet_batches()) for split in splits] == [1, 1]
    if change == "grown":  # more bytes: the size no longer matches
        with open(path, "ab") as f:
            f.write(b"\n")
        message = "FileChangedError: it is .* bytes now"
    else:  # the same bytes written again later: the time no longer matches
        moment = os.path.getmtime(path) + 10
        os.utime(path, (moment, moment))
        message = "FileChangedError: it was modified"
    with pytest.raises(Exception, match=message):
        list(getattr(splits[1], read)())


@pytest.mark.parametrize("plan, workers, spreads", [
    (SplitPlan(0, 4, 25, 100), 2, True),    # two splits a worker, each a quarter: the edge
    (SplitPlan(0, 3, 25, 100), 2, False),   # fewer than two splits a worker
    (SplitPlan(0, 4, 26, 100), 2, False),   # one split over half a worker's share
    (SplitPlan(0, 2, 0, 0), 1, True),       # empty files: nothing to spread unfairly
    (SplitPlan(0, 2, 1, 0), 1, False),
])
def test_a_split_plan_spreads_at_its_edges(plan, workers, spreads):
    assert plan.spreads(workers) is spreads
