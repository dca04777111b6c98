"""Fenced blocks of the README and the docs pages, and the commands in them.

A block that shows a command is tagged with a class in its info string, which MkDocs
(pymdownx.superfences with attr_list) renders and GitHub ignores: ```` ```bash {.run} ````
runs in tests/docs/test_readme.py on tiny data, ```` ```bash {.flags} ```` is parsed by the
command's own parser and Beam's.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
TAGS = ("run", "flags")
FENCE = re.compile(r"^(?P<fence>```+)(?P<info>[^`\n]*)\n(?P<body>.*?)^(?P=fence)\s*$",
                   re.MULTILINE | re.DOTALL)
# Programs of the shell blocks that are not this product's: not parsed.
OTHER_PROGRAMS = {"pip", "make", "cd", "git", "docker", "apt-get", "cat", "export", "gcloud",
                  "java", "ls", "mkdir", "curl", "nvidia-smi", "python"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    tags: tuple[str, ...]
    body: str

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def pages() -> list[Path]:
    """The README and every Markdown page of the docs site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        info = match.group("info").strip()
        lang = info.split("{", 1)[0].strip().split(" ", 1)[0] if info else ""
        classes = re.findall(r"\.([\w-]+)", info.split("{", 1)[1]) if "{" in info else []
        found.append(Block(path, text.count("\n", 0, match.start()) + 1, lang,
                           tuple(c for c in classes if c in TAGS), match.group("body")))
    return found


def console_scripts() -> dict[str, str]:
    """setup.py's console scripts: name -> module (each with a `main`)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    scripts: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                re.fullmatch(r"[\w-]+=[\w.]+:main", node.value):
            name, target = node.value.split("=")
            scripts[name] = target.split(":")[0]
    return scripts


def commands(body: str) -> list[list[str]]:
    """The command lines of a shell block: continuations joined, comments and heredoc
    bodies dropped, each split as the shell would (quotes removed)."""
    lines, joined, heredoc = [], "", None
    for raw in body.splitlines():
        if heredoc is not None:
            if raw.strip() == heredoc:
                heredoc = None
            continue
        line = raw.rstrip()
        marker = re.search(r"<<-?'?(\w+)'?", line)
        if marker:
            heredoc = marker.group(1)
        joined += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            if joined.strip() and not joined.lstrip().startswith("#"):
                lines.append(joined)
            joined = ""
    return [shlex.split(line, comments=True) for line in lines]


def program(argv: list[str], scripts: dict[str, str]) -> tuple[str | None, list[str]]:
    """(module of this product's command, its arguments), or (None, argv) for another
    program."""
    if argv and argv[0] in scripts:
        return scripts[argv[0]], argv[1:]
    if len(argv) > 2 and argv[0].endswith("python") and argv[1] == "-m" and \
            argv[2].split(".")[0] in ("pipelines", "transforms"):
        return argv[2], argv[3:]
    return None, argv
