from __future__ import annotations

import bz2
import io
import threading

import pytest

from transforms.wiki.dump import (
    DumpReadError,
    Page,
    iter_dump_file,
    iter_pages,
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
        multistream_index_path,
        split_ranges,
        stream_offsets,
    )
    from transforms.wiki.read import read_range_pages

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
                    for p in read_range_pages(f, str(multistream_dump), start, end)]
    whole = _pages(multistream_dump)
    assert len(whole) > 50 and by_range == whole
    assert split_ranges(offsets, size, 10**12) == [(0, size)]


def test_bad_index_or_cut_is_named(multistream_dump, tmp_path):

    from transforms.wiki.dump import check_cuts, split_ranges, stream_offsets
    from transforms.wiki.read import read_range_pages

    name = str(multistream_dump)
    with open(multistream_dump, "rb") as f:
        with pytest.raises(DumpReadError, match=r"byte 1000 \(from its index\) does not start"):
            check_cuts(f, name, [(0, 1000), (1000, 2000)])
        with pytest.raises(DumpReadError, match=r"bytes 1000-5000: cannot read dump"):
            list(read_range_pages(f, name, 1000, 5000))
        with pytest.raises(DumpReadError, match=r"bytes 0-1000000000: cannot read dump"):
            list(read_range_pages(f, name, 0, 10**9))
    with pytest.raises(DumpReadError, match="belongs to another file"):
        split_ranges([10, 10**9], 5000, 100)
    bad = tmp_path / "bad-index.txt.bz2"
    bad.write_bytes(bz2.compress(b"12:3:Title\nnot an index line\n"))
    with pytest.raises(DumpReadError, match="bad-index.txt.bz2: line 2 is not"):
        stream_offsets(open(bad, "rb"), str(bad))
    bad.write_bytes(b"not bz2 at all")
    with pytest.raises(DumpReadError, match="cannot read the index"):
        stream_offsets(open(bad, "rb"), str(bad))


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


def _dump(*pages: str) -> bytes:
    return ("<mediawiki>" + "".join(f"<page>{p}</page>" for p in pages)
            + "</mediawiki>").encode("utf-8")


GOOD_1 = "<title>One</title><ns>0</ns><id>1</id><revision><text>[[a]]</text></revision>"
GOOD_2 = "<title>Two</title><ns>0</ns><id>2</id><revision><text>[[b]]</text></revision>"


@pytest.mark.parametrize("bad, named, reason", [
    ("<title>Bad ns</title><ns>main</ns><id>9</id>", "page 2 (title 'Bad ns', id '9')",
     "<ns> is not a number: 'main'"),
    ("<ns>0</ns><id>9</id><revision><text>x</text></revision>", "page 2 (id '9')", "no <title>"),
    ("<title>Bad id</title><ns>0</ns><id>x7</id>", "page 2 (title 'Bad id', id 'x7')",
     "<id> is not a number: 'x7'"),
    ("<ns>zero</ns>", "page 2 (no title or id)", "no <title>; <ns> is not a number: 'zero'"),
])
def test_a_bad_page_is_skipped_and_named_and_the_file_read_on(bad, named, reason, caplog):
    """A page that is valid XML but no valid page costs that page only."""
    reported = []
    with caplog.at_level("WARNING", logger="transforms.wiki.dump"):
        pages = list(iter_pages(io.BytesIO(_dump(GOOD_1, bad, GOOD_2)), "d.xml",
                                on_bad_page=reported.append))
    assert [p.title for p in pages] == ["One", "Two"]
    assert reported == [f"d.xml: {named} is not a valid page, skipped: {reason}"]
    assert reported[0] in caplog.text


def test_bad_pages_without_a_callback_are_logged_and_skipped(tmp_path):
    path = tmp_path / "d.xml.bz2"
    path.write_bytes(bz2.compress(_dump(GOOD_1, "<title>B</title><ns>x</ns>", GOOD_2)))
    assert [p.title for p in _pages(path)] == ["One", "Two"]
    reported = []
    with open(path, "rb") as f:
        pages = list(iter_dump_file(str(path), f, on_bad_page=reported.append))
    assert len(pages) == 2 and len(reported) == 1 and str(path) in reported[0]


def test_bad_page_in_a_byte_range_is_named_by_the_range(tmp_path):
    from transforms.wiki.read import read_range_pages

    head = b"<mediawiki>"
    streams = [bz2.compress(head), bz2.compress(_dump(GOOD_1, "<ns>x</ns>")[len(head):-12]),
               bz2.compress(b"</mediawiki>")]
    path = tmp_path / "r-multistream.xml.bz2"
    path.write_bytes(b"".join(streams))
    start, end = len(streams[0]), len(streams[0]) + len(streams[1])
    reported = []
    with open(path, "rb") as f:
        pages = list(read_range_pages(f, str(path), start, end, on_bad_page=reported.append))
    assert [p.title for p in pages] == ["One"]
    assert reported == [f"{path} bytes {start}-{end}: page 2 (no title or id) is not a valid "
                        "page, skipped: no <title>; <ns> is not a number: 'x'"]


def test_broken_xml_still_fails_the_file():
    with pytest.raises(DumpReadError, match=r"after 1 complete pages"):
        list(iter_pages(io.BytesIO(_dump(GOOD_1, "<title>B</title><ns>0</ns")), "d.xml"))
