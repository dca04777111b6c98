"""Baselines for the mining benchmark, without Beam: what reading and a full parse cost.

    python -m tests.bench.baselines "$(qa-data dir)/wiki/enwiki-20160501-p10p30302-sample.xml.bz2"

(a) `time_xml_reading`: decompression + XML parsing alone (pages with title, ns, latest
    revision text), in MB/s of uncompressed XML and pages/s.
(b) `time_full_parse`: (a) plus `mwparserfromhell.parse(text).filter_wikilinks(
    recursive=True)` on every link source page (namespace 0, not a redirect), in MB/s of
    wikitext and pages/s, timing the parse alone and end to end.
`links_per_page` gives, per page, the links of that full parse, for measuring how well a
faster extractor agrees with it (`compare_links`). MB = 10**6 bytes, text as UTF-8.

Every timing is kept as wall time and as CPU time of this process (`time.process_time`):
on a shared 2-core machine the CPU-time rates ("per core") are the stable ones.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import IO

import mwparserfromhell

from tests.wes.reference_wes import (
    Page,
    clean_text,
    iter_pages,
    iter_pages_from,
    open_dump,
)

logger = logging.getLogger(__name__)

MB = 10**6


class CountingReader:
    """A read-only file wrapper that counts the bytes handed to the XML parser."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self.bytes_read += len(data)
        return data


def _is_source(page: Page) -> bool:
    return page.ns == 0 and page.redirect is None


@dataclass(frozen=True)
class ReadTiming:
    """(a) Decompression + XML parsing of one dump."""

    path: str
    pages: int
    source_pages: int
    xml_bytes: int
    text_bytes: int
    seconds: float
    cpu_seconds: float

    @property
    def xml_mb_per_s(self) -> float:
        return self.xml_bytes / MB / self.seconds

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds

    @property
    def xml_mb_per_cpu_s(self) -> float:
        return self.xml_bytes / MB / self.cpu_seconds

    @property
    def pages_per_cpu_s(self) -> float:
        return self.pages / self.cpu_seconds

    def summary(self) -> dict[str, float | int | str]:
        return {**asdict(self), "xml_mb_per_s": round(self.xml_mb_per_s, 2),
                "pages_per_s": round(self.pages_per_s, 1),
                "xml_mb_per_cpu_s": round(self.xml_mb_per_cpu_s, 2),
                "pages_per_cpu_s": round(self.pages_per_cpu_s, 1)}


@dataclass(frozen=True)
class ParseTiming:
    """(b) A full mwparserfromhell parse of every link source page of one dump.

    Attributes:
        parse_seconds: time inside `parse` + `filter_wikilinks` only.
        total_seconds: reading, decompression and parsing together.
        parse_cpu_seconds, total_cpu_seconds: the same in CPU time of this process.
    """

    path: str
    pages: int
    parsed_pages: int
    xml_bytes: int
    text_bytes: int
    links: int
    parse_seconds: float
    total_seconds: float
    parse_cpu_seconds: float
    total_cpu_seconds: float

    @property
    def text_mb_per_cpu_s(self) -> float:
        """Wikitext parsed per CPU second of parsing."""
        return self.text_bytes / MB / self.parse_cpu_seconds

    @property
    def pages_per_cpu_s(self) -> float:
        """Pages parsed per CPU second of parsing."""
        return self.parsed_pages / self.parse_cpu_seconds

    @property
    def text_mb_per_s(self) -> float:
        """Wikitext parsed per second of parsing."""
        return self.text_bytes / MB / self.parse_seconds

    @property
    def pages_per_s(self) -> float:
        """Pages parsed per second of parsing."""
        return self.parsed_pages / self.parse_seconds

    @property
    def xml_mb_per_s_end_to_end(self) -> float:
        """Uncompressed XML per second of the whole run, comparable with (a)."""
        return self.xml_bytes / MB / self.total_seconds

    def summary(self) -> dict[str, float | int | str]:
        return {**asdict(self), "text_mb_per_s": round(self.text_mb_per_s, 3),
                "pages_per_s": round(self.pages_per_s, 2),
                "xml_mb_per_s_end_to_end": round(self.xml_mb_per_s_end_to_end, 3),
                "text_mb_per_cpu_s": round(self.text_mb_per_cpu_s, 3),
                "pages_per_cpu_s": round(self.pages_per_cpu_s, 2)}


def time_xml_reading(path: str | os.PathLike, max_pages: int | None = None) -> ReadTiming:
    """(a) Streams every page (title, ns, latest text) of `path` and times it."""
    pages = sources = text_bytes = 0
    started, started_cpu = time.perf_counter(), time.process_time()
    with open_dump(path) as raw:
        reader = CountingReader(raw)
        for page in iter_pages_from(reader):
            pages += 1
            sources += _is_source(page)
            text_bytes += len(page.text.encode())
            if pages == max_pages:
                break
    seconds, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    return ReadTiming(os.fspath(path), pages, sources, reader.bytes_read, text_bytes,
                      seconds, cpu)


def time_full_parse(path: str | os.PathLike, max_pages: int | None = None) -> ParseTiming:
    """(b) Parses every link source page of `path` fully and times it."""
    pages = parsed = text_bytes = links = 0
    parse_seconds = parse_cpu = 0.0
    started, started_cpu = time.perf_counter(), time.process_time()
    with open_dump(path) as raw:
        reader = CountingReader(raw)
        for page in iter_pages_from(reader):
            pages += 1
            if _is_source(page):
                t0, c0 = time.perf_counter(), time.process_time()
                found = mwparserfromhell.parse(page.text).filter_wikilinks(recursive=True)
                parse_seconds += time.perf_counter() - t0
                parse_cpu += time.process_time() - c0
                parsed += 1
                text_bytes += len(page.text.encode())
                links += len(found)
            if pages == max_pages:
                break
    total, total_cpu = time.perf_counter() - started, time.process_time() - started_cpu
    return ParseTiming(os.fspath(path), pages, parsed, reader.bytes_read, text_bytes, links,
                       parse_seconds, total, parse_cpu, total_cpu)


@dataclass(frozen=True)
class PageLinks:
    """The links of one page by a full mwparserfromhell parse.

    Attributes:
        links: (target as written, link text) in document order (outer links before the
            links nested in them); the text is the text after the pipe, or the target as
            written when there is none, raw or cleaned as asked.
    """

    title: str
    page_id: str
    ns: int | None
    redirect: bool
    links: list[tuple[str, str]]


def full_parse_links(text: str, cleaned: bool = False) -> list[tuple[str, str]]:
    """(target as written, link text) of every wikilink of one page, by a full parse."""
    result = []
    for link in mwparserfromhell.parse(text).filter_wikilinks(recursive=True):
        shown = link.text if link.text is not None else link.title
        result.append((str(link.title), clean_text(shown) if cleaned else str(shown)))
    return result


def links_per_page(path: str | os.PathLike, sources_only: bool = True,
                   cleaned: bool = False) -> Iterator[PageLinks]:
    """Streams the full-parse links of each page of a dump.

    Args:
        path: a dump file (`.xml`, `.xml.bz2`, `.xml.gz`).
        sources_only: only namespace-0 pages that are not redirects (the link sources).
        cleaned: clean link texts as the reference miner does (markup, entities, spaces).
    """
    for page in iter_pages(path):
        if sources_only and not _is_source(page):
            continue
        yield PageLinks(page.title, page.page_id, page.ns, page.redirect is not None,
                        full_parse_links(page.text, cleaned))


@dataclass(frozen=True)
class LinkAgreement:
    """How many of the reference links a candidate extractor reproduced (multisets)."""

    reference_links: int
    candidate_links: int
    matched: int

    @property
    def recall(self) -> float:
        return self.matched / self.reference_links if self.reference_links else 1.0

    @property
    def precision(self) -> float:
        return self.matched / self.candidate_links if self.candidate_links else 1.0


def compare_links(reference: Iterable[tuple[str, str]],
                  candidate: Iterable[tuple[str, str]]) -> LinkAgreement:
    """Multiset agreement of two link lists of the same page (order ignored)."""
    ref, cand = collections.Counter(reference), collections.Counter(candidate)
    return LinkAgreement(ref.total(), cand.total(), (ref & cand).total())


def main(argv: list[str] | None = None) -> int:
    """Prints (a) and (b) for each dump given, as JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dumps", nargs="+")
    parser.add_argument("--max_pages", type=int, default=None)
    parser.add_argument("--skip_parse", action="store_true", help="only (a)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for dump in args.dumps:
        read = time_xml_reading(dump, args.max_pages)
        sys.stdout.write(json.dumps({"baseline": "xml_reading", **read.summary()}) + "\n")
        if not args.skip_parse:
            full = time_full_parse(dump, args.max_pages)
            sys.stdout.write(json.dumps({"baseline": "full_parse", **full.summary()}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
