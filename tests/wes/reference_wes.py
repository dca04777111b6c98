"""An independent, deliberately simple reference implementation of the WES mining rules.

Tests use it to check the Beam pipeline's positive pairs against docs/design.md (section
Mining) without sharing any code with `transforms/wiki` or `transforms/wes` (only the
lexicon, which *defines* a dictionary word). It is single-process, parses every page
fully with `mwparserfromhell`, and favours obviousness over speed.

The rules, in the order they are applied (each decision is written down here because the
pipeline must agree with it):

1. Pages: only namespace 0, the latest revision (greatest `<timestamp>`; document order
   breaks ties), redirect pages (a `<redirect>` element) are not link sources. A page
   without `<text>` (deleted text) has empty wikitext.
2. Links: `mwparserfromhell.parse(text).filter_wikilinks(recursive=True)`, so links inside
   templates, refs, tables, image captions and other links count. mwparserfromhell is the
   authority even where it disagrees with MediaWiki (an unclosed `'''` inside a link can
   make it swallow the rest of a table row).
3. Link text: the text after the pipe, or the title *as written* when there is no pipe
   (`[[Foo_bar]]` has the text `Foo_bar`, as MediaWiki displays it); no link trail. It is
   cleaned with `strip_code(normalize=False)`: templates vanish (their rendering is
   unknown: `[[Foo|{{nowrap|29° N}}]]` becomes empty), comments vanish, tags and
   bold/italic keep their contents (mwparserfromhell counts `<ref>` as visible, so
   `[[Foo|a<ref>b</ref>]]` reads `ab`; rare inside link text), nested links render their
   own text. Then `html.unescape` exactly once (entities are not decoded by
   `strip_code` first, so `&amp;lt;` becomes `&lt;`, not `<`), whitespace (Unicode,
   incl. NBSP) collapsed to single spaces, stripped. Empty text: the link is dropped here,
   at extraction, so it does not count as an incoming link either.
4. Target title: `html.unescape` (MediaWiki decodes character references in titles:
   `OS&nbsp;X` is `OS X`; `decode_title_entities=False` turns this off, which reproduces
   docs/benchmarks.md's k >= 2 figure for the sample, "Training"), underscores to spaces, whitespace collapsed
   and stripped, first character upper-cased by one-to-one case mapping (`ß` stays), the
   rest kept. Titles are not otherwise validated (`{}[]<>|` would pass). An empty title
   is dropped.
5. Character filter on the normalised title: drop when it contains `#`, `:` or `(`; the
   reason counted is the first of those three characters found, in that order.
6. Incoming links of a title: the number of link occurrences that passed 5, before dedup,
   across all source pages (self-links included; the title need not exist as a page).
7. Dedup (title, link text), exact and case-sensitive.
8. Keep pairs whose title has >= k incoming links.
9. Dictionary filter (optional): drop a pair when its link text is a dictionary word and
   its title is not (`transforms.wes.lexicon`).
"""

from __future__ import annotations

import bz2
import collections
import functools
import glob
import gzip
import html
import logging
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import IO

import mwparserfromhell
from mwparserfromhell.parser import ParserError
from mwparserfromhell.wikicode import Wikicode

logger = logging.getLogger(__name__)

TITLE_FILTER_CHARS = {"#": "hash", ":": "colon", "(": "paren"}
PathArg = str | os.PathLike | Iterable[str | os.PathLike]


@dataclass(frozen=True)
class Page:
    """One `<page>` of a dump, reduced to what mining needs."""

    title: str
    ns: int | None
    page_id: str
    redirect: str | None
    text: str


@dataclass(frozen=True)
class Extraction:
    """Links of source pages after the character filter (rules 1-5), before dedup.

    Attributes:
        occurrences: (title, link text) -> number of link occurrences.
        redirects: redirect map of namespace-0 redirect pages, title -> target as given.
        counts: stage counters, in pipeline order.
    """

    occurrences: Mapping[tuple[str, str], int]
    redirects: Mapping[str, str]
    counts: Mapping[str, int]

    def incoming_links(self) -> collections.Counter[str]:
        """Rule 6: link occurrences per title."""
        incoming: collections.Counter[str] = collections.Counter()
        for (title, _), n in self.occurrences.items():
            incoming[title] += n
        return incoming


@dataclass(frozen=True)
class ReferenceResult:
    """Positive pairs for one k, with the count after every stage."""

    pairs: set[tuple[str, str]]
    counts: dict[str, int] = field(default_factory=dict)


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def expand_paths(paths: PathArg) -> list[str]:
    """Turns a path, a glob or an iterable of them into a list of files (globs sorted).

    Raises:
        FileNotFoundError: a pattern matched nothing.
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    files: list[str] = []
    for p in paths:
        p = os.fspath(p)
        matched = sorted(glob.glob(p)) if any(c in p for c in "*?[") else [p]
        if not matched or not os.path.exists(matched[0]):
            raise FileNotFoundError(f"no dump file matches {p}")
        files.extend(matched)
    return files


def open_dump(path: str | os.PathLike) -> IO[bytes]:
    """Opens `.xml`, `.xml.bz2` (single or multi-stream) or `.xml.gz` for binary reading."""
    name = os.fspath(path)
    if name.endswith(".bz2"):
        return bz2.open(name, "rb")  # reads every concatenated stream
    if name.endswith(".gz"):
        return gzip.open(name, "rb")
    return open(name, "rb")


def _page_from_element(page: ET.Element) -> Page:
    fields: dict[str, ET.Element] = {}
    revisions: list[tuple[str, int, ET.Element]] = []
    for i, child in enumerate(page):
        name = _local(child.tag)
        if name == "revision":
            stamp = next((c.text or "" for c in child if _local(c.tag) == "timestamp"), "")
            revisions.append((stamp, i, child))
        else:
            fields.setdefault(name, child)
    text = ""
    if revisions:
        latest = max(revisions, key=lambda r: (r[0], r[1]))[2]
        text = next((c.text or "" for c in latest if _local(c.tag) == "text"), "")
    ns_el = fields.get("ns")
    ns = int(ns_el.text) if ns_el is not None and (ns_el.text or "").strip() else None
    redirect_el = fields.get("redirect")
    redirect = None if redirect_el is None else redirect_el.get("title", "")
    title_el, id_el = fields.get("title"), fields.get("id")
    return Page(
        title=(title_el.text or "") if title_el is not None else "",
        ns=ns,
        page_id=(id_el.text or "") if id_el is not None else "",
        redirect=redirect,
        text=text,
    )


def iter_pages_from(f: IO[bytes]) -> Iterator[Page]:
    """Streams the pages of an open (decompressed) dump, any namespace, bounded memory."""
    root = None
    for event, elem in ET.iterparse(f, events=("start", "end")):
        if root is None:
            root = elem
        elif event == "end" and _local(elem.tag) == "page":
            yield _page_from_element(elem)
            root.clear()  # drops the finished page from the tree


def iter_pages(path: str | os.PathLike) -> Iterator[Page]:
    """Streams the pages of one dump file, any namespace, with bounded memory."""
    with open_dump(path) as f:
        yield from iter_pages_from(f)


def wikilinks_as_written(text: str) -> list[tuple[str, str | None]]:
    """(title as written, text as written or None) of every wikilink, recursively."""
    return [
        (str(link.title), None if link.text is None else str(link.text))
        for link in mwparserfromhell.parse(text).filter_wikilinks(recursive=True)
    ]


def clean_text(code: Wikicode | str) -> str:
    """Rule 3: markup stripped, entities unescaped once, whitespace collapsed."""
    if isinstance(code, str):
        code = mwparserfromhell.parse(code)
    stripped = code.strip_code(normalize=False, collapse=False)
    return " ".join(html.unescape(stripped).split())


def normalise_title(raw: str, decode_entities: bool = True) -> str:
    """Rule 4: MediaWiki's title normalisation (entities, underscores, spaces, ucfirst).

    Args:
        raw: the title as written in the link.
        decode_entities: decode character references first, as MediaWiki does.
    """
    title = html.unescape(raw) if decode_entities else raw
    title = " ".join(title.replace("_", " ").split())
    if not title:
        return title
    first = title[0].upper()
    # One-to-one case mapping only, as MediaWiki 1.27 did: "ß" stays "ß", not "SS".
    return (first if len(first) == 1 else title[0]) + title[1:]


def title_filter_reason(title: str) -> str | None:
    """Rule 5: the name of the first forbidden character in `title`, or None."""
    for char, reason in TITLE_FILTER_CHARS.items():
        if char in title:
            return reason
    return None


def links_as_written(text: str) -> list[tuple[str, str]]:
    """(title as written, cleaned link text) of every wikilink of a page (rules 2-3)."""
    return [
        (str(link.title), clean_text(link.text if link.text is not None else link.title))
        for link in mwparserfromhell.parse(text).filter_wikilinks(recursive=True)
    ]


def page_links(text: str, decode_title_entities: bool = True) -> list[tuple[str, str]]:
    """(normalised title, cleaned text) of every wikilink of a page, before any filter."""
    return [(normalise_title(title, decode_title_entities), link_text)
            for title, link_text in links_as_written(text)]


@dataclass(frozen=True)
class ParsedPage:
    """A page after the one expensive step (the full parse), without its wikitext.

    Attributes:
        links: (title as written, cleaned text) per link; empty for pages that are not
            link sources; None when mwparserfromhell failed on the page.
    """

    title: str
    ns: int | None
    page_id: str
    redirect: str | None
    links: tuple[tuple[str, str], ...] | None


def parse_page(page: Page) -> ParsedPage:
    """Parses a link source page fully; other pages only keep their metadata (rule 1)."""
    links: tuple[tuple[str, str], ...] | None = ()
    if page.ns == 0 and page.redirect is None:
        try:
            links = tuple(links_as_written(page.text))
        except ParserError:
            logger.warning("mwparserfromhell failed on page %s (%r)", page.page_id, page.title)
            links = None
    return ParsedPage(page.title, page.ns, page.page_id, page.redirect, links)


def apply_link_rules(pages: Iterable[ParsedPage], decode_title_entities: bool = True
                     ) -> Extraction:
    """Rules 1, 3 (empty text), 4 and 5 over parsed pages."""
    counts: collections.Counter[str] = collections.Counter()
    occurrences: collections.Counter[tuple[str, str]] = collections.Counter()
    redirects: dict[str, str] = {}
    for page in pages:
        counts["pages_read"] += 1
        if page.ns != 0:
            counts["pages_filtered:namespace"] += 1
            continue
        if page.redirect is not None:
            counts["pages_filtered:redirect"] += 1
            redirects[page.title] = page.redirect
            continue
        if page.links is None:
            counts["pages_filtered:parser_error"] += 1
            continue
        counts["pages_parsed"] += 1
        for raw_title, text in page.links:
            counts["links_extracted"] += 1
            title = normalise_title(raw_title, decode_title_entities)
            if not text:
                counts["links_filtered:empty_text"] += 1
            elif not title:
                counts["links_filtered:empty_title"] += 1
            elif reason := title_filter_reason(title):
                counts[f"links_filtered:{reason}"] += 1
            else:
                counts["links_passed"] += 1
                occurrences[(title, text)] += 1
    # Read-only views: extractions are cached and shared between callers.
    return Extraction(MappingProxyType(dict(occurrences)), MappingProxyType(redirects),
                      MappingProxyType(_ordered(counts)))


def extract_pages(pages: Iterable[Page], decode_title_entities: bool = True) -> Extraction:
    """Rules 1-5 over any iterable of pages (see `normalise_title` for the flag)."""
    return apply_link_rules(map(parse_page, pages), decode_title_entities)


_COUNT_ORDER = (
    "pages_read", "pages_filtered:namespace", "pages_filtered:redirect",
    "pages_filtered:parser_error", "pages_parsed", "links_extracted",
    "links_filtered:empty_text", "links_filtered:empty_title", "links_filtered:hash",
    "links_filtered:colon", "links_filtered:paren", "links_passed",
)


def _ordered(counts: collections.Counter[str]) -> dict[str, int]:
    return {name: counts.get(name, 0) for name in _COUNT_ORDER}


def _file_key(path: str) -> tuple[str, int, int]:
    st = os.stat(path)
    return (str(Path(path).resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _parse_file(key: tuple[str, int, int]) -> tuple[ParsedPage, ...]:
    return tuple(map(parse_page, iter_pages(key[0])))


def parse_dump(path: str | os.PathLike) -> tuple[ParsedPage, ...]:
    """Every page of one dump file, parsed; cached per (file, mtime, size)."""
    return _parse_file(_file_key(os.fspath(path)))


def extract_dump(paths: PathArg, decode_title_entities: bool = True) -> Extraction:
    """Rules 1-5 over dump files; the parse is cached per file, so call it freely."""
    return apply_link_rules(
        (page for path in expand_paths(paths) for page in parse_dump(path)),
        decode_title_entities,
    )


def mine_extraction(
    extraction: Extraction,
    k: int,
    dictionary_filter: bool = True,
    is_dictionary_word: Callable[[str], bool] | None = None,
) -> ReferenceResult:
    """Rules 6-9 on an extraction.

    Args:
        extraction: from `extract_dump` or `extract_pages`.
        k: minimum number of incoming links of a title.
        dictionary_filter: apply rule 9 (off = the paper's Table 2 ablation).
        is_dictionary_word: predicate for rule 9; the project lexicon when None.

    Returns:
        The positive pairs and `extraction.counts` followed by the later stage counts.

    Raises:
        ValueError: k < 1.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    incoming = extraction.incoming_links()
    counts = dict(extraction.counts)
    counts["pairs_after_dedup"] = len(extraction.occurrences)
    counts["titles_after_dedup"] = len(incoming)
    kept = {pair for pair in extraction.occurrences if incoming[pair[0]] >= k}
    counts["pairs_filtered:min_incoming_links"] = len(extraction.occurrences) - len(kept)
    counts["pairs_passed_k"] = len(kept)
    counts["titles_passed_k"] = len({title for title, _ in kept})
    if dictionary_filter:
        if is_dictionary_word is None:
            from transforms.wes.lexicon import load_lexicon

            is_dictionary_word = load_lexicon().is_dictionary_word
        dropped = {(t, s) for t, s in kept if is_dictionary_word(s) and not is_dictionary_word(t)}
        kept -= dropped
        counts["pairs_filtered:dictionary_word"] = len(dropped)
    else:
        counts["pairs_filtered:dictionary_word"] = 0
    counts["positive_pairs"] = len(kept)
    counts["positive_titles"] = len({title for title, _ in kept})
    return ReferenceResult(kept, counts)


def mine_reference(
    paths: PathArg,
    k: int,
    dictionary_filter: bool = True,
    is_dictionary_word: Callable[[str], bool] | None = None,
    decode_title_entities: bool = True,
) -> ReferenceResult:
    """All rules on dump files: positive pairs plus the count after every stage."""
    extraction = extract_dump(paths, decode_title_entities)
    return mine_extraction(extraction, k, dictionary_filter, is_dictionary_word)


def reference_positive_pairs(
    paths: PathArg, k: int, dictionary_filter: bool = True
) -> set[tuple[str, str]]:
    """The distinct positive (title, link text) pairs of docs/design.md's rules for one k."""
    return mine_reference(paths, k, dictionary_filter).pairs
