"""Tests for transforms/scoring/write.py: names, rows, atomic finalisation."""

from __future__ import annotations

import math

import pytest

from transforms.scoring.write import (
    OutputPaths,
    finalize,
    output_row,
    scores_schema,
    to_json_line,
)


def test_output_paths():
    paths = OutputPaths("out/run", "jsonl", "abc")
    assert paths.scores == "out/run.scores.jsonl"
    assert paths.temp(paths.summary) == "out/run.summary.json.tmp-abc"
    assert paths.finals(with_report=True) == [
        "out/run.scores.jsonl", "out/run.dead_letter.jsonl", "out/run.report.json",
        "out/run.report.md", "out/run.report.png", "out/run.summary.json"]
    assert paths.finals(with_report=False)[-1] == "out/run.summary.json"


@pytest.mark.parametrize("prefix, fmt, message", [
    ("out/run", "csv", "available"), ("out/", "parquet", "file prefix"),
    ("", "parquet", "file prefix")])
def test_output_paths_validation(prefix, fmt, message):
    with pytest.raises(ValueError, match=message):
        OutputPaths(prefix, fmt, "x")


def test_output_row_orders_fields_and_attaches_signatures():
    record = {"row_key": "f:1", "file": "f", "row": 1, "id": None, "system": "s",
              "human": 2.0, "f1": math.nan, "em": 1.0}
    row = output_row(record, ["em", "f1"], True, {"em": "em|v1", "f1": "f1|v1"})
    assert list(row) == ["row_key", "file", "row", "id", "system", "human", "em", "f1",
                         "signature"]
    assert row["f1"] is None and row["signature"] == {"em": "em|v1", "f1": "f1|v1"}
    assert scores_schema(["em", "f1"], True).names == list(row)
    assert "human" not in output_row(record, ["em"], False, {"em": "x"})
    assert to_json_line({"a": math.nan, "b": "é"}) == '{"a": null, "b": "é"}'


def test_finalize_renames_in_order_and_replaces_old_outputs(tmp_path):
    paths = OutputPaths(str(tmp_path / "run"), "parquet", "r1")
    renames = [(paths.temp(f), f) for f in paths.finals(False)]
    for temp, _ in renames:
        (tmp_path / temp.rsplit("/", 1)[1]).write_text("new")
    (tmp_path / "run.summary.json").write_text("old")
    assert finalize([t for t, _ in renames], renames) == [f for _, f in renames]
    assert (tmp_path / "run.summary.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "run.dead_letter.jsonl", "run.scores.parquet", "run.summary.json"]


def test_finalize_refuses_when_a_write_is_missing(tmp_path):
    paths = OutputPaths(str(tmp_path / "run"), "parquet", "r1")
    renames = [(paths.temp(f), f) for f in paths.finals(False)]
    with pytest.raises(RuntimeError, match="not written"):
        finalize([renames[0][0]], renames)
    assert list(tmp_path.iterdir()) == []


def test_finalize_is_idempotent_after_a_partial_rename(tmp_path):
    paths = OutputPaths(str(tmp_path / "run"), "jsonl", "r1")
    renames = [(paths.temp(f), f) for f in paths.finals(False)]
    for temp, _ in renames:
        (tmp_path / temp.rsplit("/", 1)[1]).write_text("new")
    first = renames[0]
    (tmp_path / first[0].rsplit("/", 1)[1]).rename(first[1])  # the attempt that died
    finalize([t for t, _ in renames], renames)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "run.dead_letter.jsonl", "run.scores.jsonl", "run.summary.json"]
