"""qa-score on S3 (moto's server, tests/io/s3_server.py) through its command line and
Beam's own S3 file system: input read from S3, every output, the ownership claim and
the saved corpus statistics written there, an incremental run from a previous run and
statistics files on S3, and a run that fails while publishing, which leaves the
earlier run whole (as tests/pipelines/test_score_predictions.py checks on a local disk).
"""

from __future__ import annotations

import json

import pytest
from apache_beam.io.filesystems import FileSystems

from tests.runners import RUNNER_ARGS

pytestmark = pytest.mark.slow

METRICS = "em,f1,cider"
OUTPUTS = ["run.dead_letter.jsonl", "run.scores.parquet", "run.summary.json"]


def _rows(system: str, ids: range) -> str:
    return "".join(json.dumps({"id": f"r{i}", "system": system, "prediction": f"answer {i}",
                               "references": [f"answer {i}" if i % 2 else "other"]}) + "\n"
                   for i in ids)


def _score(s3, *argv: str) -> None:
    from pipelines.score_predictions import run

    run([*argv, "--metrics", METRICS, *s3.argv(), *RUNNER_ARGS["direct_in_process"]],
        save_main_session=False)


def _summary(s3, key: str) -> dict:
    return json.loads(s3.get(key))


def test_a_run_reads_from_and_writes_to_s3_then_an_incremental_run_builds_on_it(s3):
    source = s3.put("preds/p.jsonl", _rows("a", range(6)))
    _score(s3, "--input", source, "--output", s3.path("night1/run"),
           "--save_corpus_statistics", s3.path("stats/cider.parquet"))
    assert s3.keys("night1/") == [f"night1/{name}" for name in OUTPUTS]  # no claim left
    assert s3.get("night1/run.dead_letter.jsonl") == b""  # an empty file on S3
    first = _summary(s3, "night1/run.summary.json")
    assert first["overall"]["in"] == first["overall"]["scored"] == 6
    assert first["inputs"][0]["path"] == source
    assert s3.keys("stats/") == ["stats/cider.parquet"]

    # The next night: two rows more, the rest carried from the previous run on S3, and
    # CIDEr-D scored against the statistics file saved there.
    s3.put("preds/p.jsonl", _rows("a", range(8)))
    _score(s3, "--input", source, "--output", s3.path("night2/run"),
           "--previous_run", s3.path("night1/run"),
           "--corpus_statistics", s3.path("stats/cider.parquet"))
    assert s3.keys("night2/") == [f"night2/{name}" for name in OUTPUTS]
    second = _summary(s3, "night2/run.summary.json")
    assert second["overall"]["scored"] == 8
    assert second["incremental"]["previous_run"] == s3.path("night1/run")
    # CIDEr-D against other statistics (the file's, not the run's corpus): recomputed
    assert set(second["incremental"]["carried_metrics"]) == {"em", "f1"}
    assert "cider" in second["incremental"]["computed_metrics"]
    assert "stats:file:" in second["signatures"]["cider"]


def test_a_run_that_fails_while_publishing_leaves_the_earlier_run_whole(s3, monkeypatch):
    source = s3.put("preds/p.jsonl", _rows("a", range(4)))
    prefix = s3.path("scores/run")
    stats = ["--save_corpus_statistics", s3.path("scores/run.stats.parquet")]
    _score(s3, "--input", source, "--output", prefix, *stats)
    before = s3.files("scores/")
    assert sorted(before) == ["scores/run.dead_letter.jsonl", "scores/run.scores.parquet",
                              "scores/run.stats.parquet", "scores/run.summary.json"]

    # Another corpus, other statistics: the publishing step moves the earlier run's
    # files aside and the new ones in, and fails when it moves the new summary in
    # (a copy that S3 never completed).
    s3.put("preds/q.jsonl", _rows("b", range(10, 15)))
    rename, failed = FileSystems.rename, []

    def failing_rename(sources, destinations):
        if sources[0].startswith(prefix + ".summary.json.tmp-"):  # not the earlier one
            failed.append(sources[0])
            raise OSError("connection reset by peer")
        return rename(sources, destinations)

    with monkeypatch.context() as patch:
        patch.setattr(FileSystems, "rename", staticmethod(failing_rename))
        with pytest.raises(Exception, match="the earlier outputs were put back"):
            _score(s3, "--input", s3.path("preds/q.jsonl"), "--output", prefix,
                   "--overwrite", *stats)
    assert failed
    after = {k: v for k, v in s3.files("scores/").items() if ".tmp-" not in k}
    assert after == before  # byte for byte, its statistics file too; no claim left

    # The next run replaces it whole and removes the failed run's temporary files.
    _score(s3, "--input", s3.path("preds/q.jsonl"), "--output", prefix, "--overwrite",
           *stats)
    assert sorted(s3.files("scores/")) == sorted(before)
    assert _summary(s3, "scores/run.summary.json")["overall"]["in"] == 5


def test_wes_mine_publishes_its_folder_on_s3(s3, wiki_sample):
    """The mining run's own temporary folder, its publishing and the removal of a killed
    run's temporary folder, on S3 (no folders there: prefixes)."""
    from pipelines.mine_wes import run

    out = s3.path("wes")
    s3.put("wes/.temp-killed/wes-k5/part", b"a killed run's file")
    run(["--input", str(wiki_sample), "--output", out, "--min_incoming_links", "5",
         *s3.argv(), *RUNNER_ARGS["direct_in_process"]], save_main_session=False)
    files = s3.files("wes/")
    stats = json.loads(files["wes/stats.json"])
    assert sorted(files) == sorted(  # nothing of the killed run, no claim left
        ["wes/stats.json", "wes/dataset_card.md", "wes/README.md"]
        + [f[len(s3.path("")):] for f in stats["files"]])
    assert stats["corpora"]["wes-k5"]["positives"] > 0
