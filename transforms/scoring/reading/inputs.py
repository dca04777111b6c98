"""Opening one input file of the scoring pipeline: decompressed by its suffix, checked to
the end, and every error naming the file.

Beam's own decompression (`CompressedFile`, behind `FileSystems.open` and
`ReadableFile.open`) stops where the compressed bytes stop: a `.jsonl.gz` cut at 60% reads
as a shorter, complete file, and the rows after the cut vanish without a word. Here the
file is opened uncompressed and decompressed by a reader that raises `EOFError` when the
data ends before the end-of-stream marker: `.gz`, `.bz2`, `.xz` and `.lzma` by the mining
side's `BlockDecompressor` (several gzip members or bz2 streams one after the other, as
Beam reads them), `.deflate` (zlib) and `.zst`/`.zstd` by `StreamDecompressor` here.

`read_input` wraps a record iterator so that anything that goes wrong while a file is
opened or read (missing, unreadable, cut short, corrupt, not Parquet) is raised as an
`InputFileError` whose message starts with the file's path. Beam-free apart from
`FileSystems`, which opens local, GCS and S3 paths alike.
"""

import contextlib
import io
import lzma
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any

import pyarrow as pa
import zstandard
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.io.decompress import BlockDecompressor

# Suffix -> how the file is decompressed; the suffixes Beam's AUTO compression knows.
COMPRESSIONS = {".gz": "gz", ".bz2": "bz2", ".xz": "xz", ".lzma": "xz", ".deflate": "deflate",
                ".zst": "zst", ".zstd": "zst"}
_READ_BUFFER = 1 << 20
# What reading a damaged or inaccessible file raises: OS errors (missing, unreadable; a
# bad bz2 or gzip stream), EOFError (a cut compressed file), the decompressors' own errors,
# and pyarrow's (ArrowInvalid "magic bytes not found" is also a ValueError).
READ_ERRORS = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError, zstandard.ZstdError,
               pa.ArrowException)


class InputFileError(ValueError):
    """An input file that cannot be read (missing, unreadable, cut short, corrupt); the
    message starts with `input file <path>`. One line, exit status 2, also when a worker
    raises it (`transforms.io.cli.FILE_ERROR_NAMES`)."""

    user_file_error = True


def compression_of(path: str) -> str | None:
    """The compression a file's suffix names ("gz", "bz2", "xz", "deflate", "zst"), or None."""
    name = path.lower()
    return next((kind for suffix, kind in COMPRESSIONS.items() if name.endswith(suffix)), None)


def input_error(path: str, error: BaseException, after_row: int | None = None) -> InputFileError:
    """The `InputFileError` for `error`, raised while reading `path`.

    Args:
        path: the file as matched.
        error: what reading it raised.
        after_row: the last record read before the error (None: before any).
    """
    where = f" after row {after_row}" if after_row else ""
    hint = (" (the compressed data ends early: the file is cut short)"
            if isinstance(error, EOFError) else "")
    return InputFileError(
        f"input file {path}: cannot be read{where}: {type(error).__name__}: {error}{hint}")


class StreamDecompressor(io.RawIOBase):
    """Concatenated zlib (`.deflate`) or zstd streams, decompressed as they are read.

    Each stream must reach its end-of-stream marker: a file that ends inside one raises
    EOFError (an empty file is empty). Whatever follows a stream is read as the next one,
    as Beam's `CompressedFile` does.

    Args:
        raw: the compressed binary file (not closed by `close()`).
        make: a factory of decompressor objects with `decompress(data)`, `eof` and
            `unused_data` (`zlib.decompressobj`, `zstandard.ZstdDecompressor().decompressobj`).
        chunk_size: compressed bytes read at a time.
    """

    def __init__(self, raw: IO[bytes], make: Callable[[], Any],
                 chunk_size: int = 256 << 10) -> None:
        super().__init__()
        self._raw = raw
        self._make = make
        self._chunk_size = chunk_size
        self._decompressor = make()
        self._fed = False
        self._pending = b""
        self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._offset >= len(self._pending):
            if self._decompressor.eof:
                data = self._decompressor.unused_data or self._raw.read(self._chunk_size)
                if not data:
                    return 0
                self._decompressor = self._make()
            else:
                data = self._raw.read(self._chunk_size)
                if not data:
                    if self._fed:
                        raise EOFError("Compressed file ended before the end-of-stream "
                                       "marker was reached")
                    return 0
            self._pending, self._offset = self._decompressor.decompress(data), 0
            self._fed = True
        n = min(len(buffer), len(self._pending) - self._offset)
        buffer[:n] = self._pending[self._offset:self._offset + n]
        self._offset += n
        return n


def _decompressing(raw: IO[bytes], kind: str) -> io.RawIOBase:
    if kind == "deflate":
        return StreamDecompressor(raw, zlib.decompressobj)
    if kind == "zst":
        # The window bound Beam uses, so that what Beam could read still reads.
        return StreamDecompressor(raw, zstandard.ZstdDecompressor(
            max_window_size=2147483648).decompressobj)
    return BlockDecompressor(raw, kind)


@contextlib.contextmanager
def _open(path: str, seekable: bool) -> Iterator[IO[bytes]]:
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(FileSystems.open(
            path, mime_type="application/octet-stream",
            compression_type=CompressionTypes.UNCOMPRESSED))
        kind = compression_of(path)
        if kind is None:
            yield raw
            return
        data = stack.enter_context(io.BufferedReader(_decompressing(raw, kind), _READ_BUFFER))
        if seekable:
            spool = stack.enter_context(tempfile.TemporaryFile())
            shutil.copyfileobj(data, spool, _READ_BUFFER)
            spool.seek(0)
            data = spool
        yield data


@contextlib.contextmanager
def open_input(path: str, seekable: bool = False) -> Iterator[IO[bytes]]:
    """Opens an input file for reading, decompressed when its suffix names a compression.

    Args:
        path: a path FileSystems understands.
        seekable: the caller seeks (Parquet); a compressed file is then decompressed into
            a temporary local file first.

    Yields:
        A binary file object with `readline`.

    Raises:
        InputFileError: opening the file, or reading it inside the `with` block, raised
            one of READ_ERRORS (missing, unreadable, cut short, corrupt).
    """
    try:
        with _open(path, seekable) as fobj:
            yield fobj
    except InputFileError:
        raise
    except READ_ERRORS as e:
        raise input_error(path, e) from e


def read_input(path: str, read: Callable[[IO[bytes]], Iterator[tuple[int, Any, Any]]],
               seekable: bool = False) -> Iterator[tuple[int, Any, Any]]:
    """Yields what `read(file object)` yields for the opened file; an error of opening or
    reading it is raised as an `InputFileError` naming the file and the last row read.

    Args:
        path: the input file.
        read: an iterator over the `(row, ...)` tuples of an open binary file.
        seekable: see `open_input`.

    Raises:
        InputFileError: the file is missing, unreadable, cut short or corrupt.
    """
    last_row = None
    try:
        with _open(path, seekable) as fobj:
            for item in read(fobj):
                last_row = item[0]
                yield item
    except READ_ERRORS as e:
        raise input_error(path, e, last_row) from e


class FileChangedError(ValueError):
    """A file read in parts whose size is not the one its parts were planned for: it was
    written to (appended, cut, replaced) while the run read it."""


def size_of(fobj: IO[bytes]) -> int:
    """The size of a seekable file; leaves it at its start."""
    fobj.seek(0, os.SEEK_END)
    size = fobj.tell()
    fobj.seek(0)
    return size


def modified_time(path: str) -> float | None:
    """A file's modification time as `FileSystems.match` gives it (None: unknown)."""
    found = FileSystems.match([path])[0].metadata_list
    return float(found[0].last_updated_in_seconds or 0.0) if found else None


def check_unchanged(fobj: IO[bytes], planned: int | None, path: str | None = None,
                    modified: float | None = None) -> None:
    """Raises `FileChangedError` when the seekable `fobj` is not `planned` bytes long, or
    (`path` and `modified` given) when the file's modification time is no longer
    `modified` (a rewrite that kept the size); None: not read in parts, nothing to check.
    Leaves `fobj` at its start."""
    if planned is None:
        return
    now = size_of(fobj)
    if now != planned:
        raise FileChangedError(
            f"it is {now:,} bytes now and was {planned:,} when the run planned its parts "
            "(a file must not be written while it is scored: rerun once it is complete)")
    if path is not None and modified is not None:
        now_modified = modified_time(path)
        if now_modified != modified:
            raise FileChangedError(
                f"it was modified at {now_modified} and at {modified} when the run planned "
                "its parts (rewritten, with the same size: a file must not be written "
                "while it is scored: rerun once it is complete)")
