"""Session fixtures: real checkpoints on disk (see checkpoints.py)."""

from __future__ import annotations

import pytest

from transforms.inference import loading


@pytest.fixture(scope="session")
def minilm_path() -> str:
    return loading.packaged_model_path()
