from __future__ import annotations

import pytest

from transforms.wes.clusters import TitleLinks, TitleLinksCombineFn, merge_title_links
from transforms.wes.filters import classify_link
from transforms.wiki.links import RawLink


@pytest.mark.parametrize("link, expected", [
    (RawLink("paris", None), ("Paris", "paris")),
    (RawLink("United_States", "the US"), ("United States", "the US")),
    (RawLink("VAX#Name", "VAX trademark"), "filtered:title_has_hash"),
    (RawLink("WP:TWINKLE", "TW"), "filtered:title_has_colon"),
    (RawLink(":Category:X", None), "filtered:title_has_colon"),
    (RawLink("Styx (band)", "Styx"), "filtered:title_has_paren"),
    (RawLink("A#b:c(d", None), "filtered:title_has_hash"),
    (RawLink("{{x}}", "y"), "filtered:invalid_title"),
    (RawLink("Target", "{{lang|fr|x}}"), "filtered:empty_text"),
    (RawLink("Styx (band)", "{{x}}"), "filtered:empty_text"),
])
def test_classify_link(link, expected):
    assert classify_link(link) == expected


def test_combine_counts_occurrences_and_dedups_case_sensitively():
    fn = TitleLinksCombineFn()
    left = fn.create_accumulator()
    for text in ["US", "US", "us"]:
        left = fn.add_input(left, text)
    right = fn.add_input(fn.create_accumulator(), "America")
    assert fn.extract_output(fn.merge_accumulators([left, right])) == (4, ("America", "US", "us"))


def test_merge_title_links_unions_redirect_clusters():
    merged = merge_title_links("T", [TitleLinks("T", 3, ("a", "b")), TitleLinks("R", 2, ("b", "c"))])
    assert merged == TitleLinks("T", 5, ("a", "b", "c"))
    assert TitleLinks("T", 1, ("a", "b"), frozenset({"a"})).kept_texts() == ("b",)
