"""What a scoring run records about itself in summary.json: the code that ran, when, and
exactly which input files it read (`run_manifest`), so that a nightly snapshot can be
traced back and two snapshots compared.

Input files are identified by size, modification time and a checksum:
- `sha256` reads the file (on the machine that builds the pipeline) and hashes it: exact,
  and costs one extra read (about 1 GB/s from a local disk);
- `metadata` asks the file system for the checksum it keeps (Google Cloud Storage: the
  object's CRC32C/MD5, S3: its ETag; a local disk keeps none and gives the size), no read;
- `auto` (the default) is `sha256` on a local disk and `metadata` elsewhere, where reading
  a large corpus twice would cost time and egress;
- `none` records size and time only.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import importlib.metadata
import os
import subprocess
from collections.abc import Sequence
from typing import Any

from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem

PACKAGE = "qa-eval-beam"
CHECKSUM_MODES = ("auto", "sha256", "metadata", "none")
_CHUNK = 1 << 20


def utc_now() -> str:
    """The time now in UTC, ISO 8601 to the second (`2026-11-23T22:15:24Z`)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _iso(seconds: float) -> str | None:
    if not seconds:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def sha256_of(path: str) -> str:
    """The SHA-256 of a file's bytes as stored (a compressed file's compressed bytes)."""
    digest = hashlib.sha256()
    with FileSystems.open(path, compression_type="uncompressed") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def describe_input(path: str, checksums: str = "auto") -> dict[str, Any]:
    """One input file's entry: path, size, modified (UTC, when known), checksum and its
    kind (see the module docstring).

    Raises:
        ValueError: an unknown checksum mode.
        FileNotFoundError: the file is gone.
    """
    if checksums not in CHECKSUM_MODES:
        raise ValueError(f"unknown --input_checksums {checksums!r}; "
                         f"available: {list(CHECKSUM_MODES)}")
    matched = FileSystems.match([path])[0].metadata_list
    if not matched:
        raise FileNotFoundError(f"input file {path} is gone")
    meta = matched[0]
    entry: dict[str, Any] = {"path": path, "size": meta.size_in_bytes,
                             "modified": _iso(meta.last_updated_in_seconds)}
    local = isinstance(FileSystems.get_filesystem(path), LocalFileSystem)
    mode = ("sha256" if local else "metadata") if checksums == "auto" else checksums
    if mode == "sha256":
        checksum = "sha256:" + sha256_of(path)
    elif mode == "metadata" and not local:
        checksum = f"{FileSystems.get_scheme(path)}:{FileSystems.checksum(path)}"
    else:  # none, or a local disk's metadata: it keeps no checksum, size and time are all
        checksum = None
    entry["checksum"] = checksum
    entry["checksum_kind"] = mode if checksum else None
    return entry


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """The package's name and version, and the git commit of the source tree it runs from
    (None outside a git checkout; `dirty` when tracked files differ from it)."""
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = None
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 3))
    commit = dirty = None
    if os.path.exists(os.path.join(root, ".git")):
        try:
            commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], check=True,
                                    capture_output=True, text=True, timeout=10).stdout.strip()
            status = subprocess.run(
                ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                check=True, capture_output=True, text=True, timeout=30).stdout
            dirty = bool(status.strip())
        except (OSError, subprocess.SubprocessError):
            commit = dirty = None
    return {"package": PACKAGE, "version": version, "git_commit": commit, "git_dirty": dirty}


def run_manifest(files: Sequence[str], checksums: str = "auto",
                 started_at: str | None = None) -> dict[str, Any]:
    """The facts summary.json records about a run before it starts: `code`
    (`code_version`), `started_at` (UTC) and `inputs` (`describe_input` of every file, in
    the order read). `finished_at` is added when the summary is written."""
    return {"code": code_version(), "started_at": started_at or utc_now(),
            "inputs": [describe_input(path, checksums) for path in files]}
