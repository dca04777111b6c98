from __future__ import annotations

import io

import pytest

from transforms.wiki.dump import DumpReadError, Page, iter_dump_file, iter_pages


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
