"""Beam's S3 client corrected: empty files, and a boto3 session per thread.

- Empty files. Beam (2.77) writes every S3 file as a multipart upload and sends a part
  only when it has bytes, so an empty file (the dead-letter file of a run with no dead
  letters, an empty shard) completes an upload of no parts, which S3 refuses
  ("MalformedXML": CompleteMultipartUpload needs one part or more; moto's S3 server
  refuses it the same way). The upload of an empty file sends one empty part, which S3
  takes as the last (and only) part, as other S3 clients do.
- Sessions. Beam makes a new S3 client, from a new boto3 session, for every file
  operation (`FileSystems.exists`, `rename`, `match`, ... each), and a new session loads
  botocore's service models again: about 0.2 s per operation, which the launcher's
  ownership claims and the publishing step pay for every file they touch. Each thread
  keeps one session here (boto3 sessions are not thread-safe; the clients made from one
  are), so a client costs about 15 ms.

`correct_s3_client` patches Beam's modules once per process, and importing this module
calls it. A run with a path on S3 imports it in the launcher (`storage.check_launch`)
and names it in `--beam_plugins`, which every Beam worker process imports when it starts
(`sdk_worker_main`: Dataflow, the portable runners' workers, the multi-process direct
runner); Dask's workers do not read that flag.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

_APPLIED = "_qa_eval_corrected"


class _SessionPerThread:
    """Stands for the `boto3` module in Beam's S3 client: `session.Session()` gives this
    thread's session."""

    def __init__(self, boto3: Any):
        self._boto3 = boto3
        self._local = threading.local()
        self.session = self

    def Session(self) -> Any:  # noqa: N802 - boto3's name
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = self._boto3.session.Session()
        return session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._boto3, name)


def _correct_empty_uploads(s3io: Any) -> bool:
    uploader = getattr(s3io, "S3Uploader", None)
    finish = getattr(uploader, "finish", None)
    if finish is None or not hasattr(uploader, "_write_to_s3"):
        return False
    if getattr(finish, _APPLIED, False):
        return True

    @functools.wraps(finish)
    def finish_with_a_part(self):
        if not self.buffer and not self.parts and self.last_error is None:
            self._write_to_s3(b"")  # an empty file: its one part, empty
        return finish(self)

    setattr(finish_with_a_part, _APPLIED, True)
    uploader.finish = finish_with_a_part
    return True


def _share_sessions(boto3_client: Any) -> bool:
    boto3 = getattr(boto3_client, "boto3", None)
    if boto3 is None:  # boto3 is not installed: Beam's S3 file system cannot work
        return False
    if not isinstance(boto3, _SessionPerThread):
        boto3_client.boto3 = _SessionPerThread(boto3)
    return True


def correct_s3_client() -> bool:
    """Applies both corrections in this process (once); False when Beam's S3 modules or
    boto3 are missing, or Beam changed what is corrected."""
    try:
        from apache_beam.io.aws import s3io
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return False
    return _correct_empty_uploads(s3io) & _share_sessions(boto3_client)


correct_s3_client()  # a worker imports this module as a Beam plugin
