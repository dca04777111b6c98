from __future__ import annotations

import pytest
from apache_beam.transforms.window import GlobalWindow, IntervalWindow

from transforms.wes.clusters import TitleLinks, merge_tallies, merge_title_links
from transforms.wes.filters import FilterLinksFn, classify_link
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


def test_merge_tallies_counts_occurrences_and_dedups_case_sensitively():
    tallies = [(2, ("US",)), (1, ("us",)), (3, ("US", "America")), (1, ("America",))]
    assert merge_tallies("United States", iter(tallies)) == (
        "United States", TitleLinks("United States", 7, ("America", "US", "us")))


def _run_filter(fn, pages):
    """Drives a FilterLinksFn over pages as one bundle; returns (tallies, stats)."""
    fn.setup()
    fn.start_bundle()
    out = [x for page in pages for x in fn.process(page, window=GlobalWindow())]
    stats = {}
    for item in fn.finish_bundle():
        if getattr(item, "tag", None) == "stats":
            (_, name), n = item.value.value
            stats[name] = n
        else:
            out.append(item.value)
    return out, stats


@pytest.mark.parametrize("max_pending", [1, 2, 100])
def test_filter_tallies_add_up_to_the_links_that_pass(max_pending):
    pages = [
        (RawLink("paris", None), RawLink("Paris", "City of Light"), RawLink("paris", None),
         RawLink("Styx (band)", "Styx")),
        (RawLink("Paris", "paris"), RawLink("London", None), RawLink("VAX#x", "y"),
         RawLink("London", "{{x}}")),
        (RawLink("paris", None),),
    ]
    fn = FilterLinksFn(max_pending_titles=max_pending, cache_size=2)
    tallies, stats = _run_filter(fn, pages)
    per_title = {}
    for title, tally in tallies:
        per_title.setdefault(title, []).append(tally)
    assert dict(merge_tallies(t, ts) for t, ts in per_title.items()) == {
        "Paris": TitleLinks("Paris", 5, ("City of Light", "paris")),
        "London": TitleLinks("London", 1, ("London",))}
    assert stats == {"passed": 6, "filtered:title_has_paren": 1, "filtered:title_has_hash": 1,
                     "filtered:empty_text": 1}
    if max_pending == 1:  # emitted after every page that leaves a title pending
        assert len(tallies) == 4


def test_filter_refuses_windowed_input():
    fn = FilterLinksFn()
    fn.start_bundle()
    with pytest.raises(ValueError, match="global window"):
        list(fn.process((RawLink("a", None),), window=IntervalWindow(0, 10)))


def test_merge_title_links_unions_redirect_clusters():
    merged = merge_title_links("T", [TitleLinks("T", 3, ("a", "b")), TitleLinks("R", 2, ("b", "c"))])
    assert merged == TitleLinks("T", 5, ("a", "b", "c"))
    assert TitleLinks("T", 1, ("a", "b"), frozenset({"a"})).kept_texts() == ("b",)
