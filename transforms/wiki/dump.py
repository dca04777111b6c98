"""Streaming reader of MediaWiki XML export dumps (`.xml`, `.xml.bz2` incl. multi-stream,
`.xml.gz`). Beam-free; `transforms/wiki/read.py` wraps it.

Memory stays bounded by the largest page: elements are cleared as soon as a page has been
yielded. Any decompression or XML error is raised as `DumpReadError` naming the file and
how far reading got, never swallowed: a truncated dump must not look like a short one.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import io
import logging
import lzma
import queue
import re
import threading
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Iterator
from typing import IO

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of a dump with its latest revision.

    Attributes:
        title: the page title as stored in the dump.
        namespace: the `<ns>` number.
        page_id: the `<id>` of the page.
        redirect: the redirect target title, or None for a real page.
        text: the wikitext of the latest revision ("" when it has none).
    """

    title: str
    namespace: int
    page_id: int
    redirect: str | None
    text: str


class DumpReadError(RuntimeError):
    """A dump file could not be read to its end (truncated, corrupt, not XML, empty)."""


# Errors the decompressors and the XML parser raise on broken input.
_READ_ERRORS = (EOFError, OSError, ET.ParseError, zlib.error, lzma.LZMAError, ValueError)


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


class PrefetchingReader(io.RawIOBase):
    """Reads a stream ahead in a background thread: chunks go through a bounded queue.

    The decompressors (bz2, zlib, lzma) release the GIL while they work, so a dump is
    decompressed on one core while the XML parser and link extraction run on another,
    instead of in turn. Read ahead are at most `depth` + 2 chunks of `chunk_size` bytes
    (the queue, the chunk waiting to enter it, the chunk being read from). An error of
    the underlying stream is raised, unchanged, by the `read` that reaches it and by every
    later one: a stream cut short never looks complete.

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

    def readable(self) -> bool:
        return True

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

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

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


class BlockDecompressor(io.RawIOBase):
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

    def __init__(self, fileobj: IO[bytes], kind: str, block_size: int = 1 << 18) -> None:
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

    def readable(self) -> bool:
        return True

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

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def open_dump(fileobj: IO[bytes], name: str, prefetch: bool = True) -> IO[bytes]:
    """Wraps a binary file object in the decompressor its name asks for.

    `bz2` reads multi-stream files (Wikipedia's `-multistream` dumps) transparently. With
    `prefetch`, a compressed file is decompressed ahead in a thread (`PrefetchingReader`)
    in large blocks (`BlockDecompressor`).
    """
    kind = next((k for k in ("bz2", "gz", "xz") if name.endswith("." + k)), None)
    if kind is None:
        return fileobj
    if prefetch:
        # 2 MB of compressed input per call and 8 MB chunks (32 MB read ahead at most): the
        # decompressor's output buffer grows in steps that each take the GIL back, so
        # smaller chunks cost more waits (50 MB of bz2 beside a busy thread: 1.8 s, 2.1 s
        # with 4 MB chunks, 3.0 s with 1 MB of input per call; 1.4 s alone).
        return PrefetchingReader(BlockDecompressor(fileobj, kind, block_size=2 << 20),
                                 chunk_size=8 << 20, depth=2)
    if kind == "bz2":
        return bz2.BZ2File(fileobj)
    if kind == "gz":
        return gzip.GzipFile(fileobj=fileobj)
    return lzma.LZMAFile(fileobj)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child_text(elem: ET.Element, name: str) -> str | None:
    for child in elem:
        if _local(child.tag) == name:
            return child.text
    return None


def _page_from_element(elem: ET.Element) -> Page:
    title = ns = page_id = None
    redirect = None
    latest: tuple[str, int, str] | None = None
    for order, child in enumerate(elem):
        tag = _local(child.tag)
        if tag == "title":
            title = child.text or ""
        elif tag == "ns":
            ns = int(child.text or 0)
        elif tag == "id":
            page_id = int(child.text or 0)
        elif tag == "redirect":
            redirect = child.get("title", "")
        elif tag == "revision":
            # Full-history dumps hold several revisions; keep the newest (ties: the last).
            key = (_child_text(child, "timestamp") or "", order, _child_text(child, "text") or "")
            if latest is None or key[:2] >= latest[:2]:
                latest = key
    if title is None:
        raise ValueError(f"<page> without <title> (id {page_id})")
    return Page(
        title=title,
        namespace=ns if ns is not None else 0,
        page_id=page_id if page_id is not None else -1,
        redirect=redirect,
        text=latest[2] if latest else "",
    )


def iter_pages(stream: IO[bytes], name: str) -> Iterator[Page]:
    """Yields every `<page>` of a (decompressed) dump stream, in order.

    Args:
        stream: a binary stream of XML (already decompressed, see `open_dump`).
        name: the file name, for error messages.

    Raises:
        DumpReadError: the stream is empty, truncated, corrupt or not a MediaWiki dump.
    """
    pages = 0
    root = None
    try:
        for event, elem in ET.iterparse(stream, events=("start", "end")):
            if root is None:
                root = elem
                if _local(root.tag) != "mediawiki":
                    raise DumpReadError(
                        f"{name}: not a MediaWiki XML dump (root element <{_local(root.tag)}>)")
                continue
            if event == "end" and _local(elem.tag) == "page":
                page = _page_from_element(elem)
                pages += 1
                yield page
                # Drop the page subtree; the root keeps no reference to finished pages.
                root.clear()
    except DumpReadError:
        raise
    except _READ_ERRORS as e:
        reason = f"empty file or no XML: {e}" if root is None else str(e)
        raise DumpReadError(
            f"{name}: cannot read dump ({type(e).__name__}: {reason}) "
            f"after {pages} complete pages") from e
    if root is None:
        raise DumpReadError(f"{name}: empty file")


def iter_dump_file(path: str, fileobj: IO[bytes]) -> Iterator[Page]:
    """`iter_pages` over a raw (possibly compressed) file object named `path`."""
    with open_dump(fileobj, path) as stream:
        yield from iter_pages(stream, path)


# Intra-file parallelism for Wikipedia's multistream dumps: the index
# (`offset:page_id:title` per page, bz2-compressed) gives the byte offset of every bz2
# stream of pages, so a file can be read as independent byte ranges cut at stream starts.
_MULTISTREAM_NAME = re.compile(r"^(.*-multistream)(\d*)\.xml(.*)\.bz2$")
_BZ2_MAGIC = re.compile(rb"^BZh[1-9]")


def multistream_index_path(path: str) -> str | None:
    """The index Wikipedia publishes next to a multistream dump, or None for other names:
    `x-multistream.xml.bz2` -> `x-multistream-index.txt.bz2`, and for part files
    `x-multistream1.xml-p1p41242.bz2` -> `x-multistream-index1.txt-p1p41242.bz2`."""
    m = _MULTISTREAM_NAME.match(path)
    return f"{m[1]}-index{m[2]}.txt{m[3]}.bz2" if m else None


def stream_offsets(index: IO[bytes], name: str) -> list[int]:
    """The sorted distinct stream offsets of a bz2-compressed multistream index.

    Raises:
        DumpReadError: the index cannot be read or has a malformed line (naming it).
    """
    offsets: set[int] = set()
    line_number = 0
    try:
        with bz2.BZ2File(index) as text:
            for line_number, line in enumerate(text, start=1):
                offset, sep, _rest = line.partition(b":")
                if not sep or not offset.isdigit():
                    raise DumpReadError(f"{name}: line {line_number} is not "
                                        f"'offset:page_id:title': {line[:80]!r}")
                offsets.add(int(offset))
    except _READ_ERRORS as e:
        raise DumpReadError(f"{name}: cannot read the index after {line_number} lines "
                            f"({type(e).__name__}: {e})") from e
    if not offsets:
        raise DumpReadError(f"{name}: empty index")
    return sorted(offsets)


def split_ranges(offsets: list[int], file_size: int, target_bytes: int) -> list[tuple[int, int]]:
    """[start, end) byte ranges that cover the whole file, cut only at stream offsets,
    each about `target_bytes` long (the first one holds the header stream, the last one
    the footer).

    Raises:
        DumpReadError: an offset outside the file (an index of another file).
    """
    if target_bytes < 1:
        raise ValueError(f"target_bytes must be >= 1, got {target_bytes}")
    cuts = [0]
    for offset in offsets:
        if not 0 <= offset < file_size:
            raise DumpReadError(f"stream offset {offset} is outside the file "
                                f"({file_size} bytes): the index belongs to another file")
        if offset - cuts[-1] >= target_bytes:
            cuts.append(offset)
    return list(zip(cuts, [*cuts[1:], file_size]))


def check_cuts(fileobj: IO[bytes], name: str, ranges: list[tuple[int, int]]) -> None:
    """Checks that every range after the first starts a bz2 stream.

    Raises:
        DumpReadError: naming the file and the offset that is not a stream start.
    """
    for start, _end in ranges[1:]:
        fileobj.seek(start)
        if not _BZ2_MAGIC.match(fileobj.read(4)):
            raise DumpReadError(f"{name}: byte {start} (from its index) does not start a "
                                "bz2 stream: the index does not match the file")


def iter_range_pages(fileobj: IO[bytes], name: str, start: int, end: int) -> Iterator[Page]:
    """The pages of the whole bz2 streams in bytes [start, end) of a multistream dump.

    The range's XML is a run of `<page>` elements (plus the header when it starts the
    file, the footer when it ends it); it is read under a `<mediawiki>` root. Memory is
    bounded by the range's decompressed size.

    Raises:
        DumpReadError: the range is cut short, is not whole bz2 streams, or its XML is
            broken (naming the file and the byte range).
    """
    where = f"{name} bytes {start}-{end}"
    fileobj.seek(start)
    data = fileobj.read(end - start)
    if len(data) != end - start:
        raise DumpReadError(f"{where}: the file ends after {start + len(data)} bytes")
    try:
        xml = bz2.decompress(data)
    except _READ_ERRORS as e:
        raise DumpReadError(f"{where}: not whole bz2 streams ({type(e).__name__}: {e})") from e
    del data
    if start > 0:
        xml = b"<mediawiki>" + xml
    if not xml.rstrip().endswith(b"</mediawiki>"):
        xml += b"</mediawiki>"
    yield from iter_pages(io.BytesIO(xml), where)
