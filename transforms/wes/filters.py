"""`FilterLinks`: the raw links of each page -> (article title, link text) tallies, after
the paper's filters (the tallies themselves: tally.py).

The character filter (Huang 2022, Table 1) drops targets with '#' (a section), ':' (a
namespace or interwiki prefix) or '(' (a disambiguated title, whose links mostly just drop
the parenthetical). Each reason is counted separately; the first that applies wins, in
that order.
"""

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow

from transforms.io.counting import STATS_TAG, CountedParDo, CountingDoFn, in_global_window
from transforms.wes.tally import TALLY_SHARDS, PendingTallies, shard_tallies
from transforms.wiki.links import (
    RawLink,
    WikitextParseError,
    clean_link_text,
    has_visible_text,
    normalize_title,
)

TITLE_CHARACTER_RULES = (("#", "filtered:title_has_hash"),
                         (":", "filtered:title_has_colon"),
                         ("(", "filtered:title_has_paren"))
# Longest raw link text that is cleaned (real link texts with a valid title: at most 95
# characters on both bundled samples).
MAX_LINK_TEXT_CHARS = 1_000
# the output of each page's passing links, in page order (`FilterLinks(page_links=True)`)
PAGE_LINKS_TAG = "page_links"
# A page's links cross the shuffle as two strings, its titles and its texts, each joined
# by US (U+001F; a text equal to its title is written ""): two objects per page for the
# coder instead of three per link. No title or text holds US: titles refuse every
# character below U+0020, a dump's text cannot hold one (XML 1.0), entity decoding drops
# them and whitespace collapsing (`\s`) turns U+001C-U+001F into spaces. Co-occurrence's
# keys use it too (cooccurrence.py).
US = "\x1f"


def page_wire(links) -> tuple[str, str]:
    """A page's passing links ((title, text) in page order) -> their wire form."""
    return (US.join(title for title, _ in links),
            US.join("" if text == title else text for title, text in links))


def unpack_page(wire: tuple[str, str]) -> tuple[list[str], list[str]]:
    """`page_wire`'s form -> (titles, texts) in page order; a text equal to its title is
    ""."""
    titles, texts = wire
    return (titles.split(US), texts.split(US)) if titles else ([], [])


def _title_rejection(title: str | None) -> str | None:
    if title is None:
        return "filtered:invalid_title"
    for char, reason in TITLE_CHARACTER_RULES:
        if char in title:
            return reason
    return None


def classify_link(link: RawLink) -> tuple[str, str] | str:
    """(title, link text) for a link that passes the filters, else the reason it fails.

    A link whose cleaned text is empty (markup only) is dropped first, as part of link
    extraction: it counts as no incoming link (docs/decisions.md). A text over
    `MAX_LINK_TEXT_CHARS` is not cleaned at all (`long_text`): the parser is quadratic on
    some markup, and no entity name is that long. A text the parser fails on is
    `text_parser_error`. Both count as the title's rejection when the title fails too.
    """
    title = normalize_title(link.target)
    rejected = _title_rejection(title)
    if rejected is not None and has_visible_text(link):
        # The text is not needed, only whether it is empty: most rejected links are
        # `[[File:...|caption]]`, whose caption would otherwise be parsed for nothing.
        return rejected
    if len(link.target if link.text is None else link.text) > MAX_LINK_TEXT_CHARS:
        return rejected or "filtered:long_text"
    try:
        text = clean_link_text(link)
    except WikitextParseError:
        return rejected or "filtered:text_parser_error"
    if not text:
        return "filtered:empty_text"
    return (title, text) if rejected is None else rejected


class FilterLinksFn(CountingDoFn):
    """Applies `classify_link` to the links of each page, counting every exit, and tallies
    the links that pass per title: `(shard, {title: (occurrences, distinct texts)})`.

    The tally spans pages: it is emitted when it holds `max_pending_titles` titles and at
    the end of each bundle, one dict per shard of titles (`shard_tallies`, tally.py), so
    the shuffle gets a few thousand elements per bundle instead of one element per link or
    per title. `BuildClusters` adds the partial tallies up (`merge_tallies`, tally.py).
    Results of `classify_link` are memoised per bundle (at most `cache_size` entries),
    since the same (target, text) recurs across pages. A tally mixes pages, so the input must be in the global window (the mining
    pipeline is batch); anything else is refused.

    Memory: a memo entry or a pending title with one text costs about 400 bytes plus its
    strings, so the defaults bound one instance at about 40 MB and its strings.

    Args:
        max_pending_titles: bound on the titles held before the tally is emitted.
        cache_size: bound on the memoised classifications.
        shards: number of title shards (keys of the shuffle).
        page_links: also emit, per page, its passing `(title, text)` links in page order
            (`PAGE_LINKS_TAG`, in `page_wire`'s form; the co-occurrence counts',
            cooccurrence.py).
    """

    def __init__(self, max_pending_titles: int = 50_000, cache_size: int = 50_000,
                 shards: int = TALLY_SHARDS, page_links: bool = False):
        super().__init__("filter_links", [
            "passed", "filtered:empty_text", "filtered:long_text",
            "filtered:text_parser_error", "filtered:invalid_title",
            *(r for _, r in TITLE_CHARACTER_RULES)])
        if max_pending_titles < 1 or cache_size < 1 or shards < 1:
            raise ValueError("max_pending_titles, cache_size and shards must be positive")
        self._max_pending = max_pending_titles
        self._cache_size = cache_size
        self._shards = shards
        self._page_links = page_links
        self._pending: PendingTallies = {}
        self._cache: dict[RawLink, tuple[str, str] | str] = {}

    def start_bundle(self):
        super().start_bundle()
        self._pending = {}
        self._cache = {}

    def _tallies(self):
        pending, self._pending = self._pending, {}
        return shard_tallies(pending, self._shards)

    def process(self, links: tuple[RawLink, ...], window=beam.DoFn.WindowParam):
        if not isinstance(window, GlobalWindow):
            raise ValueError(f"FilterLinks tallies links across pages, so its input must be "
                             f"in the global window, not {window}")
        cache, pending = self._cache, self._pending
        failed: dict[str, int] = {}
        passed = 0
        page = [] if self._page_links else None
        for link in links:
            result = cache.get(link)
            if result is None:
                result = classify_link(link)
                if len(cache) >= self._cache_size:
                    cache.clear()
                cache[link] = result
            if isinstance(result, str):
                failed[result] = failed.get(result, 0) + 1
                continue
            passed += 1
            if page is not None:
                page.append(result)
            title, text = result
            tally = pending.get(title)
            if tally is None:
                pending[title] = [1, {text}]
            else:
                tally[0] += 1
                tally[1].add(text)
        if passed:
            self.count("passed", passed)
        for reason, n in failed.items():
            self.count(reason, n)
        if page is not None:
            yield beam.pvalue.TaggedOutput(PAGE_LINKS_TAG, page_wire(page))
        if len(pending) >= self._max_pending:
            yield from self._tallies()

    def finish_bundle(self):
        yield from super().finish_bundle()
        for tally in self._tallies():
            yield in_global_window(tally)


class FilterLinks(CountedParDo):
    """Tuples of RawLink occurrences (one per page) -> {"pairs": partial tallies
    `(shard, {title: (occurrences, distinct link texts)})` of the links that pass,
    "stats"}; with `page_links`, also "page_links": each page's passing links.

    Args:
        max_pending_titles, cache_size, shards, page_links: see `FilterLinksFn`.
    """

    def __init__(self, max_pending_titles: int = 50_000, cache_size: int = 50_000,
                 shards: int = TALLY_SHARDS, page_links: bool = False):
        super().__init__(FilterLinksFn(max_pending_titles, cache_size, shards, page_links),
                         "NormalizeAndFilter", "pairs")
        self._page_links = page_links

    def expand(self, pcoll):
        if not self._page_links:
            return super().expand(pcoll)
        outputs = pcoll | self._step >> beam.ParDo(self._fn).with_outputs(
            STATS_TAG, PAGE_LINKS_TAG, main=self._main)
        return {self._main: outputs[self._main], "stats": outputs[STATS_TAG],
                PAGE_LINKS_TAG: outputs[PAGE_LINKS_TAG]}
