"""What the dump reader gains from mwxml: full-history dumps, the `<siteinfo>`
namespace table, every export schema version; and what it keeps: XML bombs and external
entities refused."""

from __future__ import annotations

import bz2
import io
import random
import re
import resource
import time

import pytest

from transforms.wiki.dump import DumpReadError, Page, iter_dump_file, iter_pages

_REVISION = re.compile(rb"<revision>.*?</revision>", re.S)
_TEXT = re.compile(rb"<text[^>]*?(?:/>|>.*?</text>)", re.S)


def _older(revision: bytes, timestamp: bytes, rev_id: int, text: bytes) -> bytes:
    revision = re.sub(rb"<timestamp>[^<]*</timestamp>",
                      b"<timestamp>" + timestamp + b"</timestamp>", revision, count=1)
    revision = re.sub(rb"<id>\d+</id>", b"<id>%d</id>" % rev_id, revision, count=1)
    return _TEXT.sub(lambda _m: b'<text xml:space="preserve">' + text + b"</text>",
                     revision, count=1)


def _history(xml: bytes, seed: int = 13) -> bytes:
    """A `pages-meta-history` dump from a current-revision one: each page gets two older
    revisions and one with the same timestamp and a lower id, all in a shuffled order."""
    rng = random.Random(seed)

    def revisions(m: re.Match) -> bytes:
        latest = m[0]
        rev_id = int(re.search(rb"<id>(\d+)</id>", latest)[1])
        timestamp = re.search(rb"<timestamp>([^<]*)</timestamp>", latest)[1]
        versions = [latest,
                    _older(latest, b"2001-01-15T00:00:00Z", rev_id + 5, b"[[Old one]]"),
                    _older(latest, b"2002-02-01T10:00:00Z", rev_id - 7, b"[[Old two]]"),
                    _older(latest, timestamp, rev_id - 1, b"[[Same second, lower id]]")]
        rng.shuffle(versions)
        return b"\n".join(versions)

    return _REVISION.sub(revisions, xml)


def test_a_full_history_dump_gives_the_pages_of_the_latest_revision_file(
        tmp_path, wiki_sample, wiki_sample_xml):
    history = _history(wiki_sample_xml)
    assert history.count(b"<revision>") == 4 * wiki_sample_xml.count(b"<revision>")
    path = tmp_path / "enwiki-pages-meta-history1.xml-p10p30302.bz2"
    path.write_bytes(bz2.compress(history))
    with open(path, "rb") as f:
        from_history = list(iter_dump_file(str(path), f))
    with open(wiki_sample, "rb") as f:
        latest = list(iter_dump_file(str(wiki_sample), f))
    assert len(latest) == 206 and from_history == latest
    # Not file order: the latest revision is first, in the middle or last in the page.
    firsts = [m[1] for m in re.finditer(rb"<page>.*?(<revision>.*?</revision>)", history, re.S)]
    lasts = [m[0] for m in re.finditer(rb"<revision>(?:(?!<revision>).)*?</revision>\s*</page>",
                                       history, re.S)]
    assert len(firsts) == len(lasts) == 206
    assert sum(b"[[Old" not in r and b"[[Same second" not in r for r in firsts) > 20
    assert sum(b"[[Old" not in r and b"[[Same second" not in r for r in lasts) > 20
    assert sum(b"[[Old" in r or b"[[Same second" in r for r in lasts) > 100


def test_latest_revision_by_timestamp_then_id_then_file_order():
    def dump(*revisions: str) -> bytes:
        return ("<mediawiki><page><title>T</title><ns>0</ns><id>1</id>"
                + "".join(f"<revision>{r}</revision>" for r in revisions)
                + "</page></mediawiki>").encode()

    def text(*revisions: str) -> str:
        return next(iter_pages(io.BytesIO(dump(*revisions)), "h.xml")).text

    ts = "<timestamp>{}T00:00:00Z</timestamp>"
    assert text(f"<id>9</id>{ts.format('2003-01-01')}<text>a</text>",
                f"<id>8</id>{ts.format('2004-01-01')}<text>b</text>") == "b"
    assert text(f"<id>9</id>{ts.format('2004-01-01')}<text>a</text>",
                f"<id>8</id>{ts.format('2004-01-01')}<text>b</text>") == "a"
    assert text("<text>a</text>", "<text>b</text>") == "b"
    assert text(f"{ts.format('2004-01-01')}<text>a</text>", "<text>b</text>") == "a"


def test_siteinfo_namespaces_and_old_schemas_without_ns():
    xml = b"""<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.3/" version="0.3">
      <siteinfo><sitename>W</sitename><namespaces>
        <namespace key="0" /><namespace key="10">Template</namespace>
        <namespace key="14">Category</namespace></namespaces></siteinfo>
      <page><title>Template:Infobox</title><id>3</id>
        <revision><id>30</id><timestamp>2005-01-01T00:00:00Z</timestamp>
          <text>{{x}}</text></revision></page>
      <page><title>Plain: not a namespace</title><id>4</id>
        <revision><id>40</id><text>[[a]]</text></revision></page>
    </mediawiki>"""
    assert list(iter_pages(io.BytesIO(xml), "old.xml")) == [
        Page("Template:Infobox", 10, 3, None, "{{x}}"),
        Page("Plain: not a namespace", 0, 4, None, "[[a]]")]


def test_export_schema_0_11_text_and_slots():
    xml = b"""<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11">
      <page><title>A</title><ns>0</ns><id>1</id><redirect title="B" />
        <revision><id>2</id><timestamp>2024-01-01T00:00:00Z</timestamp>
          <contributor><username>U</username><id>5</id></contributor>
          <origin>2</origin><model>wikitext</model><format>text/x-wiki</format>
          <text bytes="11" sha1="abc" xml:space="preserve">#REDIRECT [[B]]</text>
          <sha1>abc</sha1></revision></page></mediawiki>"""
    assert list(iter_pages(io.BytesIO(xml), "new.xml")) == [
        Page("A", 0, 1, "B", "#REDIRECT [[B]]")]


_LAUGHS = (b'<?xml version="1.0"?>\n<!DOCTYPE mediawiki [\n<!ENTITY l0 "lol">\n'
           + b"".join(b'<!ENTITY l%d "%s">\n' % (i, b"&l%d;" % (i - 1) * 10)
                      for i in range(1, 10))
           + b"]>\n<mediawiki><page><title>&l9;</title><ns>0</ns><id>1</id>"
           b"</page></mediawiki>")


def test_an_xml_bomb_fails_the_file_quickly_in_bounded_memory():
    """10^9 copies of "lol" (3 GB): expat stops at its amplification limit."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(DumpReadError, match="bomb.xml: cannot read dump.*amplification"):
        list(iter_pages(io.BytesIO(_LAUGHS), "bomb.xml"))
    assert time.perf_counter() - started < 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KB


def test_an_external_entity_is_refused_not_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    xml = (f'<?xml version="1.0"?><!DOCTYPE m [<!ENTITY x SYSTEM "{secret.as_uri()}">]>'
           "<mediawiki><page><title>T</title><ns>0</ns><id>1</id><revision>"
           "<text>&x;</text></revision></page></mediawiki>").encode()
    with pytest.raises(DumpReadError, match="undefined entity &x;"):
        list(iter_pages(io.BytesIO(xml), "ext.xml"))


def test_a_decompression_error_inside_a_page_fails_the_file(tmp_path):
    """A read error raised while mwxml parses a page is the file's, never a bad page."""
    path = tmp_path / "cut.xml.bz2"
    page = ("<page><title>P</title><ns>0</ns><id>1</id><revision><text>"
            + "x" * 2_000_000 + "</text></revision></page>")
    path.write_bytes(bz2.compress(("<mediawiki>" + page * 3 + "</mediawiki>").encode())[:-500])
    reported = []
    with pytest.raises(DumpReadError, match=r"cut.xml.bz2: cannot read dump"):
        with open(path, "rb") as f:
            list(iter_dump_file(str(path), f, on_bad_page=reported.append))
    assert reported == []
