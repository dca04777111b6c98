"""One transfer into a partial file: HTTP(S) with resume, or a copy from a local folder.

Standard library only (urllib). A transfer always writes to a partial file that the
caller names (`<file>.part`); the caller checks it and renames it. What goes wrong ends
in a `TransferError` whose message says what, in one line, without the address (the
caller adds the data set and the address):

- an HTTP error status (404, 500...), a host that cannot be reached (refused, unknown,
  timed out): the partial file is left as it was (a later run resumes it);
- a transfer that ends early (the connection closes before the announced length, or
  fewer bytes than the registry's size arrive): `truncated=True`, the bytes received are
  kept in the partial file, and the next call asks for the rest with an HTTP Range.

A server that ignores the Range (status 200) or answers for another range is read from
the start again, over the partial file.
"""

from __future__ import annotations

import http.client
import logging
import re
import shutil
import socket
import urllib.error
import urllib.request
from pathlib import Path

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 16
USER_AGENT = "qa-eval-data/1"
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class TransferError(OSError):
    """A transfer that did not complete (the message is one line, without the address).

    Attributes:
        truncated: the transfer ended early; the partial file holds what arrived.
    """

    def __init__(self, message: str, truncated: bool = False) -> None:
        super().__init__(message)
        self.truncated = truncated


def is_url(location: str) -> bool:
    """Whether `location` is an http(s) or file URL (else a local folder)."""
    return re.match(r"(?i)(https?|file)://", location) is not None


def _describe(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    if isinstance(reason, BaseException):
        error = reason
    if isinstance(error, (socket.timeout, TimeoutError)):
        return "the host did not answer in time"
    if isinstance(error, ConnectionRefusedError):
        return "the host refused the connection"
    if isinstance(error, socket.gaierror):
        return f"unknown host ({error.strerror or error})"
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return f"cannot reach the host ({text})"


def _open(url: str, offset: int, timeout: float):
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - http(s)/file
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:
            e.close()
            return None  # the partial file holds every byte already: the checksum decides
        e.close()
        raise TransferError(f"HTTP {e.code} {e.reason}".strip()) from None
    except urllib.error.URLError as e:
        if url.lower().startswith("file:"):
            reason = getattr(e.reason, "strerror", None) or e.reason
            raise TransferError(f"cannot read it ({reason})") from None
        raise TransferError(_describe(e)) from None
    except (OSError, http.client.HTTPException) as e:
        raise TransferError(_describe(e)) from None


def _resume_offset(response, offset: int) -> int:
    """Where the body of `response` starts in the file: `offset` when the server answered
    the Range (206 with a Content-Range starting there), else 0."""
    if not offset or getattr(response, "status", 200) != 206:
        return 0
    match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
    return offset if match and int(match.group(1)) == offset else 0


def download(url: str, part: Path, timeout: float = 60.0,
             expected_size: int | None = None) -> int:
    """Fetches `url` into `part`, resuming what `part` already holds.

    Args:
        url: an http(s) or file URL.
        part: the partial file (created, or appended to when the server answers the Range).
        timeout: seconds to wait on the connection and on each read.
        expected_size: the file's size when known: a partial file already longer is
            started again, and fewer bytes in the end is a truncated transfer.

    Returns:
        The size of `part` when the transfer completed.

    Raises:
        TransferError: what went wrong, in one line; `truncated` when it ended early.
    """
    part.parent.mkdir(parents=True, exist_ok=True)
    offset = part.stat().st_size if part.exists() else 0
    if expected_size is not None and offset > expected_size:
        part.unlink()
        offset = 0
    response = _open(url, offset, timeout)
    if response is None:
        return offset
    with response:
        start = _resume_offset(response, offset)
        if offset and not start:
            logger.info("%s: the server sent the whole file; starting over", url)
        length = response.headers.get("Content-Length")
        announced = start + int(length) if length and length.isdigit() else None
        received = start
        try:
            out = open(part, "ab" if start else "wb")
        except OSError as e:
            raise TransferError(f"cannot write {part} ({e.strerror or e})") from None
        with out:
            while True:
                try:
                    chunk = response.read(CHUNK_BYTES)
                except http.client.IncompleteRead:
                    break  # received counts what was written; reported below
                except (OSError, http.client.HTTPException) as e:
                    raise TransferError(f"the transfer broke off after {received:,} bytes "
                                        f"({_describe(e)})", truncated=True) from None
                if not chunk:
                    break
                try:
                    out.write(chunk)
                except OSError as e:
                    raise TransferError(f"cannot write {part} ({e.strerror or e})") from None
                received += len(chunk)
    expected = expected_size if expected_size is not None else announced
    if announced is not None and received < announced:
        raise TransferError(f"truncated transfer: {received:,} of {announced:,} bytes "
                            "arrived", truncated=True)
    if expected is not None and received < expected:
        raise TransferError(f"truncated transfer: {received:,} of {expected:,} bytes "
                            "arrived", truncated=True)
    return received


def copy_file(source: Path, part: Path) -> int:
    """Copies a mirror folder's `source` into `part` (no resume: a local copy is cheap).

    Raises:
        TransferError: `source` is not a readable file.
    """
    if not source.is_file():
        raise TransferError("not in the mirror folder")
    part.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(source, "rb") as src, open(part, "wb") as out:
            shutil.copyfileobj(src, out, CHUNK_BYTES)
    except OSError as e:
        raise TransferError(f"cannot copy it ({e.strerror or e})") from None
    return part.stat().st_size
