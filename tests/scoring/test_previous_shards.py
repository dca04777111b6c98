"""The previous run's scores as tables by shard of content key (previous_shards.py):
the tables, the shards, the parts read from Parquet and JSONL records, the combine that
builds one table per shard, and the steps that read a previous run."""

from __future__ import annotations

import json
import math
import pickle
import re

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.dofns import step_labels
from tests.runners import RUNNER_ARGS
from tests.scoring.keys import key_of, keys_of
from transforms.metrics.base import QAExample
from transforms.scoring.incremental.previous_run import PreviousRunError, load_previous_run
from transforms.scoring.incremental.previous_shards import (
    PreviousTable,
    ReadPreviousShards,
    TablesCombineFn,
    _parse_lines,
    batch_parts,
    shard_of,
    shard_parts,
    shards_for,
)
from transforms.scoring.reading.parquet_parts import ParquetSource
from transforms.scoring.reading.rows import CONTENT_KEY_VERSION, content_key

SOURCE = ParquetSource("p.parquet", "--previous_run p: scores file", PreviousRunError)


def test_a_table_finds_its_keys_and_keeps_a_duplicate_once():
    keys = keys_of("a", "b", "c")
    values = np.array([[1.0], [2.0], [math.nan]])
    table = PreviousTable.build([(keys[:2], values[:2]), (keys[1:], values[1:])], 1)
    assert len(table) == 3 and list(table.keys) == sorted(keys.tolist())
    found = table.find(keys_of("c", "zzz", "a"))
    assert found[1] == -1
    assert math.isnan(table.values[found[0]][0]) and table.values[found[2]][0] == 1.0
    empty = PreviousTable.build([], 2)
    assert list(empty.find(keys)) == [-1, -1, -1] and empty.values.shape == (0, 2)
    again = pickle.loads(pickle.dumps(table))
    assert np.array_equal(again.keys, table.keys)


def test_shards_split_keys_by_their_first_bytes_and_follow_the_previous_runs_size():
    keys = keys_of(*"abcdefgh")
    assert list(shard_of(keys, 1)) == [0] * 8
    heads = [int.from_bytes(k[:4], "little") % 3 for k in (key_of(p) for p in "abcdefgh")]
    assert list(shard_of(keys, 3)) == heads
    halves = [int.from_bytes(key_of(p)[:4], "little") % 2 for p in "abcdefgh"]
    assert list(shard_of(keys, 2)) == halves and len(set(halves)) == 2
    summary = {"overall": {"scored": 200_000}}
    run = type("Run", (), {})()
    for scored, shards in ((None, 1), (0, 1), (10, 1), (65_536, 1), (65_537, 2),
                           (200_000, 4), (10**12, 4096)):
        run.summary = {"overall": {"scored": scored}} if scored is not None else {}
        assert shards_for(run) == shards, scored
    assert summary


def test_shard_parts_read_values_and_name_a_bad_row():
    a, b = content_key(QAExample("a", ("r",))), content_key(QAExample("b", ("r",)))
    parts = dict(shard_parts([{"row_key": "f:1", "content_key": a, "em": 1.0, "f1": None},
                              {"row_key": "f:2", "content_key": b, "em": 0, "f1": 0.5}],
                             ["em", "f1"], 1, SOURCE))
    keys, values = parts[0]
    assert keys.tolist() == [bytes.fromhex(a), bytes.fromhex(b)]
    assert values[0][0] == 1.0 and math.isnan(values[0][1]) and list(values[1]) == [0.0, 0.5]
    with pytest.raises(PreviousRunError, match=r"^--previous_run p: scores file p.parquet: "
                                               r".*a row without a content key "
                                               r"\(row_key 'f:3'\)"):
        list(shard_parts([{"row_key": "f:3", "em": 1.0}], ["em"], 1, SOURCE))
    with pytest.raises(PreviousRunError, match=r"row_key 'f:4' has a malformed content key"):
        list(shard_parts([{"row_key": "f:4", "content_key": "k" * 32, "em": 1.0}], ["em"],
                         1, SOURCE))
    with pytest.raises(PreviousRunError, match=r"row_key 'f:5' has no number for one of"):
        list(shard_parts([{"row_key": "f:5", "content_key": a, "em": "high"}], ["em"], 1,
                         SOURCE))
    with pytest.raises(PreviousRunError, match=r"row_key 'f:6' has no number for one of"):
        list(shard_parts([{"row_key": "f:6", "content_key": a, "em": True}], ["em"], 1,
                         SOURCE))


def test_a_parquet_batch_gives_the_parts_its_records_give():
    a, b = content_key(QAExample("a", ("r",))), content_key(QAExample("b", ("r",)))
    records = [{"row_key": "f:1", "content_key": a, "em": 1.0, "f1": None},
               {"row_key": "f:2", "content_key": b, "em": 0.0, "f1": 0.5}]
    table = pa.Table.from_pylist(records).to_batches()[0]
    by_columns = dict(batch_parts(table, ["em", "f1"], 2, SOURCE))
    by_records = dict(shard_parts(records, ["em", "f1"], 2, SOURCE))
    assert by_columns.keys() == by_records.keys()
    for shard, (keys, values) in by_columns.items():
        assert keys.tolist() == by_records[shard][0].tolist()
        assert np.array_equal(values, by_records[shard][1], equal_nan=True)
    # a column that is not numbers goes record by record, which names the row
    text = pa.Table.from_pylist([{**records[0], "em": "high"}]).to_batches()[0]
    with pytest.raises(PreviousRunError, match=r"row_key 'f:1' has no number for one of"):
        list(batch_parts(text, ["em"], 1, SOURCE))
    keyless = pa.Table.from_pylist([{**records[0], "content_key": None}]).to_batches()[0]
    with pytest.raises(PreviousRunError, match=r"a row without a content key"):
        list(batch_parts(keyless, ["em"], 1, SOURCE))


def test_the_combine_compacts_and_merges_parts():
    fn = TablesCombineFn(1)
    fn._COMPACT = 2
    acc = fn.create_accumulator()
    for p in "abca":
        acc = fn.add_input(acc, (keys_of(p), np.array([[ord(p)]], dtype=float)))
    assert len(acc) <= 2
    merged = fn.merge_accumulators([acc, [(keys_of("d"), np.array([[1.0]]))]])
    table = fn.extract_output(merged)
    assert sorted(table.keys.tolist()) == sorted(keys_of("a", "b", "c", "d").tolist())


def test_the_combine_compacts_at_its_size_and_keeps_the_width_of_an_empty_shard():
    fn = TablesCombineFn(3)
    empty = (keys_of()[:0], np.empty((0, 3)))
    acc = fn.create_accumulator()
    for _ in range(fn._COMPACT - 1):
        acc = fn.add_input(acc, empty)
    assert len(acc) == fn._COMPACT - 1
    acc = fn.add_input(acc, empty)  # the size reached: one part
    assert len(acc) == 1 and acc[0][1].shape == (0, 3)
    assert fn.extract_output(fn.create_accumulator()).values.shape == (0, 3)


def _previous_run(tmp_path, fmt: str, second_key: str | None = None) -> str:
    prefix = str(tmp_path / "old")
    key = content_key(QAExample("a", ("r",)))
    records = [{"row_key": "f:1", "content_key": key, "em": 1.0},
               {"row_key": "f:2", "content_key": second_key or key, "em": 1.0}]
    summary = {"signatures": {"em": "em|v:1"}, "content_key_version": CONTENT_KEY_VERSION,
               "overall": {"scored": 2}}
    (tmp_path / "old.summary.json").write_text(json.dumps(summary))
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(records), prefix + ".scores.parquet")
    else:
        (tmp_path / "old.scores.jsonl").write_text("".join(json.dumps(r) + "\n"
                                                           for r in records))
    return prefix


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_read_previous_shards_has_stable_step_names(tmp_path, fmt):
    previous = load_previous_run(_previous_run(tmp_path, fmt))
    pipeline = test_pipeline.TestPipeline()
    _ = pipeline | "Previous" >> ReadPreviousShards(previous, ["em"], 2)
    read = (["ReadPreviousParquet"] if fmt == "parquet"
            else ["ReadPreviousJsonLines", "LinesInParts", "ParsePreviousJson"])
    expected = {"Previous", *(f"Previous/{s}" for s in (*read, "ShardByContentKey",
                                                         "TablePerShard"))}
    assert {label for label in step_labels(pipeline)
            if label.startswith("Previous") and label.count("/") <= 1} == expected


@pytest.mark.slow
@pytest.mark.mutation
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_read_previous_shards_gives_one_table_per_shard(tmp_path, fmt):
    previous = load_previous_run(_previous_run(tmp_path, fmt))
    with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
        tables = pipeline | ReadPreviousShards(previous, ["em"], 1)
        assert_that(tables | beam.MapTuple(lambda s, t: (s, len(t), t.values.tolist())),
                    equal_to([(0, 1, [[1.0]])]))


@pytest.mark.parametrize("bad", ["ab" * 15, "X" + "a" * 31, "AB" * 15 + "g" * 2, "a" * 33])
def test_a_content_key_that_is_not_32_hex_digits_is_malformed(bad):
    good = content_key(QAExample("a", ("r",)))
    records = [{"row_key": "f:1", "content_key": good, "em": 1.0},
               {"row_key": "f:2", "content_key": bad, "em": 1.0}]
    message = (r"^--previous_run p: scores file p.parquet: row_key 'f:2' has a malformed "
               rf"content key '{bad[:40]}'$")
    with pytest.raises(PreviousRunError, match=message):
        list(shard_parts(records, ["em"], 1, SOURCE))
    batch = pa.Table.from_pylist(records).to_batches()[0]
    with pytest.raises(PreviousRunError, match=message):  # the column path names it too
        list(batch_parts(batch, ["em"], 2, SOURCE))


def test_hex_digits_of_either_case_are_one_key():
    key = content_key(QAExample("a", ("r",)))
    records = [{"row_key": "f:1", "content_key": key.upper(), "em": 1.0},
               {"row_key": "f:2", "content_key": "ZZ" + key[2:], "em": 1.0}]
    ((_, (keys, _)),) = shard_parts(records[:1], ["em"], 1, SOURCE)
    assert keys.tolist() == [bytes.fromhex(key)]
    with pytest.raises(PreviousRunError, match="row_key 'f:2' has a malformed"):
        list(shard_parts(records, ["em"], 1, SOURCE))  # the bad key is named, not the first


def test_a_malformed_key_is_shown_to_40_characters():
    records = [{"row_key": "f:9", "content_key": "z" * 50, "em": 1.0}]
    with pytest.raises(PreviousRunError, match=r"malformed content key 'z{40}'$"):
        list(shard_parts(records, ["em"], 1, SOURCE))


def test_a_value_that_is_not_a_number_names_its_cause():
    records = [{"row_key": "f:5", "content_key": content_key(QAExample("a", ("r",))),
                "em": "high"}]
    with pytest.raises(PreviousRunError, match=r"row_key 'f:5' has no number for one of "
                                               r"\['em'\]: TypeError: 'high' is not a number$"):
        list(shard_parts(records, ["em"], 1, SOURCE))


def test_a_numeric_batch_is_read_column_by_column(monkeypatch):
    """Numbers (floats, integers, nulls) with every content key go by column; a batch of
    another type goes record by record, into the shards asked for."""
    import transforms.scoring.incremental.previous_shards as previous_shards

    keys = [content_key(QAExample(p, ("r",))) for p in "abcdefgh"]
    records = [{"row_key": f"f:{i}", "content_key": k, "em": i, "f1": None if i % 2 else 0.5}
               for i, k in enumerate(keys)]
    batch = pa.Table.from_pylist(records).to_batches()[0]
    seen = []
    by_records = previous_shards.shard_parts
    monkeypatch.setattr(previous_shards, "shard_parts",
                        lambda *a: seen.append(a[2]) or by_records(*a))
    parts = dict(batch_parts(batch, ["em", "f1"], 3, SOURCE))
    assert seen == []
    assert sorted(parts) == sorted({int(s) for s in shard_of(keys_of(*"abcdefgh"), 3)})
    got = {k: v.tolist() for keys_, values in parts.values()
           for k, v in zip(keys_.tolist(), values, strict=True)}
    for i, k in enumerate(keys):
        em, f1 = got[bytes.fromhex(k)]
        assert em == i and (math.isnan(f1) if i % 2 else f1 == 0.5)
    text = pa.Table.from_pylist([{**r, "em": str(r["em"])} for r in records]).to_batches()[0]
    with pytest.raises(PreviousRunError, match="no number"):
        list(batch_parts(text, ["em"], 3, SOURCE))
    assert seen == [3]


def test_a_broken_jsonl_line_is_named_to_60_characters_with_its_cause():
    line = '{"row_key": "f:1", "content_key": ' + "x" * 80
    with pytest.raises(PreviousRunError, match=(
            r"^--previous_run p: scores file p.parquet: a line is not JSON "
            + re.escape(f"({line[:60]!r}...)") + r": JSONDecodeError: ")):
        _parse_lines([line], SOURCE)
    array = "[" + ", ".join(["1"] * 40) + "]"
    with pytest.raises(PreviousRunError, match=(
            r"a line is not a JSON object " + re.escape(f"({array[:60]!r})") + "$")):
        _parse_lines(['{"row_key": "f:0"}', array], SOURCE)
    assert _parse_lines(['{"a": 1}', '{"b": null}'], SOURCE) == [{"a": 1}, {"b": None}]


@pytest.mark.slow
@pytest.mark.mutation
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_reading_a_malformed_previous_run_names_its_file_and_row(tmp_path, fmt):
    previous = load_previous_run(_previous_run(tmp_path, fmt, second_key="k" * 32))
    where = re.escape(f"--previous_run {tmp_path / 'old'}: scores file {tmp_path / 'old'}")
    with pytest.raises(Exception, match=where + r".*row_key 'f:2' has a malformed content "
                                                r"key 'k{32}'"):
        with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
            _ = pipeline | ReadPreviousShards(previous, ["em"], 1)


@pytest.mark.slow
@pytest.mark.mutation
def test_a_previous_jsonl_line_that_is_not_json_is_named_by_the_pipeline(tmp_path):
    prefix = _previous_run(tmp_path, "jsonl")
    path = tmp_path / "old.scores.jsonl"
    first, _ = path.read_text().splitlines()
    path.write_text(first + '\n{"row_key": "f:2", "content_key": \n')
    previous = load_previous_run(prefix)
    with pytest.raises(Exception, match=re.escape(f"scores file {path}: a line is not JSON")):
        with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
            _ = pipeline | ReadPreviousShards(previous, ["em"], 1)
