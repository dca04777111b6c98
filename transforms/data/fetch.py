"""Fetches registry entries into the data cache, checked, never half-written.

For each entry: a file already in the cache with the registry's checksum is kept; one
with another checksum is removed. Then the file comes from the mirror (a local folder or
a base URL holding every file under its cache path, in its kept form) or, without one,
from the entry's original `url` in its served form, turned into the kept one by the
entry's `transform` (gzip, gunzip, extract of an archive member). Every byte goes
through a partial file (`<file>.part`) or a temporary one beside the target, and the
target name appears (by rename) only once its size and SHA-256 are right. A truncated
HTTP transfer keeps its `.part` for the next run to resume (HTTP Range); anything else
that fails removes what it wrote. A resumed file whose checksum is wrong is fetched
once more from the start.

Failures raise `FetchError`: one line naming the data set and the address.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import logging
import lzma
import os
import tarfile
import tempfile
import urllib.parse
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from transforms.data.download import CHUNK_BYTES, TransferError, copy_file, download, is_url
from transforms.data.registry import Entry

logger = logging.getLogger(__name__)

PART_SUFFIX = ".part"
ARCHIVE_FOLDER = ".downloads"


class FetchError(Exception):
    """A data set that could not be fetched: `<name>: <what went wrong> (<address>)`."""

    def __init__(self, entry: Entry, what: str, where: str | None) -> None:
        super().__init__(f"{entry.name}: {what}" + (f" ({where})" if where else ""))
        self.entry = entry
        self.where = where


@dataclass(frozen=True)
class Outcome:
    """What `fetch_entry` did: `present` (already right), `fetched` (from `source`)."""

    entry: Entry
    status: str
    source: str | None = None


def sha256_of(stream: BinaryIO) -> tuple[str, int]:
    """(hex SHA-256, size) of what `stream` yields."""
    digest, size = hashlib.sha256(), 0
    while chunk := stream.read(CHUNK_BYTES):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def file_digest(path: Path) -> tuple[str, int]:
    with open(path, "rb") as f:
        return sha256_of(f)


def check_kept(path: Path, entry: Entry) -> str | None:
    """None when `path` is the entry's file; else what is wrong with it. A gzip file is
    also right when its decompressed bytes are the entry's `content_sha256`."""
    digest, size = file_digest(path)
    if digest == entry.sha256 and size == entry.size:
        return None
    if entry.content_sha256:
        try:
            with gzip.open(path, "rb") as f:
                content, content_size = sha256_of(f)
        except (OSError, EOFError, zlib.error):
            content, content_size = None, None
        if content == entry.content_sha256 and (
                entry.content_size is None or content_size == entry.content_size):
            return None
    if size != entry.size:
        return f"wrong size: {size:,} bytes, expected {entry.size:,}"
    return f"wrong checksum: SHA-256 {digest}, expected {entry.sha256}"


def mirror_location(mirror: str, entry: Entry) -> str:
    """Where a mirror (folder or base URL) keeps `entry`: under its cache path."""
    if is_url(mirror):
        return mirror.rstrip("/") + "/" + urllib.parse.quote(entry.path)
    return str(Path(mirror).expanduser() / entry.path)


def _part(path: Path) -> Path:
    return path.with_name(path.name + PART_SUFFIX)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _transfer(location: str, part: Path, timeout: float, size: int | None,
              check: Callable[[Path], str | None]) -> None:
    """Fetches `location` into `part` and checks it; resumes `part` when it holds a
    truncated transfer, and starts once more from nothing when a resumed file is wrong.

    Raises:
        TransferError: the transfer failed (`part` kept only when truncated), or the file
            is wrong (`part` removed).
    """
    for attempt in range(2):
        resumed = part.exists() and part.stat().st_size > 0
        try:
            if is_url(location):
                download(location, part, timeout, size)
            else:
                copy_file(Path(location), part)
        except TransferError as e:
            if not e.truncated:
                _remove(part)
            raise
        problem = check(part)
        if problem is None:
            return
        _remove(part)
        if not (resumed and attempt == 0):
            raise TransferError(problem)
        logger.info("%s: the resumed file is wrong (%s); fetching it again", location, problem)


def _decompressor(path: Path) -> Callable[..., BinaryIO]:
    name = path.name.lower()
    if name.endswith(".bz2"):
        return bz2.open
    if name.endswith((".xz", ".lzma")):
        return lzma.open
    return gzip.open


@contextlib.contextmanager
def _open_member(archive: Path, kind: str, member: str) -> Iterator[BinaryIO]:
    """The member's bytes; a member named `member` exactly, else the one member whose
    last path component is `member`'s (KeyError when there is none or several)."""
    base = member.rsplit("/", 1)[-1]
    if kind == "zip":
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
            found = member if member in names else _unique(
                [n for n in names if n.rsplit("/", 1)[-1] == base], member)
            with zf.open(found) as stream:
                yield stream
        return
    with tarfile.open(archive, "r:*") as tf:
        members = [m for m in tf.getmembers() if m.isfile()]
        exact = [m for m in members if m.name.removeprefix("./") == member]
        found_member = exact[0] if exact else _unique(
            [m for m in members if m.name.rsplit("/", 1)[-1] == base], member)
        stream = tf.extractfile(found_member)
        if stream is None:
            raise KeyError(member)
        with stream:
            yield stream


def _unique(candidates: list, member: str):
    if len(candidates) != 1:
        raise KeyError(member)
    return candidates[0]


def _write_transformed(entry: Entry, source: Path, target: Path) -> None:
    """Applies the entry's transform to `source` into `target` (a temporary file)."""
    t = entry.transform
    if t is None:
        raise ValueError(f"{entry.name} has no transform")
    with open(target, "wb") as out:
        if t.op == "gzip":
            with open(source, "rb") as src, gzip.GzipFile(
                    filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as gz:
                while chunk := src.read(CHUNK_BYTES):
                    gz.write(chunk)
        elif t.op == "gunzip":
            with _decompressor(Path(entry.url or source.name))(source, "rb") as src:
                while chunk := src.read(CHUNK_BYTES):
                    out.write(chunk)
        else:
            with _open_member(source, t.archive or "", t.member or "") as src:
                while chunk := src.read(CHUNK_BYTES):
                    out.write(chunk)


def _check_source(entry: Entry) -> Callable[[Path], str | None]:
    t = entry.transform

    def check(path: Path) -> str | None:
        if t is None:
            return check_kept(path, entry)
        if t.source_sha256 is None:
            return None  # an archive of unknown checksum: its member is checked
        digest, size = file_digest(path)
        if digest != t.source_sha256 or (t.source_size is not None and size != t.source_size):
            return f"wrong checksum of the served file: SHA-256 {digest}, expected " \
                   f"{t.source_sha256}"
        return None
    return check


class Fetcher:
    """Fetches entries into `data_dir`, from `mirror` (folder or base URL) when given,
    else from each entry's original URL. One download of an archive serves every entry
    extracted from it; `close()` removes the archives."""

    def __init__(self, data_dir: Path, mirror: str | None = None, timeout: float = 60.0):
        self.data_dir = Path(data_dir)
        self.mirror = mirror
        self.timeout = timeout
        self._archives: dict[str, Path] = {}

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Removes the archives downloaded for `extract` entries (kept on failure would
        leave a complete-looking file whose checksum nobody knows)."""
        for path in self._archives.values():
            _remove(path)
        self._archives.clear()
        folder = self.data_dir / ARCHIVE_FOLDER
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

    def fetch(self, entries: Iterable[Entry]) -> list[Outcome]:
        """`fetch_entry` for each; stops at the first failure.

        Raises:
            FetchError: the first entry that could not be fetched.
        """
        return [self.fetch_entry(entry) for entry in entries]

    def source_of(self, entry: Entry) -> str | None:
        """Where `entry` would come from: the mirror's copy, or its original URL."""
        return mirror_location(self.mirror, entry) if self.mirror else entry.url

    def fetch_entry(self, entry: Entry) -> Outcome:
        """Makes `data_dir / entry.path` the entry's file (see the module docstring).

        Raises:
            FetchError: one line naming the data set and the address.
        """
        target = self.data_dir / entry.path
        if target.is_file():
            problem = check_kept(target, entry)
            if problem is None:
                return Outcome(entry, "present")
            logger.warning("%s: %s holds the wrong file (%s); fetching it again",
                           entry.name, target, problem)
            try:
                _remove(target)
            except OSError as e:
                raise FetchError(entry, f"{target} holds the wrong file ({problem}) and "
                                        f"cannot be removed ({e.strerror or e})", None) from None
        where = self.source_of(entry)
        if where is None:
            raise FetchError(entry, "no known public source"
                             + (f": {entry.note}" if entry.note else "")
                             + f"; give --mirror (a folder or URL holding {entry.path})", None)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise FetchError(entry, f"cannot write the cache folder {target.parent} "
                                    f"({e.strerror or e})", where) from None
        try:
            if self.mirror or entry.transform is None:
                part = _part(target)
                _transfer(where, part, self.timeout, entry.size,
                          lambda p: check_kept(p, entry))
                os.replace(part, target)
            else:
                self._fetch_transformed(entry, where, target)
        except TransferError as e:
            raise FetchError(entry, str(e), where) from None
        logger.info("%s: fetched %s from %s", entry.name, entry.path, where)
        return Outcome(entry, "fetched", where)

    def _fetch_transformed(self, entry: Entry, url: str, target: Path) -> None:
        t = entry.transform
        if t is None:
            raise ValueError(f"{entry.name} has no transform")
        if t.op == "extract":
            source = self._archive(entry, url)
        else:
            source = _part(target.with_name(target.name + ".source"))
            _transfer(url, source, self.timeout, t.source_size, _check_source(entry))
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                        dir=target.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            try:
                _write_transformed(entry, source, tmp)
            except KeyError:
                raise TransferError(f"the archive has no member {t.member}") from None
            except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError,
                    zlib.error) as e:
                raise TransferError(f"cannot {t.op} the served file ({e})") from None
            problem = check_kept(tmp, entry)
            if problem is not None:
                raise TransferError(f"after {t.op}: {problem}")
            os.replace(tmp, target)
        finally:
            _remove(tmp)
            if t.op != "extract":
                _remove(source)

    def _archive(self, entry: Entry, url: str) -> Path:
        """The archive at `url`, downloaded once per fetcher (its checksum is unknown:
        the members extracted from it are checked)."""
        if url in self._archives:
            return self._archives[url]
        name = urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1] or "archive"
        key = hashlib.sha256(url.encode()).hexdigest()[:12]
        # Kept under its partial name: nobody knows the archive's checksum, so it never
        # takes a name that looks complete; a truncated one is resumed by the next run.
        part = _part(self.data_dir / ARCHIVE_FOLDER / f"{key}-{name}")
        _transfer(url, part, self.timeout, None, _check_source(entry))
        self._archives[url] = part
        return part


def fetch(entries: Iterable[Entry], data_dir: Path, mirror: str | None = None,
          timeout: float = 60.0) -> list[Outcome]:
    """Fetches `entries` into `data_dir` (see `Fetcher`).

    Raises:
        FetchError: the first entry that could not be fetched.
    """
    with Fetcher(data_dir, mirror, timeout) as fetcher:
        return fetcher.fetch(entries)
