"""No development history in the product: the README, the docs, the root Markdown files,
`--help` text and the comments and docstrings of the code describe the product as it is,
without the work log it was built from.

What is checked, and where:

- Markdown (the README, CONTRIBUTING, CHANGELOG, SECURITY, every page under docs/): the
  whole text.
- Python of pipelines/, transforms/, docs/ and setup.py: comments (read with `tokenize`),
  docstrings, and every `help=`, `description=` and `epilog=` argument of a call
  (argparse's `add_argument` and `ArgumentParser`, with the string literal, concatenation
  or f-string it is built from); docs/*.py: every string.
- Python of tests/: comments, docstrings and test names, for the prose markers only (not
  commit ids or paths: tests hold content keys, hashes and temporary paths as data).
- Every other Markdown file (tests/data/README.md, ...): the whole text.
- Shell scripts, the Makefile, the Dockerfile, configuration and requirements files:
  comments.

The patterns (case-insensitive, `PATTERNS` below; a line break counts as a space, and
comments on consecutive lines are read as one text):

- work-session numbers: `session 12`, `sessions 3`, `stop 38`, `stops 40-41`, `before stop`,
  `this session`, `work session`;
- "lent" machines: the word `lent`;
- reviewer narration: `the reviewer`, `the lead`, `the review's mend`, `reread mend`,
  `the acceptance`;
- work trees of one session: `final code`, `base commit`, `fresh worktree`, `second worktree`;
- one machine's paths: `/work/`, `/tmp/pytest-of-`, `/root/`;
- tracker numbers: `issue 26`, `issues 12`, `#12` in prose, `PR 7`, unless a public link
  (`https://...`) follows on the same line; tracker narration: `the issue's bound`, `the
  issue asks`, `the pages of the issue`;
- commit ids: 7 to 40 lower-case hex characters with at least one digit and one letter
  (not a number such as `1e308`, a colour such as `#1f77b4` or part of a UUID).

Allowed: commit ids in CHANGELOG.md and in the tables of docs/benchmarks.md (their commit
column). Dates are not checked: a dump's date or a measurement's date column is data.
This file itself and the breaks' patches (code as it was) are not read.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from dataclasses import dataclass

import pytest

from tests.docs.blocks import REPO

_LINK_AFTER = r"(?![^\n]*https?://)"

# name -> pattern; each is searched case-insensitively unless it says otherwise.
PATTERNS: dict[str, re.Pattern[str]] = {
    "session number": re.compile(r"\bsessions?\s+\d+|\b(?:this|work)\s+session\b", re.I),
    "stop number": re.compile(r"\bstops?\s+\d+|\b(?:before|after|since|until)\s+stop\b", re.I),
    "lent machine": re.compile(r"\blent\b", re.I),
    "reviewer narration": re.compile(
        r"\bthe\s+reviewers?\b|\bthe\s+lead\b|\b(?:review|reread)'s\s+mend\b|\breread\s+mend\b"
        r"|\bthe\s+acceptance\b", re.I),
    "work tree": re.compile(
        r"\bfinal\s+code\b|\bbase\s+commit\b|\b(?:fresh|second)\s+worktree\b", re.I),
    "machine path": re.compile(r"/work/|/tmp/pytest-of-|(?<![\w.])/root/"),
    "tracker number": re.compile(
        r"(?:\bissues?\s+\d+\b|\bPR\s+\d+\b|\bpull\s+request\s+\d+\b"
        r"|(?<![\w&/#])#\d+\b(?![-\w]))" + _LINK_AFTER, re.I),
    "tracker narration": re.compile(
        r"\b(?:the|this)\s+issue(?:'s|\s+(?:asks|says|wants|requires|lists))\b"
        r"|\bof\s+the\s+issue\b", re.I),
    "commit id": re.compile(
        r"(?<![\w.#\-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
        r"(?![.\-+]?\d|-[0-9a-f]{4}-)"),
}
# Markers of prose only: the ones a test's data may legitimately hold are left out.
PROSE_ONLY = ("session number", "stop number", "lent machine", "reviewer narration",
              "work tree", "tracker number", "tracker narration")

# Files whose commit ids and dates are part of what they record.
COMMITS_ALLOWED = {"CHANGELOG.md"}
# docs/benchmarks.md: its tables' commit and date columns; prose is checked.
TABLE_COMMITS_ALLOWED = {"docs/benchmarks.md"}

# Pages being rewritten elsewhere, checked once that rewrite is merged: REMOVE each entry
# when its rewrite lands (the check then runs on it like on every other page). Until then
# the test lists their hits in its skip reason instead of failing.
PENDING_REWRITE: set[str] = set()


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    marker: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.marker}: {self.text.strip()[:120]!r}"


def find(text: str, markers=tuple(PATTERNS)) -> list[tuple[int, str, str]]:
    """(line offset from the start of `text`, marker, matched line) for every marker found."""
    found = []
    for name in markers:
        for match in PATTERNS[name].finditer(text):
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            found.append((text.count("\n", 0, match.start()), name,
                          text[start:end if end >= 0 else None]))
    return found


def _files() -> list[str]:
    """The repository's files, tracked or new (not ignored), relative to its root."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=REPO, capture_output=True, text=True, check=True).stdout
        return sorted({p for p in out.splitlines() if (REPO / p).is_file()})
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", ".venv-mutmut", "mutants", "site", "demo_out", "bench_out"}
        return sorted(str(p.relative_to(REPO)) for p in REPO.rglob("*")
                      if p.is_file() and not skip & set(p.relative_to(REPO).parts))


def comment_blocks(comments: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Comments on consecutive lines joined into one text (the `#`s dropped), so that a
    marker broken over two lines is found: (first line, text) per block."""
    blocks: list[tuple[int, list[str]]] = []
    last = -2
    for line, text in comments:
        body = text.lstrip().removeprefix("#").strip()
        if line == last + 1 and blocks:
            blocks[-1][1].append(body)
        else:
            blocks.append((line, [body]))
        last = line
    return [(first, "\n".join(lines)) for first, lines in blocks]


def _strings(node: ast.AST) -> str:
    """The literal text of a string expression: constants, `+`, implicit concatenation and
    the literal parts of f-strings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_strings(v) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _strings(node.left) + _strings(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):  # "...".format()
        return _strings(node.func.value)
    return ""


def python_prose(source: str, *, help_text: bool, all_strings: bool = False,
                 names: bool = False) -> list[tuple[int, str]]:
    """(line, text) of a module's comments and docstrings, with its `help=` strings when
    `help_text`, every string literal when `all_strings` and its test names when `names`."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    pieces = comment_blocks([(tok.start[0], tok.string) for tok in tokens
                             if tok.type == tokenize.COMMENT])
    if all_strings:
        pieces += [(tok.start[0], tok.string) for tok in tokens if tok.type == tokenize.STRING]
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                pieces.append((body[0].lineno, body[0].value.value))
            if names and not isinstance(node, ast.Module):
                pieces.append((node.lineno, node.name.replace("_", " ")))
        if help_text and isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg in {"help", "description", "epilog"}:
                    pieces.append((keyword.value.lineno, _strings(keyword.value)))
    return pieces


def _hash_comments(path: str) -> bool:
    """Whether `path` is a file of `#` comments this test reads: shell scripts, the
    Makefile, Dockerfiles, configuration and requirements files."""
    name = path.rsplit("/", 1)[-1]
    return (name.endswith((".sh", ".cfg", ".toml", ".ini", ".yml", ".yaml", ".Dockerfile"))
            or name in {"Makefile", "Dockerfile", "run"} or name.startswith("requirements"))


def _allowed(path: str, line: str, marker: str) -> bool:
    if marker != "commit id":
        return False
    return path in COMMITS_ALLOWED or (path in TABLE_COMMITS_ALLOWED
                                       and line.lstrip().startswith("|"))


def hits(path: str) -> list[Hit]:
    """The history markers of one repository file, `[]` when its kind is not checked."""
    full = REPO / path
    suffix = full.suffix
    top = path.split("/", 1)[0]
    pieces: list[tuple[int, str]]
    markers: tuple[str, ...] = tuple(PATTERNS)
    if suffix == ".md":
        pieces = [(1, full.read_text(encoding="utf-8"))]
    elif suffix == ".py" and (top in {"pipelines", "transforms", "docs"} or path == "setup.py"):
        pieces = python_prose(full.read_text(encoding="utf-8"), help_text=True,
                              all_strings=top == "docs")
    elif suffix == ".py" and top == "tests":
        pieces = python_prose(full.read_text(encoding="utf-8"), help_text=True, names=True)
        markers = PROSE_ONLY
    elif _hash_comments(path):
        pieces = comment_blocks([(n, line) for n, line in
                                 enumerate(full.read_text(encoding="utf-8").splitlines(), 1)
                                 if line.lstrip().startswith("#") and not line.startswith("#!")])
    else:
        return []
    found = {Hit(path, first + offset, marker, line)
             for first, text in pieces for offset, marker, line in find(text, markers)
             if not _allowed(path, line, marker)}
    return sorted(found, key=lambda hit: (hit.line, hit.marker))


# This file names the markers it looks for; the breaks' patches quote code as it was.
CHECKED = [p for p in _files()
           if (p.endswith((".md", ".py")) or _hash_comments(p)) and not p.startswith("tests/breaks/")
           and p != "tests/docs/test_no_history.py"]


@pytest.mark.parametrize("path", CHECKED)
def test_no_development_history(path):
    found = hits(path)
    if path in PENDING_REWRITE:
        if found:
            pytest.skip(f"rewrite pending; {len(found)} markers:\n"
                        + "\n".join(map(str, found)))
        pytest.fail(f"{path} has no markers left: remove it from PENDING_REWRITE")
    assert not found, "development history in the product:\n" + "\n".join(map(str, found))


def test_pending_rewrites_are_files_still_checked():
    missing = sorted(PENDING_REWRITE - set(CHECKED))
    assert not missing, f"remove from PENDING_REWRITE (no such page any more): {missing}"


@pytest.mark.parametrize("text, marker", [
    ("measured in session 8 on the dev machine", "session number"),
    ("1.4 in stop 38, 1.8 in stop 39", "stop number"),
    ("since stop the copy starts small", "stop number"),
    ("on a bare lent GPU machine", "lent machine"),
    ("the lead re-ran the demo", "reviewer narration"),
    ("measured after the reread's mend", "reviewer narration"),
    ("`make test` from a fresh worktree", "work tree"),
    ("scratch files in /work/main/.gpu", "machine path"),
    ("/tmp/pytest-of-root/pytest-3/x", "machine path"),
    ("cached under /root/.cache", "machine path"),
    ("the regression of issue 26", "tracker number"),
    ("fixed in #12, see there", "tracker number"),
    ("workers have their own (docs/decisions.md, issue\n    26)", "tracker number"),
    ("the issue's bound on peak memory", "tracker narration"),
    ("The pages of the issue, and the worst cases", "tracker narration"),
    ("repeated with c79b111 on this machine", "commit id"),
    ("On e8efa54 the run took 98 s", "commit id"),
])
def test_each_marker_is_found(text, marker):
    assert {m for _, m, _ in find(text)} == {marker}


@pytest.mark.parametrize("text", [
    "Beam's issue 12345 (https://github.com/apache/beam/issues/12345) is worked around",
    "colours #1f77b4 and #ff7f0e; an HTML entity &#35; a heading [x](#1-install)",
    "the enwiki-20160501 dump; 2.2250738585072014e-308 and 1e308; 1000000 rows",
    "a uuid 123e4567-e89b-12d3-a456-426614174000",
    "the sha256 3360c5f41dfd74eb011154dd2260973c3360c5f41dfd74eb011154dd2260973c",
    "a session-scoped fixture; stopwords; a decade; the leading zeros; lentils",
    "/usr/share/wordnet and ~/.cache/qa-eval",
])
def test_what_is_not_a_marker(text):
    assert find(text) == []


def test_python_prose_reads_comments_docstrings_and_help_only():
    source = ('"""Module, stop 3."""\n'
              'import argparse\n'
              'x = "issue 4 is data here"  # comment: session 5\n'
              'def f():\n'
              '    """Doc, lent."""\n'
              'argparse.ArgumentParser().add_argument("--a", help="as " f"stop 4{x} " + "c0ffee1")\n')
    found = {m for _, text in python_prose(source, help_text=True) for _, m, _ in find(text)}
    assert found == {"stop number", "session number", "lent machine", "commit id"}
    assert not any("issue 4" in text for _, text in python_prose(source, help_text=True))


def test_comments_on_consecutive_lines_are_read_as_one_text():
    source = "x = 1  # measured in stop\n# 38 on the dev machine\n\n# issue\ny = 2\n# 26\n"
    found = [(line, m) for line, text in python_prose(source, help_text=False)
             for _, m, _ in find(text)]
    assert found == [(1, "stop number")]


def test_benchmark_tables_may_hold_commits_and_changelog_too():
    assert _allowed("docs/benchmarks.md", "| 98 s | H200 | c79b111 | 2026-11-28 |", "commit id")
    assert not _allowed("docs/benchmarks.md", "measured on c79b111", "commit id")
    assert _allowed("CHANGELOG.md", "- fixed (c79b111)", "commit id")
    assert not _allowed("CHANGELOG.md", "in stop 38", "stop number")
