"""Fixtures of this folder's tests: S3 served by moto (tests/io/s3_server.py)."""

from tests.io.s3_server import s3, s3_server  # noqa: F401 - fixtures
