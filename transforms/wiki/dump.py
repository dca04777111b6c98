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
import logging
import lzma
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


def open_dump(fileobj: IO[bytes], name: str) -> IO[bytes]:
    """Wraps a binary file object in the decompressor its name asks for.

    `bz2` reads multi-stream files (Wikipedia's `-multistream` dumps) transparently.
    """
    if name.endswith(".bz2"):
        return bz2.BZ2File(fileobj)
    if name.endswith(".gz"):
        return gzip.GzipFile(fileobj=fileobj)
    if name.endswith(".xz"):
        return lzma.LZMAFile(fileobj)
    return fileobj


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
