"""Decompressing a compressed file ahead of its reader (dumps in mining, compressed
prediction files in scoring). Beam-free; `transforms/wiki/dump.py` reads the pages.

`open_dump` wraps a compressed file in `BlockDecompressor` (large blocks, so that the
GIL is taken back rarely) inside `PrefetchingReader` (a background thread and a bounded
queue), so that a dump is decompressed on one core while the XML parser and link
extraction run on another; `open_range` does the same for a byte range of a multistream
dump (`ByteRange`). Errors are raised, unchanged, by the read that reaches them and by
every later one: a truncated dump never looks like a short one, nor a damaged stream
like the end of a range.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import queue
import threading
import zlib
from typing import IO


def _put_until_stopped(chunks: queue.Queue, stopping: threading.Event, item) -> bool:
    while not stopping.is_set():
        try:
            chunks.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _prefetch(stream: IO[bytes], chunk_size: int, chunks: queue.Queue,
              stopping: threading.Event) -> None:
    """The prefetch thread: reads `stream` into `chunks` until its end, an error (handed
    over to be raised by the reader) or `stopping`. It holds no reference to the reader,
    so a reader nobody closed is still collected, and closed (which stops the thread)."""
    try:
        while True:
            chunk = stream.read(chunk_size)
            if not _put_until_stopped(chunks, stopping, chunk) or not chunk:
                return
    except BaseException as e:  # handed to the reader, who raises it
        _put_until_stopped(chunks, stopping, e)


class _ReadOnlyStream(io.RawIOBase):
    """A readable raw stream whose subclasses implement `read(size)`."""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


class PrefetchingReader(_ReadOnlyStream):
    """Reads a stream ahead in a background thread: chunks go through a bounded queue.

    The decompressors (bz2, zlib, lzma) release the GIL while they work, so a dump is
    decompressed on one core while the XML parser and link extraction run on another,
    instead of in turn. Read ahead are at most `depth` + 2 chunks of `chunk_size` bytes
    (the queue, the chunk waiting to enter it, the chunk being read from). An error of
    the underlying stream is raised, unchanged, by the `read` that reaches it (by the next
    one when a `read(size)` has bytes from before it to return first) and by every later
    one: a stream cut short never looks complete.

    Args:
        stream: a binary stream (a decompressor); closed by `close()`.
        chunk_size: bytes per read of the underlying stream.
        depth: chunks queued ahead at most.
    """

    def __init__(self, stream: IO[bytes], chunk_size: int = 1 << 20, depth: int = 4) -> None:
        super().__init__()
        self._stream = stream
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stopping = threading.Event()
        self._buffer = b""
        self._offset = 0
        self._finished = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=_prefetch, args=(stream, chunk_size, self._queue, self._stopping),
            name="dump-prefetch", daemon=True)
        self._thread.start()

    def read(self, size: int = -1) -> bytes:
        self._checkClosed()
        if self._error is not None:
            raise self._error
        parts = []
        wanted = size if size is not None and size >= 0 else -1
        while wanted:
            if self._offset >= len(self._buffer):
                if self._finished:
                    break
                item = self._queue.get()
                if isinstance(item, BaseException):
                    self._error = item
                    if parts and size is not None and size >= 0:
                        break  # the bytes before the error first; the next read raises
                    raise item
                if not item:
                    self._finished = True
                    break
                self._buffer, self._offset = item, 0
            stop = len(self._buffer) if wanted < 0 else self._offset + wanted
            take = self._buffer[self._offset: stop]
            self._offset += len(take)
            if wanted > 0:
                wanted -= len(take)
            parts.append(take)
        return b"".join(parts)

    def close(self) -> None:
        if not self.closed:
            self._stopping.set()
            self._thread.join()
            self._stream.close()
        super().close()


_GZIP_MAGIC = b"\x1f\x8b"


class _GzipMember:
    """One gzip member through zlib, with the `decompress(data, max_length)`, `needs_input`,
    `eof` and `unused_data` of `bz2.BZ2Decompressor` and `lzma.LZMADecompressor`. zlib
    checks the member's CRC-32 and length itself."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._started = False
        self.needs_input = True

    def decompress(self, data: bytes, max_length: int = -1) -> bytes:
        if not self._started and data:
            if len(data) >= 2 and data[:2] != _GZIP_MAGIC:
                raise gzip.BadGzipFile(f"Not a gzipped file ({data[:2]!r})")
            self._started = True
        out = self._d.decompress(self._d.unconsumed_tail + data, max(max_length, 0))
        self.needs_input = not self._d.unconsumed_tail and (
            max_length <= 0 or len(out) < max_length)
        return out

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def unused_data(self) -> bytes:
        return self._d.unused_data


class BlockDecompressor(_ReadOnlyStream):
    """A compressed file decompressed in large blocks: each `read` is one decompressor
    call over up to `block_size` compressed bytes, which releases the GIL throughout.

    The standard library's `BZ2File`, `GzipFile` and `LZMAFile` feed their decompressor
    8 KB at a time, so a decompressing thread needs the GIL back every 8 KB; beside a
    busy main thread it waits up to the interpreter's switch interval (5 ms) each time,
    and the parser ended up waiting for it. Several streams or members (Wikipedia's
    multistream dumps) are read one after the other; gzip members and xz streams may be
    padded with zero bytes. A cut file raises EOFError, corrupt data the decompressor's
    error, and so does every later read.
    Unlike the standard library, which takes a later stream whose first block does not
    decompress for trailing junk and ends the data there without a word, anything after
    a stream that is not a stream is an error: a damaged stream in the middle of a
    multistream dump never looks like its end.

    Args:
        fileobj: the compressed binary file (not closed by `close()`).
        kind: "bz2", "gz" or "xz".
        block_size: compressed bytes read at a time.
    """

    _DECOMPRESSORS = {"bz2": bz2.BZ2Decompressor, "gz": _GzipMember,
                      "xz": lzma.LZMADecompressor}

    def __init__(self, fileobj: IO[bytes], kind: str, block_size: int = 2 << 20) -> None:
        super().__init__()
        self._raw = fileobj
        self._kind = kind
        self._make = self._DECOMPRESSORS[kind]
        self._block_size = block_size
        self._decompressor = self._make()
        self._input = b""
        self._fed = False  # the current stream has been given input
        self._done = False
        self._error: Exception | None = None

    def _next_stream_input(self) -> bytes:
        data = self._decompressor.unused_data or self._raw.read(self._block_size)
        if self._kind in ("gz", "xz"):  # zero padding between and after members or streams
            padding = 0
            while data and not data.strip(b"\0"):
                padding += len(data)
                data = self._raw.read(self._block_size)
            stripped = data.lstrip(b"\0")
            padding += len(data) - len(stripped)
            if self._kind == "xz" and padding % 4:
                raise lzma.LZMAError(f"xz stream padding of {padding} bytes, not a multiple of 4")
            data = stripped
        return data

    def read(self, size: int = -1) -> bytes:
        self._checkClosed()
        if self._error is not None:  # a stream cut short never reads as complete
            raise self._error
        try:
            return self._read(size)
        except Exception as e:
            self._error = e
            raise

    def _read(self, size: int) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self._read(1 << 20), b""))
        while size and not self._done:
            if self._decompressor.eof:
                data = self._next_stream_input()
                if not data:
                    self._done = True
                    break
                self._decompressor, self._input, self._fed = self._make(), data, False
            elif not self._input and self._decompressor.needs_input:
                self._input = self._raw.read(self._block_size)
                if not self._input:
                    # As the standard library: an empty .bz2 or .xz file is cut short, an
                    # empty .gz file is empty.
                    if self._fed or self._kind != "gz":
                        raise EOFError("Compressed file ended before the end-of-stream "
                                       "marker was reached")
                    self._done = True
                    break
            data, self._input = self._input, b""
            out = self._decompressor.decompress(data, size)
            self._fed = True
            if out:
                return out
        return b""


def _prefetched(decompressor: BlockDecompressor) -> PrefetchingReader:
    # 2 MB of compressed input per call (BlockDecompressor's default) and 8 MB chunks
    # (32 MB read ahead at most): the decompressor's output buffer grows in steps that each
    # take the GIL back, so smaller chunks cost more waits (50 MB of bz2 beside a busy
    # thread: 1.8 s, 2.1 s with 4 MB chunks, 3.0 s with 1 MB of input per call; 1.4 s alone).
    return PrefetchingReader(decompressor, chunk_size=8 << 20, depth=2)


def open_dump(fileobj: IO[bytes], name: str) -> IO[bytes]:
    """Wraps a binary file object in the decompressor its name asks for (`.bz2`, multi-
    stream included, `.gz`, `.xz`), decompressing ahead in a thread in large blocks; any
    other name is read as it is."""
    kind = next((k for k in ("bz2", "gz", "xz") if name.endswith("." + k)), None)
    if kind is None:
        return fileobj
    return _prefetched(BlockDecompressor(fileobj, kind))


class ByteRange(_ReadOnlyStream):
    """Bytes [start, end) of a seekable binary file, read as a stream of their own.

    A file that ends before `end` raises EOFError (naming the byte where it ended), as a
    cut compressed file does: a range cut short never reads as a short range.

    Args:
        fileobj: the file (not closed by `close()`); nothing else may read it meanwhile.
        start, end: the range, 0 <= start <= end.

    Raises:
        ValueError: a range that is not 0 <= start <= end.
    """

    def __init__(self, fileobj: IO[bytes], start: int, end: int) -> None:
        super().__init__()
        if not 0 <= start <= end:
            raise ValueError(f"not a byte range: [{start}, {end})")
        self._raw = fileobj
        self._position = start
        self._end = end
        fileobj.seek(start)

    def read(self, size: int = -1) -> bytes:
        self._checkClosed()
        left = self._end - self._position
        wanted = left if size is None or size < 0 else min(size, left)
        parts = []
        while wanted:
            data = self._raw.read(wanted)
            if not data:
                if parts and size is not None and size >= 0:
                    break  # the bytes before the end first; the next read raises
                raise EOFError(f"the file ends at byte {self._position}, before the end of "
                               f"the range at byte {self._end}")
            parts.append(data)
            self._position += len(data)
            wanted -= len(data)
        return b"".join(parts)


def open_range(fileobj: IO[bytes], start: int, end: int) -> IO[bytes]:
    """The decompressed bytes of the whole bz2 streams in bytes [start, end) of a file (a
    byte range of a multistream dump, cut at stream starts), decompressed ahead in a
    thread in large blocks.

    Every stream in the range is checked: a range that ends inside a stream raises
    EOFError, a damaged stream anywhere in it (or bytes that are not a stream) the
    decompressor's error. (`bz2.decompress` takes a damaged stream after the first for
    trailing junk, and returns the streams before it without a word.)
    """
    return _prefetched(BlockDecompressor(ByteRange(fileobj, start, end), "bz2"))
