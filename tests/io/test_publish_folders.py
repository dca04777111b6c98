"""transforms/io/publish.py: the folders and checks around the swap of a run's files: the
output folder checked before a run (`check_output_dir`) and by `publish_run` (its owner,
what it refuses), roots written as "" or with a trailing slash, a file published outside
the folder, the temporary folders (`new_temp_dir`, `temp_dirs`, `delete_tree`, those of
runs that died), and `PublishRun` as the last step of a pipeline."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.io.filesystems import FileSystems

from tests.dofns import step_labels
from tests.io.publish_runs import (
    EARLIER,
    EARLIER_RUN,
    MARKER,
    NEW,
    _files,
    _make,
    _run_in,
    _stage,
)
from tests.runners import RUNNER_ARGS
from transforms.io import publish
from transforms.io.ownership import OutputLock, OwnershipLostError
from transforms.io.publish import (
    PublishRun,
    check_output_dir,
    delete_tree,
    new_temp_dir,
    publish_run,
    replace_outputs,
    temp_dirs,
)
from transforms.wes.write import run_files


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


def test_check_output_dir_refuses_an_earlier_run_unless_overwrite(tmp_path, caplog):
    out = tmp_path / "out"
    caplog.set_level(logging.WARNING, logger=publish.__name__)
    check_output_dir(str(out), False, run_files)  # not even the folder exists yet
    _make(out, {"notes.txt": b"not a run file", ".temp.txt": b"not a temporary folder"})
    check_output_dir(str(out), False, run_files)
    assert caplog.messages == []
    _make(out, EARLIER)
    first = run_files(str(out))[0]
    with pytest.raises(ValueError, match=re.escape(
            f"{out} already holds the outputs of a run (8 files, e.g. {first}); pass "
            "--overwrite")):
        check_output_dir(str(out), False, run_files)
    check_output_dir(str(out), True, run_files)
    assert caplog.messages == []


def test_check_output_dir_names_the_temporary_folders_of_runs_that_did_not_finish(
        tmp_path, caplog):
    out = tmp_path / "out"
    _make(out, {".temp-a/part.parquet": b"partial", ".temp-a/previous/stats.json": b"{}"})
    (out / ".temp-b").mkdir()
    caplog.set_level(logging.WARNING, logger=publish.__name__)
    check_output_dir(str(out), False, run_files)
    [message] = caplog.messages
    assert message.startswith(f"{out} holds 2 temporary folders of runs that did not "
                              f"finish ({out}/.temp-a, {out}/.temp-b); ")
    assert message.endswith("this run removes them when it succeeds")


def test_a_new_temporary_folder_is_a_temp_dir_of_its_own(tmp_path):
    out = str(tmp_path / "out")
    first, second = new_temp_dir(out), new_temp_dir(out)
    assert first != second
    assert re.fullmatch(re.escape(out) + r"/\.temp-[0-9a-f]{32}", first), first
    Path(first).mkdir(parents=True)
    assert temp_dirs(out) == [first]


def test_outputs_in_the_working_directory(tmp_path, monkeypatch):
    """A scoring prefix without a folder (`--output run`): paths relative to the working
    directory, root ""."""
    monkeypatch.chdir(tmp_path)
    _make(tmp_path, {"run.scores.parquet": b"old scores", "run.summary.json": b"old",
                     "run.scores.parquet.tmp-r1": b"new scores",
                     "run.summary.json.tmp-r1": b"new"})
    moves = [("run.scores.parquet.tmp-r1", "run.scores.parquet"),
             ("run.summary.json.tmp-r1", "run.summary.json")]
    finals = replace_outputs(moves, ["run.summary.json", "run.scores.parquet"], "",
                             "run.tmp-r1.previous")
    assert finals == ["run.scores.parquet", "run.summary.json"]
    assert _files(tmp_path) == {"run.scores.parquet": b"new scores", "run.summary.json": b"new"}


def test_a_root_written_with_a_trailing_slash(tmp_path):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)
    elsewhere = tmp_path / "elsewhere.parquet"
    elsewhere.write_bytes(b"not under the root")
    before = _files(tmp_path)
    with pytest.raises(ValueError, match=f"{elsewhere} is not under {out}"):
        replace_outputs(moves, [str(elsewhere)], str(out), str(temp / "previous"))
    assert _files(tmp_path) == before  # refused before anything moved
    replace_outputs(moves, run_files(str(out)), f"{out}/", str(temp / "previous"))
    assert _files(out) == NEW | {"notes.txt": EARLIER["notes.txt"]}
    assert not (out / "wes-k2").exists() and not (temp / "previous").exists()


def _with_statistics(tmp_path, earlier_run=True):
    """A run that publishes a statistics file outside its folder, with an earlier one."""
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    stats = tmp_path / "elsewhere" / "corpus.parquet"
    if earlier_run:
        _make(out, EARLIER)
    moves = _stage(out, temp)
    _make(stats.parent, {stats.name: b"earlier statistics",
                         f"{stats.name}.tmp-r1": b"new statistics"})
    moves.insert(0, (f"{stats}.tmp-r1", str(stats)))
    return out, temp, stats, moves, {str(stats): f"{stats}.tmp-r1.previous"}


def test_a_file_outside_the_folder_is_published_with_the_run(tmp_path, monkeypatch):
    out, temp, stats, moves, aside = _with_statistics(tmp_path)
    rename = FileSystems.rename

    def failing_rename(sources, destinations):
        if destinations[0] == str(out / MARKER) and sources[0].startswith(str(temp / "staged")):
            raise OSError("disk on fire")
        return rename(sources, destinations)

    monkeypatch.setattr(FileSystems, "rename", staticmethod(failing_rename))
    with pytest.raises(RuntimeError, match="put back as they were"):
        replace_outputs(moves, run_files(str(out)), str(out), str(temp / "previous"),
                        True, aside)
    assert _files(stats.parent) == {"corpus.parquet": b"earlier statistics",
                                    "corpus.parquet.tmp-r1": b"new statistics"}
    assert _run_in(out) == EARLIER_RUN
    monkeypatch.undo()
    finals = replace_outputs(moves, run_files(str(out)), str(out), str(temp / "previous"),
                             True, aside)
    assert finals == [final for _, final in moves]
    assert _files(stats.parent) == {"corpus.parquet": b"new statistics"}  # spare removed
    assert _files(out) == NEW | {"notes.txt": EARLIER["notes.txt"]}


def test_a_file_moved_aside_by_an_attempt_that_died_is_reported(tmp_path, monkeypatch):
    """An attempt died after moving the earlier statistics file aside; the retry fails
    too: its error says that files moved aside before are not back."""
    out, temp, stats, moves, aside = _with_statistics(tmp_path, earlier_run=False)
    spare = Path(aside[str(stats)])
    stats.rename(spare)
    rename = FileSystems.rename

    def failing_rename(sources, destinations):
        if destinations[0] == str(out / MARKER):
            raise OSError("disk on fire")
        return rename(sources, destinations)

    monkeypatch.setattr(FileSystems, "rename", staticmethod(failing_rename))
    with pytest.raises(RuntimeError, match="files of the earlier run moved aside before "
                                           "are still in"):
        replace_outputs(moves, run_files(str(out)), str(out), str(temp / "previous"),
                        True, aside)
    assert spare.read_bytes() == b"earlier statistics"
    # Likewise for files of the earlier run in the aside folder.
    _make(temp, {"previous/wes-k2/train-00000-of-00001.parquet": b"k2 train"})
    spare.rename(stats)
    with pytest.raises(RuntimeError, match="moved aside before are still in"):
        replace_outputs(moves, run_files(str(out)), str(out), str(temp / "previous"),
                        True, aside)


def test_delete_tree(tmp_path):
    _make(tmp_path, {"a/b/c.txt": b"c", "a/d.txt": b"d", "keep.txt": b"k"})
    delete_tree(str(tmp_path / "a"))
    delete_tree(str(tmp_path / "missing"))  # nothing there: nothing to do
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_publish_run_checks_that_the_run_still_owns_the_folder(tmp_path):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)
    with OutputLock(str(out), "this-run", folder=True):
        before = _files(out)
        with pytest.raises(OwnershipLostError, match="no longer owned by this run"):
            publish_run(moves, str(out), str(temp), MARKER, True, run_files,
                        owner="another-run")
        assert _files(out) == before
        finals = publish_run(reversed(moves), str(out), str(temp), MARKER, True, run_files,
                             owner="this-run")
    assert finals == sorted(final for _, final in moves[:-1]) + [str(out / MARKER)]
    assert _files(out) == NEW | {"notes.txt": EARLIER["notes.txt"]}


def test_publish_run_refuses_what_it_cannot_publish(tmp_path):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)
    with pytest.raises(ValueError, match="no stats.json to publish"):
        publish_run([], str(out), str(temp), MARKER, True, run_files)
    with pytest.raises(FileExistsError, match="two runs into one folder at once"):
        publish_run(moves, str(out), str(temp), MARKER, False, run_files)
    assert _files(out) == EARLIER | {f".temp-new/staged-{i}": d
                                     for i, d in enumerate(NEW.values())}


def test_a_temporary_folder_that_cannot_be_removed_is_logged(tmp_path, monkeypatch, caplog):
    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    moves = _stage(out, temp)

    def failing_delete_tree(folder):
        raise OSError("busy")

    monkeypatch.setattr(publish, "delete_tree", failing_delete_tree)
    caplog.set_level(logging.WARNING, logger=publish.__name__)
    publish_run(moves, str(out), str(temp), MARKER, False, run_files)
    assert _run_in(out) == NEW
    assert caplog.messages[-1] == f"could not remove the temporary folder {temp}: busy"


def test_publish_run_as_the_last_step_of_a_pipeline(tmp_path):
    from apache_beam.testing.util import assert_that, equal_to

    out, temp = tmp_path / "out", tmp_path / "out" / ".temp-new"
    _make(out, EARLIER)
    moves = _stage(out, temp)
    with beam.Pipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
        finals = (pipeline | "Moves" >> beam.Create(moves)
                  | "Publish" >> PublishRun(str(out), str(temp), MARKER, True, run_files))
        assert_that(finals, equal_to([final for _, final in moves]))
    assert _files(out) == NEW | {"notes.txt": EARLIER["notes.txt"]}
    # Step names are an interface (the runner's UI, counters, Dataflow's --update).
    assert {"Publish/WaitForAllFiles", "Publish/ReplaceEarlierRun"} <= step_labels(pipeline)
