"""Streaming reader of MediaWiki XML export dumps (`.xml`, `.xml.bz2` incl. multi-stream,
`.xml.gz`). Beam-free; `transforms/wiki/read.py` wraps it.

Memory stays bounded by the largest page: elements are cleared as soon as a page has been
yielded. Any decompression or XML error is raised as `DumpReadError` naming the file and
how far reading got, never swallowed: a truncated dump must not look like a short one. A
page that is well-formed XML but not a valid page (no `<title>`, a `<ns>` or `<id>` that
is not a number) is no damage to the file: it is logged, reported to the caller's
`on_bad_page`, and skipped, and the pages after it are read.
"""

from __future__ import annotations

import bz2
import dataclasses
import logging
import lzma
import re
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Callable, Iterator
from typing import IO

from transforms.wiki.decompress import open_dump

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


class BadPageError(Exception):
    """A `<page>` element that is well-formed XML but not a valid page; the pages around
    it are read as usual."""


# Called with a message naming a skipped bad page and where it is (see `iter_pages`).
BadPageCallback = Callable[[str], None]


# Errors the decompressors and the XML parser raise on broken input.
_READ_ERRORS = (EOFError, OSError, ET.ParseError, zlib.error, lzma.LZMAError, ValueError)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child_text(elem: ET.Element, name: str) -> str | None:
    for child in elem:
        if _local(child.tag) == name:
            return child.text
    return None


def _number(text: str | None, tag: str, problems: list[str]) -> int | None:
    try:
        return int(text or 0)
    except ValueError:
        problems.append(f"<{tag}> is not a number: {text[:40]!r}")
        return None


def _page_from_element(elem: ET.Element) -> Page:
    """The page of a `<page>` element.

    Raises:
        BadPageError: no `<title>`, or an `<ns>` or `<id>` that is not a number.
    """
    title = ns = page_id = None
    redirect = None
    latest: tuple[str, int, str] | None = None
    problems: list[str] = []
    for order, child in enumerate(elem):
        tag = _local(child.tag)
        if tag == "title":
            title = child.text or ""
        elif tag == "ns":
            ns = _number(child.text, tag, problems)
        elif tag == "id":
            page_id = _number(child.text, tag, problems)
        elif tag == "redirect":
            redirect = child.get("title", "")
        elif tag == "revision":
            # Full-history dumps hold several revisions; keep the newest (ties: the last).
            key = (_child_text(child, "timestamp") or "", order, _child_text(child, "text") or "")
            if latest is None or key[:2] >= latest[:2]:
                latest = key
    if title is None:
        problems.insert(0, "no <title>")
    if problems:
        raise BadPageError("; ".join(problems))
    return Page(
        title=title,
        namespace=ns if ns is not None else 0,
        page_id=page_id if page_id is not None else -1,
        redirect=redirect,
        text=latest[2] if latest else "",
    )


def _bad_page_message(name: str, position: int, elem: ET.Element, reason: str) -> str:
    """Names a bad page by whatever it has: its position in `name`, title and id."""
    known = [f"{tag} {text.strip()[:200]!r}" for tag in ("title", "id")
             if (text := _child_text(elem, tag))]
    return (f"{name}: page {position} ({', '.join(known) or 'no title or id'}) "
            f"is not a valid page, skipped: {reason}")


def iter_pages(stream: IO[bytes], name: str,
               on_bad_page: BadPageCallback | None = None) -> Iterator[Page]:
    """Yields every `<page>` of a (decompressed) dump stream, in order.

    A page that is not valid (see `BadPageError`) is logged and skipped, and
    `on_bad_page` (when given) is called with the message, which names the page by its
    position in the stream (1 = the first `<page>`), and its title and id where it has
    them; reading goes on with the next page.

    Args:
        stream: a binary stream of XML (already decompressed, see `open_dump`).
        name: the file name, for error messages.
        on_bad_page: called once per page skipped as bad, e.g. to count it.

    Raises:
        DumpReadError: the stream is empty, truncated, corrupt or not a MediaWiki dump.
    """
    pages = 0  # complete <page> elements, bad ones included
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
                pages += 1
                try:
                    page = _page_from_element(elem)
                except BadPageError as e:
                    message = _bad_page_message(name, pages, elem, str(e))
                    logger.warning("%s", message)
                    if on_bad_page is not None:
                        on_bad_page(message)
                else:
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


def iter_dump_file(path: str, fileobj: IO[bytes],
                   on_bad_page: BadPageCallback | None = None) -> Iterator[Page]:
    """`iter_pages` over a raw (possibly compressed) file object named `path`."""
    with open_dump(fileobj, path) as stream:
        yield from iter_pages(stream, path, on_bad_page)


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
