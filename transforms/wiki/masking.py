"""Masking of the wikitext regions `mwparserfromhell` never reads as wikitext. Beam-free.

An opaque region is a comment or one of the parser's blacklisted tags (`<nowiki>`,
`<pre>`, `<math>`, `<gallery>`, ...) with its content. `mask_opaque` replaces each by
spaces, offsets kept, so that links.py's scan finds only the `[[...]]` spans the parser
would read, in time linear in the page; a page with a tag left unclosed is reported
(None) for the full parse.
"""

from __future__ import annotations

import re

from mwparserfromhell.definitions import PARSER_BLACKLIST

# The blacklisted tags, longest name first: none is a prefix of another today, and if one
# ever were, only the longer could be followed by what a tag needs next. One group per
# name, so that the name is known whatever case (or case-folded letter) was written.
_TAG_NAMES = sorted(PARSER_BLACKLIST, key=lambda t: (-len(t), t))
_TAG_NAME = re.compile("<(?:" + "|".join(f"({t})" for t in _TAG_NAMES) + ")", re.IGNORECASE)
_TAG_CLOSE = {tag: re.compile(rf"</{tag}\s*>", re.IGNORECASE) for tag in PARSER_BLACKLIST}
_ATTRIBUTES_END = re.compile("[<>]")
# An opening tag left in the masked page (one pass, no backtracking beyond a tag).
_OPAQUE_OPEN = re.compile(rf"<({'|'.join(_TAG_NAMES)})(?:\s[^<>]*)?>", re.IGNORECASE)

_UNCLOSED = -1


def mask_opaque(text: str) -> str | None:
    """Replaces opaque regions by spaces (offsets kept); None when one is left unclosed.

    An opaque region is a comment (`<!--` to the first `-->`; an unclosed one is left
    as text, as the parser does) or a blacklisted tag with its content up to the first
    closing tag of the same name, or a self-closing one; regions are taken left to right.
    This is the substitution of the regex
    `<!--.*?-->|<(TAG)(?:\\s[^<>]*)?(?:/>|>.*?</\\1\\s*>)` (DOTALL, IGNORECASE), then None
    when `_OPAQUE_OPEN` finds an opener left, done in time linear in the page: the regex
    searched the rest of the page again for every unclosed tag or comment (62 s for 40,000
    unclosed `<nowiki>`). Here a failed search for a closer stands for every later opener
    of that name, and an opener without a closer ends the masking at once.
    """
    if "<" not in text:
        return text
    pieces: list[str] = []
    copied = 0  # text[:copied] is in pieces
    no_closer_from: dict[str, int] = {}  # closer -> a position after which there is none
    i = text.find("<")
    while i >= 0:
        if text.startswith("<!--", i):
            end = _closer_end(text, "-->", i + 4, no_closer_from)
        else:
            end = _opaque_tag_end(text, i, no_closer_from)
            if end == _UNCLOSED:
                return None
        if end is None:
            i = text.find("<", i + 1)
            continue
        pieces.append(text[copied:i])
        pieces.append(" " * (end - i))
        copied = end
        i = text.find("<", end)
    if not pieces:
        return text
    pieces.append(text[copied:])
    masked = "".join(pieces)
    # Every opener in `text` was closed or returned None above, but masking can make one:
    # `<math` and a masked comment after it read as `<math   ...>`.
    return None if _OPAQUE_OPEN.search(masked) else masked


def _closer_end(text: str, closer: str, start: int, no_closer_from: dict[str, int]) -> int | None:
    """The end of the first `closer` (a comment's `-->` or a tag name, for its closing
    tag) at or after `start`, or None; remembers a failed search, as a later one from
    further on would fail as well."""
    if no_closer_from.get(closer, len(text) + 1) <= start:
        return None
    if closer == "-->":
        found = text.find(closer, start)
        end = None if found < 0 else found + 3
    else:
        m = _TAG_CLOSE[closer].search(text, start)
        end = None if m is None else m.end()
    if end is None:
        no_closer_from[closer] = start
    return end


def _opaque_tag_end(text: str, i: int, no_closer_from: dict[str, int]) -> int | None:
    """Where the opaque region of a blacklisted tag opening at `i` ends; None when no
    tag opens there, `_UNCLOSED` when one opens and is never closed.

    The cases of the regex `<(TAG)(?:\\s[^<>]*)?(?:/>|>.*?</\\1\\s*>)` in the order it
    tries them: attributes run to the next `<` or `>`; a `>` there opens content that
    needs its closing tag, and failing that `/>` at its end closes the tag.
    """
    m = _TAG_NAME.match(text, i)
    if m is None:
        return None
    tag, k = _TAG_NAMES[m.lastindex - 1], m.end()
    if k < len(text) and text[k].isspace():
        a = _ATTRIBUTES_END.search(text, k + 1)
        if a is None or a.group() == "<":
            return None
        r = a.start()  # the `>`
        end = _closer_end(text, tag, r + 1, no_closer_from)
        if end is not None:
            return end
        return r + 1 if text[r - 1] == "/" else _UNCLOSED
    if text.startswith("/>", k):
        return k + 2
    if text.startswith(">", k):
        end = _closer_end(text, tag, k + 1, no_closer_from)
        return _UNCLOSED if end is None else end
    return None
