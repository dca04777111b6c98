"""The layers of transforms/: each package imports only the packages below it.

    pipelines      wiring: flags -> a config -> one transform, run
    demo           the demo's orchestration
    scoring  training  wes              (the two jobs and the training between them)
    inference      Beam's model inference, knowing nothing of scoring rows
    metrics        pure scoring: strings (and model outputs) in, numbers out
    wiki           dump reading and link extraction (below wes)
    models  text   leaves: loading/running models; tokenisers and external tools
    data           leaf: the registry of the data files and their fetcher (qa-data)
    io             infrastructure shared by all

transforms/scoring has rooms by stage (SCORING_ROOMS): a room imports only the rooms
before it in the flow, and never the graph, the config or the flags at scoring's top.

Read from the source (AST), so a new import that breaks a layer fails here with the file
and the import named, before anyone has to find the cycle by hand. Every import form is
resolved to the absolute module it names: `import transforms.x as y`, `from transforms
import x`, `from transforms.x import y`, relative imports at any depth (`from ..x import
y`, `from .. import x`), and `importlib.import_module` / `__import__` with a literal name.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRANSFORMS = ROOT / "transforms"

# package -> the project packages it may import (itself always allowed)
ALLOWED: dict[str, set[str]] = {
    "io": set(),
    "data": set(),
    "models": set(),
    "text": set(),
    "metrics": {"models", "text"},
    "wiki": {"io"},
    "wes": {"io", "wiki"},
    "inference": {"io", "metrics", "models", "text"},
    "scoring": {"io", "inference", "metrics", "models", "text"},
    "training": {"io", "metrics", "models", "text"},
    "demo": {"io", "metrics", "models", "text", "scoring", "training", "wes", "wiki"},
}
# transforms/scoring's rooms -> the rooms each may import (itself always allowed). The
# modules at scoring's top (the graph, the config, the flags) may import every room; no
# room imports them.
SCORING_ROOMS: dict[str, set[str]] = {
    "reading": set(),
    "statistics": {"reading"},
    "report": set(),
    "outputs": {"report"},
    "incremental": {"reading", "outputs"},
    "score": {"reading", "statistics", "incremental"},
}
# Third-party modules a pure layer must not import (no runner, no model runtime, no
# processes, no file formats): metrics declare model uses and fold outputs; models/text
# do the rest.
FORBIDDEN_MODULES = {
    "metrics": {"apache_beam", "torch", "transformers", "subprocess", "tempfile", "shutil",
                "gzip", "bz2", "lzma", "zipfile", "tarfile"},
    "models": {"apache_beam"},
    "text": {"apache_beam", "torch", "transformers"},
}
# Names that open, read or write a file, whatever they are reached through: the builtin
# `open`, `io.open`, `os.open`, `os.fdopen`, `codecs.open`, `gzip.open`, `Path(p).open()`,
# `Path.read_text`, numpy's `np.load` / `np.fromfile` / `np.save`, `json.load` of an
# opened file... A name is caught when it is used at all (called, passed, aliased), not
# only when called bare.
FILE_ACCESS = {"open", "fdopen", "read_text", "read_bytes", "write_text", "write_bytes",
               "load", "loadtxt", "genfromtxt", "fromfile", "memmap", "save", "savez",
               "savez_compressed", "savetxt", "tofile"}
# Packages that must not touch files (file I/O belongs to models/ and text/).
NO_FILE_ACCESS = {"metrics"}
_DYNAMIC_IMPORTS = {"import_module", "__import__"}


def _modules() -> list[Path]:
    return sorted(p for p in TRANSFORMS.rglob("*.py") if p.parent != TRANSFORMS)


def _package_of(path: Path) -> list[str]:
    """The dotted package a module file belongs to (what `from . import` starts from)."""
    return ["transforms", *path.relative_to(TRANSFORMS).parent.parts]


def _resolve(level: int, module: str | None, package: list[str]) -> str | None:
    """The absolute module of `from <level dots><module> import ...`; None when the dots
    climb above the top-level package (an ImportError at run time)."""
    if not level:
        return module
    if level > len(package):
        return None
    base = package[:len(package) - level + 1]
    return ".".join([*base, *([module] if module else [])])


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def imported_modules(tree: ast.AST, package: list[str]) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in `tree`. A name imported from the
    top package is the package it names (`from transforms import scoring`, or `from ..
    import scoring` in a subpackage, imports `transforms.scoring`). A relative import
    above the top gives `<beyond top level>`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.level, node.module, package)
            if base is None:
                yield node.lineno, "<beyond top level>"
                continue
            if base == "transforms":
                yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)
            else:
                yield node.lineno, base
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            target = _literal(node.args[0])
            if name in _DYNAMIC_IMPORTS and target:
                if target.startswith("."):
                    dots = len(target) - len(target.lstrip("."))
                    target = _resolve(dots, target[dots:] or None, package)
                yield node.lineno, target or "<beyond top level>"


def file_accesses(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, what) of every use of a name in FILE_ACCESS: a bare name (`open(p)`,
    `f = open`), an attribute (`io.open`, `Path(p).open()`, `np.load`), an import of it
    under any alias (`from io import open as o`) or `getattr(x, "open")`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in FILE_ACCESS:
            yield node.lineno, f"{node.id}()"
        elif isinstance(node, ast.Attribute) and node.attr in FILE_ACCESS:
            yield node.lineno, f".{node.attr}()"
        elif isinstance(node, ast.ImportFrom):
            yield from ((node.lineno, f"import of {alias.name}") for alias in node.names
                        if alias.name in FILE_ACCESS)
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr"
              and len(node.args) > 1 and _literal(node.args[1]) in FILE_ACCESS):
            yield node.lineno, f"getattr(..., {_literal(node.args[1])!r})"


def layer_violations(path: Path) -> list[str]:
    """Every import or file access in `path` that its package's layer does not allow."""
    package = path.relative_to(TRANSFORMS).parts[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(ROOT)
    problems = []
    for line, module in sorted(set(imported_modules(tree, _package_of(path)))):
        parts = module.split(".")
        if module == "<beyond top level>":
            problems.append(f"{rel}:{line} has a relative import above the transforms "
                            "package")
        elif parts[0] == "pipelines":
            problems.append(f"{rel}:{line} imports {module} (transforms never import pipelines)")
        elif parts[0] == "transforms" and len(parts) > 1:
            target = parts[1]
            if target != package and target not in ALLOWED[package]:
                problems.append(f"{rel}:{line} imports {module}: {package}/ may import "
                                f"{sorted(ALLOWED[package]) or 'nothing else of the project'}")
            elif target == package == "scoring":
                problems += _room_violations(path, line, parts[2:])
        elif parts[0] in FORBIDDEN_MODULES.get(package, set()):
            problems.append(f"{rel}:{line} imports {module}, which {package}/ must not use")
    if package in NO_FILE_ACCESS:
        problems += [f"{rel}:{line} uses {what}: {package}/ must not open files"
                     for line, what in sorted(set(file_accesses(tree)))]
    return problems


def _room_violations(path: Path, line: int, target: list[str]) -> list[str]:
    """An import of `transforms.scoring.<target...>` from `path` (in scoring/) that the
    rooms do not allow."""
    parts = path.relative_to(TRANSFORMS).parts
    room = parts[1] if len(parts) > 2 else None  # None: a module at scoring's top
    if room is None or not target:
        return []
    rel = path.relative_to(ROOT)
    other = target[0]
    if other not in SCORING_ROOMS:
        return [f"{rel}:{line} imports transforms.scoring.{'.'.join(target)}: a room of "
                "scoring/ never imports the modules at its top"]
    if other != room and other not in SCORING_ROOMS[room]:
        return [f"{rel}:{line} imports transforms.scoring.{'.'.join(target)}: scoring/{room}/ "
                f"may import {sorted(SCORING_ROOMS[room]) or 'no other room'}"]
    return []


def test_every_package_has_a_layer():
    packages = {p.name for p in TRANSFORMS.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ALLOWED), "add the new package to ALLOWED with what it may import"


def test_every_room_of_scoring_has_a_place():
    rooms = {p.name for p in (TRANSFORMS / "scoring").iterdir() if (p / "__init__.py").exists()}
    assert rooms == set(SCORING_ROOMS), "add the new room to SCORING_ROOMS"


def test_rooms_name_what_they_catch(fake_tree):
    assert fake_tree("from transforms.scoring.config import ScoringConfig\n",
                     "scoring/reading/leaky.py") == [
        "transforms/scoring/reading/leaky.py:1 imports transforms.scoring.config: a room of "
        "scoring/ never imports the modules at its top"]
    assert fake_tree("from transforms.scoring.score.batches import ScoreBatches\n",
                     "scoring/reading/leaky.py") == [
        "transforms/scoring/reading/leaky.py:1 imports transforms.scoring.score.batches: "
        "scoring/reading/ may import no other room"]
    assert fake_tree("from ..reading.rows import ScoringRow\n", "scoring/score/ok.py") == []
    assert fake_tree("from transforms.scoring.reading import rows\n", "scoring/ok.py") == []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(TRANSFORMS)))
def test_module_respects_its_layer(path: Path):
    problems = layer_violations(path)
    assert not problems, "\n".join(problems)


@pytest.fixture
def fake_tree(tmp_path, monkeypatch):
    """Writes a module under a fake transforms/ and returns its layer violations."""
    monkeypatch.setattr(sys.modules[__name__], "TRANSFORMS", tmp_path / "transforms")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)

    def check(source: str, where: str = "metrics/leaky.py") -> list[str]:
        fake = tmp_path / "transforms" / where
        fake.parent.mkdir(parents=True, exist_ok=True)
        fake.write_text(source)
        return layer_violations(fake)
    return check


# Every import form, each naming a package metrics/ may not import (scoring).
@pytest.mark.parametrize("source, where", [
    ("from transforms.scoring import score\n", "metrics/leaky.py"),
    ("from transforms.scoring.score.batches import ScoreResult\n", "metrics/leaky.py"),
    ("from transforms import scoring\n", "metrics/leaky.py"),
    ("from transforms import models, scoring as s\n", "metrics/leaky.py"),
    ("import transforms.scoring\n", "metrics/leaky.py"),
    ("import transforms.scoring.score.batches as score\n", "metrics/leaky.py"),
    ("from ..scoring import score\n", "metrics/leaky.py"),
    ("from ..scoring.score import ScoreResult\n", "metrics/leaky.py"),
    ("from .. import scoring\n", "metrics/leaky.py"),
    ("from ...scoring import score\n", "metrics/deep/leaky.py"),
    ("from ... import scoring\n", "metrics/deep/leaky.py"),
    ("def f():\n    from ..scoring import score\n", "metrics/leaky.py"),
    ("try:\n    import transforms.scoring as s\nexcept ImportError:\n    s = None\n",
     "metrics/leaky.py"),
    ("import importlib\nm = importlib.import_module('transforms.scoring.score.batches')\n",
     "metrics/leaky.py"),
    ("from importlib import import_module\nm = import_module('..scoring', __package__)\n",
     "metrics/leaky.py"),
    ("m = __import__('transforms.scoring')\n", "metrics/leaky.py"),
], ids=lambda v: v if v.endswith(".py") else v.strip().splitlines()[-1])
def test_every_import_form_is_caught(fake_tree, source, where):
    problems = fake_tree(source, where)
    assert len(problems) == 1, problems
    assert "imports transforms.scoring" in problems[0], problems
    assert "metrics/ may import ['models', 'text']" in problems[0]


@pytest.mark.parametrize("source, where", [
    ("from . import base\n", "metrics/ok.py"),
    ("from .base import Score\n", "metrics/ok.py"),
    ("from ..models import uses\n", "metrics/ok.py"),
    ("from .. import models, text\n", "metrics/ok.py"),
    ("from transforms import metrics\n", "metrics/ok.py"),
    ("import transforms.models.uses as uses\n", "metrics/ok.py"),
    ("from ..scoring import score\n", "demo/ok.py"),
    ("from ... import models\n", "metrics/deep/ok.py"),
    ("import numpy as np\nx = np.zeros(3)\n", "metrics/ok.py"),
    ("def f(path):\n    return open(path)\n", "models/ok.py"),  # models/ may read files
], ids=lambda v: v if v.endswith(".py") else v.strip().splitlines()[-1])
def test_allowed_imports_pass(fake_tree, source, where):
    assert fake_tree(source, where) == []


def test_other_rules_name_what_they_catch(fake_tree):
    assert fake_tree("import apache_beam as beam\n") == [
        "transforms/metrics/leaky.py:1 imports apache_beam, which metrics/ must not use"]
    assert fake_tree("from torch.nn import functional\n")[0].endswith(
        "imports torch.nn, which metrics/ must not use")
    assert "(transforms never import pipelines)" in fake_tree(
        "from pipelines import score_predictions\n", "io/leaky.py")[0]
    assert "relative import above the transforms package" in fake_tree(
        "from ... import pipelines\n", "metrics/leaky.py")[0]
    assert "imports transforms.wes" in fake_tree("from ..wes import filters\n",
                                                 "scoring/leaky.py")[0]


# Every file-opening form a metric could use.
@pytest.mark.parametrize("source", [
    "def read(p):\n    return open(p).read()\n",
    "import builtins\ndef read(p):\n    return builtins.open(p).read()\n",
    "import io\ndef read(p):\n    return io.open(p).read()\n",
    "import os\ndef read(p):\n    return os.read(os.open(p, os.O_RDONLY), 10)\n",
    "import os\ndef read(fd):\n    return os.fdopen(fd).read()\n",
    "import codecs\ndef read(p):\n    return codecs.open(p).read()\n",
    "from pathlib import Path\ndef read(p):\n    return Path(p).open().read()\n",
    "from pathlib import Path\ndef read(p):\n    with Path(p).open('rb') as f:\n"
    "        return f.read()\n",
    "def read(p):\n    return p.read_text()\n",
    "def read(p):\n    return p.read_bytes()\n",
    "def write(p, s):\n    p.write_text(s)\n",
    "from io import open as o\ndef read(p):\n    return o(p).read()\n",
    "def read(paths):\n    return list(map(open, paths))\n",
    "opener = open\n",
    "import io\ndef read(p):\n    return getattr(io, 'open')(p)\n",
    "import numpy as np\ndef read(p):\n    return np.load(p)\n",
    "import numpy as np\ndef read(p):\n    return np.fromfile(p)\n",
    "import numpy as np\ndef write(p, a):\n    np.save(p, a)\n",
], ids=lambda s: s.strip().splitlines()[-1].strip())
def test_every_file_opening_form_is_caught(fake_tree, source):
    problems = fake_tree(source)
    assert problems and all("metrics/ must not open files" in p for p in problems), problems
