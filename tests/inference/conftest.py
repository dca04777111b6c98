"""Session fixtures: real checkpoints on disk (see checkpoints.py)."""

from __future__ import annotations

import pytest

from tests.inference.checkpoints import save_keyphrase
from transforms.inference import loading


@pytest.fixture(scope="session")
def minilm_path() -> str:
    return loading.packaged_model_path()


@pytest.fixture(scope="session")
def keyphrase_path(tmp_path_factory) -> str:
    return save_keyphrase(tmp_path_factory.mktemp("ckpt") / "keyphrase")
