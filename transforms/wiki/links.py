"""Wikilink extraction with `mwparserfromhell` as the authority, made fast. Beam-free.

A full `mwparserfromhell` parse of a page costs about 1 s per MB of wikitext. Most of a
page is prose, and most links are plain `[[Target]]` or `[[Target|text]]`. So:

1. Regions whose content the parser never reads as wikitext (comments and the parser's
   blacklisted tags: `<nowiki>`, `<pre>`, `<math>`, `<gallery>`, ...) are masked out
   (masking.py).
2. One regex pass finds every top-level `[[ ... ]]` span (nesting counted), and the
   spans that are plainly a link (no markup, no nesting, a valid title) whole.
3. A plain span is read directly, and so is a link whose text holds only plain links
   and plain text (an image caption); every other span is parsed by `mwparserfromhell`
   on its own, recursively, so links in captions and nested links come out exactly as
   the parser sees them.
4. Pages where this cannot be trusted (an unclosed blacklisted tag, brackets that do not
   balance, a span too long to be a link) are parsed whole by `mwparserfromhell`.

`extract_links_full` is the plain full parse, kept as the fallback and as the baseline
the benchmark and tests compare against.

Hostile wikitext must cost a page, never a run. Everything done to a whole page here is
linear in its length (the masking finds each closing tag once, the scan is one regex pass
without backtracking across brackets); the parser only ever sees a span (at most
`MAX_SPAN_CHARS`, with a time limit over all the spans of a page) or the whole page in
the caller's `full_parse`, which the pipeline runs in a killable child process. Whatever
the parser raises on a text (its `ParserError`, or `RecursionError` on nesting thousands
of levels deep) comes out as `WikitextParseError`.
"""

from __future__ import annotations

import dataclasses
import html
import re
import time
from collections.abc import Callable
from typing import NamedTuple

import mwparserfromhell
from mwparserfromhell.definitions import URI_SCHEMES
from mwparserfromhell.parser import ParserError

from transforms.wiki.masking import mask_opaque

__all__ = [
    "ExtractionResult",
    "ExtractionTimedOut",
    "RawLink",
    "WikitextParseError",
    "clean_link_text",
    "extract_links",
    "extract_links_full",
    "has_visible_text",
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


class WikitextParseError(Exception):
    """`mwparserfromhell` failed on a text: its own `ParserError`, or a `RecursionError`
    from its tree builder or tree walk on markup nested thousands of levels deep."""


class ExtractionTimedOut(TimeoutError):
    """The spans of a page took longer to parse than the page's time limit."""


# What `mwparserfromhell` raises on a text it cannot handle. Its C tokenizer caps nesting
# at 100 levels, but its Python builder (and `filter`, `str` on the tree) recurse several
# frames per level, so deeply nested templates exhaust the interpreter's recursion limit.
# ValueError is Python's error for bad input: the parser is not known to raise it, but
# should it on some text, that text costs its page, not the run. MemoryError is not
# caught: it says nothing about the page and is the worker's to handle.
_PARSER_FAILURES = (ParserError, RecursionError, ValueError)


@dataclasses.dataclass(frozen=True)
class ExtractionResult:
    """The links of one page and which path produced them ("fast" or "full")."""

    links: tuple[RawLink, ...]
    path: str


# A span read without the parser: a title of ordinary characters, optionally a pipe and
# a text without anything the parser would treat as markup. `'` is markup only doubled
# (checked apart), `&` only starts an entity, which leaves the source text as it is, and
# `:` only matters when the title starts with a URI scheme (checked apart).
_SIMPLE_LINK = re.compile(r"\[\[([^\[\]{}<>|\n=~_]+)(?:\|([^\[\]{}<>|\n=~]*))?\]\]")
# A whole plain-looking span, or a lone bracket pair: the scan of `_scan_links`.
_SCAN = re.compile(_SIMPLE_LINK.pattern + r"|\[\[|\]\]")
# A link with a title as plain as `_SIMPLE_LINK`'s and a text that holds links.
_CAPTIONED = re.compile(r"\[\[([^\[\]{}<>|\n=~_\x00]+)\|(.*)\]\]")
# The text of such a link between its inner links: what `_SIMPLE_LINK` allows in a
# text, and pipes (plain text in a link's text, as in `thumb|200px|caption`). Neither
# takes NUL, which ends the parser's input (XML cannot hold one anyway).
_PLAIN_CAPTION = re.compile(r"[^\[\]{}<>\n=~\x00]*")
_URL_SCHEME = re.compile(r"\s*(?:[a-z][a-z0-9+.\-]*:)?//", re.IGNORECASE)
# The parser reads `[[scheme:...]]` as a bracketed external link when `scheme` (the
# characters it accepts in a scheme, up to the first colon) is one of its URI schemes.
_SCHEME_PREFIX = re.compile(r"([A-Za-z0-9+.\-]*):")
MAX_SPAN_CHARS = 8192


def _could_be_markup(span: str, title: str) -> bool:
    """Whether a span `_SIMPLE_LINK` matched may still be read otherwise by the parser:
    a doubled quote (bold or italics), or a title that starts like a URL."""
    if "''" in span or _URL_SCHEME.match(title):
        return True
    if ":" in title:
        scheme = _SCHEME_PREFIX.match(title)
        return scheme is not None and scheme.group(1).lower() in URI_SCHEMES
    return False


def _parse_links(text: str) -> list[RawLink]:
    """Every wikilink of `text` by a recursive `mwparserfromhell` parse.

    Raises:
        WikitextParseError: the parser failed on this text.
    """
    try:
        return [
            RawLink(str(link.title), None if link.text is None else str(link.text))
            for link in mwparserfromhell.parse(text).filter_wikilinks(recursive=True)
        ]
    except _PARSER_FAILURES as e:
        # Raised anew, not chained: a RecursionError's traceback is a thousand frames,
        # and this error crosses a process boundary in the pipeline.
        raise WikitextParseError(f"{type(e).__name__}: {e}") from None


def extract_links_full(text: str) -> list[RawLink]:
    """Every wikilink of a page by a full recursive `mwparserfromhell` parse.

    Raises:
        WikitextParseError: the parser failed on this text.
    """
    return _parse_links(text)


def extract_links(
    text: str,
    full_parse: Callable[[str], list[RawLink]] = extract_links_full,
    time_limit_s: float | None = None,
) -> ExtractionResult:
    """Every wikilink of a page, as `extract_links_full` finds them, but faster.

    Args:
        text: the page's wikitext.
        full_parse: the whole-page parse for pages the fast path cannot trust (the
            pipeline passes a time-limited one).
        time_limit_s: a limit on the parses of the page's spans, all together (None: no
            limit). A span is short, but a page may hold thousands of spans that each
            take the parser a second; the limit is checked between spans.

    Raises:
        WikitextParseError: the parser failed on this text (on a span or the whole page).
        ExtractionTimedOut: the spans took longer than `time_limit_s` to parse.
    """
    if "[[" not in text:
        return ExtractionResult((), "fast")
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    masked = mask_opaque(text)
    links = None if masked is None else _scan_links(text, masked, deadline)
    if links is None:
        return ExtractionResult(tuple(full_parse(text)), "full")
    return ExtractionResult(tuple(links), "fast")


def _scan_links(text: str, masked: str, deadline: float | None = None) -> list[RawLink] | None:
    """The links of every top-level `[[...]]` span of `masked` (brackets counted), read
    from `text`; None when brackets do not balance or a span is too long to be a link.

    One regex pass finds both whole plain spans and lone brackets. A plain span at the
    top level is read directly; the brackets delimit the other spans (with the plain
    spans inside them), which are read by `_read_span` once the whole page has been found
    sound, so that a page sent to the full parse has had no span parsed first.

    Raises:
        WikitextParseError: the parser failed on a span.
        ExtractionTimedOut: `deadline` (a `time.monotonic()` value) passed before the
            last span was read.
    """
    links: list[RawLink | None] = []
    deferred: list[tuple[int, int, int, list[re.Match], bool]] = []
    depth = 0
    start = 0
    inner: list[re.Match] = []
    deep = False
    for m in _SCAN.finditer(masked):
        title = m.group(1)
        if title is not None:  # a whole plain-looking span
            if depth:
                inner.append(m)
                continue
            s, e = m.span()
            if e - s > MAX_SPAN_CHARS:
                return None
            # The parser reads the span as written; masking only locates spans.
            if (masked is text or text[s:e] == m.group()) and not (
                    s and masked[s - 1] == "[") and not _could_be_markup(m.group(), title):
                links.append(RawLink(title, m.group(2)))
            else:
                deferred.append((len(links), s, e, [], False))
                links.append(None)
        elif masked[m.start()] == "[":
            if depth:
                deep = True
            else:
                start, inner, deep = m.start(), [], False
            depth += 1
        elif depth:
            depth -= 1
            if not depth:
                if m.end() - start > MAX_SPAN_CHARS:
                    return None
                deferred.append((len(links), start, m.end(), inner, deep))
                links.append(None)
    if depth:
        return None
    if not deferred:
        return links
    out: list[RawLink] = []
    done = 0
    for n, (index, s, e, spans_inside, nested) in enumerate(deferred):
        if deadline is not None and time.monotonic() > deadline:
            raise ExtractionTimedOut(
                f"time limit passed after reading {n} of {len(deferred)} spans")
        out.extend(links[done:index])
        out.extend(_read_span(text, masked, s, e, spans_inside, nested))
        done = index + 1
    out.extend(links[done:])
    return out


def _read_span(text: str, masked: str, start: int, end: int, inner: list[re.Match],
               deep: bool) -> list[RawLink]:
    """The links of a top-level span that is not plainly one link, `inner` being the
    plain spans inside it and `deep` whether it holds other bracketed spans.

    A link whose text holds plain links and plain text only
    (`[[File:x.jpg|thumb|A [[cat]] on a [[mat|rug]]]]`) is read directly: the outer link
    with its text as written, then the inner links in order, as the parser gives them.
    Anything else is parsed by `mwparserfromhell`.
    """
    # A bracket right before the span changes how the parser reads it ("[[[x]]]").
    if start and masked[start - 1] == "[":
        return _parse_links(text[start - 1:end])
    span = text[start:end]
    if deep or not inner or "''" in span or (masked is not text
                                            and span != masked[start:end]):
        return _parse_links(span)
    outer = _CAPTIONED.fullmatch(span)
    if outer is None or _could_be_markup(span, outer.group(1)):
        return _parse_links(span)
    pos = start + outer.start(2)
    for m in inner:
        if not _PLAIN_CAPTION.fullmatch(text, pos, m.start()) or _could_be_markup(
                m.group(), m.group(1)):
            return _parse_links(span)
        pos = m.end()
    if not _PLAIN_CAPTION.fullmatch(text, pos, start + outer.end(2)):
        return _parse_links(span)
    return [RawLink(outer.group(1), outer.group(2)),
            *(RawLink(m.group(1), m.group(2)) for m in inner)]


_WHITESPACE = re.compile(r"\s+")
# MediaWiki's illegal title characters (after comments are removed); '#' is a fragment.
_ILLEGAL_TITLE = re.compile(r"[<>\[\]{}|\x00-\x1f\x7f\ufffd]")


def _remove_comments(text: str) -> str:
    """`text` without its comments (`<!--` to the first `-->`, left to right), as the
    regex `<!--.*?-->` would remove them but in linear time: the regex searches the rest
    of the text again for each `<!--` after the last `-->`."""
    pieces = []
    pos = 0
    while (start := text.find("<!--", pos)) >= 0:
        end = text.find("-->", start + 4)
        if end < 0:
            break
        pieces.append(text[pos:start])
        pos = end + 3
    pieces.append(text[pos:])
    return "".join(pieces)


def normalize_title(target: str) -> str | None:
    """Normalises a link target as MediaWiki does; None when it is not a valid title.

    Comments are removed and HTML entities decoded, underscores become spaces, whitespace
    is collapsed and trimmed, and the first character is upper-cased.
    """
    if "<!--" in target:
        target = _remove_comments(target)
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
    collapsed; "" when nothing is left. `[[Target]]` gives Target as written.

    Raises:
        WikitextParseError: the parser fails on the text (markup nested thousands deep);
            `filters.classify_link` counts such a link.
    """
    raw = link.target if link.text is None else link.text
    if _NEEDS_PARSE.search(raw):
        # Entities are left as written here and unescaped once below: normalising them
        # here too would decode "&amp;lt;" twice.
        try:
            raw = mwparserfromhell.parse(raw).strip_code(normalize=False, collapse=True)
        except _PARSER_FAILURES as e:
            raise WikitextParseError(f"link text: {type(e).__name__}: {e}") from e
    if "&" in raw:
        raw = html.unescape(raw)
    return _WHITESPACE.sub(" ", raw).strip()


def has_visible_text(link: RawLink) -> bool:
    """A cheap sufficient test that `clean_link_text(link)` is not empty, without parsing.

    True when the raw text starts with a letter or digit: no wikitext construct starts
    with one except a free URL, which `strip_code` keeps, so that character is in a text
    node and survives. False means "unknown", not "empty".
    """
    raw = link.target if link.text is None else link.text
    return raw[:1].isalnum()


# What may start markup that strip_code would remove or rewrite. A lone quote is text; an
# entity is kept as written by strip_code(normalize=False) and unescaped below either way.
_NEEDS_PARSE = re.compile(r"[\[\]{}<]|''|__|~~~|^[*#:;]|\n[*#:;=]|^=")
