"""End to end: bad pages in a real dump cost those pages, never the run."""

from __future__ import annotations

import bz2
import json

import pytest

from pipelines import mine_wes

DEEP = "{{" * 2000 + "x" + "}}" * 2000
BAD_PAGES = {
    # The parser raises RecursionError on a span (fast path) ...
    "Deep": f"[[Target|{DEEP}]]",
    # ... and in the guarded whole-page parse (an unclosed link sends the page there).
    "Deep and unclosed": f"[[Target|{DEEP}]] [[unclosed",
    # 40,000 unclosed <nowiki>: linear masking, then the guarded parse times out.
    "Unclosed nowiki": "[[A]] " + "&lt;nowiki&gt;" * 40_000,
    # Extracted, but its 1,500-character text is not cleaned (filtered:long_text).
    "Long link text": "[[Paris|" + "word " * 300 + "]]",
}


def _page(title: str, page_id: int, text: str, ns: str = "0") -> str:
    return (f"<page><title>{title}</title><ns>{ns}</ns><id>{page_id}</id>"
            f"<revision><text>{text}</text></revision></page>\n")


@pytest.mark.slow
def test_hostile_and_invalid_pages_are_skipped_and_the_run_completes(
        tmp_path, wiki_sample_xml):
    pages = [_page(title, 900_000 + n, text) for n, (title, text) in enumerate(BAD_PAGES.items())]
    # Valid XML, but no valid page: a non-numeric <ns>, and no <title>.
    pages.append(_page("Bad namespace", 900_100, "[[Paris]]", ns="main"))
    pages.append("<page><ns>0</ns><id>900101</id><revision><text>[[Paris]]</text>"
                 "</revision></page>\n")
    xml = wiki_sample_xml.decode("utf-8").replace(
        "</mediawiki>", "".join(pages) + "</mediawiki>")
    path = tmp_path / "hostile.xml.bz2"
    path.write_bytes(bz2.compress(xml.encode("utf-8")))
    out = tmp_path / "out"
    mine_wes.run([f"--input={path}", f"--output={out}", "--min_incoming_links=5",
                  "--seed=3", "--full_parse_timeout_s=2"], save_main_session=False)
    stats = json.loads((out / "stats.json").read_text())
    counts = stats["counts"]
    assert stats["complete"] is True
    assert counts["extract_links/filtered:parser_error"] == 2
    assert counts["extract_links/filtered:parser_timeout"] == 1
    # The sample's 206 pages (106 articles) and the four hostile ones; the two invalid
    # pages are skipped as the dump is read.
    assert counts["read_dump/pages"] == 210
    assert counts["read_dump/articles"] == 110
    assert counts["read_dump/filtered:bad_page"] == 2
    assert counts["read_dump/filtered:bad_file"] == 0
    assert counts["filter_links/filtered:long_text"] == 1
    assert stats["corpora"]["wes-k5"]["positives"] > 700
