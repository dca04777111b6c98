from __future__ import annotations

import pytest
from apache_beam.transforms.window import GlobalWindow, IntervalWindow

from transforms.wes.filters import FilterLinksFn, classify_link
from transforms.wes.tally import TALLY_SHARDS, TitleLinks, merge_tallies, tally_shard
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


def test_long_or_unparsable_link_texts_are_counted_not_cleaned(monkeypatch):
    long_text = "{{" * 600 + "x"  # 1,201 characters: never reaches the parser
    assert classify_link(RawLink("Target", long_text)) == "filtered:long_text"
    assert classify_link(RawLink("Styx (band)", "{" + long_text)) == "filtered:title_has_paren"
    assert classify_link(RawLink("Target", "x" * 1000)) == ("Target", "x" * 1000)
    import transforms.wiki.links as links_module

    def fail(text):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(links_module.mwparserfromhell, "parse", fail)
    assert classify_link(RawLink("Target", "''b''")) == "filtered:text_parser_error"
    assert classify_link(RawLink("A:b", "''b''")) == "filtered:title_has_colon"


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


@pytest.mark.parametrize("max_pending, shards", [(1, 1), (2, 2), (100, 1), (100, TALLY_SHARDS)])
def test_filter_tallies_add_up_to_the_links_that_pass(max_pending, shards):
    pages = [
        (RawLink("paris", None), RawLink("Paris", "City of Light"), RawLink("paris", None),
         RawLink("Styx (band)", "Styx")),
        (RawLink("Paris", "paris"), RawLink("London", None), RawLink("VAX#x", "y"),
         RawLink("London", "{{x}}")),
        (RawLink("paris", None),),
    ]
    fn = FilterLinksFn(max_pending_titles=max_pending, cache_size=2, shards=shards)
    tallies, stats = _run_filter(fn, pages)
    per_shard = {}
    for shard, part in tallies:
        assert all(tally_shard(title, shards) == shard for title in part)
        per_shard.setdefault(shard, []).append(part)
    assert dict(kv for s, parts in per_shard.items() for kv in merge_tallies(s, parts)) == {
        "Paris": TitleLinks("Paris", 5, ("City of Light", "paris")),
        "London": TitleLinks("London", 1, ("London",))}
    assert stats == {"passed": 6, "filtered:title_has_paren": 1, "filtered:title_has_hash": 1,
                     "filtered:empty_text": 1}
    if max_pending == 1:  # emitted after every page that leaves a title pending
        assert sum(len(part) for _, part in tallies) == 4
    if shards == 1:
        assert {shard for shard, _ in tallies} == {0}


def test_filter_refuses_windowed_input():
    fn = FilterLinksFn()
    fn.start_bundle()
    with pytest.raises(ValueError, match="global window"):
        list(fn.process((RawLink("a", None),), window=IntervalWindow(0, 10)))
