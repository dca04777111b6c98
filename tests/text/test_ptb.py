"""The Python PTB tokenizer gives exactly what coco-caption's Java tokenizer gives."""

from __future__ import annotations

import csv
import glob
import os

import pytest

from tests.conftest import SHARED_DATA
from transforms.text import ptb
from transforms.text.ptb_lexer import PTBLexer

JUDGMENTS = str(SHARED_DATA / "judgments")
KPQA_FILES = sorted(glob.glob(f"{JUDGMENTS}/kpqa/*.csv"))
SAS_FILE = f"{JUDGMENTS}/sas/SQuAD_SAS.csv"

# Hand-checked against `java ... PTBTokenizer -preserveLines -lowerCase` + coco's filter.
TABLE = [
    ("Hello, World!", "hello world"),
    ("he didn't think it was worth the effort.", "he did n't think it was worth the effort"),
    ("i can 't tell", "i can t tell"),                      # "'" is a punctuation token
    ('a pharynx ("throat"); a stomach', "a pharynx -lrb- throat -rrb- a stomach"),
    ("the U.S. National Science Foundation", "the u.s. national science foundation"),
    ("e.t., who", "e.t. who"),
    ("cannot", "can not"),
    ("gonna", "gon na"),
    ("$2.2 billion", "$ 2.2 billion"),
    ("56.20%", "56.20 %"),
    ("1,435 mm (4 ft 8 1\u20442 in)", "1,435 mm -lrb- 4 ft 8\u00a01\u20442 in -rrb-"),
    ("0.5\u20131.4 m", "0.5 1.4 m"),                      # en dash -> "--", removed
    ("\u00bd cup", "1/2 cup"),
    ("Brighton &amp; Hove", "brighton & hove"),
    ("\u00a320", "# 20"),
    ("a mouth; a pharynx . . . and", "a mouth a pharynx and"),
    ("first line\nsecond\rthird", "first line second third"),  # line breaks are spaces
    ("emoji \U0001f600 ok", "emoji ok"),                  # untokenizable: deleted
    ("\u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 \u039f\u0394\u039f\u03a3", None),  # jar path
    ("Mr. Smith", "mr. smith"),
    ("", ""),
    ("?!", "?!"),                                          # not in coco's list
]


@pytest.fixture(scope="module")
def table_jar() -> list[str]:
    return ptb.jar_tokenize([t for t, _ in TABLE])


@pytest.mark.parametrize(("index", "text", "expected"),
                         [(i, t, e) for i, (t, e) in enumerate(TABLE)])
def test_table(index: int, text: str, expected: str | None, table_jar: list[str]) -> None:
    got = ptb.tokenize([text])[0]
    assert got == table_jar[index]
    if expected is not None:
        assert got == expected


def test_capital_sigma_goes_to_the_jar(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = ptb.jar_tokenize
    monkeypatch.setattr(ptb, "jar_tokenize", lambda texts, **kw: calls.append(texts) or
                        real(texts, **kw))
    ptb.clear_cache()
    assert ptb.tokenize(["plain", "\u039f\u0394\u039f\u03a3 x"]) == ["plain", "\u03bf\u03b4\u03bf\u03c2 x"]
    assert calls == [["\u039f\u0394\u039f\u03a3 x"]]


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="backend"):
        ptb.tokenize(["x"], backend="spacy")


def test_jar_keeps_alignment_with_empty_texts() -> None:
    texts = ["", "a b", "", "c.", ""]
    assert ptb.jar_tokenize(texts) == ["", "a b", "", "c.", ""]
    assert ptb.jar_tokenize(texts, isolate=False) == ["", "a b", "", "c.", ""]


def test_lexer_refuses_another_class() -> None:
    with pytest.raises(ValueError, match="sha256"):
        PTBLexer.from_class_bytes(b"\xca\xfe\xba\xbe" + b"\x00" * 16)


def _file_texts(path: str) -> list[str]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    columns = [c for c in rows[0] if c in ("question", "answer", "answer1", "answer2")
               or c.startswith("reference")]
    return [r[c] for c in columns for r in rows]


@pytest.mark.parametrize("path", [*KPQA_FILES, SAS_FILE], ids=os.path.basename)
def test_identical_to_coco_on_every_text_of_the_real_files(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    texts = _file_texts(path)
    # coco's own procedure: every text a line of one file, in the file's column order
    coco = PTBTokenizer().tokenize({i: [{"caption": t}] for i, t in enumerate(texts)})
    ptb.clear_cache()
    monkeypatch.setattr(ptb, "jar_tokenize", _no_jar)  # no fallback: all Python
    ours = ptb.tokenize(texts)
    assert len(texts) > 500
    mismatches = [(t, coco[i][0], o) for i, (t, o) in enumerate(zip(texts, ours, strict=True))
                  if coco[i][0] != o]
    assert mismatches == []


def _no_jar(texts, **kwargs):
    raise AssertionError(f"the Python tokenizer declined {texts!r}")
