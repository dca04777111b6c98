"""The resume state: JSON + safetensors round trip, and folders that must not run code."""

from __future__ import annotations

import json
import math
import os
import random

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from pipelines import train_cross_encoder
from tests.models.checkpoints import write_malicious_pickle
from tests.training.conftest import FAST
from transforms.training import checkpoint


class _FakeModel:
    """Writes what save_pretrained would (a safetensors weights file), nothing more."""

    def save_pretrained(self, directory):
        os.makedirs(directory, exist_ok=True)
        save_file({"w": torch.zeros(2)}, f"{directory}/model.safetensors")


class _FakeTokenizer:
    def save_pretrained(self, directory):
        with open(f"{directory}/tokenizer.json", "w") as f:
            f.write("{}")


def _state():
    """A trainer state as `Trainer.fit` saves it, after one real AdamW + schedule step."""
    from transformers import get_linear_schedule_with_warmup
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = get_linear_schedule_with_warmup(optimizer, 2, 10)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return {"global_step": 1, "epoch": 0, "batch_in_epoch": 1, "total_steps": 10,
            "best_metric": "auroc", "best_value": math.nan, "best_step": None,
            "history": [{"step": 0, "loss": math.nan, "auroc": 0.5}],
            "loss_curve": [(1, 0.25)], "wall_s": 1.5, "cpu_s": 1.25,
            "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "scaler": {"scale": 65536.0, "_growth_tracker": 3},
            "rng": checkpoint.rng_state(),
            "fingerprint": {"files": {"train": ["a.csv"]}, "rows": {"train": 3}, "seed": 13,
                            "max_minutes": None, "pair": (1, "x")}}


def _same(a, b) -> bool:
    """Equal values of the same types, tensors and arrays compared exactly, NaN == NaN."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


def test_state_round_trips_exactly_as_json_and_safetensors(tmp_path):
    state = _state()
    checkpoint.save_last(str(tmp_path), _FakeModel(), _FakeTokenizer(), state)
    last = tmp_path / checkpoint.LAST
    assert sorted(p.name for p in last.iterdir()) == [
        "model.safetensors", "resume_state.json", "resume_state.safetensors",
        "tokenizer.json", "trainer_state.json"]
    assert json.loads((last / "trainer_state.json").read_text())["global_step"] == 1
    loaded = checkpoint.load_state(str(tmp_path))
    assert loaded.keys() == state.keys()
    for key in state:
        assert _same(state[key], loaded[key]), key
    assert list(loaded["optimizer"]["state"]) == [0, 1]  # int keys, as load_state_dict needs
    # The restored RNG states draw the same numbers.
    checkpoint.set_rng_state(loaded["rng"])
    draws = (random.random(), np.random.rand(), torch.rand(2))
    checkpoint.set_rng_state(state["rng"])
    assert _same(draws, (random.random(), np.random.rand(), torch.rand(2)))


def test_a_state_value_json_cannot_hold_fails_when_saving(tmp_path):
    with pytest.raises(TypeError, match=r"cannot save a object at state\.fingerprint\.odd"):
        checkpoint.save_last(str(tmp_path), _FakeModel(), _FakeTokenizer(),
                             {**_state(), "fingerprint": {"odd": object()}})
    assert not (tmp_path / checkpoint.LAST).exists()


@pytest.mark.parametrize("name", [checkpoint.STATE_FILE, checkpoint.STATE_TENSORS])
def test_a_pickle_in_place_of_a_state_file_is_refused_and_never_runs(tmp_path, name):
    checkpoint.save_last(str(tmp_path), _FakeModel(), _FakeTokenizer(), _state())
    marker = tmp_path / "pwned"
    planted = write_malicious_pickle(tmp_path / checkpoint.LAST / name, marker)
    with pytest.raises(ValueError, match=f"cannot resume: {planted}"):
        checkpoint.load_state(str(tmp_path))
    assert not marker.exists()


def test_resume_needs_safetensors_weights(tmp_path):
    checkpoint.save_last(str(tmp_path), _FakeModel(), _FakeTokenizer(), _state())
    last = tmp_path / checkpoint.LAST
    (last / "model.safetensors").unlink()
    write_malicious_pickle(last / "pytorch_model.bin", tmp_path / "pwned")
    with pytest.raises(ValueError, match=f"{last} has no model.safetensors"):
        checkpoint.load_state(str(tmp_path))
    assert not (tmp_path / "pwned").exists()


def test_resume_refuses_a_pickled_state_of_earlier_versions(stsb_small, tmp_path):
    """`--resume` at a folder whose last/ holds a malicious trainer_state.pt (the old
    format): refused with the file named, before anything is loaded."""
    out = tmp_path / "out"
    (out / checkpoint.LAST).mkdir(parents=True)
    marker = tmp_path / "pwned"
    legacy = write_malicious_pickle(out / checkpoint.LAST / checkpoint.LEGACY_STATE_FILE, marker)
    with pytest.raises(ValueError, match=f"cannot resume from {legacy}: it is a pickle"):
        train_cross_encoder.run(["--format=stsb", f"--input={stsb_small}", f"--output={out}",
                                 *FAST, "--max_length=32", "--batch_size=8", "--max_steps=2",
                                 "--resume"])
    assert not marker.exists()
    # The payload was live: an unrestricted torch.load runs it.
    torch.load(legacy, weights_only=False)
    assert marker.read_text() == "ran"


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs CUDA (on a GPU machine: bash tests/bench/gpu_call.sh, step 0)")
def test_cuda_optimizer_and_rng_states_round_trip(tmp_path):
    model = torch.nn.Linear(4, 2).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 4, device="cuda")).sum().backward()
    optimizer.step()
    state = {**_state(), "optimizer": optimizer.state_dict(), "rng": checkpoint.rng_state()}
    assert "cuda" in state["rng"]
    checkpoint.save_last(str(tmp_path), _FakeModel(), _FakeTokenizer(), state)
    loaded = checkpoint.load_state(str(tmp_path))
    fresh = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fresh.load_state_dict(loaded["optimizer"])
    for p in model.parameters():
        for key, value in optimizer.state[p].items():
            assert torch.equal(fresh.state[p][key].cpu(), value.cpu()), key
    assert fresh.state[next(model.parameters())]["exp_avg"].device.type == "cuda"
    checkpoint.set_rng_state(loaded["rng"])
    draw = torch.rand(3, device="cuda")
    checkpoint.set_rng_state(state["rng"])
    assert torch.equal(draw, torch.rand(3, device="cuda"))
