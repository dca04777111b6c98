"""Every repository path a page cites (`transforms/...`, `tests/...`, `pipelines/...`,
`docs/...`) exists, so a moved module cannot leave a page pointing at nothing."""

from __future__ import annotations

import itertools
import re

import pytest

from tests.docs.blocks import REPO, pages

PATH = re.compile(r"(?<![\w./-])((?:transforms|tests|pipelines|docs)/[\w./{},*<>-]*[\w/}*>])")


def _expand(path: str) -> list[str]:
    """`a/{b,c}/d` -> `a/b/d`, `a/c/d`."""
    parts = re.split(r"\{([^{}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def _exists(path: str) -> bool:
    if "<" in path or "*" in path:
        pattern = re.sub(r"<[^>]*>", "*", path)
        return any(REPO.glob(pattern.rstrip("/")))
    return (REPO / path.rstrip("/")).exists()


def cited(text: str) -> set[str]:
    return {p for match in PATH.findall(text) for p in _expand(match.rstrip("."))}


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_cited_path_exists(page):
    text = page.read_text()
    # a page under docs/ may cite its neighbours relative to itself (`../benchmarks.md`)
    missing = sorted(p for p in cited(text) if not _exists(p))
    assert not missing, f"{page.relative_to(REPO)} cites paths that do not exist: {missing}"


def test_the_path_check_reads_braces_and_placeholders():
    assert cited("`transforms/scoring/{reading,report}/` and `tests/breaks/*.patch`") == {
        "transforms/scoring/reading/", "transforms/scoring/report/", "tests/breaks/*.patch"}
    assert _exists("transforms/scoring/reading/") and not _exists("transforms/nowhere.py")
    assert _exists("tests/breaks/*.patch")
