"""Splittable reads: JSONL byte ranges and Parquet row groups read the same rows, with the
same keys and line numbers, and score the same, as one file read whole."""

from __future__ import annotations

import json
import logging
import os
import re

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.runners import RUNNER_ARGS
from transforms.metrics.registry import build_metrics
from transforms.scoring.reading.formats import iter_jsonl
from transforms.scoring.reading.inputs import InputFileError
from transforms.scoring.reading.read import (
    ReadPredictions,
    ReadSplit,
    count_newlines,
    number_lines,
    plan_splits,
)
from transforms.scoring.reading.rows import ColumnMapping
from transforms.scoring.score.in_process import ScoreBatches
from transforms.scoring.statistics.global_statistics import ComputeCorpusStatistics

LINES = [json.dumps({"id": f"r{i}", "prediction": f"the answer {i % 7} is here",
                     "references": [f"the answer {i % 5} is there", f"answer {i % 3}"]})
         for i in range(40)]
LINES[5] = '{"id": "broken", '  # malformed: dead-lettered with its line number
LINES[9] = ""  # blank: skipped, still counted as a line
LINES[17] = "   "


def _jsonl(tmp_path, name="preds.jsonl", lines=LINES):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _whole(path):
    with open(path, "rb") as f:
        return [(row, line, repr(rec)) for row, line, rec in iter_jsonl(f)]


@pytest.mark.parametrize("split_bytes", [1, 7, 53, 64, 300, 10_000])
def test_byte_ranges_read_every_line_once_with_its_number(tmp_path, split_bytes):
    path = _jsonl(tmp_path)
    size = len(open(path, "rb").read())
    splits = plan_splits(path, size, None, split_bytes)
    if split_bytes < size:
        assert len(splits) > 1 and all(s.end is not None for s in splits)
    counts = [count_newlines(s)[1] for s in splits if s.end is not None]
    if counts:
        splits = number_lines(splits, counts)
    got = [(row, line, repr(rec)) for s in splits for row, line, rec in s.records()]
    assert got == _whole(path)


def test_a_split_starting_exactly_at_a_line_start(tmp_path):
    path = _jsonl(tmp_path, lines=['{"a": 1}', '{"a": 2}'])  # 9 bytes per line
    splits = number_lines(plan_splits(path, 18, None, 9), [(0, 1), (9, 1)])
    assert [s.first_line for s in splits] == [1, 2]
    assert [[r[0] for r in s.records()] for s in splits] == [[1], [2]]


def _parquet_in_five_groups(tmp_path) -> tuple[str, pa.Table]:
    """23 rows in row groups of 5 (the last one 3)."""
    path = str(tmp_path / "p.parquet")
    table = pa.table({"prediction": [f"p{i}" for i in range(23)],
                      "references": [[f"r{i}"] for i in range(23)]})
    pq.write_table(table, path, row_group_size=5)
    return path, table


def test_parquet_is_planned_by_row_group_with_row_numbers(tmp_path):
    path, _ = _parquet_in_five_groups(tmp_path)
    splits = plan_splits(path, 0, None, 1 << 30)
    assert [(s.groups, s.first_row) for s in splits] == [
        ((0,), 1), ((1,), 6), ((2,), 11), ((3,), 16), ((4,), 21)]
    got = [(row, rec["prediction"]) for s in splits for row, _, rec in s.records()]
    assert got == [(i + 1, f"p{i}") for i in range(23)]


@pytest.mark.parametrize("change", ["appended", "cut", "rewritten"])
def test_a_file_that_changes_after_planning_fails_naming_it(tmp_path, change):
    """A file read in parts must be the file its parts were planned for: rows appended
    after planning would be skipped by the last range, a cut file would lose rows, so
    every part checks the size and fails the run naming the file (once)."""
    path = _jsonl(tmp_path)
    size = len(open(path, "rb").read())
    splits = plan_splits(path, size, None, 97)
    if change == "appended":
        with open(path, "a", encoding="utf-8") as f:
            f.write('{"prediction": "late", "references": ["row"]}\n')
    elif change == "cut":
        with open(path, "r+b") as f:
            f.truncate(size - 30)
    else:
        _jsonl(tmp_path, lines=LINES[:10])
    now = len(open(path, "rb").read())
    message = (rf"^input file {re.escape(path)}: cannot be read: FileChangedError: it is "
               rf"{now:,} bytes now and was {size:,} when the run planned its parts")
    with pytest.raises(InputFileError, match=message):
        count_newlines(splits[-1])
    for split in (splits[0], splits[-1]):
        with pytest.raises(InputFileError, match=message):
            list(split.records())


def test_a_parquet_file_rewritten_after_planning_fails_naming_it(tmp_path):
    path, table = _parquet_in_five_groups(tmp_path)
    splits = plan_splits(path, 0, None, 1 << 30)
    assert [len(list(s.records())) for s in splits] == [5, 5, 5, 5, 3]  # unchanged: reads
    pq.write_table(table.slice(0, 12), path, row_group_size=5)
    with pytest.raises(InputFileError, match=r"p\.parquet: cannot be read.*FileChangedError"):
        list(splits[0].records())


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_file_rewritten_with_the_same_size_fails_naming_it(tmp_path, fmt):
    """A rewrite that keeps the size exactly is noticed by the modification time (the size
    alone would let the parts read the new bytes with the old plan)."""
    import os

    if fmt == "jsonl":
        path = _jsonl(tmp_path)
        splits = plan_splits(path, os.path.getsize(path), None, 97)
        same_size = open(path, "rb").read().replace(b"the answer", b"THE ANSWER")
    else:
        path, table = _parquet_in_five_groups(tmp_path)
        splits = plan_splits(path, 0, None, 1 << 30)
        same_size = open(path, "rb").read()  # the same bytes, written again
    stamp = os.stat(path).st_mtime + 2  # a later write (a coarse clock would not see it)
    with open(path, "wb") as f:
        f.write(same_size)
    os.utime(path, (stamp, stamp))
    assert os.path.getsize(path) == splits[0].size
    message = rf"^input file {re.escape(path)}: cannot be read: FileChangedError: it was modified"
    for split in (splits[0], splits[-1]):
        with pytest.raises(InputFileError, match=message):
            list(split.records())
    if fmt == "jsonl":
        with pytest.raises(InputFileError, match=message):
            count_newlines(splits[-1])


def test_csv_and_compressed_files_are_read_whole(tmp_path):
    assert plan_splits(str(tmp_path / "a.csv"), 10 << 30, None, 1) == [
        ReadSplit(str(tmp_path / "a.csv"), "csv")]
    assert plan_splits(str(tmp_path / "a.jsonl.gz"), 10 << 30, None, 1) == [
        ReadSplit(str(tmp_path / "a.jsonl.gz"), "jsonl")]


def _collect(pcoll, prefix: str, label: str = "Collect") -> None:
    _ = (pcoll | f"{label}Json" >> beam.Map(json.dumps)
         | f"{label}Write" >> beam.io.WriteToText(prefix))


def _collected(prefix: str) -> list:
    import glob

    return sorted(tuple(json.loads(line)) for path in glob.glob(prefix + "*")
                  for line in open(path, encoding="utf-8"))


def _scores_by_id(pattern, split_bytes, out_prefix, runner="direct_in_process"):
    metrics = build_metrics(["f1", "bleu4", "cider"], {})
    with test_pipeline.TestPipeline(argv=RUNNER_ARGS[runner]) as pipeline:
        read = pipeline | ReadPredictions(pattern, ColumnMapping(id="id"),
                                          split_bytes=split_bytes, batch_rows=4)
        stats = beam.pvalue.AsSingleton(read["batches"] | ComputeCorpusStatistics(metrics))
        scored = read["batches"] | ScoreBatches(metrics, stats, shards=3)
        joined = scored["scored"] | beam.FlatMap(lambda records: [(
            r["id"], r["row_key"].rsplit(":", 1)[1],
            tuple(sorted((c, r[c]) for c in ("f1", "bleu4", "cider")))) for r in records])
        dead = read["dead_letter"] | beam.Map(lambda d: (d["row"], d.get("line"),
                                                         d["reason"]))
        _collect(joined, out_prefix)
        assert_that(dead, equal_to([(6, 6, "malformed_json")]), label="dead")
    return [(i, n, [tuple(kv) for kv in s]) for i, n, s in _collected(out_prefix)]


@pytest.mark.slow
def test_ranges_and_two_files_score_as_one_file_read_whole(tmp_path):
    whole_dir, two_dir = tmp_path / "whole", tmp_path / "two"
    whole_dir.mkdir()
    two_dir.mkdir()
    out = str(tmp_path / "out")
    whole = _scores_by_id(_jsonl(whole_dir), 1 << 30, out + "1")
    assert len(whole) == 37
    assert _scores_by_id(_jsonl(whole_dir), 97, out + "2") == whole
    assert _scores_by_id(_jsonl(whole_dir), 97, out + "3",
                         runner="direct_multi_processing") == whole
    _jsonl(two_dir, "a.jsonl", LINES[:20])
    _jsonl(two_dir, "b.jsonl", LINES[20:])
    # the row key's number is the file line (blank and malformed lines counted)
    assert {i: int(n) for i, n, _ in whole} == {
        f"r{k}": k + 1 for k in range(40) if k not in (5, 9, 17)}
    two = _scores_by_id(str(two_dir / "*.jsonl"), 1 << 30, out + "4")
    # same scores per id; line numbers of b.jsonl restart at 1
    assert [(i, s) for i, _, s in two] == [(i, s) for i, _, s in whole]
    assert {i: int(n) for i, n, _ in two} == {
        f"r{k}": k + 1 if k < 20 else k - 19 for k in range(40) if k not in (5, 9, 17)}


@pytest.mark.slow
def test_parquet_by_row_groups_scores_as_one_group(tmp_path, caplog):
    """37 rows in 10 row groups: the pipeline reads 10 splits (one per group), and the
    rows and scores are those of the file written as one group."""
    rows = [json.loads(line) for line in LINES if line.strip() and "broken" not in line]
    table = pa.Table.from_pylist(rows)
    one, many = str(tmp_path / "one.parquet"), str(tmp_path / "many.parquet")
    pq.write_table(table, one)
    pq.write_table(table, many, row_group_size=4)
    assert pq.ParquetFile(many).metadata.num_row_groups == 10
    metrics = build_metrics(["f1", "cider"], {})

    def scores(path):
        prefix = path + ".out"
        with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as p:
            read = p | ReadPredictions(path, ColumnMapping(id="id"), batch_rows=3)
            stats = beam.pvalue.AsSingleton(read["batches"] | ComputeCorpusStatistics(metrics))
            scored = read["batches"] | ScoreBatches(metrics, stats, shards=2)
            keyed = scored["scored"] | beam.FlatMap(lambda records: [(
                r["row_key"].rsplit(":", 1)[1],
                tuple(sorted((c, r[c]) for c in ("f1", "cider")))) for r in records])
            _collect(keyed, prefix)
        return _collected(prefix)

    caplog.set_level(logging.INFO, logger="transforms.scoring.reading.read")
    got = scores(many)
    assert _splits_read(caplog, many) == [f"row groups [{g}]" for g in range(10)]
    caplog.clear()
    assert len(got) == 37 and got == scores(one)
    assert _splits_read(caplog, one) == ["row groups [0]"]


def _splits_read(caplog, path: str) -> list[str]:
    """What ReadRowsFn logged it read of `path`, one entry per split, sorted."""
    prefix = f"reading {path} as parquet ("
    return sorted((m[len(prefix):-1] for m in (r.getMessage() for r in caplog.records)
                   if m.startswith(prefix)), key=lambda d: (len(d), d))


def _sized(path, size):
    """A file of `size` bytes (sparse: planning reads sizes only)."""
    with open(path, "wb") as f:
        f.truncate(size)
    return str(path)


def test_plan_for_workers_gives_each_worker_about_four_ranges(tmp_path):
    from transforms.scoring.reading.read import (
        MIN_SPLIT_BYTES,
        RANGES_PER_WORKER,
        SPLIT_BYTES,
        plan_for_workers,
    )

    mib = 1 << 20

    def plan(*files, workers):
        folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        for name, size in files:
            _sized(folder / name, size)
        return plan_for_workers(str(folder / "*"), None, workers)

    two = plan(("big.jsonl", 100 * mib), workers=2)
    assert two.split_bytes == 100 * mib // (RANGES_PER_WORKER * 2) and two.splits == 8
    assert two.spreads(2) and not two.spreads(8)
    eight = plan(("big.jsonl", 100 * mib), workers=8)
    assert (eight.split_bytes, eight.splits) == (-(-100 * mib // 32), 32) and eight.spreads(8)
    # never above the usual range size, never below the smallest
    huge = plan(("huge.jsonl", 1000 * mib), workers=2)
    assert (huge.split_bytes, huge.splits, huge.largest) == (SPLIT_BYTES, 1000 // 16 + 1,
                                                            SPLIT_BYTES)
    small = plan(("small.jsonl", 3 * mib), workers=8)
    assert (small.split_bytes, small.splits) == (MIN_SPLIT_BYTES, 3) and not small.spreads(8)
    # compressed files and CSV are read whole: one split each, weighed by their size
    whole = plan(("a.jsonl.gz", 50 * mib), ("b.csv", 50 * mib), workers=4)
    assert (whole.split_bytes, whole.splits, whole.largest) == (MIN_SPLIT_BYTES, 2, 50 * mib)
    # enough splits, but one whole file would be one worker's alone: not spread by them
    uneven = plan(("big.jsonl.gz", 200 * mib), *((f"s{i}.jsonl.gz", mib) for i in range(7)),
                  workers=2)
    assert uneven.splits == 8 and uneven.largest == 200 * mib and not uneven.spreads(2)
    even = plan(*((f"s{i}.jsonl.gz", mib) for i in range(8)), workers=2)
    assert even.splits == 8 and even.spreads(2)


def test_direct_workers_are_counted_where_the_fnapirunner_runs():
    import multiprocessing

    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.io.progress import direct_workers

    def workers(*flags):
        return direct_workers(PipelineOptions(list(flags)))

    assert workers() == 1 and workers("--runner=FnApiRunner") == 1
    assert workers("--direct_running_mode=multi_processing", "--direct_num_workers=4") == 4
    assert workers("--runner=DirectRunner", "--direct_num_workers=0") == (
        multiprocessing.cpu_count())
    assert workers("--runner=BundleBasedDirectRunner", "--direct_num_workers=4") == 1
    assert workers("--runner=DataflowRunner", "--direct_num_workers=4") is None
    assert workers("--runner=PortableRunner") is None


def _spread_in_graph(config, argv):
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.scoring.score_predictions import ScorePredictions

    # built, not run: the options' runner is the one the graph is planned for
    p = beam.Pipeline(runner="FnApiRunner", options=PipelineOptions(argv))
    _ = p | ScorePredictions(config)
    labels = {t.unique_name for t in p.to_runner_api().components.transforms.values()}
    return any("SpreadBatchesOverWorkers" in label for label in labels)


def test_batches_are_spread_only_where_the_splits_cannot_spread_them(tmp_path):
    """In process: nothing to spread to. Local workers: each scores what it reads when
    the splits are at least two per worker, else a reshuffle spreads the batches. A
    runner whose workers cannot be counted: always spread."""
    from transforms.scoring.config import build_config

    rows = [json.dumps({"id": f"r{i}", "prediction": "an answer " * 40,
                        "references": ["a reference " * 40]}) for i in range(9000)]
    big = _jsonl(tmp_path, "big.jsonl", rows)  # about 8 MB: 8 ranges for 2 workers
    small = _jsonl(tmp_path, "small.jsonl", rows[:100])  # one split
    multi = ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
             "--direct_num_workers=2"]
    for path, argv, spread in ((big, ["--runner=FnApiRunner"], False), (big, multi, False),
                               (small, multi, True), (big, ["--runner=DataflowRunner"], True)):
        config = build_config(input=path, output=str(tmp_path / "out"), metrics="em,f1")
        assert _spread_in_graph(config, argv) is spread, (path, argv)


def test_plan_for_workers_reads_the_format_given_with_the_match_times(tmp_path, monkeypatch):
    """Files without a known suffix are planned in the format given; one worker gets
    four ranges too; a Parquet file's row groups are weighed as equal shares of it. The
    modification time comes from the match: no file is looked up again (one request a
    file on an object store)."""
    from transforms.scoring.reading import read

    mib = 1 << 20
    monkeypatch.setattr(read, "modified_time", lambda path: pytest.fail(f"looked up {path}"))
    (tmp_path / "txt").mkdir()
    text = _sized(tmp_path / "txt" / "a.txt", 40 * mib)
    table = tmp_path / "b.parquet"
    pq.write_table(pa.table({"prediction": [f"p{i}" for i in range(30)]}), table,
                   row_group_size=10)
    size = table.stat().st_size
    assert read.plan_for_workers(str(tmp_path / "txt" / "*"), "jsonl", 1) == (
        10 * mib, 4, 10 * mib, 40 * mib)
    parquet = read.plan_for_workers(str(table), None, 0)
    assert parquet == (read.MIN_SPLIT_BYTES, 3, -(-size // 3), size)
    assert isinstance(parquet.largest, int)  # a share is whole bytes, rounded up
    modified = os.path.getmtime(table)
    assert {s.modified for s in read.plan_splits(str(table), size, None, 1, modified + 5)} == {
        modified + 5}
    assert {s.modified for s in read.plan_splits(text, 40 * mib, "jsonl", 16 * mib,
                                                 modified + 5)} == {modified + 5}
