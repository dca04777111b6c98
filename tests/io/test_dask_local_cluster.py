"""transforms/io/dask_runner.py without a scheduler address: the cluster it starts on this
machine speaks TLS with a certificate made for the run (a client without it is turned
away) and serves no dashboard."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

pytestmark = pytest.mark.slow

ddist = pytest.importorskip("distributed", reason="dask.distributed is not installed; "
                            "`make setup` installs it")


def test_the_runs_own_cluster_is_reachable_by_the_run_only(tmp_path, monkeypatch):

    made = []
    real_client = ddist.Client

    def client(**kwargs):
        made.append(real_client(**kwargs, n_workers=1, threads_per_worker=1))
        return made[-1]

    import dask.distributed

    for module in (ddist, dask.distributed):  # a small cluster
        monkeypatch.setattr(module, "Client", client)
    out = tmp_path / "out"
    options = PipelineOptions(["--runner", "transforms.io.dask_runner.DaskRunner"])
    pipeline = beam.Pipeline(options=options)
    _ = (pipeline | beam.Create(["a", "b"]) | beam.Map(str.upper)
         | beam.io.WriteToText(str(out), shard_name_template=""))
    result = pipeline.run()
    cluster = made[0].cluster
    address = cluster.scheduler_address
    try:
        assert address.startswith("tls://127.0.0.1:")
        (http,) = (s.getsockname() for s in cluster.scheduler.http_server._sockets.values())
        assert http[0] == "127.0.0.1"
        for page in ("/status", "/info/main/workers.html", "/health", "/metrics"):
            with pytest.raises(urllib.error.HTTPError, match="404"):
                urllib.request.urlopen(f"http://127.0.0.1:{http[1]}{page}", timeout=5)
        # another local process: over plain TCP, and over TLS without the run's certificate
        for probe in (address.replace("tls://", "tcp://"), address):
            connect = subprocess.run(
                [sys.executable, "-c", "import sys, distributed; "
                 "distributed.Client(sys.argv[1], timeout=3)", probe],
                capture_output=True, text=True, timeout=120)
            assert connect.returncode != 0, probe
            assert "Traceback" in connect.stderr and "ImportError" not in connect.stderr
    finally:
        result.wait_until_finish()
        cluster.close()
    assert sorted(out.read_text().split()) == ["A", "B"]
