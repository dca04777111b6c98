"""Runner configurations shared by the pipeline tests.

`RUNNER_ARGS` names each way the tests run a pipeline: the FnApiRunner, in process or with
worker processes (named, not the DirectRunner, which in Beam 2.77 first tries Prism and
downloads its binary when the machine is online, then falls back to the FnApiRunner: the
same code then runs everywhere). The portable one needs Beam's own
job service (the same Job API that Flink's job server speaks), which `local_job_service`
starts on 127.0.0.1 and stops by its own process id.

Engines that place work in other processes:

- `external_workers`: the job service and Beam's worker pool (`worker_pool_main`), each
  its own process, the layout of Flink and Spark (`--environment_type EXTERNAL`). The
  pool's workers import the project from `site` (the wheel `setup.py` builds, installed
  there, as `--setup_file` installs it on Dataflow), start in an empty working directory
  and see none of the launcher's memory.
- `dask_cluster`: a dask.distributed cluster (a scheduler and worker processes) in a
  process of its own, for Beam's DaskRunner.

Every service is started in a new session on a free port of 127.0.0.1 and stopped by its
process group id when the block ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence

RUNNER_ARGS = {
    "direct_in_process": ["--runner=FnApiRunner", "--direct_running_mode=in_memory"],
    "direct_multi_processing": [
        "--runner=FnApiRunner",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=2",
    ],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """Stops a service started with `start_new_session`: its whole process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # the group's other processes (a worker pool's workers) may outlive their parent
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _wait_for_port(proc: subprocess.Popen, port: int, what: str, timeout_s: float,
                   log: str | None = None) -> None:
    """Waits until `proc` accepts connections on 127.0.0.1:`port`.

    Raises:
        RuntimeError: the process exited, or did not listen within `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            tail = ""
            if log:
                with open(log, errors="replace") as f:
                    tail = f.read()[-4000:]
            raise RuntimeError(f"{what} exited with {proc.returncode}: {tail}")
        with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} on 127.0.0.1:{port} did not start in {timeout_s} s")
        time.sleep(0.2)


@contextlib.contextmanager
def _service(argv: Sequence[str], port: int, what: str, log: str, timeout_s: float,
             env: Mapping[str, str] | None = None, cwd: str | None = None
             ) -> Iterator[subprocess.Popen]:
    """Runs `argv` in a new session, its output in `log`, until the block ends."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT,
                                env=None if env is None else dict(env), cwd=cwd,
                                start_new_session=True)
    try:
        _wait_for_port(proc, port, what, timeout_s, log)
        yield proc
    finally:
        _stop(proc)


@contextlib.contextmanager
def local_job_service(timeout_s: float = 60.0) -> Iterator[list[str]]:
    """Starts Beam's local job service; yields the pipeline args that use it.

    Raises:
        RuntimeError: the service did not accept connections within `timeout_s`.
    """
    port = _free_port()
    with tempfile.TemporaryDirectory() as folder, _service(
            [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
             "--port", str(port)], port, "job service", os.path.join(folder, "service.log"),
            timeout_s):
        yield ["--runner=PortableRunner", f"--job_endpoint=127.0.0.1:{port}",
               "--environment_type=LOOPBACK"]


def worker_environment(site: str, extra_path: Sequence[str] = ()) -> dict[str, str]:
    """The environment of a worker process: the project only from `site` (where its wheel
    is installed), never from this checkout; the same Python (`python` on PATH is the
    one a worker pool starts its workers with)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([site, *extra_path])
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


@contextlib.contextmanager
def external_workers(site: str, workdir: str, timeout_s: float = 60.0
                     ) -> Iterator[list[str]]:
    """Beam's job service and worker pool, each in its own process; yields the pipeline
    args that use them (`--environment_type EXTERNAL`).

    Args:
        site: a folder where the project's wheel is installed (`install_wheel`); the only
            place the workers import the project from.
        workdir: an empty folder: the services' working directory and their logs.
    """
    env = worker_environment(site)
    pool_port, job_port = _free_port(), _free_port()
    with _service(
            [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
             "--service_port", str(pool_port)],
            pool_port, "worker pool", os.path.join(workdir, "worker_pool.log"), timeout_s,
            env=env, cwd=workdir), _service(
            [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
             "--port", str(job_port)],
            job_port, "job service", os.path.join(workdir, "job_service.log"), timeout_s,
            env=env, cwd=workdir):
        yield ["--runner=PortableRunner", f"--job_endpoint=127.0.0.1:{job_port}",
               "--environment_type=EXTERNAL", f"--environment_config=127.0.0.1:{pool_port}"]


_DASK_CLUSTER = """\
import signal, sys, threading
from distributed import LocalCluster
cluster = LocalCluster(n_workers=int(sys.argv[1]), threads_per_worker=1, processes=True,
                       host="127.0.0.1", scheduler_port=int(sys.argv[2]),
                       dashboard_address=":0", silence_logs=40)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
cluster.wait_for_workers(int(sys.argv[1]))
print(cluster.scheduler_address, flush=True)
stop.wait()
cluster.close()
"""


@contextlib.contextmanager
def dask_cluster(site: str, workdir: str, workers: int = 2, timeout_s: float = 90.0
                 ) -> Iterator[list[str]]:
    """A dask.distributed cluster of `workers` worker processes (one thread each) in a
    process of its own; yields the pipeline args of the project's DaskRunner (Beam's,
    corrected: transforms/io/dask_runner.py) against it, `Reshuffle` spreading elements
    over `workers` partitions.

    Args:
        site: where the project's wheel is installed (the workers import it from there).
        workdir: an empty folder: the cluster's working directory and its log.
    """
    import dask
    import distributed

    # dask and distributed themselves may come from PYTHONPATH (a folder of their own)
    extra = sorted({os.path.dirname(os.path.dirname(m.__file__)) for m in (dask, distributed)})
    port = _free_port()
    with _service([sys.executable, "-c", _DASK_CLUSTER, str(workers), str(port)], port,
                  "dask scheduler", os.path.join(workdir, "dask_cluster.log"), timeout_s,
                  env=worker_environment(site, extra), cwd=workdir):
        yield ["--runner=transforms.io.dask_runner.DaskRunner",
               f"--dask_client_address=tcp://127.0.0.1:{port}",
               f"--dask_npartitions={workers}"]
