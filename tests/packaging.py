"""The project as a worker installs it: the wheel `setup.py` builds (what Dataflow's
`--setup_file` builds and installs on each worker), installed into a folder of its own.

The wheel is built from a copy of the sources (`setup.py`, `pipelines/`, `transforms/`)
so that the build leaves nothing in the checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("setup.py", "pipelines", "transforms")


def build_wheel(workdir: Path) -> Path:
    """Builds the project's wheel in `workdir` (with the setuptools of this environment,
    no download); returns its path."""
    src = workdir / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    dist = workdir / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(dist), str(src)],
                   check=True, cwd=workdir)
    (wheel,) = dist.glob("*.whl")
    return wheel


def install_wheel(wheel: Path, target: Path) -> Path:
    """Installs `wheel` alone (its dependencies are this environment's) into `target`."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-compile", "--target", str(target), str(wheel)],
                   check=True)
    return target
