from __future__ import annotations

import collections
import os
import random
import re
import time

import pytest
from mwparserfromhell.definitions import PARSER_BLACKLIST

import transforms.wiki.guard as guard_module
from transforms.wiki.dump import iter_dump_file
from transforms.wiki.guard import CallCrashed, CallTimedOut, TimeLimitedCaller
from transforms.wiki.links import (
    ExtractionTimedOut,
    RawLink,
    WikitextParseError,
    _remove_comments,
    clean_link_text,
    extract_links,
    extract_links_full,
    normalize_title,
)
from transforms.wiki.masking import mask_opaque

R = RawLink


@pytest.mark.parametrize("text, expected, path", [
    ("no links at all", [], "fast"),
    ("[[Paris]] and [[London|the capital]]", [R("Paris", None), R("London", "the capital")], "fast"),
    ("[[Paris]]ian trail is not part of the text", [R("Paris", None)], "fast"),
    ("{{cite|title=[[Foo]]}} <ref>[[Bar|b]]</ref>", [R("Foo", None), R("Bar", "b")], "fast"),
    ("[[File:x.jpg|thumb|a [[Nested]] caption]]",
     [R("File:x.jpg", "thumb|a [[Nested]] caption"), R("Nested", None)], "fast"),
    ("<!-- [[Hidden]] --> [[Shown]]", [R("Shown", None)], "fast"),
    ("<nowiki>[[Literal]]</nowiki> [[Real]]", [R("Real", None)], "fast"),
    ("<gallery>\nA.jpg|[[Gal]]\n</gallery> [[Out]]", [R("Out", None)], "fast"),
    ("[[http://example.com]] is an external link", [], "fast"),
    ("[[Bad\nTitle]] [[Good]]", [R("Good", None)], "fast"),
    ("[[Open]] [[never closed", [R("Open", None)], "full"),
    ("<nowiki>[[unclosed tag", [], "full"),
    ("[[A|''italic'' &amp; more]]", [R("A", "''italic'' &amp; more")], "fast"),
    ("[[wikt:anarchism|anarchism]] [[Demanding the Impossible: A History]]",
     [R("wikt:anarchism", "anarchism"), R("Demanding the Impossible: A History", None)], "fast"),
    # URI schemes make bracketed external links (case-insensitive; irc needs slashes).
    ("[[news:comp.lang]] [[mailto:a@b.org|mail]] [[Mailto:x]] [[HTTP://x.org]] [[geo:1,2|x]]"
     " [[irc:x]]", [R("irc:x", None)], "fast"),
    ("[[Workers' Party|dissident]] [[A|b'c]] [[AT&T Inc.|AT&T]] [[Dead Man's Chest|''Chest'']]",
     [R("Workers' Party", "dissident"), R("A", "b'c"), R("AT&T Inc.", "AT&T"),
      R("Dead Man's Chest", "''Chest''")], "fast"),
])
def test_extract_links_table(text, expected, path):
    result = extract_links(text)
    assert list(result.links) == expected
    assert result.path == path
    assert collections.Counter(result.links) == collections.Counter(extract_links_full(text))


def test_plain_links_with_colons_quotes_and_ampersands_skip_the_parser(monkeypatch):
    """Titles with a colon that is no URI scheme, lone quotes and `&` are read without
    `mwparserfromhell` (a third of the real sample's parser calls were such links)."""
    import transforms.wiki.links as links_module

    calls = []
    real_parse = links_module.mwparserfromhell.parse
    monkeypatch.setattr(links_module.mwparserfromhell, "parse",
                        lambda text: calls.append(text) or real_parse(text))
    text = "[[wikt:x|y]] [[Workers' Party]] [[AT&T]] [[Film: A Story|its story]] [[news:x]]"
    assert [link.target for link in extract_links(text).links] == [
        "wikt:x", "Workers' Party", "AT&T", "Film: A Story"]
    assert calls == ["[[news:x]]"]
    assert clean_link_text(R("Workers' Party", "the workers' party &amp; co")) == (
        "the workers' party & co")
    assert calls == ["[[news:x]]"]


@pytest.mark.slow
def test_fast_path_agrees_with_full_parse_on_real_pages(wiki_sample):
    """The fast extractor's links agree with a full parse on >= 99.5% of links."""
    with open(wiki_sample, "rb") as f:
        pages = [p for p in iter_dump_file(str(wiki_sample), f)
                 if p.namespace == 0 and p.redirect is None]
    total = agree = 0
    for page in pages:
        full = collections.Counter(extract_links_full(page.text))
        fast = collections.Counter(extract_links(page.text).links)
        total += sum(full.values())
        agree += sum((full & fast).values())
    assert total > 30_000
    assert agree / total >= 0.995


# A plain masking for reference: one regex substitution, quadratic in unclosed
# tags and comments. The linear `mask_opaque` must give exactly what it gives.
_TAGS = "|".join(sorted(PARSER_BLACKLIST))
_OPAQUE = re.compile(
    rf"<!--.*?-->|<({_TAGS})(?:\s[^<>]*)?(?:/>|>.*?</\1\s*>)", re.DOTALL | re.IGNORECASE)
_OPAQUE_OPEN = re.compile(rf"<({_TAGS})(?:\s[^<>]*)?>", re.IGNORECASE)


def _regex_mask(text: str) -> str | None:
    masked = _OPAQUE.sub(lambda m: " " * (m.end() - m.start()), text)
    return None if _OPAQUE_OPEN.search(masked) else masked


_MASK_PIECES = [
    "<", ">", "/", "/>", "!--", "-->", "<!--", "--", " ", "\n", "\t", "a", "x=1", "nowiki",
    "NoWiki", "pre", "</", "<nowiki", "</nowiki", "<pre", "</pre", "<ce", "</ce>", "<nowiki>",
    "</nowiki>", "<nowiki/>", "<nowiki />", "</NOWIKI >", "<pre x>", "</pre>", "<precious>",
    "<math", "</math>", "[[", "]]", "</nowiki\n>", "<!---->", "<math<!---->",
]


@pytest.mark.parametrize("seed", range(4))
def test_masking_is_the_regex_substitution_it_replaced(seed):
    rng = random.Random(seed)
    for _ in range(20_000):
        text = "".join(rng.choice(_MASK_PIECES) for _ in range(rng.randint(0, 40)))
        assert mask_opaque(text) == _regex_mask(text), text


@pytest.mark.parametrize("text", [
    "<nowiki>" * 400_000,
    "<!--" * 400_000,
    "<nowiki />" * 200_000,
    "<nowiki x" * 200_000,
    "<pre>x</pre>" * 200_000,
])
def test_masking_is_linear_in_unclosed_tags_and_comments(text):
    """40,000 unclosed `<nowiki>` take 62 s, 40,000 `<!--` 34 s in a quadratic masking; ten
    times as many take well under a second of CPU (the bound is generous: this is not a
    timing test; CPU time, so that a busy machine does not count against it)."""
    start = time.process_time()
    mask_opaque(text)
    assert time.process_time() - start < 5


def test_comments_are_removed_as_the_regex_did_in_linear_time():
    rng = random.Random(0)
    pieces = ["<!--", "-->", "<!---->", "-", "<", "!", ">", "a", "\n", "<!-", "--"]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 25)))
        assert _remove_comments(text) == re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    start = time.process_time()
    assert normalize_title("A" + "<!--" * 250_000) is None  # `<` is no title character
    assert time.process_time() - start < 5


def test_parser_failures_are_wikitext_parse_errors(monkeypatch):
    import transforms.wiki.links as links_module

    def fail(text):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(links_module.mwparserfromhell, "parse", fail)
    with pytest.raises(WikitextParseError, match="RecursionError"):
        extract_links("[[a|''b'']]")  # a span the parser reads
    with pytest.raises(WikitextParseError, match="RecursionError"):
        extract_links_full("[[a]]")
    # The link text of such markup is unknown: the filter stage counts the link.
    with pytest.raises(WikitextParseError, match="link text: RecursionError"):
        clean_link_text(R("a", "''b''"))


def test_span_parses_stop_at_the_time_limit():
    text = ("[[a|" + "{{a|" * 1_500 + "]]\n") * 50
    start = time.monotonic()
    with pytest.raises(ExtractionTimedOut, match=r"after reading [01] of 50 spans"):
        extract_links(text, time_limit_s=0.001)
    assert time.monotonic() - start < 10  # a span parsed at most, not fifty
    # Spans read without the parser are not limited.
    assert extract_links("[[a]] [[b|c]]", time_limit_s=0.0).links == (R("a", None), R("b", "c"))


@pytest.mark.parametrize("target, expected", [
    ("paris", "Paris"),
    ("New_York  City", "New York City"),
    ("  spaced  ", "Spaced"),
    ("AT&amp;T", "AT&T"),
    ("eBay", "EBay"),
    ("ßeta", "ßeta"),
    ("Foo<!-- note -->", "Foo"),
    ("", None),
    ("{{PAGENAME}}", None),
    ("a|b", None),
])
def test_normalize_title(target, expected):
    assert normalize_title(target) == expected


@pytest.mark.parametrize("link, expected", [
    (R("New_York", None), "New_York"),
    (R("X", "the  big\napple"), "the big apple"),
    (R("X", "''Italic'' and '''bold'''"), "Italic and bold"),
    (R("X", "caf&eacute; &amp; bar"), "café & bar"),
    (R("X", "''a'' &amp;lt;"), "a &lt;"),
    (R("X", "[[Inner|shown]] text"), "shown text"),
    (R("X", "{{lang|fr|mot}}"), ""),
    (R("X", "   "), ""),
])
def test_clean_link_text(link, expected):
    assert clean_link_text(link) == expected


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@pytest.mark.slow
def test_time_guard_kills_a_call_that_runs_too_long():
    caller = TimeLimitedCaller(timeout_s=3.0)
    try:
        assert caller.call(_sleep, 0.01) == 0.01
        with pytest.raises(CallTimedOut):
            caller.call(_sleep, 30)
        assert caller.call(_sleep, 0.0) == 0.0  # a fresh child replaces the killed one
    finally:
        caller.close(kill=True)


def _exit_abruptly(code: int) -> int:
    os._exit(code)


def test_time_guard_survives_a_child_that_dies():
    caller = TimeLimitedCaller(timeout_s=30.0)
    try:
        with pytest.raises(CallCrashed, match="died"):
            caller.call(_exit_abruptly, 3)
        assert caller.call(_sleep, 0.0) == 0.0
    finally:
        caller.close(kill=True)


def test_time_guard_raises_when_no_child_can_run(monkeypatch):
    """A child that cannot run at all is no fault of the call: not a `CallCrashed` that
    would skip the page, but an error that fails the run."""
    monkeypatch.setattr(guard_module, "_alive", _exit_abruptly_without_args)
    caller = TimeLimitedCaller(timeout_s=30.0)
    try:
        with pytest.raises(RuntimeError, match="cannot run a trivial call") as e:
            caller.call(_exit_abruptly, 3)
        assert not isinstance(e.value, CallCrashed)
    finally:
        caller.close(kill=True)


def _exit_abruptly_without_args() -> bool:
    os._exit(4)


def test_time_guard_rejects_bad_limit():
    with pytest.raises(ValueError, match="positive"):
        TimeLimitedCaller(0)
