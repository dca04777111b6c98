"""`FilterLinks`: raw link occurrences -> (article title, link text), the paper's filters.

The character filter (Huang 2022, Table 1) drops targets with '#' (a section), ':' (a
namespace or interwiki prefix) or '(' (a disambiguated title, whose links mostly just drop
the parenthetical). Each reason is counted separately; the first that applies wins, in
that order.
"""

from __future__ import annotations

import apache_beam as beam

from transforms.counting import STATS_TAG, CountingDoFn, zero_stats
from transforms.wiki.links import RawLink, clean_link_text, normalize_title

TITLE_CHARACTER_RULES = (("#", "filtered:title_has_hash"),
                         (":", "filtered:title_has_colon"),
                         ("(", "filtered:title_has_paren"))


def classify_link(link: RawLink) -> tuple[str, str] | str:
    """(title, link text) for a link that passes the filters, else the reason it fails.

    A link whose cleaned text is empty (markup only) is dropped first, as part of link
    extraction: it counts as no incoming link (docs/decisions.md).
    """
    text = clean_link_text(link)
    if not text:
        return "filtered:empty_text"
    title = normalize_title(link.target)
    if title is None:
        return "filtered:invalid_title"
    for char, reason in TITLE_CHARACTER_RULES:
        if char in title:
            return reason
    return title, text


class FilterLinksFn(CountingDoFn):
    """Applies `classify_link`, counting every exit."""

    def __init__(self):
        super().__init__("filter_links", [
            "passed", "filtered:empty_text", "filtered:invalid_title",
            *(r for _, r in TITLE_CHARACTER_RULES)])

    def process(self, link: RawLink):
        result = classify_link(link)
        if isinstance(result, str):
            self.count(result)
            return
        self.count("passed")
        yield result


class FilterLinks(beam.PTransform):
    """RawLink occurrences -> {"pairs": (title, link_text) occurrences, "stats"}."""

    def expand(self, links):
        fn = FilterLinksFn()
        outputs = links | "NormalizeAndFilter" >> beam.ParDo(fn).with_outputs(
            STATS_TAG, main="pairs")
        stats = (outputs[STATS_TAG], zero_stats(links.pipeline, "ZeroFilterStats",
                                                fn.stat_keys())) | "FlattenFilterStats" >> beam.Flatten()
        return {"pairs": outputs.pairs, "stats": stats}
