"""transforms/io/decompress.py: the prefetching reader and the block decompressor."""

from __future__ import annotations

import bz2
import gc
import gzip
import io
import lzma
import zlib

import pytest

from transforms.io.decompress import (
    BlockDecompressor,
    ByteRange,
    PrefetchingReader,
    open_dump,
    open_range,
)


def test_prefetching_reader_returns_the_stream_unchanged():
    data = bytes(range(256)) * 1000
    reader = PrefetchingReader(io.BytesIO(data), chunk_size=1000, depth=2)
    out = [reader.read(7), reader.read(0), reader.read(3000)]
    buf = bytearray(500)
    out.append(bytes(buf[: reader.readinto(buf)]))
    out.append(reader.read())
    assert b"".join(out) == data
    assert reader.read(10) == b"" and reader.read() == b""
    reader.close()


class _FailingStream(io.RawIOBase):
    def __init__(self, good: bytes, error: Exception):
        self._good, self._error = good, error

    def read(self, size=-1):
        if self._good:
            chunk, self._good = self._good[:size], self._good[size:]
            return chunk
        raise self._error


def test_prefetching_reader_raises_the_streams_error_where_it_happened():
    reader = PrefetchingReader(_FailingStream(b"x" * 10, EOFError("cut short")), chunk_size=4)
    assert reader.read(10) == b"x" * 10
    for _ in range(2):  # and again: a stream cut short never reads as complete
        with pytest.raises(EOFError, match="cut short"):
            reader.read(1)
    reader.close()
    with pytest.raises(ValueError, match="closed"):
        reader.read(1)


def test_prefetching_reader_returns_the_bytes_before_an_error_first():
    reader = PrefetchingReader(_FailingStream(b"x" * 10, EOFError("cut short")), chunk_size=4)
    assert reader.read(100) == b"x" * 10
    with pytest.raises(EOFError, match="cut short"):
        reader.read(100)
    reader.close()
    # Reading to the end: the error, not the bytes before it (they would look complete).
    reader = PrefetchingReader(_FailingStream(b"x" * 10, EOFError("cut short")), chunk_size=4)
    with pytest.raises(EOFError, match="cut short"):
        reader.read()
    reader.close()


def test_closing_a_prefetching_reader_early_stops_its_thread(long_dump):
    with open(long_dump, "rb") as f:
        stream = open_dump(f, str(long_dump))
        assert isinstance(stream, PrefetchingReader)
        assert stream.read(100).startswith(b"<mediawiki")
        thread = stream._thread
        assert thread.is_alive()
        stream.close()  # the thread was blocked on a full queue
        assert not thread.is_alive()
        with pytest.raises(ValueError, match="closed"):
            stream.read(1)


def test_a_reader_nobody_closed_stops_its_thread_when_collected(long_dump):
    with open(long_dump, "rb") as f:
        stream = open_dump(f, str(long_dump))
        stream.read(100)
        thread = stream._thread
        assert thread.is_alive()
        del stream
        gc.collect()
        thread.join(timeout=5)
        assert not thread.is_alive()


def test_prefetch_gives_the_same_bytes_as_plain_decompression(wiki_sample):
    with open(wiki_sample, "rb") as f, open_dump(f, str(wiki_sample)) as stream:
        assert stream.read() == bz2.decompress(wiki_sample.read_bytes())


_DATA = b"".join(b"<page>%d lorem ipsum %d</page>\n" % (i, i * i) for i in range(20_000))
_STDLIB = {"bz2": lambda f: bz2.BZ2File(f), "gz": lambda f: gzip.GzipFile(fileobj=f),
           "xz": lambda f: lzma.LZMAFile(f)}


def _block_read(data: bytes, kind: str, block_size: int, read_size: int) -> bytes:
    stream = BlockDecompressor(io.BytesIO(data), kind, block_size=block_size)
    out = []
    while chunk := stream.read(read_size):
        assert len(chunk) <= read_size
        out.append(chunk)
    assert stream.read(read_size) == b""
    return b"".join(out)


@pytest.mark.parametrize("kind, data", [
    ("bz2", bz2.compress(_DATA)),
    ("bz2", bz2.compress(_DATA[:1000]) + bz2.compress(_DATA[1000:])),  # multistream
    ("gz", gzip.compress(_DATA)),
    ("gz", gzip.compress(_DATA[:5000]) + b"\0\0" + gzip.compress(_DATA[5000:]) + b"\0"),
    ("xz", lzma.compress(_DATA)),
    ("xz", lzma.compress(_DATA[:7]) + lzma.compress(_DATA[7:])),
    ("gz", b""),
])
@pytest.mark.parametrize("block_size, read_size", [(7, 1000), (100, 1 << 20), (1 << 18, 4096)])
def test_block_decompressor_gives_the_standard_librarys_bytes(kind, data, block_size, read_size):
    expected = _STDLIB[kind](io.BytesIO(data)).read()
    assert _block_read(data, kind, block_size, read_size) == expected
    assert BlockDecompressor(io.BytesIO(data), kind).read() == expected


@pytest.mark.parametrize("kind, compress", [("bz2", bz2.compress), ("gz", gzip.compress),
                                            ("xz", lzma.compress)])
def test_block_decompressor_raises_on_cut_corrupt_or_trailing_data(kind, compress):
    whole = compress(_DATA)
    with pytest.raises(EOFError, match="ended before the end-of-stream"):
        _block_read(whole[: len(whole) // 2], kind, 1000, 1 << 16)
    corrupt = whole[:100] + bytes(b ^ 0x55 for b in whole[100:300]) + whole[300:]
    with pytest.raises((OSError, EOFError, zlib.error, lzma.LZMAError)):
        _block_read(corrupt, kind, 1 << 18, 1 << 20)
    # Junk after the last stream, or a damaged later stream, is an error; the standard
    # library takes either for the end of the data when it fails in the first block.
    with pytest.raises((OSError, zlib.error, lzma.LZMAError)):
        _block_read(whole + b"junk after the stream", kind, 1 << 18, 1 << 20)
    second = compress(_DATA)
    damaged = whole + second[:50] + bytes(b ^ 0x55 for b in second[50:250]) + second[250:]
    with pytest.raises((OSError, EOFError, zlib.error, lzma.LZMAError)):
        _block_read(damaged, kind, 1 << 18, 1 << 20)


def test_block_decompressor_on_empty_files_acts_as_the_standard_library():
    for kind in ("bz2", "xz"):  # an empty .bz2 or .xz file is cut short
        with pytest.raises(EOFError):
            _block_read(b"", kind, 1000, 1000)
    assert _block_read(b"", "gz", 1000, 1000) == b""
    with pytest.raises(gzip.BadGzipFile, match="Not a gzipped file"):
        _block_read(b"not gzip", "gz", 1000, 1000)


def test_block_decompressor_errors_stick():
    good = gzip.compress(b"first member", mtime=0)
    bad = bytearray(gzip.compress(bytes(range(256)) * 40, mtime=0))
    bad[12] ^= 0x55
    stream = BlockDecompressor(io.BytesIO(good + bytes(bad)), "gz")
    assert stream.read(1 << 20) == b"first member"
    for _ in range(2):  # and again: a corrupt file never reads as complete
        with pytest.raises(zlib.error):
            stream.read(1 << 20)


def test_block_decompressor_reads_xz_stream_padding():
    padded = lzma.compress(b"one") + b"\0" * 4 + lzma.compress(b"two") + b"\0" * 8
    assert _block_read(padded, "xz", 5, 100) == b"onetwo"
    with pytest.raises(lzma.LZMAError, match="multiple of 4"):
        _block_read(lzma.compress(b"one") + b"\0" * 3 + lzma.compress(b"two"), "xz", 100, 100)


def test_byte_range_reads_its_bytes_and_fails_where_the_file_ends():
    data = bytes(range(256)) * 40
    stream = ByteRange(io.BytesIO(data), 1000, 5000)
    assert stream.read(7) + stream.read(100_000) == data[1000:5000]
    assert stream.read(10) == b"" and stream.read() == b""
    assert ByteRange(io.BytesIO(data), 3, 3).read() == b""
    with pytest.raises(EOFError, match="ends at byte 10240"):
        ByteRange(io.BytesIO(data), 10_000, 20_000).read()
    cut = ByteRange(io.BytesIO(data), 10_000, 20_000)
    assert cut.read(100_000) == data[10_000:]  # what there is, first
    for _ in range(2):
        with pytest.raises(EOFError, match="ends at byte 10240, before the end of the "
                                           "range at byte 20000"):
            cut.read(1)
    with pytest.raises(ValueError, match="not a byte range"):
        ByteRange(io.BytesIO(data), 5, 4)


def test_open_range_checks_every_stream_of_the_range():
    streams = [bz2.compress(_DATA[i:i + 30_000]) for i in range(0, 120_000, 30_000)]
    data = b"".join(streams)
    start = len(streams[0])
    end = start + len(streams[1]) + len(streams[2])
    with open_range(io.BytesIO(data), start, end) as stream:
        assert stream.read() == _DATA[30_000:90_000]
    # One byte flipped in the middle of the range's second stream: bz2.decompress returns
    # the first stream without a word; the range reader fails.
    damaged = bytearray(data)
    damaged[start + len(streams[1]) + len(streams[2]) // 2] ^= 0xFF
    assert bz2.decompress(bytes(damaged[start:end])) == _DATA[30_000:60_000]
    with open_range(io.BytesIO(bytes(damaged)), start, end) as stream, \
            pytest.raises(OSError, match="Invalid data stream"):
        stream.read()
    # A range that ends inside a stream, or runs past the end of the file.
    with open_range(io.BytesIO(data), start, end - 1) as stream, \
            pytest.raises(EOFError, match="ended before the end-of-stream marker"):
        stream.read()
    with open_range(io.BytesIO(data), start, len(data) + 1) as stream, \
            pytest.raises(EOFError, match=f"the file ends at byte {len(data)}"):
        stream.read()
