"""The layers of transforms/: each package imports only the packages below it.

    pipelines      wiring: flags -> a config -> one transform, run
    demo           the demo's orchestration
    scoring  training  wes              (the two jobs and the training between them)
    metrics        pure scoring: strings (and model outputs) in, numbers out
    wiki           dump reading and link extraction (below wes)
    models  text   leaves: loading/running models; tokenisers and external tools
    io             infrastructure shared by all

Read from the source (AST), so a new import that breaks a layer fails here with the file
and the import named, before anyone has to find the cycle by hand.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRANSFORMS = ROOT / "transforms"

# package -> the project packages it may import (itself always allowed)
ALLOWED: dict[str, set[str]] = {
    "io": set(),
    "models": set(),
    "text": set(),
    "metrics": {"models", "text"},
    "wiki": {"io"},
    "wes": {"io", "wiki"},
    "scoring": {"io", "metrics", "models", "text"},
    "training": {"io", "metrics", "models", "text"},
    "demo": {"io", "metrics", "models", "text", "scoring", "training", "wes", "wiki"},
}
# Third-party modules a pure layer must not import (no runner, no model runtime, no
# processes): metrics declare model uses and fold outputs; models/text do the rest.
FORBIDDEN_MODULES = {
    "metrics": {"apache_beam", "torch", "transformers", "subprocess", "tempfile"},
    "models": {"apache_beam"},
    "text": {"apache_beam", "torch", "transformers"},
}
# Calls a pure layer must not make (file I/O belongs to models/ and text/).
FORBIDDEN_CALLS = {"metrics": {"open"}}


def _modules() -> list[Path]:
    return sorted(p for p in TRANSFORMS.rglob("*.py") if p.parent != TRANSFORMS)


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def layer_violations(path: Path) -> list[str]:
    """Every import or call in `path` that its package's layer does not allow."""
    package = path.relative_to(TRANSFORMS).parts[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(ROOT)
    problems = []
    for line, module in _imports(tree):
        parts = module.split(".")
        if parts[0] == "pipelines":
            problems.append(f"{rel}:{line} imports {module} (transforms never import pipelines)")
        elif parts[0] == "transforms" and len(parts) > 1:
            target = parts[1]
            if target != package and target not in ALLOWED[package]:
                problems.append(f"{rel}:{line} imports {module}: {package}/ may import "
                                f"{sorted(ALLOWED[package]) or 'nothing else of the project'}")
        elif parts[0] in FORBIDDEN_MODULES.get(package, set()):
            problems.append(f"{rel}:{line} imports {module}, which {package}/ must not use")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in FORBIDDEN_CALLS.get(package, set())):
            problems.append(f"{rel}:{node.lineno} calls {node.func.id}(), which {package}/ "
                            "must not do")
    return problems


def test_every_package_has_a_layer():
    packages = {p.name for p in TRANSFORMS.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ALLOWED), "add the new package to ALLOWED with what it may import"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(TRANSFORMS)))
def test_module_respects_its_layer(path: Path):
    assert layer_violations(path) == []


def test_the_check_finds_violations(tmp_path, monkeypatch):
    """A metric that loads a model through scoring, imports Beam and opens a file."""
    fake = tmp_path / "transforms" / "metrics" / "leaky.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("import apache_beam as beam\n"
                    "from transforms.scoring.handlers import build_handler\n"
                    "from transforms.models.uses import ModelUse\n"
                    "def read(p):\n    return open(p).read()\n")
    monkeypatch.setattr(sys.modules[__name__], "TRANSFORMS", tmp_path / "transforms")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    problems = layer_violations(fake)
    assert len(problems) == 3, problems
    assert "imports apache_beam" in problems[0]
    assert "transforms.scoring.handlers" in problems[1]
    assert "calls open()" in problems[2]
