"""The files at the repository's root that a user looks for agree with the project: the
licence that setup.py declares is the one in LICENSE and CITATION.cff, the citation and
the changelog name setup.py's version, and NOTICE names every third-party fixture."""

from __future__ import annotations

import ast
import re

import yaml

from tests.docs.blocks import REPO


def _setup_keywords() -> dict[str, object]:
    """The literal keyword arguments of setup.py's `setup(...)` call."""
    tree = ast.parse((REPO / "setup.py").read_text())
    call = next(node for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "setup")
    return {k.arg: k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)}


def test_the_licence_is_apache_2_in_full_everywhere_it_is_named():
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX" in text
    assert _setup_keywords()["license"] == "Apache-2.0"
    assert yaml.safe_load((REPO / "CITATION.cff").read_text())["license"] == "Apache-2.0"
    assert "Apache-2.0" in (REPO / "README.md").read_text()


def test_the_citation_names_this_version_and_its_papers():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert str(cff["version"]) == _setup_keywords()["version"]
    assert cff["authors"] and cff["message"] and cff["title"]
    for ref in cff["references"]:
        assert ref["type"] and ref["title"] and ref["authors"] and isinstance(ref["year"], int), ref
    titles = " ".join(ref["title"] for ref in cff["references"])
    for paper in ("SQuAD", "BLEU", "ROUGE", "Meteor", "CIDEr", "BERTScore", "Sentence-BERT",
                  "Semantic Answer Similarity", "11M Names", "KPQA", "Tomayto", "SQuArE",
                  "Open-Domain Question Answering", "Open-QA Evaluation"):
        assert paper in titles, f"CITATION.cff has no reference for {paper}"


def test_the_changelog_has_a_section_for_this_version():
    headings = re.findall(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert _setup_keywords()["version"] in headings


def test_notice_names_every_third_party_fixture():
    notice = (REPO / "NOTICE").read_text()
    fixtures = [p for p in (REPO / "tests" / "data").iterdir() if p.name != "README.md"]
    assert fixtures
    missing = [p.name for p in fixtures if f"tests/data/{p.name}" not in notice]
    assert not missing, f"NOTICE does not name these fixtures and their licences: {missing}"
