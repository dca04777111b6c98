"""The ownership claims, the publishing swap and empty files on a real S3 server (moto's,
tests/io/s3_server.py), through Beam's own S3 file system: the same checks the local-disk
tests make (test_ownership.py, test_publish.py, test_publish_folders.py), on S3's semantics
(no create-if-absent, a rename is a copy and a delete, no folders)."""

from __future__ import annotations

import re

import pytest
from apache_beam.io.filesystems import FileSystems

from tests.io.s3_server import S3Bucket
from transforms.io import s3_fixes
from transforms.io.ownership import (
    OutputLock,
    OutputOwnedError,
    OwnershipLostError,
    check_owner,
    owner_of,
)
from transforms.io.publish import publish_run, replace_outputs

MARKER = "stats.json"
EARLIER = {"stats.json": b"earlier marker", "wes-k2/train-00000-of-00001.parquet": b"e1",
           "notes.txt": b"not a run file"}
NEW = {"stats.json": b"new marker", "wes-k5/train-00000-of-00002.parquet": b"n1",
       "wes-k5/train-00001-of-00002.parquet": b"n2"}


def _run_files(folder: str) -> list[str]:
    return [m.path for r in FileSystems.match([f"{folder}/stats.json", f"{folder}/wes-*/**"])
            for m in r.metadata_list]


def _stage(s3: S3Bucket, out: str, temp: str) -> list[tuple[str, str]]:
    """The new run's files under `temp` (keys under the bucket's `out/`), marker last."""
    moves = []
    for name, data in NEW.items():
        s3.put(f"out/.temp-new/{name}", data)
        moves.append((f"{temp}/{name}", f"{out}/{name}"))
    return sorted(moves, key=lambda m: (m[1].endswith(MARKER), m[1]))


def _in_out(s3: S3Bucket) -> dict[str, bytes]:
    return {k[len("out/"):]: v for k, v in s3.files("out/").items()}


def test_an_empty_file_is_written(s3):
    path = s3.path("empty.jsonl")
    with FileSystems.create(path):
        pass
    assert s3.get("empty.jsonl") == b""
    assert FileSystems.match([path])[0].metadata_list[0].size_in_bytes == 0


def test_beam_alone_cannot_write_an_empty_file_to_s3(s3, monkeypatch):
    """The fault s3_fixes corrects: S3 refuses an upload of no parts."""
    from apache_beam.io.aws import s3io

    with monkeypatch.context() as patch:  # (`monkeypatch.undo` would undo the fixture's)
        patch.setattr(s3io.S3Uploader, "finish", s3io.S3Uploader.finish.__wrapped__)
        with pytest.raises(Exception, match="MalformedXML"):
            with FileSystems.create(s3.path("empty.jsonl")):
                pass
    assert s3_fixes.correct_s3_client()  # applied once, idempotent


def test_a_second_run_is_refused_while_the_first_owns_the_output(s3):
    out = s3.path("scores/run")
    first = OutputLock(out, "first-run", what=f"--output {out}")
    with first:
        assert s3.keys("scores/") == ["scores/run.lock-first-run"]  # a claim, not a lock
        assert owner_of(out) == "first-run"
        check_owner(out, "first-run")
        with pytest.raises(OutputOwnedError, match=re.escape(f"{out} is in use by another "
                                                             "run (run first-run,")):
            OutputLock(out, "second-run").acquire()
        assert s3.keys("scores/") == ["scores/run.lock-first-run"]  # withdrawn
        with pytest.raises(OwnershipLostError):
            check_owner(out, "second-run")
    assert s3.keys("scores/") == []
    with OutputLock(out, "second-run"):
        assert owner_of(out) == "second-run"


def test_a_dead_runs_claim_is_taken_over(s3, caplog):
    out = s3.path("wes")
    dead = OutputLock(out, "dead-run", folder=True, stale_after_s=0.0)
    dead.acquire()
    dead._stop.set()  # its heartbeat stops, as a killed launcher's
    with OutputLock(out, "next-run", folder=True, stale_after_s=0.0):
        assert s3.keys("wes/") == ["wes/.lock-next-run"]
    assert "taken for dead" in caplog.text


@pytest.mark.parametrize("name, nth", [
    ("stats.json", 1),  # the earlier marker, moved aside first
    ("wes-k5/train-00001-of-00002.parquet", 1),  # a new file, moved in
    ("stats.json", 2),  # the new marker, moved in last
])
def test_a_swap_that_fails_midway_puts_the_earlier_run_back(s3, monkeypatch, name, nth):
    out, temp = s3.path("out"), s3.path("out/.temp-new")
    for key, data in EARLIER.items():
        s3.put(f"out/{key}", data)
    moves = _stage(s3, out, temp)
    before = _in_out(s3)
    rename, seen = FileSystems.rename, []

    def failing_rename(sources, destinations):
        if f"{out}/{name}" in (sources[0], destinations[0]):
            seen.append(sources[0])
            if len(seen) == nth:
                raise OSError("connection reset")  # a copy that never happened
        return rename(sources, destinations)

    with monkeypatch.context() as patch:
        patch.setattr(FileSystems, "rename", staticmethod(failing_rename))
        with pytest.raises(RuntimeError, match="the earlier outputs were put back as they "
                                               "were"):
            replace_outputs(moves, _run_files(out), out, s3.path("out/.temp-new/previous"))
    assert len(seen) >= nth
    assert _in_out(s3) == before  # the earlier run whole, the new files where they were
    replace_outputs(moves, _run_files(out), out, s3.path("out/.temp-new/previous"))
    assert _in_out(s3) == NEW | {"notes.txt": EARLIER["notes.txt"]}


def test_publish_run_on_s3_checks_the_owner_and_removes_temporary_folders(s3):
    out, temp = s3.path("out"), s3.path("out/.temp-new")
    for key, data in EARLIER.items():
        s3.put(f"out/{key}", data)
    moves = _stage(s3, out, temp)
    s3.put("out/.temp-killed/wes-k5/part", b"a killed run's file")
    with OutputLock(out, "this-run", folder=True):
        with pytest.raises(OwnershipLostError):
            publish_run(moves, out, temp, MARKER, True, _run_files, owner="another-run")
        finals = publish_run(moves, out, temp, MARKER, True, _run_files, owner="this-run")
    assert finals[-1] == f"{out}/{MARKER}"
    assert _in_out(s3) == NEW | {"notes.txt": EARLIER["notes.txt"]}
