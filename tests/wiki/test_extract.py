"""`ExtractLinksFn`, the per-page step of the mining pipeline: every way a page leaves it
is counted, and no page raises."""

from __future__ import annotations

import logging
import os
import time

import pytest

import transforms.wiki.extract as extract_module
from transforms.wiki.dump import Page
from transforms.wiki.extract import ExtractLinksFn
from transforms.wiki.links import RawLink

DEEP = "[[Target|" + "{{" * 2000 + "x" + "}}" * 2000 + "]]"


def _process(text: str, timeout_s: float = 30.0, title: str = "P", page_id: int = 7):
    fn = ExtractLinksFn(full_parse_timeout_s=timeout_s, max_page_mb=1.0)
    fn.start_bundle()
    try:
        out = list(fn.process(Page(title, 0, page_id, None, text)))
    finally:
        fn.teardown()
    return out, {name: n for name, n in fn._bundle_counts.items() if n}


def test_a_plain_page_yields_its_links():
    out, counts = _process("[[Paris]] and [[London|the capital]]")
    assert out == [(RawLink("Paris", None), RawLink("London", "the capital"))]
    assert counts == {"pages": 1, "pages:fast_path": 1, "links": 2}


@pytest.mark.parametrize("text, path", [
    (DEEP, "a span"),
    (DEEP + " [[unclosed", "the guarded whole-page parse"),
])
def test_nesting_too_deep_for_the_parser_is_counted_as_a_parser_error(text, path, caplog):
    """A RecursionError in the parser, on a span here or in the time guard's child, skips
    the page (named by title and id) and the run goes on."""
    with caplog.at_level(logging.WARNING, logger="transforms.wiki.extract"):
        out, counts = _process(text, title="Deep", page_id=42)
    assert out == []
    assert counts == {"pages": 1, "filtered:parser_error": 1}
    assert "'Deep' (id 42): parser error, skipped: RecursionError" in caplog.text


@pytest.mark.slow
def test_spans_that_take_too_long_are_a_parser_timeout(caplog):
    """Each span is short, but the parser takes about half a second over each of these;
    the page stops at the time limit rather than after 100 of them."""
    text = ("[[a|" + "{{a|" * 1_500 + "]]\n") * 100
    with caplog.at_level(logging.WARNING, logger="transforms.wiki.extract"):
        out, counts = _process(text, timeout_s=0.1, title="Slow")
    assert out == []
    assert counts == {"pages": 1, "filtered:parser_timeout": 1}
    assert "'Slow' (id 7): parse timed out, skipped: time limit passed after reading" in (
        caplog.text)


def test_the_spans_limit_has_a_floor(monkeypatch):
    """A tiny whole-page limit (tests use one to make the fallback time out) does not cut
    the spans of ordinary pages short."""
    fn = ExtractLinksFn(full_parse_timeout_s=0.01, max_page_mb=1.0)
    assert fn._spans_time_limit_s == extract_module.MIN_SPANS_TIME_LIMIT_S


@pytest.mark.slow
def test_an_unclosed_nowiki_page_costs_the_time_limit_not_more():
    """40,000 unclosed `<nowiki>` (320 KB): a quadratic masking before the guarded parse
    would take 50-70 s; the guarded parse's limit is all it costs."""
    start = time.monotonic()
    out, counts = _process("[[A]] " + "<nowiki>" * 40_000, timeout_s=1.0)
    assert counts == {"pages": 1, "filtered:parser_timeout": 1}
    assert time.monotonic() - start < 30  # a child process started, then 1 s


def _die(text: str) -> list[RawLink]:
    os._exit(3)


@pytest.mark.slow
def test_a_page_that_kills_the_parser_process_is_a_parser_error(monkeypatch, caplog):
    """A crash of the guarded child (the parser's C code, or the system killing it) costs
    the page, and a fresh child serves the next."""
    fn = ExtractLinksFn(full_parse_timeout_s=30.0, max_page_mb=1.0)
    fn.start_bundle()
    try:
        monkeypatch.setattr(extract_module, "extract_links_full", _die)
        with caplog.at_level(logging.WARNING, logger="transforms.wiki.extract"):
            assert list(fn.process(Page("Crash", 0, 5, None, "[[unclosed"))) == []
        assert "'Crash' (id 5): parser error, skipped: the child process died" in caplog.text
        monkeypatch.undo()
        assert list(fn.process(Page("Next", 0, 6, None, "[[a]] [[unclosed"))) == [
            (RawLink("a", None),)]
    finally:
        fn.teardown()
    assert {k: n for k, n in fn._bundle_counts.items() if n} == {
        "pages": 2, "filtered:parser_error": 1, "pages:full_parse": 1, "links": 1}


def test_a_page_over_the_size_limit_is_skipped():
    out, counts = _process("[[a]]" * 300_000)
    assert out == []
    assert counts == {"pages": 1, "filtered:page_too_large": 1}
