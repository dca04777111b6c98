"""The run manifest in summary.json (code, times, input files), the refusal of a prefix
that holds a complete run, and the dead-letter alert."""

from __future__ import annotations

import hashlib
import re
import subprocess

import pytest

from transforms.scoring.outputs import manifest
from transforms.scoring.outputs.paths import OutputPaths, check_prefix, leftover_temp_files
from transforms.scoring.outputs.summary import dead_letter_alert


def test_describe_input_hashes_a_local_file(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prediction": "x"}\n' * 1000)
    entry = manifest.describe_input(str(path))
    assert entry["size"] == 20_000
    assert entry["checksum"] == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert entry["checksum_kind"] == "sha256"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry["modified"])
    path.write_bytes(b'{"prediction": "y"}\n' * 1000)  # same size, other bytes
    assert manifest.describe_input(str(path))["checksum"] != entry["checksum"]


def test_describe_input_without_reading(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("prediction\nx\n")
    for mode in ("metadata", "none"):  # a local disk keeps no checksum of its own
        entry = manifest.describe_input(str(path), mode)
        assert (entry["size"], entry["checksum"], entry["checksum_kind"]) == (13, None, None)
    with pytest.raises(ValueError, match="unknown --input_checksums 'md5'"):
        manifest.describe_input(str(path), "md5")
    with pytest.raises(FileNotFoundError, match="gone"):
        manifest.describe_input(str(tmp_path / "missing.csv"))


def test_code_version_names_the_checkout():
    manifest.code_version.cache_clear()  # asked once per process: the checkout may have moved
    code = manifest.code_version()
    assert code["package"] == "qa-eval-beam"
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=manifest.__file__.rsplit("/transforms/", 1)[0])
    if head.returncode == 0:
        assert code["git_commit"] == head.stdout.strip()
        assert isinstance(code["git_dirty"], bool)
    else:  # not a checkout (an installed package)
        assert code["git_commit"] is None


def test_run_manifest_lists_inputs_in_order(tmp_path):
    files = []
    for name in ("b.jsonl", "a.jsonl"):
        (tmp_path / name).write_text(name)
        files.append(str(tmp_path / name))
    doc = manifest.run_manifest(files, started_at="2026-11-23T00:00:00Z")
    assert [e["path"] for e in doc["inputs"]] == files
    assert doc["started_at"] == "2026-11-23T00:00:00Z" and doc["code"]["package"]


def _complete_run(prefix: str, with_summary: bool = True) -> None:
    paths = OutputPaths(prefix, "parquet", "old")
    for final in paths.finals(with_report=False):
        if final != paths.summary or with_summary:
            open(final, "w").write("old")


def test_check_prefix_refuses_a_complete_run_without_overwrite(tmp_path):
    prefix = str(tmp_path / "run")
    paths = OutputPaths(prefix, "parquet", "new")
    check_prefix(paths, overwrite=False)  # nothing there
    _complete_run(prefix)
    with pytest.raises(ValueError, match=r"holds a complete run .*run\.summary\.json.*"
                                         r"--overwrite"):
        check_prefix(paths, overwrite=False)
    check_prefix(paths, overwrite=True)
    # The other format's run is a run too.
    with pytest.raises(ValueError, match="complete run"):
        check_prefix(OutputPaths(prefix, "jsonl", "new"), overwrite=False)


def test_check_prefix_lets_an_incomplete_run_be_replaced(tmp_path, caplog):
    prefix = str(tmp_path / "run")
    _complete_run(prefix, with_summary=False)  # killed while moving in: no summary
    paths = OutputPaths(prefix, "parquet", "new")
    open(f"{prefix}.scores.parquet.tmp-dead1", "w").write("x")
    open(f"{prefix}.scores.parquet.tmp-new", "w").write("x")  # this run's own
    check_prefix(paths, overwrite=False)
    assert "did not finish" in caplog.text
    assert leftover_temp_files(paths) == [f"{prefix}.scores.parquet.tmp-dead1"]


@pytest.mark.parametrize("dead, rows, limit, alerted", [
    (0, 10, 0.0, False), (1, 10, 0.1, False), (2, 10, 0.1, True), (5, 10, None, False),
    (0, 0, 0.5, True)])
def test_dead_letter_alert(dead, rows, limit, alerted):
    summary = {"overall": {"in": rows, "scored": rows - dead, "dead_lettered": dead,
                           "dead_lettered_by_reason": {"bad_json": dead} if dead else {}}}
    alert = dead_letter_alert(summary, limit, " in out/run")
    assert bool(alert) is alerted
    if alerted and rows:
        assert alert == (f"{dead} of {rows} rows (20.00%) were dead-lettered in out/run, "
                         "more than --max_dead_letter_fraction 0.1 allows (bad_json 2)")
        assert "\n" not in alert
