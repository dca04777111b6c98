"""Progress lines of a run on a local runner: counts tallied as they happen, read by a
thread of the launcher every few seconds.

Beam's counters are the progress of a run on Dataflow (its UI shows them while the job
runs), but a local runner gives them to the launcher only once `run()` has returned: the
FnApiRunner (what the DirectRunner runs) executes the whole pipeline inside `run()` and
builds its `PipelineResult` at the end, so polling `result.metrics()` during the run is
not possible. The counting code therefore also tallies here (`add`), per process:

- in the launcher's process (FnApiRunner in memory or with threads, PortableRunner with
  LOOPBACK workers) the tally is read directly;
- worker processes (`--direct_running_mode=multi_processing`) inherit the environment
  variable `QA_EVAL_PROGRESS_DIR` that the reporter sets, and write their tally to
  `<dir>/<pid>.json` at most once a second (and at the end of every bundle), which the
  reporter adds up.

Nothing here changes what a run computes or writes: the tally is only read by
`ProgressReporter`, which logs one line every `interval_s` seconds (`describe` turns the
counts into the line) and removes its folder at the end.
"""

import atexit
import collections
import contextlib
import gc
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping

logger = logging.getLogger(__name__)

ENV_DIR = "QA_EVAL_PROGRESS_DIR"
_FLUSH_EVERY_S = 1.0


class _Tally:
    """This process's counts; written to the progress folder when one is set."""

    def __init__(self) -> None:
        self._counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._last_flush = 0.0

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n
        if _collector_paused:  # the run's first count here: its start-up is over
            resume_collector()
        if time.monotonic() - self._last_flush >= _FLUSH_EVERY_S:
            self.flush()

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def flush(self, folder: str | None = None) -> None:
        """Writes this process's counts to `<folder>/<pid>.json` (atomically)."""
        self._last_flush = time.monotonic()
        folder = folder or os.environ.get(ENV_DIR)
        if not folder or not os.path.isdir(folder):
            return
        path = os.path.join(folder, f"{os.getpid()}.json")
        try:
            with open(f"{path}.tmp", "w", encoding="utf-8") as f:
                json.dump(self.snapshot(), f)
            os.replace(f"{path}.tmp", path)
        except OSError:  # the reporter removed its folder: the run is over
            pass


_TALLY = _Tally()


# add(key, n): adds `n` to the count `key` ("namespace/name") of this process.
add = _TALLY.add


def flush() -> None:
    """Writes this process's counts now (a worker process, at the end of a bundle)."""
    if os.environ.get(ENV_DIR):
        _TALLY.flush()


def read_counts(folder: str | None) -> dict[str, int]:
    """This process's counts plus those the other processes wrote to `folder`."""
    total = collections.Counter(_TALLY.snapshot())
    if folder and os.path.isdir(folder):
        own = f"{os.getpid()}.json"
        for name in os.listdir(folder):
            if not name.endswith(".json") or name == own:
                continue
            with contextlib.suppress(OSError, ValueError):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    total.update(json.load(f))
    return dict(total)


class CountingReader:
    """A file object that adds the bytes read through it to the count `key`."""

    def __init__(self, raw, key: str) -> None:
        self._raw = raw
        self._key = key

    def read(self, *args):
        data = self._raw.read(*args)
        add(self._key, len(data))
        return data

    def read1(self, *args):
        data = self._raw.read1(*args)
        add(self._key, len(data))
        return data

    def readinto(self, buffer):
        n = self._raw.readinto(buffer)
        add(self._key, n or 0)
        return n

    def readinto1(self, buffer):
        n = self._raw.readinto1(buffer)
        add(self._key, n or 0)
        return n

    def __getattr__(self, name):
        return getattr(self._raw, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._raw.close()


class ProgressReporter:
    """Logs a progress line every `interval_s` seconds while its `with` block runs.

    Args:
        describe: `(counts, elapsed_s) -> line`; `counts` are this run's counts
            ("namespace/name" -> n: the tally since the reporter started).
        interval_s: seconds between lines; 0 or less = no lines.
        log: the logger of the lines.
    """

    def __init__(self, describe: Callable[[Mapping[str, int], float], str],
                 interval_s: float, log: logging.Logger = logger) -> None:
        self._describe = describe
        self._interval = interval_s
        self._log = log
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._folder: str | None = None
        self._previous_env: str | None = None
        self._baseline: dict[str, int] = {}
        self._started = 0.0
        self.lines = 0

    def counts(self) -> dict[str, int]:
        """This run's counts so far."""
        now = read_counts(self._folder)
        return {k: v - self._baseline.get(k, 0) for k, v in now.items()
                if v - self._baseline.get(k, 0)}

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def __enter__(self) -> "ProgressReporter":
        self._started = time.monotonic()
        if self._interval <= 0:
            return self
        self._folder = tempfile.mkdtemp(prefix="qa-eval-progress-")
        self._previous_env = os.environ.get(ENV_DIR)
        os.environ[ENV_DIR] = self._folder
        self._baseline = read_counts(None)
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._log.info("%s", self._describe(self.counts(), self.elapsed()))
                self.lines += 1
            except Exception:  # a progress line must never end the run
                self._log.debug("progress line failed", exc_info=True)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._folder is not None:
            if self._previous_env is None:
                os.environ.pop(ENV_DIR, None)
            else:
                os.environ[ENV_DIR] = self._previous_env
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def rate(n: float, seconds: float) -> float:
    """n per second (0 for no time)."""
    return n / seconds if seconds > 0 else 0.0


# Runners that run the pipeline on this machine, where the progress tally is seen.
LOCAL_RUNNERS = ("DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner",
                 "FnApiRunner", "PrismRunner")


def _runner_name(options) -> str | None:
    """The runner's class name (a dotted path or an instance, as given), None if unset."""
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) or runner is None else type(runner).__name__
    return None if name is None else name.rsplit(".", 1)[-1]


def is_local_runner(options) -> bool:
    """Whether `options` (PipelineOptions) run the pipeline on this machine: a direct
    runner (the default), or the PortableRunner with LOOPBACK workers."""
    from apache_beam.options.pipeline_options import PortableOptions

    name = _runner_name(options)
    if name is None or name in LOCAL_RUNNERS:
        return True
    return (options.view_as(PortableOptions).environment_type or "").upper() == "LOOPBACK"


# Runners that run the pipeline on the FnApiRunner here (the DirectRunner's default
# choice when Prism is not available), whose workers `--direct_num_workers` counts.
_DIRECT_RUNNERS = ("DirectRunner", "SwitchingDirectRunner", "FnApiRunner")


def direct_workers(options) -> int | None:
    """How many workers a direct runner hands each stage's input to, in parts (the
    FnApiRunner: `--direct_num_workers`, 0 meaning one per core, in threads or processes
    by `--direct_running_mode`); 1 for the BundleBasedDirectRunner (one thread); None
    for any other runner, whose workers the pipeline cannot count. The DirectRunner may
    run on Prism where Prism can be fetched: the count then describes nothing, and a
    pipeline planned by it stays correct, its parallelism that of its splits."""
    import multiprocessing

    from apache_beam.options.pipeline_options import DirectOptions

    name = _runner_name(options) or "DirectRunner"
    if name == "BundleBasedDirectRunner":
        return 1
    if name not in _DIRECT_RUNNERS:
        return None
    workers = options.view_as(DirectOptions).direct_num_workers
    return multiprocessing.cpu_count() if workers == 0 else (workers or 1)


def starts_worker_processes(options) -> bool:
    """Whether this process will start the run's worker processes on this machine: a
    direct runner (the FnApiRunner) with `--direct_running_mode=multi_processing`. Not
    the BundleBasedDirectRunner (one process), nor any other runner, whose workers this
    process does not start. The DirectRunner may hand a pipeline to Prism where Prism can
    be fetched (not here): its workers then run elsewhere, and what this enables (a
    tokenizer's share of the cores, the shared copies started here) stays correct, only
    less useful; `--runner=FnApiRunner` names the runner these were measured on."""
    from apache_beam.options.pipeline_options import DirectOptions

    return ((_runner_name(options) or "DirectRunner") in _DIRECT_RUNNERS
            and options.view_as(DirectOptions).direct_running_mode == "multi_processing")


def divide_local_cores(options, *, runs_models: bool, cpus: int | None = None) -> dict[str, str]:
    """For the worker processes of a direct runner's `--direct_running_mode=
    multi_processing` run with model metrics: each worker's tokenizer gets the machine's
    cores divided by the workers, at least one (RAYON_NUM_THREADS, the fast tokenizer's
    thread pool, read by each worker when it starts: they inherit the launcher's
    environment). Left alone, every worker's pool has a thread per core, so N workers run
    N x cores tokenizer threads on the cores their own Python also needs. A value the
    user set stays. Returns what was set."""
    from apache_beam.options.pipeline_options import DirectOptions

    direct = options.view_as(DirectOptions)
    if (not runs_models or not starts_worker_processes(options)
            or "RAYON_NUM_THREADS" in os.environ):
        return {}
    cpus = cpus or _usable_cpus()
    workers = cpus if direct.direct_num_workers == 0 else (direct.direct_num_workers or 1)
    os.environ["RAYON_NUM_THREADS"] = str(max(1, cpus // workers))
    return {"RAYON_NUM_THREADS": os.environ["RAYON_NUM_THREADS"]}


def _usable_cpus() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def freeze_startup_objects() -> None:
    """For a process that is this run's alone: every object alive now moves out of the
    cyclic collector's reach (`gc.freeze`), and again at the interpreter's exit. Called
    when the run starts and once its graph is built, the frozen objects are mostly the
    modules of Beam, this package and, with model metrics, torch (half a million
    objects, alive to the end anyway), which Python's full collections otherwise scan
    each time: while the model's library is imported and the model loaded, and at exit
    (about 1.2 s of a short in-process judge run on the 2-core machine, 0.7 s with two
    workers: docs/benchmarks.md). Everything else alive then is frozen too (the flags,
    the graph, any garbage cycle not yet collected) and stays to the exit. What the run
    makes afterwards is collected as before, and a frozen object is still freed when its
    last reference goes; only cycles among frozen objects stay, which is why a process
    that goes on after the run (a program calling `run()`, tests) is left alone."""
    gc.freeze()
    atexit.unregister(gc.freeze)  # once, however often called
    atexit.register(gc.freeze)


# Whether `pause_collector_until_rows` turned the cyclic collector off and nothing has
# turned it back on (read at every `add`, without the lock).
_collector_paused = False
_PAUSE_LOCK = threading.Lock()


def pause_collector_until_rows() -> None:
    """For a process that is this run's alone and reads and scores its rows itself (an
    in-process local run from the command line): the cyclic collector off from now until
    the first count of the run is tallied here (`add`: rows read, in the stage that has
    loaded the models by then) or `resume_collector()` is called, whichever comes first.

    A run's start-up (the graph, its planning, torch and transformers imported, the
    model loaded) makes hundreds of thousands of objects that live to the end, and the
    collector scanned them over and over as they came: about 0.5 s of a short judge run
    on the 2-core machine even after `freeze_startup_objects` (docs/benchmarks.md). The
    garbage cycles made meanwhile (about 8,000 objects in such a run) are frozen with the
    rest at the resume and stay to the exit, as `freeze_startup_objects` keeps those alive
    at its call. Nothing happens where the collector is already off (the user's choice
    stands). Not for worker processes, nor for a launcher whose rows are read elsewhere:
    no count would end the pause before the run does."""
    global _collector_paused
    with _PAUSE_LOCK:
        if gc.isenabled():
            gc.disable()
            _collector_paused = True


def resume_collector() -> None:
    """Ends `pause_collector_until_rows`: what is alive is frozen
    (`freeze_startup_objects`), and the collector is on again. Does nothing when no pause
    is on, so that a run calls it at its end whatever happened."""
    global _collector_paused
    with _PAUSE_LOCK:
        if not _collector_paused:
            return
        _collector_paused = False
        freeze_startup_objects()
        gc.enable()
