"""The documentation site builds with `mkdocs build --strict`: a broken link or anchor, an
unrecognised link or a page left out of the nav fails it (mkdocs.yml's `validation`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.docs.blocks import REPO


def _mkdocs() -> list[str]:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        message = "mkdocs or mkdocs-material is not installed: pip install -r requirements-docs.txt"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return [sys.executable, "-m", "mkdocs"]


def test_the_config_validates_links_anchors_and_omitted_files():
    text = (REPO / "mkdocs.yml").read_text()
    for setting in ("omitted_files: warn", "unrecognized_links: warn", "anchors: warn",
                    "absolute_links: warn", "strict: true"):
        assert setting in text, setting


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([*_mkdocs(), "build", "--strict", "--site-dir", str(site)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "reference" / "cli" / "index.html").exists()
    assert (site / "metrics" / "judge" / "index.html").exists()
    shutil.rmtree(site)
