"""The command-line reference (docs/reference/cli.md) is generated from each entry point's
parser actions by docs/gen_reference.py: a flag added or changed without regenerating the
page fails here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.docs.blocks import REPO, console_scripts


def _generator(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "docs/gen_reference.py", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.slow  # imports every entry point in a fresh interpreter: about 8 s
def test_the_cli_reference_is_generated_from_the_parsers():
    done = _generator("--check")
    assert done.returncode == 0, done.stderr + "\n(an intended change? run python docs/gen_reference.py)"


def test_the_reference_covers_every_console_script():
    sys.path.insert(0, str(REPO / "docs"))
    try:
        import gen_reference
    finally:
        sys.path.remove(str(REPO / "docs"))
    documented = {module for _, module, _ in gen_reference.ENTRY_POINTS}
    assert set(console_scripts().values()) <= documented
    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    assert all(f"## {name}\n" in page for name in console_scripts())
