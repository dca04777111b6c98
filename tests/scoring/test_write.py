"""Tests for transforms/scoring/outputs/write.py (names, rows) and finalize.py (atomic
finalisation)."""

from __future__ import annotations

import json
import math
import os

import pytest
from apache_beam.io.filesystems import FileSystems

from transforms.io.ownership import OutputLock, OutputLocks, OwnershipLostError
from transforms.scoring.outputs.finalize import FinalizeOutputs, finalize
from transforms.scoring.outputs.paths import OutputPaths
from transforms.scoring.outputs.write import (
    SIGNATURES_KEY,
    columns_table,
    output_row,
    read_signatures,
    scores_schema,
    to_json_line,
)


def test_a_row_group_built_by_column_holds_the_output_rows():
    import pyarrow as pa

    kept = ["question", "references"]
    schema = scores_schema(["em", "f1"], True, {"em": "em|v1"}, kept)
    records = [{"row_key": f"f:{i}", "content_key": "c", "file": "f", "row": i,
                "id": None if i % 2 else f"id{i}", "system": "s", "human": 0.5 * i,
                "em": math.nan if i == 1 else 1.0, "f1": 0.25, "_carried": ("em",),
                "question": None if i == 2 else "q?", "references": ("a",) if i else ["b", "c"]}
               for i in range(4)]
    del records[3]["f1"], records[3]["human"]  # a field a record lacks is null
    table = columns_table(records, schema, ["em", "f1"])
    rows = [output_row(r, ["em", "f1"], True, kept) for r in records]
    assert table.equals(pa.Table.from_pylist(rows, schema=schema))
    assert table.schema.equals(schema, check_metadata=True)
    assert table.column("em").to_pylist() == [1.0, None, 1.0, 1.0]  # NaN written as null
    assert table.column("f1").to_pylist()[3] is None and table.column("human")[3].as_py() is None


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


def test_output_row_orders_fields_and_the_schema_holds_the_signatures_once(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    record = {"row_key": "f:1", "content_key": "c", "file": "f", "row": 1, "id": None,
              "system": "s", "human": 2.0, "f1": math.nan, "em": 1.0, "question": "q?",
              "_carried": ("em",),
              "references": ["a", "b"], "extra": "x"}
    row = output_row(record, ["em", "f1"], True, ["question", "references"])
    assert list(row) == ["row_key", "content_key", "file", "row", "id", "system", "human",
                         "question", "references", "em", "f1"]
    assert row["f1"] is None and "signature" not in row
    signatures = {"em": "em|v1", "f1": "f1|v1"}
    schema = scores_schema(["em", "f1"], True, signatures, ["question", "references"])
    assert schema.names == list(row)
    assert schema.field("references").type == pa.list_(pa.string())
    assert "human" not in output_row(record, ["em"], False)
    assert to_json_line({"a": math.nan, "b": "é"}) == '{"a": null, "b": "é"}'
    # The signatures live in the file's key-value metadata (and on each metric field).
    path = str(tmp_path / "s.scores.parquet")
    pq.write_table(pa.Table.from_pylist([row], schema=schema), path)
    assert read_signatures(path) == signatures
    assert json.loads(pq.read_schema(path).metadata[SIGNATURES_KEY]) == signatures
    assert pq.read_schema(path).field("f1").metadata == {b"signature": b"f1|v1"}


def test_read_signatures_of_jsonl_scores_comes_from_the_summary(tmp_path):
    prefix = tmp_path / "run"
    (tmp_path / "run.summary.json").write_text(json.dumps({"signatures": {"em": "em|v1"}}))
    assert read_signatures(f"{prefix}.scores.jsonl") == {"em": "em|v1"}
    with pytest.raises(ValueError, match="summary.json"):
        read_signatures(str(tmp_path / "other.scores.jsonl"))


def _stage(tmp_path, paths, with_report=False, content="new"):
    renames = [(paths.temp(f), f) for f in paths.finals(with_report)]
    for temp, _ in renames:
        (tmp_path / temp.rsplit("/", 1)[-1]).write_text(content)
    return renames


def _finalize(paths, renames, written=None):
    return finalize([t for t, _ in renames] if written is None else written, renames,
                    paths.every_final(), paths.aside_dir)


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_finalize_moves_in_order_and_replaces_old_outputs(tmp_path):
    paths = OutputPaths(str(tmp_path / "run"), "parquet", "r1")
    renames = _stage(tmp_path, paths)
    (tmp_path / "run.summary.json").write_text("old")
    assert _finalize(paths, renames) == [f for _, f in renames]
    assert (tmp_path / "run.summary.json").read_text() == "new"
    assert _names(tmp_path) == [
        "run.dead_letter.jsonl", "run.scores.parquet", "run.summary.json"]


def test_a_rerun_without_a_report_leaves_none_of_the_earlier_run(tmp_path):
    """A run with a human column (report) in jsonl, then one without, in parquet: every
    file of the first goes, including its report and its scores in the other format."""
    first = OutputPaths(str(tmp_path / "run"), "jsonl", "r1")
    _finalize(first, _stage(tmp_path, first, with_report=True, content="old"))
    (tmp_path / "other.summary.json").write_text("another prefix")
    assert _names(tmp_path) == [
        "other.summary.json", "run.dead_letter.jsonl", "run.report.json", "run.report.md",
        "run.report.png", "run.scores.jsonl", "run.summary.json"]
    second = OutputPaths(str(tmp_path / "run"), "parquet", "r2")
    _finalize(second, _stage(tmp_path, second))
    assert _names(tmp_path) == [
        "other.summary.json", "run.dead_letter.jsonl", "run.scores.parquet",
        "run.summary.json"]
    assert {(tmp_path / n).read_text() for n in _names(tmp_path)} == {"new", "another prefix"}


def test_a_failure_while_moving_in_leaves_the_earlier_run_intact(tmp_path, monkeypatch):
    first = OutputPaths(str(tmp_path / "run"), "jsonl", "r1")
    _finalize(first, _stage(tmp_path, first, with_report=True, content="old"))
    before = {n: (tmp_path / n).read_text() for n in _names(tmp_path)}
    second = OutputPaths(str(tmp_path / "run"), "jsonl", "r2")
    renames = _stage(tmp_path, second)
    rename = FileSystems.rename
    calls = []

    def failing_rename(sources, destinations):
        calls.append(sources)
        if len(calls) == 8:  # 6 files aside, then the first new one in: the second fails
            raise OSError("disk gone")
        rename(sources, destinations)

    monkeypatch.setattr(FileSystems, "rename", staticmethod(failing_rename))
    with pytest.raises(RuntimeError, match="put back as they were"):
        _finalize(second, renames)
    monkeypatch.undo()
    assert {n: (tmp_path / n).read_text() for n in before} == before
    assert not (tmp_path / "run.scores.parquet").exists()
    # The new run's temporary files are back under their temporary names: a retry works.
    _finalize(second, renames)
    assert _names(tmp_path) == ["run.dead_letter.jsonl", "run.scores.jsonl",
                                "run.summary.json"]


def test_finalize_refuses_when_a_write_is_missing(tmp_path):
    paths = OutputPaths(str(tmp_path / "run"), "parquet", "r1")
    renames = [(paths.temp(f), f) for f in paths.finals(False)]
    with pytest.raises(RuntimeError, match="not written"):
        _finalize(paths, renames, written=[renames[0][0]])
    assert list(tmp_path.iterdir()) == []


def test_finalize_is_idempotent_after_a_partial_move(tmp_path):
    paths = OutputPaths(str(tmp_path / "run"), "jsonl", "r1")
    renames = _stage(tmp_path, paths)
    first = renames[0]
    (tmp_path / first[0].rsplit("/", 1)[1]).rename(first[1])  # the attempt that died
    _finalize(paths, renames)
    assert _names(tmp_path) == ["run.dead_letter.jsonl", "run.scores.jsonl",
                                "run.summary.json"]


def test_finalize_with_a_prefix_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = OutputPaths("run", "jsonl", "r1")
    _finalize(paths, _stage(tmp_path, paths, content="old"))
    _finalize(paths, _stage(tmp_path, OutputPaths("run", "jsonl", "r2")))
    assert _names(tmp_path) == ["run.dead_letter.jsonl", "run.scores.jsonl",
                                "run.summary.json"]


def test_saved_statistics_move_in_with_the_run_and_replace_only_with_overwrite(tmp_path):
    """--save_corpus_statistics is written under a temporary name and moved in by
    `finalize` with the run's outputs: an earlier file is replaced only with overwrite,
    and a retry after the move does nothing."""
    stats = str(tmp_path / "stats" / "s.parquet")
    (tmp_path / "stats").mkdir()
    for run_id, overwrite in (("r1", False), ("r2", True)):
        paths = OutputPaths(str(tmp_path / "run"), "jsonl", run_id)
        renames = _stage(tmp_path, paths)
        temp = paths.temp(stats)
        open(temp, "w").write(run_id)
        finalize([*(t for t, _ in renames), temp], renames, paths.every_final(),
                 paths.aside_dir, overwrite=overwrite, statistics=(temp, stats))
        assert open(stats).read() == run_id and _names(tmp_path / "stats") == ["s.parquet"]
        finalize([*(t for t, _ in renames), temp], renames, paths.every_final(),
                 paths.aside_dir, overwrite=overwrite, statistics=(temp, stats))  # retry

    paths = OutputPaths(str(tmp_path / "run"), "jsonl", "r3")
    renames = _stage(tmp_path, paths)
    temp = paths.temp(stats)
    with pytest.raises(RuntimeError, match=r"outputs were not written: .*s\.parquet\.tmp-r3"):
        finalize([t for t, _ in renames], renames, paths.every_final(), paths.aside_dir,
                 overwrite=True, statistics=(temp, stats))
    open(temp, "w").write("r3")
    with pytest.raises(RuntimeError, match=r"s\.parquet was written by something else while "
                       r"this run ran; this run's statistics are at .*tmp-r3"):
        finalize([*(t for t, _ in renames), temp], renames, paths.every_final(),
                 paths.aside_dir, overwrite=False, statistics=(temp, stats))
    assert open(stats).read() == "r2"
    assert os.path.exists(paths.temp(paths.summary))  # nothing of r3 was published


def _earlier_run_with_statistics(tmp_path):
    """A complete earlier run at tmp_path/run (with a report) and its statistics file in
    another folder; returns (statistics path, every file's bytes)."""
    stats_dir = tmp_path / "stats"
    stats_dir.mkdir()
    stats = str(stats_dir / "s.parquet")
    first = OutputPaths(str(tmp_path / "run"), "jsonl", "r1")
    renames = _stage(tmp_path, first, with_report=True, content="old")
    open(first.temp(stats), "w").write("old statistics")
    finalize([*(t for t, _ in renames), first.temp(stats)], renames, first.every_final(),
             first.aside_dir, statistics=(first.temp(stats), stats))
    files = {p: open(p, "rb").read() for p in (*map(str, tmp_path.glob("run*")), stats)}
    return stats, files


def _publish(tmp_path, stats, run_id="r2"):
    paths = OutputPaths(str(tmp_path / "run"), "parquet", run_id)
    renames = _stage(tmp_path, paths)
    temp = paths.temp(stats)
    open(temp, "w").write("new statistics")
    written = [*(t for t, _ in renames), temp]
    return lambda: finalize(written, renames, paths.every_final(), paths.aside_dir,
                            overwrite=True, statistics=(temp, stats))


def test_a_failure_at_any_move_leaves_the_earlier_run_and_statistics_as_they_were(
        tmp_path, monkeypatch):
    """The statistics file and the run's outputs are published as one.
    A failure is injected at each move of a publish in turn (the earlier run's files
    moved aside, the new ones and the statistics moved in, summary.json last): each time
    the earlier run and the earlier statistics file are back, byte for byte."""
    stats, before = _earlier_run_with_statistics(tmp_path)
    rename = FileSystems.rename
    moves = []
    # How many moves a publish makes: count them on a copy of the same layout.
    copy = tmp_path / "copy"
    copy.mkdir()
    copy_stats, _ = _earlier_run_with_statistics(copy)
    monkeypatch.setattr(FileSystems, "rename", staticmethod(
        lambda s, d: (moves.append(s[0]), rename(s, d))))
    _publish(copy, copy_stats)()
    monkeypatch.undo()
    assert len(moves) == 7 + 4  # 6 outputs + statistics aside; 3 outputs + statistics in
    for nth in range(1, len(moves) + 1):
        calls = []

        def failing(sources, destinations, nth=nth, calls=calls):
            calls.append(sources[0])
            if len(calls) == nth:
                raise OSError(f"move {nth} failed")
            return rename(sources, destinations)

        publish = _publish(tmp_path, stats)
        monkeypatch.setattr(FileSystems, "rename", staticmethod(failing))
        with pytest.raises(RuntimeError, match=rf"move {nth} failed.*put back as they were"):
            publish()
        monkeypatch.undo()
        assert {p: open(p, "rb").read() for p in before} == before, nth
        finals = [p for p in map(str, tmp_path.glob("run*")) if ".tmp-" not in p]
        assert sorted(finals) == sorted(p for p in before if p != stats), nth
        assert _names(tmp_path / "stats") == ["s.parquet", "s.parquet.tmp-r2"], nth
    _publish(tmp_path, stats)()  # then it succeeds
    assert open(stats).read() == "new statistics"
    assert _names(tmp_path / "stats") == ["s.parquet"]


def test_killed_runs_statistics_files_beside_the_file_are_removed(tmp_path):
    """A killed run's `<stats>.tmp-<id>` is removed beside the file, wherever it lies, not
    only under the next run's --output prefix. An aside copy (`.previous`, maybe the only copy
    of an earlier file) stays."""
    stats, _ = _earlier_run_with_statistics(tmp_path)
    open(stats + ".tmp-killed", "w").write("a killed run's statistics")
    open(stats + ".tmp-killed2.previous", "w").write("an earlier file, moved aside")
    _publish(tmp_path, stats)()
    assert _names(tmp_path / "stats") == ["s.parquet", "s.parquet.tmp-killed2.previous"]


def test_finalize_publishes_only_while_the_run_owns_its_prefix_and_statistics(tmp_path):
    """Another run took the prefix, or the statistics file, over while this run (r2) ran:
    the publish is refused before anything moves, and the earlier run and statistics file
    stay byte for byte. Once r2 owns both, the same publish goes through."""
    stats, before = _earlier_run_with_statistics(tmp_path)
    paths = OutputPaths(str(tmp_path / "run"), "parquet", "r2")
    renames = _stage(tmp_path, paths)
    temp = paths.temp(stats)
    open(temp, "w").write("new statistics")
    staged = sorted([*(t for t, _ in renames), temp])
    owners = [(paths.prefix, "r2"), (stats, "r2")]

    def publish():
        return finalize(staged, renames, paths.every_final(), paths.aside_dir,
                        statistics=(temp, stats), owners=owners)

    for taken in (paths.prefix, stats):
        locks = [OutputLock(target, "other" if target == taken else "r2")
                 for target, _ in owners]
        with OutputLocks(locks):
            with pytest.raises(OwnershipLostError, match=rf"{taken} is no longer owned by "
                               rf"this run \(r2; its lock .* names other\)"):
                publish()
        assert {p: open(p, "rb").read() for p in before} == before, taken
        assert all(os.path.exists(p) for p in staged), taken
    with OutputLocks([OutputLock(target, "r2") for target, _ in owners]):
        assert publish() == [final for _, final in renames]
    assert open(stats).read() == "new statistics"
    assert _names(tmp_path) == ["run.dead_letter.jsonl", "run.scores.parquet",
                                "run.summary.json", "stats"]


def test_finalize_outputs_of_an_owning_run_checks_its_ownership(tmp_path):
    """FinalizeOutputs(owned=True), the last step of a pipeline: a run whose prefix was
    taken over by another run fails there and publishes nothing."""
    import apache_beam as beam

    from tests.runners import RUNNER_ARGS

    earlier = OutputPaths(str(tmp_path / "run"), "jsonl", "r1")
    _finalize(earlier, _stage(tmp_path, earlier, content="old"))
    paths = OutputPaths(str(tmp_path / "run"), "jsonl", "r2")
    renames = _stage(tmp_path, paths)
    with OutputLock(paths.prefix, "other"):
        with pytest.raises(Exception, match=r"is no longer owned by this run \(r2; its "
                           r"lock .* names other\)"):
            with beam.Pipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
                written = pipeline | beam.Create([t for t, _ in renames])
                _ = (written,) | FinalizeOutputs(paths, with_report=False, owned=True)
    assert {(tmp_path / n).read_text() for n in _names(tmp_path) if ".tmp-" not in n} == {
        "old"}
    assert sorted(t for t, _ in renames) == sorted(
        str(p) for p in tmp_path.iterdir() if ".tmp-" in p.name)
