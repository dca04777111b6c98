"""Hostile wikitext costs a page, never a run.

A seeded generator (no `hypothesis` in the environment) writes pages of random nesting of
links, templates, arguments, `<nowiki>` and other opaque tags, comments, tables, refs and
quotes, some closed, some not, some mismatched, with runs of one construct thousands deep,
up to 1 MB. The extractor's per-page entry point, `ExtractLinksFn.process` with its time
guard, must never raise and must finish every page in bounded time; and the links it
gives must go through the next stage's functions (`normalize_title`, `clean_link_text`)
without raising either.
"""

from __future__ import annotations

import random
import time

import pytest

from transforms.wiki.dump import Page
from transforms.wiki.extract import ExtractLinksFn
from transforms.wiki.links import (
    WikitextParseError,
    clean_link_text,
    extract_links,
    normalize_title,
)

# (opener, closer) pairs the generator nests.
PAIRS = [
    ("[[", "]]"), ("[[Target|", "]]"), ("[[File:x.jpg|thumb|", "]]"), ("{{", "}}"),
    ("{{cite|title=", "}}"), ("{{{", "}}}"), ("<nowiki>", "</nowiki>"), ("<!--", "-->"),
    ("\n{|\n|", "\n|}\n"), ("<ref>", "</ref>"), ("<ref name=x>", "</ref>"), ("<pre>", "</pre>"),
    ("<math>", "</math>"), ("<gallery>\n", "\n</gallery>"), ("[http://x.org ", "]"),
    ("'''", "'''"), ("''", "''"), ("<b>", "</b>"), ("<NoWiki >", "</nowiki >"),
    ("<span style=\"a\">", "</span>"), ("\n== ", " ==\n"), ("-{", "}-"),
]
FILLERS = [
    "a", "Target", " ", "|", "|x=", "=", "\n", "\n|-\n", "\n! h ", "\n* ", "\n:", "[[Plain]]",
    "[[P|text]]", "[[a|''b'']]", "http://x.org", "&amp;", "&", "#", ":", "(", "<nowiki/>",
    "<nowiki />", "<br/>", "<", ">", "/>", "[", "]", "{", "}", "~~~~", "__TOC__", "'",
    "<!-- c -->", "[[wikt:x]]", "[[news:x]]", "\u212a", "é", "[[Ünïcode|ü]]",
]
BALANCED_FILLERS = [f for f in FILLERS if not set(f) & set("<>[]{}")] + [
    "[[Plain]]", "[[P|text]]", "[[a|''b'']]", "<!-- c -->", "<nowiki/>", "<br/>", "[[wikt:x]]"]
# A construct repeated thousands of times, closed or not: the pathological pages.
RUNS = [
    ("{{", "x", "}}"), ("[[Target|", "x", "]]"), ("[[a|", "", ""), ("{{a|", "", ""),
    ("<nowiki>", "", ""), ("<!--", "", ""), ("<nowiki />", "", ""), ("[[", "x", "]]"),
    ("{{{", "x", "}}}"), ("<ref>", "x", "</ref>"), ("\n{|", "", "\n|}"), ("[[", "", ""),
    ("]]", "", ""), ("<math", "", ""), ("'''", "", ""), ("[[a|{{b|", "", "}}]]"),
    ("[[a|{{b|", "x", "]]"), ("[[A|<b>", "", "</b>]]"), ("[[Target|{{", "x", "}}]]"),
    # Each a link whose text the parser takes half a second over (quadratic in unclosed
    # templates), under the span limit: many of them make a page that is slow span by span.
    ("[[a|" + "{{a|" * 1_500 + "]]", "", ""),
]
# The runs that leave links balanced and no opaque tag open.
BALANCED_RUNS = [
    run for run in RUNS
    if (sample := run[0] * 2 + run[1] + run[2] * 2).count("[[") == sample.count("]]")
    and not any(tag in sample for tag in ("<nowiki>", "<!--", "<math"))]


def adversarial_page(rng: random.Random, size: int, max_depth: int,
                     balanced: bool = False) -> str:
    """Random hostile wikitext of about `size` characters: chunks of random nesting (at
    most `max_depth` deep) and runs of one construct up to `max_depth` times. Unless
    `balanced`, some constructs are left open or closed by the wrong closer (pages the
    extractor parses whole); balanced pages keep it on its fast path, span by span."""
    chunks: list[str] = []
    length = 0
    while length < size:
        if rng.random() < 0.25:
            opener, middle, closer = rng.choice(BALANCED_RUNS if balanced else RUNS)
            n = min(rng.randint(1, max_depth), 1 + (size - length) // len(opener))
            closers = n if balanced or rng.random() < 0.7 else rng.randint(0, n)
            chunk = opener * n + middle + closer * closers
        else:
            chunk = _nested_chunk(rng, rng.choice([100, 1_000, 10_000]), max_depth, balanced)
        chunks.append(chunk)
        length += len(chunk)
    return "".join(chunks) if balanced else "".join(chunks)[:size]  # whole spans if balanced


def _nested_chunk(rng: random.Random, size: int, max_depth: int, balanced: bool) -> str:
    out: list[str] = []
    stack: list[str] = []
    length = 0
    while length < size:
        roll = rng.random()
        if roll < 0.35 and len(stack) < max_depth:
            opener, closer = rng.choice(PAIRS)
            stack.append(closer)
            piece = opener
        elif roll < 0.6 and stack:
            closer = stack.pop()
            # Mostly the right closer; sometimes none, sometimes another one.
            piece = closer if balanced else rng.choice([closer] * 6 + ["", rng.choice(PAIRS)[1]])
        else:
            piece = rng.choice(FILLERS if not balanced else BALANCED_FILLERS)
            piece *= rng.choice([1, 1, 1, 2, 5, 50])
        out.append(piece)
        length += len(piece)
    if balanced or rng.random() < 0.9:  # most chunks close what they opened
        out.extend(reversed(stack))
    return "".join(out)


def _links_go_through_the_filters(links, max_parsed_chars: int = 1_000) -> None:
    """The next stage's functions do not raise on these links. `clean_link_text` parses a
    text with markup again, which on such pages can take seconds a link (the parser is
    quadratic in unclosed templates, and nested links repeat the rest of the page in each
    text), so only texts up to `max_parsed_chars` are tried."""
    for link in links:
        normalize_title(link.target)
        if link.text is None or len(link.text) <= max_parsed_chars:
            clean_link_text(link)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(25))
def test_extract_links_raises_only_its_own_errors_on_hostile_pages(seed):
    """Small pages, the whole parse in this process: the only exception is
    `WikitextParseError` (the parser's own errors and RecursionError, wrapped)."""
    rng = random.Random(seed)
    for _ in range(5):
        text = adversarial_page(rng, rng.choice([200, 2_000, 5_000]), rng.choice([5, 50, 2_000]),
                                balanced=rng.random() < 0.5)
        try:
            result = extract_links(text)
        except WikitextParseError:
            continue
        _links_go_through_the_filters(result.links)


@pytest.mark.parametrize("text", [
    "[[Target|" + "{{" * 2000 + "x" + "}}" * 2000 + "]]",
    "[[Target|" + "{{" * 2000 + "x" + "}}" * 2000 + "]] [[unclosed",
])
def test_nesting_too_deep_for_the_parser_is_a_wikitext_parse_error(text):
    with pytest.raises(WikitextParseError, match="RecursionError"):
        extract_links(text)


# Pages that once cost a run (nesting too deep, unclosed tags by the ten thousand) and
# the worst cases found while making each cost one page.
KNOWN_HOSTILE_PAGES = {
    "nesting too deep in a link": "[[Target|" + "{{" * 2000 + "x" + "}}" * 2000 + "]]",
    "nesting too deep, then an unclosed link":
        "[[Target|" + "{{" * 2000 + "x" + "}}" * 2000 + "]] [[unclosed",
    "40,000 unclosed nowiki": "[[A]] " + "<nowiki>" * 40_000,
    "40,000 unclosed comments": "[[A]] " + "<!--" * 40_000,
    "100,000 nowiki closed by themselves": "[[A]] " + "<nowiki />" * 100_000,
    "200 links that each take the parser half a second":
        ("[[a|" + "{{a|" * 1_500 + "]]\n") * 200,
    "2,000 unclosed links": "[[Unclosed " * 2000,
}
PAGE_SIZES = [1_000, 30_000, 300_000, 1_000_000]
TIMEOUT_S = 2.0
# Each page: linear work (under a second for 1 MB), then either the spans' parses (cut
# after TIMEOUT_S, plus the one span under way: at most about a second) or the guarded
# whole-page parse (TIMEOUT_S, plus a child process started: a few seconds). Generous.
PAGE_BOUND_S = 10 * TIMEOUT_S + 20


@pytest.mark.slow
def test_pipeline_extractor_never_raises_and_bounds_time_on_hostile_pages():
    """Hostile pages cost bounded time: `ExtractLinksFn.process`, as the pipeline runs it
    per page (fast path, time-limited span parses, guarded whole-page fallback), on the
    known hostile pages and on generated ones of up to 1 MB and nesting 2,000 deep,
    balanced (parsed span by span) or not (parsed whole)."""
    rng = random.Random(12)
    pages = [*KNOWN_HOSTILE_PAGES.items()]
    for n in range(16):
        size = PAGE_SIZES[n % len(PAGE_SIZES)]
        balanced = n % 8 >= 4
        pages.append((f"generated {n} ({size:,} chars, balanced: {balanced})",
                      adversarial_page(rng, size, rng.choice([50, 500, 2_000]), balanced)))
    fn = ExtractLinksFn(full_parse_timeout_s=TIMEOUT_S, max_page_mb=10.0)
    fn.start_bundle()
    try:
        for n, (name, text) in enumerate(pages):
            start = time.monotonic()
            out = list(fn.process(Page(name, 0, n, None, text)))
            elapsed = time.monotonic() - start
            assert elapsed < PAGE_BOUND_S, (name, elapsed)
            for links in out:
                _links_go_through_the_filters(links)
    finally:
        fn.teardown()
    counts = fn._bundle_counts
    assert counts["pages"] == len(pages)
    assert counts["pages"] == (counts["pages:fast_path"] + counts["pages:full_parse"]
                               + counts["filtered:parser_error"]
                               + counts["filtered:parser_timeout"])
    # Every way out was taken.
    assert all(counts[key] for key in ("pages:fast_path", "pages:full_parse",
                                       "filtered:parser_error", "filtered:parser_timeout"))
