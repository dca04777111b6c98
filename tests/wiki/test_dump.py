from __future__ import annotations

import bz2
import gc
import gzip
import io
import lzma
import threading
import zlib

import pytest

from transforms.wiki.dump import (
    BlockDecompressor,
    DumpReadError,
    Page,
    PrefetchingReader,
    iter_dump_file,
    iter_pages,
    open_dump,
)


def _pages(path):
    with open(path, "rb") as f:
        return list(iter_dump_file(str(path), f))


def test_real_sample_pages(wiki_sample):
    pages = _pages(wiki_sample)
    assert len(pages) == 206
    assert sum(p.namespace == 0 for p in pages) == 205
    assert sum(p.redirect is not None for p in pages) == 100
    assert pages[0] == Page("AccessibleComputing", 0, 10, "Computer accessibility", pages[0].text)
    assert pages[1].title == "Anarchism" and len(pages[1].text) > 100_000


@pytest.mark.parametrize("variant", ["xml", "gz", "multistream"])
def test_every_compression_gives_the_same_pages(dump_variants, wiki_sample, variant):
    assert _pages(dump_variants[variant]) == _pages(wiki_sample)


@pytest.mark.parametrize("variant, message", [
    ("truncated", "after"),
    ("notxml", "empty file or no XML"),
    ("empty", "empty file or no XML"),
])
def test_broken_dumps_raise_naming_the_file(dump_variants, variant, message):
    path = dump_variants[variant]
    with pytest.raises(DumpReadError, match=message) as e:
        _pages(path)
    assert str(path) in str(e.value)


def test_truncated_dump_reports_how_far_it_got(dump_variants):
    with pytest.raises(DumpReadError, match=r"after \d+ complete pages"):
        _pages(dump_variants["truncated"])


def test_not_a_mediawiki_root():
    with pytest.raises(DumpReadError, match="not a MediaWiki XML dump"):
        list(iter_pages(io.BytesIO(b"<html><page/></html>"), "x.xml"))


def test_latest_revision_wins_and_dump_without_pages_is_valid():
    xml = b"""<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
      <page><title>T</title><ns>0</ns><id>7</id>
        <revision><timestamp>2001-01-01T00:00:00Z</timestamp><text>new</text></revision>
        <revision><timestamp>2000-01-01T00:00:00Z</timestamp><text>old</text></revision>
      </page></mediawiki>"""
    assert list(iter_pages(io.BytesIO(xml), "h.xml")) == [Page("T", 0, 7, None, "new")]
    assert list(iter_pages(io.BytesIO(b"<mediawiki></mediawiki>"), "e.xml")) == []


def test_multistream_index_names():
    from transforms.wiki.dump import multistream_index_path

    assert multistream_index_path("/d/enwiki-20240601-pages-articles-multistream.xml.bz2") == \
        "/d/enwiki-20240601-pages-articles-multistream-index.txt.bz2"
    assert multistream_index_path("gs://b/x-multistream3.xml-p1p41242.bz2") == \
        "gs://b/x-multistream-index3.txt-p1p41242.bz2"
    assert multistream_index_path("/d/enwiki-pages-articles.xml.bz2") is None


def test_byte_ranges_read_the_same_pages_as_the_whole_file(multistream_dump):
    from transforms.wiki.dump import (
        check_cuts,
        iter_range_pages,
        multistream_index_path,
        split_ranges,
        stream_offsets,
    )

    index = multistream_index_path(str(multistream_dump))
    with open(index, "rb") as f:
        offsets = stream_offsets(f, index)
    size = multistream_dump.stat().st_size
    ranges = split_ranges(offsets, size, 50_000)
    assert len(ranges) > 3 and ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    with open(multistream_dump, "rb") as f:
        check_cuts(f, str(multistream_dump), ranges)
        by_range = [p for start, end in ranges
                    for p in iter_range_pages(f, str(multistream_dump), start, end)]
    whole = _pages(multistream_dump)
    assert len(whole) > 50 and by_range == whole
    assert split_ranges(offsets, size, 10**12) == [(0, size)]


def test_bad_index_or_cut_is_named(multistream_dump, tmp_path):
    import bz2

    from transforms.wiki.dump import check_cuts, iter_range_pages, split_ranges, stream_offsets

    name = str(multistream_dump)
    with open(multistream_dump, "rb") as f:
        with pytest.raises(DumpReadError, match=r"byte 1000 \(from its index\) does not start"):
            check_cuts(f, name, [(0, 1000), (1000, 2000)])
        with pytest.raises(DumpReadError, match=r"bytes 1000-5000: not whole bz2 streams"):
            list(iter_range_pages(f, name, 1000, 5000))
        with pytest.raises(DumpReadError, match="the file ends after"):
            list(iter_range_pages(f, name, 0, 10**9))
    with pytest.raises(DumpReadError, match="belongs to another file"):
        split_ranges([10, 10**9], 5000, 100)
    bad = tmp_path / "bad-index.txt.bz2"
    bad.write_bytes(bz2.compress(b"12:3:Title\nnot an index line\n"))
    with pytest.raises(DumpReadError, match="bad-index.txt.bz2: line 2 is not"):
        stream_offsets(open(bad, "rb"), str(bad))
    bad.write_bytes(b"not bz2 at all")
    with pytest.raises(DumpReadError, match="cannot read the index"):
        stream_offsets(open(bad, "rb"), str(bad))


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


@pytest.fixture(scope="module")
def long_dump(tmp_path_factory):
    """A 48 MB multistream dump (a small page, then one of 48 MB) made of one compressed
    1 MB stream repeated: more than the prefetch thread reads ahead, so it is still
    running, blocked on its full queue, after the first page."""
    path = tmp_path_factory.mktemp("long") / "long-dump.xml.bz2"
    head = (b"<mediawiki><page><title>A</title><ns>0</ns><id>1</id><revision><text>a"
            b"</text></revision></page><page><title>B</title><ns>0</ns><id>2</id>"
            b"<revision><text>")
    block = bz2.compress(b"lorem ipsum dolor sit amet " * 40_000)
    tail = b"</text></revision></page></mediawiki>"
    path.write_bytes(bz2.compress(head) + block * 48 + bz2.compress(tail))
    return path


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


def test_closing_the_page_iterator_early_stops_the_reader(long_dump):
    before = {t for t in threading.enumerate() if t.name == "dump-prefetch"}
    with open(long_dump, "rb") as f:
        pages = iter_dump_file(str(long_dump), f)
        assert next(pages).title == "A"
        assert {t for t in threading.enumerate() if t.name == "dump-prefetch"} - before
        pages.close()
    assert not {t for t in threading.enumerate() if t.name == "dump-prefetch"} - before


def test_a_long_dump_reads_whole(long_dump):
    pages = _pages(long_dump)
    assert [p.title for p in pages] == ["A", "B"]
    assert len(pages[1].text) == 48 * 27 * 40_000


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
