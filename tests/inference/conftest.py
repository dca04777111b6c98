"""Session fixtures: real checkpoints on disk (see checkpoints.py)."""

from __future__ import annotations

import pytest

from tests.inference.checkpoints import save_cross_encoder, save_keyphrase
from transforms.inference import loading


@pytest.fixture(scope="session")
def minilm_path() -> str:
    return loading.packaged_model_path()


@pytest.fixture(scope="session")
def cross_encoder_path(tmp_path_factory) -> str:
    """One-logit cross-encoder (SAS/WES/SQuArE shape)."""
    return save_cross_encoder(tmp_path_factory.mktemp("ckpt") / "cross_encoder")


@pytest.fixture(scope="session")
def bem_path(tmp_path_factory) -> str:
    """Two-class cross-encoder with three token types (BEM shape)."""
    return save_cross_encoder(tmp_path_factory.mktemp("ckpt") / "bem", num_labels=2,
                              token_types=3)


@pytest.fixture(scope="session")
def keyphrase_path(tmp_path_factory) -> str:
    return save_keyphrase(tmp_path_factory.mktemp("ckpt") / "keyphrase")
