"""What `--setup_file ./setup.py` ships to Dataflow (and any worker that installs the
project): the wheel setup.py builds must hold every module and package data file under
pipelines/ and transforms/, and declare every third-party package those modules import
(workers install the wheel with its requirements, nothing else of this checkout)."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import subprocess
import sys
import zipfile

import pytest

from tests.packaging import REPO
from tests.runners import worker_environment

pytestmark = pytest.mark.slow

PACKAGES = ("pipelines", "transforms")
# Imported only by the training and demo entry points, which never run on a Beam worker.
NOT_ON_WORKERS = {"pandas", "tqdm"}


def _source_files() -> set[str]:
    return {str(p.relative_to(REPO)) for package in PACKAGES
            for p in (REPO / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_the_wheel_holds_every_module_and_data_file(project_wheel):
    names = set(zipfile.ZipFile(project_wheel).namelist())
    missing = sorted(_source_files() - names)
    assert not missing, f"setup.py leaves out of the wheel: {missing}"


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level third-party module -> the project files importing it."""
    found: dict[str, set[str]] = {}
    for path in sorted(_source_files()):
        if not path.endswith(".py"):
            continue
        for node in ast.walk(ast.parse((REPO / path).read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in PACKAGES:
                    found.setdefault(top, set()).add(path)
    return found


def _name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _closure(names: set[str]) -> set[str]:
    """`names` and every distribution they require (installed metadata), transitively."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo.extend(_name(r) for r in requires if "extra ==" not in r)
    return seen


def test_the_wheel_declares_what_its_modules_import(project_wheel):
    wheel = zipfile.ZipFile(project_wheel)
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    requires = [line.split(":", 1)[1].strip() for line in
                wheel.read(meta).decode().splitlines() if line.startswith("Requires-Dist:")]
    # the extras count: `models` for model metrics (the GPU container installs it),
    # `dask` for the Dask runner
    declared = _closure({_name(r) for r in requires
                         if "extra ==" not in r or re.search(r'extra == "(models|dask)"', r)})
    distributions = metadata.packages_distributions()
    undeclared = {}
    for module, files in _third_party_imports().items():
        if module in NOT_ON_WORKERS:
            continue
        names = {_name(d) for d in distributions.get(module, [module])}
        if not names & declared:
            undeclared[module] = sorted(files)
    assert not undeclared, f"imported but not required by setup.py: {undeclared}"


def _pins(text: str) -> dict[str, str]:
    return {_name(line): line.split("==", 1)[1].strip()
            for line in text.splitlines() if "==" in line and not line.startswith("#")}


def test_the_gpu_container_pins_what_the_project_pins():
    dockerfile = (REPO / "docs" / "containers" / "gpu.Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, flags=re.MULTILINE))
    requirements = _pins((REPO / "requirements.txt").read_text())
    assert args["BEAM_VERSION"] == requirements["apache-beam"]
    assert args["PYTHON_VERSION"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    makefile_torch = re.search(r"install --quiet torch==(\S+)",
                               (REPO / "Makefile").read_text()).group(1)
    assert args["TORCH_VERSION"] == makefile_torch
    assert "--index-url \"https://download.pytorch.org/whl/${TORCH_CUDA}\"" in dockerfile


def test_workers_import_the_project_from_the_wheel_only(worker_site, tmp_path):
    """The environment the engines' tests give their workers finds the installed wheel,
    not this checkout (nor an editable install of it)."""
    found = subprocess.run(
        [sys.executable, "-c", "import pipelines, transforms.scoring.reading.read as r; "
                               "print(pipelines.__file__); print(r.__file__)"],
        env=worker_environment(worker_site), cwd=tmp_path, capture_output=True, text=True,
        check=True).stdout.split()
    assert len(found) == 2 and all(path.startswith(worker_site) for path in found), found
