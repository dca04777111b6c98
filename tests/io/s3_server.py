"""S3 for the tests: moto's S3 server on a free port of 127.0.0.1, reached by Beam's own
S3 file system through its options (`--s3_endpoint_url`, keys, region), as a run on
another S3-compatible store is.

`s3_server` (a module-scoped fixture: the server starts in about a second) and `s3`
(a fresh bucket per test, with Beam's `FileSystems` pointed at the server for the test's
launcher-side calls) are imported by the test modules that use them.
"""

from __future__ import annotations

import dataclasses
import socket
import uuid
from collections.abc import Iterator

import pytest

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class S3Bucket:
    """One bucket of the test server: its Beam flags, paths and a boto3 client."""

    url: str
    bucket: str
    client: object

    def argv(self) -> list[str]:
        """The Beam flags that point a run's S3 file system at the server."""
        return ["--s3_endpoint_url", self.url, "--s3_access_key_id", ACCESS_KEY,
                "--s3_secret_access_key", SECRET_KEY, "--s3_region_name", REGION]

    def path(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def put(self, key: str, data: bytes | str) -> str:
        body = data.encode() if isinstance(data, str) else data
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
        return self.path(key)

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def files(self, prefix: str = "") -> dict[str, bytes]:
        """Every object under `prefix`, key -> bytes."""
        return {key: self.get(key) for key in self.keys(prefix)}


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """The endpoint URL of a moto S3 server running in this process's threads."""
    pytest.importorskip("boto3", reason="the aws extra (boto3) is not installed")
    server_module = pytest.importorskip("moto.server",
                                        reason="moto[s3] and flask are not installed")
    port = free_port()
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port,
                                              verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch) -> S3Bucket:
    """A fresh bucket; Beam's `FileSystems` uses the server until the test ends."""
    import boto3
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    client = boto3.client("s3", endpoint_url=s3_server, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY, region_name=REGION)
    bucket = S3Bucket(s3_server, f"qa-eval-{uuid.uuid4().hex[:12]}", client)
    client.create_bucket(Bucket=bucket.bucket)
    monkeypatch.setattr(FileSystems, "_pipeline_options", PipelineOptions(bucket.argv()))
    return bucket
