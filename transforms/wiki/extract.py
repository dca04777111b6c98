"""`ExtractLinks`: article pages -> the wikilink occurrences of each page, as written.

One element per page (a tuple of `RawLink`s), not one per link: a page has about 150
links, and every element a runner moves costs more than classifying a link.

No page can end a run: a page the parser fails on (`filtered:parser_error`), that takes
too long (`filtered:parser_timeout`) or is too large (`filtered:page_too_large`) is
counted, logged by title and id, and skipped.
"""

import logging

from transforms.io.counting import CountedParDo, CountingDoFn
from transforms.wiki.dump import Page
from transforms.wiki.guard import CallCrashed, CallTimedOut, TimeLimitedCaller
from transforms.wiki.links import (
    ExtractionTimedOut,
    RawLink,
    WikitextParseError,
    extract_links,
    extract_links_full,
)

logger = logging.getLogger(__name__)

# The parses of a page's spans on the fast path get, all together, the time limit of a
# whole-page parse, but never less than this: real pages take milliseconds (6 ms at most
# on the samples), and a tiny limit, as tests set to make the fallback time out, must not
# cut an ordinary page short on a busy machine.
MIN_SPANS_TIME_LIMIT_S = 1.0


class ExtractLinksFn(CountingDoFn):
    """Yields the `RawLink`s of a page as one tuple (nothing for a page without links); a
    page the parser fails on is counted and logged.

    Args:
        full_parse_timeout_s: time limit of a whole-page parse (the fallback path), and
            of the parses of a page's spans, all together, on the fast path (at least
            `MIN_SPANS_TIME_LIMIT_S`).
        max_page_mb: pages with more wikitext than this are skipped, counted and logged.
    """

    def __init__(self, full_parse_timeout_s: float, max_page_mb: float):
        super().__init__("extract_links", [
            "pages", "pages:fast_path", "pages:full_parse", "links",
            "filtered:parser_error", "filtered:parser_timeout", "filtered:page_too_large"])
        self._caller = TimeLimitedCaller(full_parse_timeout_s)
        self._spans_time_limit_s = max(full_parse_timeout_s, MIN_SPANS_TIME_LIMIT_S)
        self._max_chars = int(max_page_mb * 1_000_000)

    def _guarded_full_parse(self, text: str) -> list[RawLink]:
        return self._caller.call(extract_links_full, text)

    def process(self, page: Page):
        self.count("pages")
        if len(page.text) > self._max_chars:
            logger.warning("page %r (id %d): %d chars of wikitext, over the limit; skipped",
                           page.title, page.page_id, len(page.text))
            self.count("filtered:page_too_large")
            return
        try:
            result = extract_links(page.text, self._guarded_full_parse,
                                   self._spans_time_limit_s)
        except (WikitextParseError, CallCrashed) as e:
            logger.warning("page %r (id %d): parser error, skipped: %s",
                           page.title, page.page_id, e)
            self.count("filtered:parser_error")
            return
        except (CallTimedOut, ExtractionTimedOut) as e:
            logger.warning("page %r (id %d): parse timed out, skipped: %s",
                           page.title, page.page_id, e)
            self.count("filtered:parser_timeout")
            return
        self.count("pages:fast_path" if result.path == "fast" else "pages:full_parse")
        self.count("links", len(result.links))
        if result.links:
            yield result.links

    def teardown(self):
        self._caller.close(kill=True)


class ExtractLinks(CountedParDo):
    """Pages -> {"links": one tuple of RawLink occurrences per page with links, "stats"}."""

    def __init__(self, full_parse_timeout_s: float = 60.0, max_page_mb: float = 10.0):
        if max_page_mb <= 0:
            raise ValueError(f"max_page_mb must be positive, got {max_page_mb}")
        super().__init__(ExtractLinksFn(full_parse_timeout_s, max_page_mb),
                         "ExtractWikilinks", "links")
