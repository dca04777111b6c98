"""transforms/training/start_model.py: what a cross-encoder run may start from, and the
encoder its weights descend from."""

from __future__ import annotations

import json

import pytest

from transforms.models.loading import packaged_model_path
from transforms.training.start_model import base_model_name, start_checkpoint


def _folder(tmp_path, name: str, config: dict, metrics: dict | None = None) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    if metrics is not None:
        (folder / "metrics.json").write_text(json.dumps(metrics))
    return str(folder)


def test_an_encoder_or_a_one_logit_cross_encoder_is_a_start(tmp_path):
    encoder = packaged_model_path()
    assert start_checkpoint(None, encoder) == encoder
    one_logit = _folder(tmp_path, "ce", {"architectures": ["BertForSequenceClassification"],
                                          "id2label": {"0": "LABEL_0"}})
    assert start_checkpoint(one_logit, None) == one_logit


def test_a_head_of_more_labels_is_refused_before_training(tmp_path):
    three = _folder(tmp_path, "nli", {"architectures": ["BertForSequenceClassification"],
                                      "id2label": {"0": "a", "1": "b", "2": "c"}})
    with pytest.raises(ValueError, match="3-label classification head"):
        start_checkpoint(None, three)
    with pytest.raises(ValueError, match="not a one-logit cross-encoder"):
        start_checkpoint(three, None)
    encoder = _folder(tmp_path, "enc", {"architectures": ["BertModel"]})
    with pytest.raises(ValueError, match="not a one-logit cross-encoder"):
        start_checkpoint(encoder, None)


def test_the_base_model_is_read_from_the_init_checkpoint(tmp_path):
    trained = _folder(tmp_path, "wes", {"architectures": ["BertForSequenceClassification"]},
                      {"model": "all-MiniLM-L6-v2"})
    assert base_model_name(trained, None) == "all-MiniLM-L6-v2"
    bare = _folder(tmp_path, "bare", {"architectures": ["BertForSequenceClassification"]})
    assert base_model_name(bare, None) == bare
    assert base_model_name(None, packaged_model_path())
