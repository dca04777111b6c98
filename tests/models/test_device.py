"""The device half of a model (transforms/models/device.py) on the packaged MiniLM: one
copy per window, the prepared attention mask where it gives the same outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transforms.models import batching, device, loading, uses


@pytest.fixture(scope="module")
def spec():
    return loading.ModelSpec.of(None, device="cpu")


def test_a_window_reaches_the_device_as_one_buffer_viewed_per_pass(spec):
    """Every pass of a window comes out of the one staging copy as its own int64 arrays,
    equal to the host's: with and without segment ids, passes of different shapes."""
    model = device.DeviceModel(uses.encoder_use(spec, None, pooled=True))
    rng = np.random.default_rng(0)
    passes = []
    for rows, longest, with_types in ((3, 7, True), (1, 1, False), (5, 2, True)):
        ids = rng.integers(0, 30_000, size=(rows, longest))
        mask = (np.arange(longest)[None, :] < rng.integers(1, longest + 1, rows)[:, None])
        types = rng.integers(0, 3, size=(rows, longest)) if with_types else None
        passes.append(batching.Padded(ids, mask.astype(np.int64), types))
    window = model._window(passes)
    assert len(window) == len(passes)
    for padded, tensors in zip(passes, window):
        expected = {k: v for k, v in padded._asdict().items() if v is not None}
        assert set(tensors) == set(expected)
        for name, array in expected.items():
            assert tensors[name].dtype == torch.int64
            np.testing.assert_array_equal(tensors[name].numpy(), array)


def _passes(rows: int = 5, longest: int = 9, seed: int = 1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 20_000, size=(rows, longest))
    ids[:, 0] = 101
    lengths = rng.integers(1, longest + 1, rows)
    lengths[0] = longest
    mask = (np.arange(longest)[None, :] < lengths[:, None]).astype(np.int64)
    return [batching.Padded(ids * mask, mask, np.zeros_like(ids))]


@pytest.mark.parametrize("implementation, form", [("sdpa", "bool"), ("eager", "additive")])
def test_a_prepared_mask_gives_the_outputs_of_the_plain_one(spec, implementation, form):
    """The 4-D mask that spares transformers' per-pass `.all()` is used only where the
    probe found it equal; and it is: per token and pooled, on padded passes."""
    for use in (uses.encoder_use(spec, None, pooled=True), uses.encoder_use(spec, 4)):
        model = device.DeviceModel(use)
        model.model.set_attn_implementation(implementation)
        model._mask_form = model._probe_mask_form()
        assert model._mask_form == form
        prepared = model.run(_passes())
        model._mask_form = None
        plain = model.run(_passes())
        mask = _passes()[0].attention_mask.astype(bool)
        for a, b in zip(prepared, plain):
            if a.ndim == 3:
                a, b = a[mask], b[mask]
            np.testing.assert_allclose(a, b, atol=2e-5)


def test_a_model_that_reads_the_prepared_mask_differently_keeps_the_plain_one(spec):
    class Inverted(device.DeviceModel):
        def _model_kwargs(self, kwargs):
            if self._mask_form is None:
                return kwargs
            return {**kwargs, "attention_mask": ~kwargs["attention_mask"][:, None, None, :].bool()}

    model = Inverted(uses.encoder_use(spec, None, pooled=True))
    assert model._mask_form is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_the_staging_buffer_is_reused_and_windows_stay_whole():
    """Page-locked, kept per thread and grown when a window needs more; each window's
    tensors equal its host arrays even when the next window reuses the buffer at once."""
    spec = loading.ModelSpec.of(None, device="cuda")
    model = device.DeviceModel(uses.encoder_use(spec, None, pooled=True))
    small, large = _passes(3, 5, seed=2), _passes(64, 300, seed=3)
    first = model._window(small)
    buffer = model._local.staging
    assert buffer.is_pinned()
    second = model._window(small)
    assert model._local.staging.data_ptr() == buffer.data_ptr()  # reused
    third = model._window(large)  # grown
    for window, passes in ((first, small), (second, small), (third, large)):
        for name, array in passes[0]._asdict().items():
            np.testing.assert_array_equal(window[0][name].cpu().numpy(), array)
