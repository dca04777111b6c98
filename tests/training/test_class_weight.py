"""Class weighting of the cross-encoder loss (`--class_weight balanced`)."""

from __future__ import annotations

import math

import pytest
import torch

from transforms.training.cross_encoder import CrossEncoderData, CrossEncoderTask, class_weights


def test_balanced_weights_give_each_class_half_the_loss():
    labels = [1.0] * 85 + [0.0] * 15
    w0, w1 = class_weights(labels, "balanced")
    assert (w0, w1) == pytest.approx((100 / 30, 100 / 170))
    assert 15 * w0 == pytest.approx(85 * w1) == pytest.approx(50)
    assert class_weights(labels, "none") == (1.0, 1.0)
    with pytest.raises(ValueError, match="both classes"):
        class_weights([1.0, 1.0], "balanced")
    with pytest.raises(ValueError, match="0/1 targets"):
        class_weights([0.2, 0.9], "balanced")
    with pytest.raises(ValueError, match="class_weight must be one of"):
        class_weights(labels, "inverse")
    with pytest.raises(ValueError, match="class_weight must be one of"):
        CrossEncoderData(format="stsb", input=".", class_weight="inverse")


class _Fixed(torch.nn.Module):
    """A 'model' whose logits are given: the loss is then a function of the weights."""

    def __init__(self, logits):
        super().__init__()
        self.value = torch.tensor(logits)

    def forward(self, **_):
        return type("Out", (), {"logits": self.value[:, None]})()


def test_the_loss_weighs_examples_by_class():
    batch = {"input_ids": torch.zeros(2, 1), "labels": torch.tensor([0.0, 1.0])}
    model = _Fixed([0.0, 0.0])  # BCE of each example: log 2
    plain = CrossEncoderTask(True, 2, "auroc").loss(model, batch)
    weighted = CrossEncoderTask(True, 2, "auroc", (3.0, 0.5)).loss(model, batch)
    assert float(plain) == pytest.approx(math.log(2))
    assert float(weighted) == pytest.approx((3.0 + 0.5) / 2 * math.log(2))
