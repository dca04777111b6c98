"""Runner configurations shared by the pipeline tests.

`RUNNER_ARGS` names each way the tests run a pipeline: the FnApiRunner, in process or with
worker processes (named, not the DirectRunner, which in Beam 2.77 first tries Prism and
downloads its binary when the machine is online, then falls back to the FnApiRunner: the
same code then runs everywhere). The portable one needs Beam's own
job service (the same Job API that Flink's job server speaks), which `local_job_service`
starts on 127.0.0.1 and stops by its own process id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

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


@contextlib.contextmanager
def local_job_service(timeout_s: float = 60.0) -> Iterator[list[str]]:
    """Starts Beam's local job service; yields the pipeline args that use it.

    Raises:
        RuntimeError: the service did not accept connections within `timeout_s`.
    """
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"job service exited with {proc.returncode}: {proc.stderr.read().decode()}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", port), timeout=1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"job service on 127.0.0.1:{port} did not start")
            time.sleep(0.2)
        yield [
            "--runner=PortableRunner",
            f"--job_endpoint=127.0.0.1:{port}",
            "--environment_type=LOOPBACK",
        ]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stderr.close()
