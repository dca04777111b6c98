"""Runs that overlap (one owner per output, a refused run changes nothing),
owners that died, and files the user hands in that cannot be read (one line naming the
file, exit status 2), for both pipelines."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest

from pipelines import mine_wes, score_predictions
from tests.runners import RUNNER_ARGS

_REPO = Path(__file__).resolve().parents[2]
IN_PROCESS = RUNNER_ARGS["direct_in_process"]


def _rows(n: int, system: str) -> str:
    return "".join(json.dumps({"id": f"{system}{i}", "system": system,
                               "prediction": f"answer {i} of {system}",
                               "references": [f"answer {i}", "other"]}) + "\n"
                   for i in range(n))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines()
            if line.startswith(("qa-score", "wes-mine"))]


@pytest.fixture
def no_pipeline(monkeypatch):
    """Fails the test if a pipeline is built."""
    def refuse(*args, **kwargs):
        raise AssertionError("a pipeline was built")
    monkeypatch.setattr(beam, "Pipeline", refuse)


def test_a_run_into_an_owned_output_is_refused_at_once_and_changes_nothing(
        tmp_path, capsys, no_pipeline):
    from transforms.io.ownership import OutputLock

    data = tmp_path / "b.jsonl"
    data.write_text(_rows(5, "B"))
    prefix = str(tmp_path / "run")
    for name, blob in {"run.scores.parquet": b"owner's scores", "run.summary.json": b"{}",
                       "run.dead_letter.jsonl": b"", "stats.parquet": b"statistics"}.items():
        (tmp_path / name).write_bytes(blob)
    with OutputLock(prefix, "owner1", what=f"--output {prefix}", command="qa-score"):
        before = _snapshot(tmp_path)
        code = score_predictions.main(["--input", str(data), "--output", prefix, "--metrics",
                                       "em,f1", "--overwrite", *IN_PROCESS])
        assert code == 2
        (line,) = _error_lines(capsys)
        assert line.startswith(f"qa-score: error: --output {prefix} is in use by another "
                               f"run (run owner1 (qa-score), pid {os.getpid()} on ")
        assert _snapshot(tmp_path) == before  # nothing written, moved or removed
    stats = str(tmp_path / "stats.parquet")
    with OutputLock(stats, "owner2"):
        code = score_predictions.main(["--input", str(data), "--output", str(tmp_path / "o"),
                                       "--metrics", "cider", "--save_corpus_statistics",
                                       stats, "--overwrite", *IN_PROCESS])
        assert code == 2
        (line,) = _error_lines(capsys)
        assert line.startswith(f"qa-score: error: --save_corpus_statistics {stats} is in "
                               "use by another run (run owner2")
        assert not (tmp_path / "o.lock").exists()  # the prefix was given back
    assert _snapshot(tmp_path) == {k: v for k, v in before.items() if k != "run.lock"}


def test_a_mining_run_into_an_owned_folder_is_refused_at_once(tmp_path, capsys,
                                                              wiki_sample, no_pipeline):
    from transforms.io.ownership import OutputLock

    out = tmp_path / "wes"
    out.mkdir()
    (out / "stats.json").write_text('{"owner": true}')
    with OutputLock(str(out), "miner", folder=True, command="wes-mine"):
        before = _snapshot(out)
        code = mine_wes.main(["--input", str(wiki_sample), "--output", str(out),
                              "--overwrite", *IN_PROCESS])
        assert code == 2
        (line,) = _error_lines(capsys)
        assert line.startswith(f"wes-mine: error: --output {out} is in use by another run "
                               "(run miner (wes-mine)")
        assert _snapshot(out) == before


@pytest.mark.slow
def test_an_owner_that_was_killed_does_not_block_the_next_run(tmp_path, caplog):
    import socket

    from transforms.io.lock_owner import Owner

    data = tmp_path / "a.jsonl"
    data.write_text(_rows(3, "A"))
    prefix = str(tmp_path / "run")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.kill()  # a run that held the prefix, killed a moment ago
    child.wait()
    now = time.time()
    Path(prefix + ".lock").write_bytes(Owner("killed", socket.gethostname(), child.pid,
                                             now, now, "qa-score", prefix).to_json())
    score_predictions.run(["--input", str(data), "--output", prefix, "--metrics", "em",
                           *IN_PROCESS], save_main_session=False)
    assert "taken for dead: its process" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.jsonl", "run.dead_letter.jsonl", "run.scores.parquet", "run.summary.json"]


@pytest.mark.slow
def test_two_runs_started_together_give_one_whole_run_and_one_refusal(tmp_path):
    """Two overlapping runs: two `qa-score --output P --overwrite` started together,
    3,000 rows of system A and 2,000 of system B. Before, P could hold the summary of one
    beside the scores of the other, or one failed with status 1. Now, every time, one
    run publishes whole and the other is refused at launch (exit 2, one line)."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(_rows(3000, "A"))
    b.write_text(_rows(2000, "B"))
    out = tmp_path / "out"
    prefix = str(out / "run")
    env = {**os.environ, "PYTHONPATH": str(_REPO), "HF_HUB_OFFLINE": "1"}
    for trial in range(3):
        commands = [[sys.executable, "-m", "pipelines.score_predictions", "--input",
                     str(source), "--output", prefix, "--overwrite", "--metrics",
                     "em,f1,rougeL", "--progress_interval", "0", *IN_PROCESS]
                    for source in (a, b)]
        runs = [subprocess.Popen(c, cwd=_REPO, env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True) for c in commands]
        results = [(r.wait(timeout=300), r.stderr.read()) for r in runs]
        codes = sorted(code for code, _ in results)
        assert codes == [0, 2], (trial, [err[-2000:] for _, err in results])
        winner = 0 if results[0][0] == 0 else 1
        refused = results[1 - winner][1].strip().splitlines()[-1]
        assert refused.startswith(f"qa-score: error: --output {prefix} is in use by "
                                  "another run"), refused
        summary = json.loads(Path(prefix + ".summary.json").read_text())
        scores = pq.read_table(prefix + ".scores.parquet")
        system, rows = ("A", 3000) if winner == 0 else ("B", 2000)
        assert summary["overall"]["in"] == scores.num_rows == rows, trial
        assert set(scores.column("system").to_pylist()) == {system}, trial
        assert summary["input"] == str((a, b)[winner])
        assert sorted(p.name for p in out.iterdir()) == [
            "run.dead_letter.jsonl", "run.scores.parquet", "run.summary.json"], trial


@pytest.mark.slow
def test_an_input_that_cannot_be_read_on_a_worker_ends_in_one_line(tmp_path, capsys):
    """An input cut short is found by the worker that reads it: one line naming it and
    exit status 2 (it was a traceback and status 1), in process and with worker
    processes (where the runner hands back the worker's error as text)."""
    data = gzip.compress(_rows(3000, "A").encode())
    source = tmp_path / "preds.jsonl.gz"
    source.write_bytes(data[: int(len(data) * 0.6)])
    for runner in ("direct_in_process", "direct_multi_processing"):
        code = score_predictions.main(["--input", str(source), "--output",
                                       str(tmp_path / runner), "--metrics", "em",
                                       *RUNNER_ARGS[runner]])
        assert code == 2, runner
        err = capsys.readouterr().err.splitlines()
        assert err[-1].startswith(f"qa-score: error: input file {source}: cannot be read "
                                  "after row "), (runner, err[-5:])
        assert err[-1].endswith("(the compressed data ends early: the file is cut short)")
        assert not any("Traceback" in line for line in err), runner


@pytest.mark.slow
def test_a_dump_that_cannot_be_read_ends_in_one_line(tmp_path, capsys, dump_variants):
    code = mine_wes.main(["--input", str(dump_variants["truncated"]), "--output",
                          str(tmp_path / "wes"), *IN_PROCESS])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(f"wes-mine: error: {dump_variants['truncated']}"), err[-3:]
    assert not any("Traceback" in line for line in err)
    assert not (tmp_path / "wes" / "stats.json").exists()


def test_training_data_that_cannot_be_read_ends_in_one_line_naming_it(tmp_path, capsys):
    from pipelines import train_cross_encoder

    folder = tmp_path / "stsb"
    folder.mkdir()
    for split in ("train", "dev", "test"):
        (folder / f"sts-{split}.csv").write_bytes(b"genre\tfile\tyear\t1\t4.0\ta\tb\n")
    (folder / "sts-dev.csv").write_bytes(b"\xff\xfe not UTF-8 \x80\x81\n")
    started = time.time()
    code = train_cross_encoder.main(["--format", "stsb", "--input", str(folder),
                                     "--output", str(tmp_path / "model")])
    assert code == 2 and time.time() - started < 120
    (line,) = [x for x in capsys.readouterr().err.splitlines() if ": error: " in x]
    assert f"training data {folder / 'sts-dev.csv'}: cannot be read as UTF-8" in line


@pytest.mark.slow
def test_a_model_folder_that_cannot_be_loaded_on_a_worker_ends_in_one_line(
        tmp_path, capsys, cross_encoder_path):
    """The launcher checks that the weights are there; that they can be read is found
    where the model is loaded, on a worker: one line naming the folder, exit 2."""
    from tests.models.checkpoints import copy_checkpoint

    folder = copy_checkpoint(cross_encoder_path, tmp_path / "sas")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    data = tmp_path / "a.jsonl"
    data.write_text(_rows(3, "A"))
    code = score_predictions.main(["--input", str(data), "--output", str(tmp_path / "run"),
                                   "--metrics", "sas", "--sas_model", str(folder),
                                   *IN_PROCESS])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(f"qa-score: error: cannot read the weights of {folder}: ")
    assert not any("Traceback" in line for line in err)
