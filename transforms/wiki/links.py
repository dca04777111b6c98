"""Wikilink extraction with `mwparserfromhell` as the authority, made fast. Beam-free.

A full `mwparserfromhell` parse of a page costs about 1 s per MB of wikitext. Most of a
page is prose, and most links are plain `[[Target]]` or `[[Target|text]]`. So:

1. Regions whose content the parser never reads as wikitext (comments and the parser's
   blacklisted tags: `<nowiki>`, `<pre>`, `<math>`, `<gallery>`, ...) are masked out.
2. A bracket scan finds every top-level `[[ ... ]]` span (nesting counted).
3. A span that is plainly a link (no markup, no nesting, a valid title) is read directly;
   every other span is parsed by `mwparserfromhell` on its own, recursively, so links in
   captions and nested links come out exactly as the parser sees them.
4. Pages where this cannot be trusted (an unclosed blacklisted tag, brackets that do not
   balance, a span too long to be a link) are parsed whole by `mwparserfromhell`.

`extract_links_full` is the plain full parse, kept as the fallback and as the baseline
the benchmark and tests compare against.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Callable
from typing import NamedTuple

import mwparserfromhell
from mwparserfromhell.definitions import PARSER_BLACKLIST, URI_SCHEMES
from mwparserfromhell.parser import ParserError

__all__ = [
    "ExtractionResult",
    "ParserError",
    "RawLink",
    "clean_link_text",
    "extract_links",
    "extract_links_full",
    "normalize_title",
]


class RawLink(NamedTuple):
    """A wikilink as written: its target and its display text, both unprocessed.

    `text` is None for `[[Target]]` (the link text is then the target as written). A
    named tuple rather than a dataclass: a page yields hundreds of these, and a tuple is
    built and hashed in C.
    """

    target: str
    text: str | None


@dataclasses.dataclass(frozen=True)
class ExtractionResult:
    """The links of one page and which path produced them ("fast" or "full")."""

    links: tuple[RawLink, ...]
    path: str


_TAGS = "|".join(sorted(PARSER_BLACKLIST))
# A comment, or a blacklisted tag with its content, or a self-closing one.
_OPAQUE = re.compile(
    rf"<!--.*?-->|<({_TAGS})(?:\s[^<>]*)?(?:/>|>.*?</\1\s*>)", re.DOTALL | re.IGNORECASE)
_OPAQUE_OPEN = re.compile(rf"<({_TAGS})(?:\s[^<>]*)?>", re.IGNORECASE)
_BRACKETS = re.compile(r"\[\[|\]\]")
# A span read without the parser: a title of ordinary characters, optionally a pipe and
# a text without anything the parser would treat as markup. `'` is markup only doubled
# (checked apart), `&` only starts an entity, which leaves the source text as it is, and
# `:` only matters when the title starts with a URI scheme (checked apart).
_SIMPLE_LINK = re.compile(r"\[\[([^\[\]{}<>|\n=~_]+)(?:\|([^\[\]{}<>|\n=~]*))?\]\]")
_URL_SCHEME = re.compile(r"\s*(?:[a-z][a-z0-9+.\-]*:)?//", re.IGNORECASE)
# The parser reads `[[scheme:...]]` as a bracketed external link when `scheme` (the
# characters it accepts in a scheme, up to the first colon) is one of its URI schemes.
_SCHEME_PREFIX = re.compile(r"([A-Za-z0-9+.\-]*):")
MAX_SPAN_CHARS = 8192


def _mask_opaque(text: str) -> str | None:
    """Replaces opaque regions by spaces (offsets kept); None when one is left unclosed."""
    if "<" not in text:
        return text
    masked = _OPAQUE.sub(lambda m: " " * (m.end() - m.start()), text)
    if _OPAQUE_OPEN.search(masked):
        return None
    return masked


def _could_be_markup(span: str, title: str) -> bool:
    """Whether a span `_SIMPLE_LINK` matched may still be read otherwise by the parser:
    a doubled quote (bold or italics), or a title that starts like a URL."""
    if "''" in span or _URL_SCHEME.match(title):
        return True
    if ":" in title:
        scheme = _SCHEME_PREFIX.match(title)
        return scheme is not None and scheme.group(1).lower() in URI_SCHEMES
    return False


def _top_level_spans(text: str) -> list[tuple[int, int]] | None:
    """(start, end) of every top-level `[[...]]`; None when brackets do not balance."""
    spans = []
    depth = 0
    start = 0
    for m in _BRACKETS.finditer(text):
        if m.group() == "[[":
            if depth == 0:
                start = m.start()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                spans.append((start, m.end()))
    if depth:
        return None
    return spans


def _links_of(wikicode: mwparserfromhell.wikicode.Wikicode) -> list[RawLink]:
    return [
        RawLink(str(link.title), None if link.text is None else str(link.text))
        for link in wikicode.filter_wikilinks(recursive=True)
    ]


def extract_links_full(text: str) -> list[RawLink]:
    """Every wikilink of a page by a full recursive `mwparserfromhell` parse.

    Raises:
        ParserError: the parser failed on this text.
    """
    return _links_of(mwparserfromhell.parse(text))


def extract_links(
    text: str, full_parse: Callable[[str], list[RawLink]] = extract_links_full
) -> ExtractionResult:
    """Every wikilink of a page, as `extract_links_full` finds them, but faster.

    Args:
        text: the page's wikitext.
        full_parse: the whole-page parse for pages the fast path cannot trust (the
            pipeline passes a time-limited one).

    Raises:
        ParserError: the parser failed on this text (on a span or the whole page).
    """
    if "[[" not in text:
        return ExtractionResult((), "fast")
    masked = _mask_opaque(text)
    spans = _top_level_spans(masked) if masked is not None else None
    if spans is None or any(end - start > MAX_SPAN_CHARS for start, end in spans):
        return ExtractionResult(tuple(full_parse(text)), "full")
    links: list[RawLink] = []
    for start, end in spans:
        # A bracket right before the span changes how the parser reads it ("[[[x]]]").
        if start and masked[start - 1] == "[":
            start -= 1
        # Masking only locates spans; the parser reads the span as written.
        span = text[start:end]
        simple = _SIMPLE_LINK.fullmatch(span)
        if simple and not _could_be_markup(span, simple.group(1)):
            links.append(RawLink(simple.group(1), simple.group(2)))
        else:
            links.extend(_links_of(mwparserfromhell.parse(span)))
    return ExtractionResult(tuple(links), "fast")


_WHITESPACE = re.compile(r"\s+")
# MediaWiki's illegal title characters (after comments are removed); '#' is a fragment.
_ILLEGAL_TITLE = re.compile(r"[<>\[\]{}|\x00-\x1f\x7f\ufffd]")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def normalize_title(target: str) -> str | None:
    """Normalises a link target as MediaWiki does; None when it is not a valid title.

    Comments are removed and HTML entities decoded, underscores become spaces, whitespace
    is collapsed and trimmed, and the first character is upper-cased.
    """
    if "<!--" in target:
        target = _COMMENT.sub("", target)
    if "&" in target:
        target = html.unescape(target)
    target = _WHITESPACE.sub(" ", target.replace("_", " ")).strip()
    if not target or _ILLEGAL_TITLE.search(target):
        return None
    first = target[0].upper()
    # One-to-one only, as MediaWiki: "ß" stays "ß" rather than becoming "SS".
    return (first if len(first) == 1 else target[0]) + target[1:]


def clean_link_text(link: RawLink) -> str:
    """The displayed text of a link: markup stripped, entities unescaped, whitespace
    collapsed; "" when nothing is left. `[[Target]]` gives Target as written."""
    raw = link.target if link.text is None else link.text
    if _NEEDS_PARSE.search(raw):
        # Entities are left as written here and unescaped once below: normalising them
        # here too would decode "&amp;lt;" twice.
        raw = mwparserfromhell.parse(raw).strip_code(normalize=False, collapse=True)
    if "&" in raw:
        raw = html.unescape(raw)
    return _WHITESPACE.sub(" ", raw).strip()


# What may start markup that strip_code would remove or rewrite. A lone quote is text; an
# entity is kept as written by strip_code(normalize=False) and unescaped below either way.
_NEEDS_PARSE = re.compile(r"[\[\]{}<]|''|__|~~~|^[*#:;]|\n[*#:;=]|^=")
