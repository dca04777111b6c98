"""Streaming reader of MediaWiki XML export dumps (`.xml`, `.xml.bz2` incl. multi-stream,
`.xml.gz`), current-revision and full-history (`pages-meta-history`) alike. Beam-free;
`transforms/wiki/read.py` wraps it.

Pages and revisions are parsed by `mwxml` (the Wikimedia research team's dump parser:
every export schema version, the `<siteinfo>` namespace table, one revision at a time);
this module keeps decompression (`decompress.py`), byte ranges (`read.py`) and the error
semantics around it. Memory stays bounded by the largest revision: each revision is
parsed and dropped in turn, and only the latest one's text is kept until its page is
yielded. Any decompression or XML error is raised as `DumpReadError` naming the file and
how far reading got, never swallowed: a truncated dump must not look like a short one. A
page that is well-formed XML but not a valid page (no `<title>`, a `<ns>` or `<id>` that
is not a number, anything else mwxml refuses in a page) is no damage to the file: it is
logged, reported to the caller's `on_bad_page`, and skipped, and the pages after it are
read. XML bombs and external entities are refused by expat under `xml.etree` (which
mwxml parses with): entity expansion past its amplification limit, and any reference to
an external entity, is a parse error, so a `DumpReadError`.
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

import mwxml
from mwxml.element_iterator import ElementIterator, EventPointer
from mwxml.errors import MalformedXML

from transforms.io.decompress import open_dump

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of a dump with its latest revision.

    Attributes:
        title: the page title as stored in the dump.
        namespace: the `<ns>` number (from the `<siteinfo>` namespace table and the
            title's prefix in old dumps without `<ns>`).
        page_id: the `<id>` of the page.
        redirect: the redirect target title, or None for a real page.
        text: the wikitext of the latest revision ("" when it has none): the one with the
            newest `<timestamp>`, ties broken by the higher revision `<id>`, then by the
            later in the file.
    """

    title: str
    namespace: int
    page_id: int
    redirect: str | None
    text: str


class DumpReadError(RuntimeError):
    """A dump file could not be read to its end (truncated, corrupt, not XML, empty); the
    message names it. A file the user handed in: one line, exit status 2
    (`transforms.io.cli.FILE_ERROR_NAMES`)."""

    user_file_error = True


class BadPageError(Exception):
    """A `<page>` element that is well-formed XML but not a valid page; the pages around
    it are read as usual."""


# Called with a message naming a skipped bad page and where it is (see `iter_pages`).
BadPageCallback = Callable[[str], None]


# Errors the decompressors and the XML parser raise on broken input.
_READ_ERRORS = (EOFError, OSError, ET.ParseError, zlib.error, lzma.LZMAError, ValueError)
# Errors mwxml raises on a page that is well-formed XML but not a valid page (a field that
# is not a number or a timestamp, a missing title, an element no schema has there).
_BAD_PAGE_ERRORS = (BadPageError, MalformedXML, ValueError, TypeError, AttributeError)
# The page fields kept as written, to name a bad page and to keep the title as stored.
_NAMED_FIELDS = frozenset(("title", "ns", "id", "redirect"))


class _PagePointer(EventPointer):
    """mwxml's event pointer, which also keeps the text of the current page's `<title>`,
    `<ns>` and `<id>` and the target of its `<redirect>` as written (mwxml's own page
    holds the title without its namespace prefix, and a failed page holds nothing)."""

    def __init__(self, events) -> None:
        super().__init__(events)
        self.fields: dict[str, str | None] = {}

    def __next__(self):
        # `EventPointer.__next__` with the fields kept, inline: it runs once per event.
        event, element = next(self.etree_events)
        tag = element.tag
        tag = tag[tag.find("}") + 1:]
        stack = self.tag_stack
        if event == "start":
            stack.append(tag)
        elif stack[-1] == tag:
            stack.pop()
            if len(stack) == 2 and tag in _NAMED_FIELDS and stack[1] == "page":
                self.fields[tag] = (element.get("title", "") if tag == "redirect"
                                    else element.text)
        else:
            raise MalformedXML(f"Expected {stack[-1]}, but saw {tag}.")
        return event, element


def _problems(fields: dict[str, str | None]) -> list[str]:
    problems = [] if "title" in fields else ["no <title>"]
    for tag in ("ns", "id"):
        text = fields.get(tag)
        if text is not None:
            try:
                int(text)
            except ValueError:
                problems.append(f"<{tag}> is not a number: {text[:40]!r}")
    return problems


def _revision_key(order: int, revision: mwxml.Revision) -> tuple:
    timestamp = revision.timestamp
    return (timestamp is not None, timestamp.unix() if timestamp is not None else 0,
            revision.id if revision.id is not None else -1, order)


def _page(item: ElementIterator, namespaces: dict | None,
          fields: dict[str, str | None]) -> Page:
    """The page of a `<page>` element, parsed by mwxml, with its latest revision.

    Raises:
        one of `_BAD_PAGE_ERRORS`: not a valid page.
    """
    page = mwxml.Page.from_element(item, namespaces)
    latest_key, text = None, None
    for order, revision in enumerate(page):
        key = _revision_key(order, revision)
        if latest_key is None or key > latest_key:
            latest_key, text = key, revision.text
    if "title" not in fields:  # mwxml takes a missing title for ""
        raise BadPageError("no <title>")
    return Page(
        title=fields["title"] or "",
        namespace=page.namespace if page.namespace is not None else 0,
        page_id=page.id if page.id is not None else -1,
        redirect=fields.get("redirect"),
        text=text or "",
    )


def _bad_page_message(name: str, position: int, fields: dict[str, str | None],
                      error: Exception) -> str:
    """Names a bad page by whatever it has: its position in `name`, title and id."""
    known = [f"{tag} {text.strip()[:200]!r}" for tag in ("title", "id")
             if (text := fields.get(tag))]
    reason = "; ".join(_problems(fields)) or f"{type(error).__name__}: {error}"
    return (f"{name}: page {position} ({', '.join(known) or 'no title or id'}) "
            f"is not a valid page, skipped: {reason}")


def iter_pages(stream: IO[bytes], name: str,
               on_bad_page: BadPageCallback | None = None) -> Iterator[Page]:
    """Yields every `<page>` of a (decompressed) dump stream, in order, each with its
    latest revision (see `Page.text`).

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
        pointer = _PagePointer(ET.iterparse(stream, events=("start", "end")))
        _event, element = next(pointer)
        root = ElementIterator(element, pointer)
        if root.tag != "mediawiki":
            raise DumpReadError(f"{name}: not a MediaWiki XML dump (root element <{root.tag}>)")
        namespaces = None
        for item in root:
            if item.tag == "siteinfo":
                site = mwxml.SiteInfo.from_element(item)
                namespaces = {ns.name: ns for ns in site.namespaces or ()} or None
            elif item.tag == "page":
                pointer.fields = {}
                try:
                    page = _page(item, namespaces, pointer.fields)
                except _BAD_PAGE_ERRORS as e:
                    # Read to the page's end, keeping its fields (`complete()` would clear
                    # them before the pointer sees their text).
                    while pointer.depth() > item.depth:
                        try:
                            next(pointer)
                        except StopIteration:  # the parser itself failed: not the page
                            raise e from None
                    pages += 1
                    message = _bad_page_message(name, pages, pointer.fields, e)
                    logger.warning("%s", message)
                    if on_bad_page is not None:
                        on_bad_page(message)
                else:
                    pages += 1
                    yield page
            # Drop the finished element; the root keeps no reference to it.
            item.complete()
            root.element.clear()
        # Read on to the end of the stream: mwxml stops at the root's end tag, and a
        # stream cut or damaged after it (a byte range's last stream) must still fail.
        for _event in pointer.etree_events:
            pass
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
