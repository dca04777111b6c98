"""transforms/io/progress.py: the tally, the worker files, the reporter, the reader."""

import io
import json
import logging
import os
import time

from apache_beam.options.pipeline_options import PipelineOptions

from transforms.io import progress


def test_reporter_logs_this_runs_counts_including_other_processes(caplog):
    caplog.set_level(logging.INFO, logger="test.progress")
    progress.add("t/before", 5)  # before the run: not this run's
    lines = []

    def describe(counts, elapsed):
        lines.append(dict(counts))
        return f"progress {counts.get('t/rows', 0)} rows"

    with progress.ProgressReporter(describe, 0.02, logging.getLogger("test.progress")) as rep:
        folder = os.environ[progress.ENV_DIR]
        progress.add("t/rows", 3)
        # A worker process writes its own tally to the folder.
        with open(os.path.join(folder, "999999.json"), "w") as f:
            json.dump({"t/rows": 4}, f)
        deadline = time.monotonic() + 5
        while rep.lines < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rep.counts() == {"t/rows": 7}
    assert progress.ENV_DIR not in os.environ and not os.path.exists(folder)
    assert lines and all("t/before" not in c for c in lines)
    assert "progress 7 rows" in caplog.text


def test_no_interval_no_thread_and_no_folder():
    with progress.ProgressReporter(lambda c, e: "x", 0) as rep:
        assert progress.ENV_DIR not in os.environ
    assert rep.lines == 0


def test_worker_flush_writes_the_tally(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.ENV_DIR, str(tmp_path))
    progress.add("t/flushed", 2)
    progress.flush()
    written = json.loads((tmp_path / f"{os.getpid()}.json").read_text())
    assert written["t/flushed"] >= 2


def test_counting_reader_counts_bytes():
    before = progress.read_counts(None).get("t/bytes", 0)
    reader = progress.CountingReader(io.BytesIO(b"x" * 100), "t/bytes")
    assert reader.read(30) == b"x" * 30
    buffer = bytearray(50)
    assert reader.readinto(buffer) == 50
    reader.seek(0)  # anything else goes to the file
    assert len(reader.read()) == 100
    assert progress.read_counts(None)["t/bytes"] - before == 180


def test_local_runners():
    assert progress.is_local_runner(PipelineOptions([]))
    assert progress.is_local_runner(PipelineOptions(["--runner=FnApiRunner"]))
    assert progress.is_local_runner(PipelineOptions(
        ["--runner=PortableRunner", "--environment_type=LOOPBACK"]))
    assert not progress.is_local_runner(PipelineOptions(["--runner=DataflowRunner"]))
    assert not progress.is_local_runner(PipelineOptions(
        ["--runner=PortableRunner", "--environment_type=DOCKER"]))


def test_local_worker_processes_share_the_cores_among_their_tokenizers(monkeypatch):
    """Each worker process's tokenizer pool gets cores // workers threads (at least one),
    only for a direct runner's worker processes with model metrics; the user's value
    stays."""
    import os

    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.io import progress

    def divide(*flags, runs_models=True, cpus=16):
        return progress.divide_local_cores(PipelineOptions(list(flags)),
                                           runs_models=runs_models, cpus=cpus)

    multi = ("--runner=FnApiRunner", "--direct_running_mode=multi_processing")
    monkeypatch.setenv("RAYON_NUM_THREADS", "-")  # recorded: what the calls set goes after
    monkeypatch.delenv("RAYON_NUM_THREADS")
    assert divide(*multi, "--direct_num_workers=8", runs_models=False) == {}
    assert divide("--runner=FnApiRunner", "--direct_num_workers=8") == {}  # threads
    for runner in ("DataflowRunner", "BundleBasedDirectRunner", "PrismRunner"):
        assert divide(f"--runner={runner}", "--direct_running_mode=multi_processing",
                      "--direct_num_workers=8") == {}
    assert "RAYON_NUM_THREADS" not in os.environ
    assert divide(*multi, "--direct_num_workers=8") == {"RAYON_NUM_THREADS": "2"}
    assert os.environ["RAYON_NUM_THREADS"] == "2"  # the workers inherit it
    monkeypatch.delenv("RAYON_NUM_THREADS")
    assert divide(*multi, "--direct_num_workers=12") == {"RAYON_NUM_THREADS": "1"}
    monkeypatch.delenv("RAYON_NUM_THREADS")
    assert divide(*multi, "--direct_num_workers=0") == {"RAYON_NUM_THREADS": "1"}  # a core each
    monkeypatch.delenv("RAYON_NUM_THREADS")
    assert divide("--direct_running_mode=multi_processing",  # the DirectRunner, by default
                  "--direct_num_workers=4") == {"RAYON_NUM_THREADS": "4"}
    monkeypatch.delenv("RAYON_NUM_THREADS")
    assert divide(*multi, "--direct_num_workers=2", cpus=None) == {  # this machine's cores
        "RAYON_NUM_THREADS": str(max(1, len(os.sched_getaffinity(0)) // 2))}
    monkeypatch.setenv("RAYON_NUM_THREADS", "6")
    assert divide(*multi, "--direct_num_workers=8") == {}
    assert os.environ["RAYON_NUM_THREADS"] == "6"


def _in_own_process(script: str) -> str:
    """The standard output of `script` run by a fresh interpreter from the repository's
    root (the collector's state there is the script's alone); fails on its failure."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=root)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_freeze_startup_objects_freezes_now_and_at_exit():
    """In a process of its own (the test process would keep its cycles): what is alive is
    frozen at the call, what is made afterwards is not, the exit hook freezes what is
    alive then, and calling again adds no second hook."""
    script = """
import atexit, gc
atexit.register(lambda: print("at exit", gc.get_freeze_count()))  # runs after the hook
import types
from transforms.io import progress
calls = []
def freeze():
    calls.append(1)
    gc.freeze()
progress.gc = types.SimpleNamespace(freeze=freeze)  # counts the calls, the hook's too
atexit.register(lambda: print("calls", len(calls)))  # runs after the hook
assert gc.get_freeze_count() == 0
progress.freeze_startup_objects()
frozen = gc.get_freeze_count()
assert frozen > 1000, frozen
progress.freeze_startup_objects()
progress.freeze_startup_objects()
later = [[i] for i in range(5000)]  # made after the calls: not frozen until exit
assert gc.get_freeze_count() < frozen + 100
print("frozen", gc.get_freeze_count())
"""
    frozen, calls, at_exit = (int(line.split()[-1])
                              for line in _in_own_process(script).splitlines())
    assert calls == 4  # three calls, one hook at exit
    assert at_exit > frozen + 4000  # the hook froze the later lists too


def test_the_collector_is_paused_until_the_first_count():
    """In a process of its own (the resume freezes what is alive): the pause switches the
    collector off; the first count tallied switches it on again, after freezing what the
    start-up made; a resume with no pause on, or a second one, does nothing; and a
    collector the user switched off stays off."""
    script = """
import gc
from transforms.io import progress
assert gc.isenabled() and gc.get_freeze_count() == 0
progress.pause_collector_until_rows()
progress.pause_collector_until_rows()
assert not gc.isenabled()
startup = [[i] for i in range(5000)]  # made while paused: frozen at the resume
progress.add("read/passed", 3)
assert gc.isenabled()
frozen = gc.get_freeze_count()
assert frozen > 5000, frozen
later = [[i] for i in range(5000)]
progress.add("read/passed", 3)  # no second freeze
progress.resume_collector()
assert gc.isenabled() and gc.get_freeze_count() == frozen
gc.disable()  # the user's choice
progress.pause_collector_until_rows()
progress.add("read/passed", 1)
progress.resume_collector()
assert not gc.isenabled() and gc.get_freeze_count() == frozen
print("ok")
"""
    assert _in_own_process(script).split() == ["ok"]
