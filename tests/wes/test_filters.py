from __future__ import annotations

import pytest
from apache_beam.transforms.window import GlobalWindow, IntervalWindow

from transforms.wes.filters import (
    PAGE_LINKS_TAG,
    FilterLinksFn,
    classify_link,
    page_wire,
    unpack_page,
)
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


def test_filter_counts_every_exit_under_its_name():
    fn = FilterLinksFn()
    assert fn.stat_keys() == [("filter_links", name) for name in (
        "passed", "filtered:empty_text", "filtered:long_text", "filtered:text_parser_error",
        "filtered:invalid_title", "filtered:title_has_hash", "filtered:title_has_colon",
        "filtered:title_has_paren")]
    # a reason met several times, on one page and across pages, is added up
    pages = [(RawLink("A#1", "x"), RawLink("B#2", "y"), RawLink("C:3", "z")),
             (RawLink("D#4", "w"),)]
    _, stats = _run_filter(FilterLinksFn(), pages)
    assert stats == {"filtered:title_has_hash": 3, "filtered:title_has_colon": 1}


@pytest.mark.parametrize("kwargs", [{"max_pending_titles": 0}, {"cache_size": 0},
                                    {"shards": 0}, {"max_pending_titles": 0, "shards": 0}])
def test_filter_bounds_must_be_positive(kwargs):
    with pytest.raises(ValueError, match=r"^max_pending_titles, cache_size and shards must "
                                         r"be positive$"):
        FilterLinksFn(**kwargs)


def test_filter_memoises_classifications_within_its_bound(monkeypatch):
    import transforms.wes.filters as filters

    calls = []

    def counting(link):
        calls.append(link)
        return classify_link(link)

    monkeypatch.setattr(filters, "classify_link", counting)
    links = [RawLink("Paris", None), RawLink("A#b", "x"), RawLink("Paris", None),
             RawLink("A#b", "x"), RawLink("London", None)]
    fn = FilterLinksFn(cache_size=2)  # the smallest cache above one entry
    tallies, stats = _run_filter(fn, [tuple(links), tuple(links[:2])])
    # Paris and A#b once each while both fit; London clears the full cache; then both again
    assert calls == [links[0], links[1], links[4], links[0], links[1]]
    assert len(fn._cache) <= 2
    assert stats == {"passed": 4, "filtered:title_has_hash": 3}
    _run_filter(FilterLinksFn(cache_size=1), [tuple(links)])  # one entry is a valid bound


def test_filter_links_stage_and_its_defaults():
    from transforms.wes.filters import FilterLinks

    stage = FilterLinks(3, 4, 5)
    assert (stage._step, stage._main) == ("NormalizeAndFilter", "pairs")
    fn = stage._fn
    assert (fn._max_pending, fn._cache_size, fn._shards) == (3, 4, 5)
    # the documented memory bound (about 40 MB per instance) rests on these defaults
    for fn in (FilterLinks()._fn, FilterLinksFn()):
        assert (fn._max_pending, fn._cache_size, fn._shards) == (50_000, 50_000, TALLY_SHARDS)


@pytest.mark.parametrize("links", [
    [], [("A", "A")], [("A", "a"), ("B", "B"), ("C d", "é f"), ("A", "a")]])
def test_a_page_s_wire_form_keeps_its_links_and_writes_a_text_equal_to_its_title_empty(links):
    titles, texts = unpack_page(page_wire(links))
    assert [(t, x or t) for t, x in zip(titles, texts, strict=True)] == links
    assert all(x == "" for (t, text), x in zip(links, texts) if t == text)


def test_page_links_are_each_pages_passing_links_in_order():
    pages = [(RawLink("paris", None), RawLink("Styx (band)", "Styx"), RawLink("London", "city")),
             (RawLink("VAX#x", "y"),)]
    fn = FilterLinksFn(page_links=True)
    fn.setup()
    fn.start_bundle()
    out = [x for page in pages for x in fn.process(page, window=GlobalWindow())]
    assert [unpack_page(x.value) for x in out if getattr(x, "tag", None) == PAGE_LINKS_TAG] == [
        (["Paris", "London"], ["paris", "city"]), ([], [])]
    fn = FilterLinksFn()
    fn.setup()
    fn.start_bundle()
    assert not [x for page in pages for x in fn.process(page, window=GlobalWindow())
                if getattr(x, "tag", None) == PAGE_LINKS_TAG]


@pytest.mark.slow
@pytest.mark.mutation
def test_the_filter_stage_gives_page_links_only_when_asked():
    import apache_beam as beam
    from apache_beam.testing import test_pipeline
    from apache_beam.testing.util import assert_that, equal_to

    from tests.runners import RUNNER_ARGS
    from transforms.wes.filters import FilterLinks

    pages = [(RawLink("paris", None), RawLink("Styx (band)", "Styx"), RawLink("London", "city")),
             (RawLink("VAX#x", "y"),)]
    with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
        read = pipeline | beam.Create(pages)
        asked = read | "Asked" >> FilterLinks(page_links=True)
        assert set(asked) == {"pairs", "stats", PAGE_LINKS_TAG}
        links = asked[PAGE_LINKS_TAG] | beam.Map(lambda wire: tuple(map(tuple, unpack_page(wire))))
        assert_that(links, equal_to([(("Paris", "London"), ("paris", "city")), ((), ())]))
        plain = read | "Plain" >> FilterLinks()
        assert PAGE_LINKS_TAG not in plain
