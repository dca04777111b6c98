"""Builds a large Wikipedia XML dump out of the real sample pages, for benchmarks.

    python -m tests.bench.make_dump --out bench_out/dump100.xml.bz2 --min_mb 100 --bz2
    python -m tests.bench.make_dump --out bench_out/dump100-multistream.xml.bz2 \\
        --min_mb 100 --multistream

The pages of the Wikipedia samples in the data cache (`bench_data.WIKI_SOURCES`: the
registry's `wiki-sample` and `wiki-tables`, which `qa-data fetch bench` fetches) are
written as they are (copy 0), then again and again under new titles (`Anarchism copy17`),
page ids and revision ids until the uncompressed XML reaches `--min_mb` MiB. Real wikitext, any size: the link structure stays
realistic because, in copy c, each wikilink whose target can be renamed (no `#`, `:`,
`(`, brackets or braces in it) points at the same copy c of its target with probability
`--same_copy_share`, and otherwise at a uniformly drawn earlier copy (0 = the original).
`[[Foo]]` becomes `[[Foo copy17|Foo]]`, so link texts are unchanged; a title's
incoming-link count in one copy is then close to the sample's, with a heavier tail for the
originals and early copies, as in a real wiki.

Output is streamed (never the whole dump in memory) to a temporary name and renamed at the
end, so a file at `--out` is always complete. Formats: plain `.xml`, `--gz`, `--bz2` (one
stream), `--multistream` (like Wikipedia's `pages-articles-multistream`: a header stream,
100 pages per bz2 stream, a footer stream, and the `offset:page_id:title` index,
bz2-compressed, next to it as `<name>-index.txt.bz2`). Deterministic from `--seed`.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import html
import json
import logging
import os
import random
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from tests.bench.bench_data import WIKI_SOURCES, data_path, require

logger = logging.getLogger(__name__)

DEFAULT_SOURCES = tuple(str(data_path(p)) for p in WIKI_SOURCES)
MIB = 1 << 20
COMPRESSIONS = (None, "gz", "bz2", "multistream")

_PAGE = re.compile(r"[ \t]*<page>.*?</page>\n?", re.DOTALL)
_TITLE = re.compile(r"<title>(.*?)</title>")
_PAGE_ID = re.compile(r"(</ns>\s*<id>)(\d+)(</id>)")
_REV_ID = re.compile(r"(<revision>\s*<id>)(\d+)(</id>)")
_REDIRECT = re.compile(r'(<redirect title=")([^"]*)(")')
_TEXT = re.compile(r"(<text\b[^>]*>)(.*?)(</text>)", re.DOTALL)
# A wikilink target that can be renamed: no section, namespace, disambiguator, markup.
_LINK = re.compile(r"\[\[([^\[\]{}|#:(\n]+?)(\]\]|\|)")


@dataclass(frozen=True)
class SourcePage:
    """One `<page>` of a source dump, kept as its raw (escaped) XML."""

    xml: str
    title: str  # unescaped
    page_id: int
    rev_id: int


@dataclass(frozen=True)
class DumpInfo:
    """What `build_dump` wrote."""

    path: str
    index_path: str | None
    compression: str | None
    seed: int
    pages: int
    copies: int
    xml_bytes: int
    file_bytes: int
    seconds: float


def load_sources(paths: tuple[str, ...] = DEFAULT_SOURCES) -> tuple[str, list[SourcePage]]:
    """Reads the source dumps' pages; returns (header of the first dump, pages).

    Raises:
        ValueError: no source dump, or one without a `<page>`.
    """
    if not paths:
        raise ValueError("no source dumps")
    header, pages = "", []
    seen_ids: set[int] = set()
    seen_titles: set[str] = set()
    for path in paths:
        opener = bz2.open if path.endswith(".bz2") else open
        with opener(path, "rt", encoding="utf-8") as f:
            text = f.read()
        matches = list(_PAGE.finditer(text))
        if not matches:
            raise ValueError(f"{path}: no <page> element")
        header = header or text[: matches[0].start()]
        for m in matches:
            xml = m.group(0)
            rev = _REV_ID.search(xml)
            page = SourcePage(
                xml=xml,
                title=html.unescape(_TITLE.search(xml).group(1)),
                page_id=int(_PAGE_ID.search(xml).group(2)),
                rev_id=int(rev.group(2)) if rev else 0,
            )
            # The two samples share a page (id 316); a dump holds each page once.
            if page.page_id in seen_ids or page.title in seen_titles:
                logger.info("%s: skipping page %d (%r), already read", path, page.page_id,
                            page.title)
                continue
            seen_ids.add(page.page_id)
            seen_titles.add(page.title)
            pages.append(page)
    return header, pages


def _suffix(copy: int) -> str:
    return f" copy{copy}" if copy else ""


def _with_suffix(title: str, suffix: str) -> str:
    """`Foo#Bar` -> `Foo copy3#Bar`: the suffix belongs to the page name, not the section."""
    name, hash_, section = title.partition("#")
    return name.rstrip() + suffix + hash_ + section


def rewrite_links(wikitext: str, copy: int, rng: random.Random, same_copy_share: float) -> str:
    """Points the renameable links of copy `copy` at copies of their targets."""

    def rename(m: re.Match[str]) -> str:
        target, end = m.group(1), m.group(2)
        if not target.strip():
            return m.group(0)
        to = copy if rng.random() < same_copy_share else rng.randrange(copy)
        if to == 0:
            return m.group(0)
        new_target = target.rstrip() + _suffix(to)
        return f"[[{new_target}|{target}]]" if end == "]]" else f"[[{new_target}|"

    return _LINK.sub(rename, wikitext)


def page_copy(page: SourcePage, copy: int, page_id: int, rev_id: int, seed: int,
              index: int, same_copy_share: float) -> str:
    """The raw XML of copy `copy` (>= 1) of `page`, under the given ids."""
    rng = random.Random(f"{seed}:{copy}:{index}")
    suffix = _suffix(copy)
    xml = _TITLE.sub(lambda m: f"<title>{m.group(1)}{suffix}</title>", page.xml, count=1)
    xml = _PAGE_ID.sub(lambda m: f"{m.group(1)}{page_id}{m.group(3)}", xml, count=1)
    xml = _REV_ID.sub(lambda m: f"{m.group(1)}{rev_id}{m.group(3)}", xml, count=1)
    xml = _REDIRECT.sub(lambda m: m.group(1) + _with_suffix(m.group(2), suffix) + m.group(3),
                        xml)
    return _TEXT.sub(
        lambda m: m.group(1) + rewrite_links(m.group(2), copy, rng, same_copy_share)
        + m.group(3), xml)


def iter_pages(pages: list[SourcePage], seed: int, same_copy_share: float
               ) -> Iterator[tuple[int, int, str, str]]:
    """Endless (copy, page id, unescaped title, page XML): copy 0 as is, then copies."""
    next_page_id = max(p.page_id for p in pages) + 1
    next_rev_id = max(p.rev_id for p in pages) + 1
    for page in pages:
        yield 0, page.page_id, page.title, page.xml
    copy = 0
    while True:
        copy += 1
        for index, page in enumerate(pages):
            xml = page_copy(page, copy, next_page_id, next_rev_id, seed, index,
                            same_copy_share)
            yield copy, next_page_id, page.title + _suffix(copy), xml
            next_page_id += 1
            next_rev_id += 1


def default_index_path(out: str) -> str:
    """`x-multistream.xml.bz2` -> `x-multistream-index.txt.bz2`, as Wikipedia names it."""
    stem = out.removesuffix(".xml.bz2")
    return stem + "-index.txt.bz2"


def _open_output(path: str, compression: str | None) -> IO[bytes]:
    if compression == "bz2":
        return bz2.open(path, "wb", compresslevel=9)
    if compression == "gz":
        return gzip.open(path, "wb", compresslevel=6)
    return open(path, "wb")


def build_dump(
    out: str | os.PathLike,
    min_mb: float = 100,
    compression: str | None = None,
    seed: int = 0,
    same_copy_share: float = 0.9,
    pages_per_stream: int = 100,
    sources: tuple[str, ...] = DEFAULT_SOURCES,
) -> DumpInfo:
    """Writes a dump of at least `min_mb` MiB of XML (see the module docstring).

    Args:
        out: output path.
        min_mb: minimum size of the uncompressed XML, in MiB (whole pages, so a bit more).
        compression: None (plain XML), "gz", "bz2" (one stream) or "multistream".
        seed: makes the link rewiring reproducible.
        same_copy_share: probability that a link in copy c points at copy c.
        pages_per_stream: pages per bz2 stream of a multistream dump.
        sources: source dumps (default: the real samples).

    Returns:
        What was written.

    Raises:
        ValueError: bad arguments.
    """
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
    if min_mb <= 0 or not 0 <= same_copy_share <= 1 or pages_per_stream < 1:
        raise ValueError(
            f"need min_mb > 0, 0 <= same_copy_share <= 1, pages_per_stream >= 1; got "
            f"{min_mb}, {same_copy_share}, {pages_per_stream}")
    started = time.perf_counter()
    out = os.fspath(out)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    header, pages = load_sources(sources)
    footer = "</mediawiki>\n"
    target = int(min_mb * MIB)
    index_path = default_index_path(out) if compression == "multistream" else None
    written = n_pages = copies = 0
    tmp, tmp_index = out + ".partial", (index_path + ".partial") if index_path else None

    if compression == "multistream":
        with open(tmp, "wb") as f, bz2.open(tmp_index, "wt", encoding="utf-8") as index:
            f.write(bz2.compress(header.encode()))
            written += len(header.encode())
            batch: list[bytes] = []
            entries: list[str] = []
            for copy, page_id, title, xml in iter_pages(pages, seed, same_copy_share):
                data = xml.encode()
                batch.append(data)
                entries.append(f"{page_id}:{title}\n")
                written, n_pages, copies = written + len(data), n_pages + 1, copy
                done = written + len(footer) >= target
                if len(batch) == pages_per_stream or done:
                    offset = f.tell()
                    f.write(bz2.compress(b"".join(batch)))
                    index.writelines(f"{offset}:{entry}" for entry in entries)
                    batch, entries = [], []
                if done:
                    break
            f.write(bz2.compress(footer.encode()))
            written += len(footer)
    else:
        with _open_output(tmp, compression) as f:
            f.write(header.encode())
            written += len(header.encode())
            for copy, _, _, xml in iter_pages(pages, seed, same_copy_share):
                data = xml.encode()
                f.write(data)
                written, n_pages, copies = written + len(data), n_pages + 1, copy
                if written + len(footer) >= target:
                    break
            f.write(footer.encode())
            written += len(footer)
    os.replace(tmp, out)
    if index_path:
        os.replace(tmp_index, index_path)
    info = DumpInfo(out, index_path, compression, seed, n_pages, copies, written,
                    os.path.getsize(out), round(time.perf_counter() - started, 2))
    logger.info("wrote %s", info)
    return info


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output dump path")
    parser.add_argument("--min_mb", type=float, default=100,
                        help="minimum uncompressed XML size in MiB (default 100)")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--bz2", action="store_true", help="one bz2 stream")
    kind.add_argument("--multistream", action="store_true",
                      help="bz2 streams of --pages_per_stream pages, plus the index file")
    kind.add_argument("--gz", action="store_true", help="gzip")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--same_copy_share", type=float, default=0.9)
    parser.add_argument("--pages_per_stream", type=int, default=100)
    parser.add_argument("--sources", nargs="+", default=list(DEFAULT_SOURCES),
                        help="source dumps (default: the Wikipedia samples of the data "
                             "cache, `qa-data fetch bench`)")
    args = parser.parse_args(argv)
    require(*args.sources)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    compression = ("multistream" if args.multistream else "bz2" if args.bz2
                   else "gz" if args.gz else None)
    info = build_dump(args.out, args.min_mb, compression, args.seed, args.same_copy_share,
                      args.pages_per_stream, tuple(args.sources))
    sys.stdout.write(json.dumps(asdict(info)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
