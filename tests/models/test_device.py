"""The device half of a model (transforms/models/device.py) on the packaged MiniLM: one
copy per window, the prepared attention mask where it gives the same outputs, and its
greedy match (transforms/models/matching.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transforms.models import batching, device, loading, matching, uses

cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA (on a GPU machine: bash tests/bench/gpu_call.sh, step 0)")


@pytest.fixture(scope="module")
def spec():
    return loading.ModelSpec.of(None, device="cpu")


def test_a_window_reaches_the_device_as_one_buffer_viewed_per_pass(spec):
    """Every pass of a window comes out of the one staging copy as its own int64 arrays,
    equal to the host's: with and without segment ids, passes of different shapes; extra
    index arrays come out of the same copy as int32 views of their shapes."""
    model = device.DeviceModel(uses.encoder_use(spec, None, pooled=True))
    rng = np.random.default_rng(0)
    passes = []
    for rows, longest, with_types in ((3, 7, True), (1, 1, False), (5, 2, True)):
        ids = rng.integers(0, 30_000, size=(rows, longest))
        mask = (np.arange(longest)[None, :] < rng.integers(1, longest + 1, rows)[:, None])
        types = rng.integers(0, 3, size=(rows, longest)) if with_types else None
        passes.append(batching.Padded(ids, mask.astype(np.int64), types))
    extra = [np.arange(7, dtype=np.int64), np.zeros(0, dtype=np.int64),
             rng.integers(0, 1 << 30, size=(3, 4))]
    plain, none = model._window(passes)
    assert none == []
    with_extra, views = model._window(passes, extra)
    for window in (plain, with_extra):
        assert len(window) == len(passes)
        for padded, tensors in zip(passes, window):
            expected = {k: v for k, v in padded._asdict().items() if v is not None}
            assert set(tensors) == set(expected)
            for name, array in expected.items():
                assert tensors[name].dtype == torch.int64
                np.testing.assert_array_equal(tensors[name].numpy(), array)
    assert len(views) == len(extra)
    for view, array in zip(views, extra):
        assert view.dtype == torch.int32 and view.shape == array.shape
        np.testing.assert_array_equal(view.numpy(), array)


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


@cuda
def test_on_a_gpu_the_staging_buffer_is_reused_and_windows_stay_whole():
    """Page-locked, kept per thread and grown when a window needs more; each window's
    tensors equal its host arrays even when the next window reuses the buffer at once."""
    spec = loading.ModelSpec.of(None, device="cuda")
    model = device.DeviceModel(uses.encoder_use(spec, None, pooled=True))
    small, large = _passes(3, 5, seed=2), _passes(64, 300, seed=3)
    first, _ = model._window(small)
    buffer = model._local.staging
    assert buffer.is_pinned()
    second, _ = model._window(small)
    assert model._local.staging.data_ptr() == buffer.data_ptr()  # reused
    third, _ = model._window(large)  # grown
    for window, passes in ((first, small), (second, small), (third, large)):
        for name, array in passes[0]._asdict().items():
            np.testing.assert_array_equal(window[0][name].cpu().numpy(), array)


def _old_match(model, passes, starts, lengths, pairs):
    """The greedy match as it was before it was made free of host-device waits (boolean
    masks, per-chunk copies of host indices): the reference the new one must equal bit
    for bit."""
    with torch.inference_mode():
        tables = []
        for padded in passes:
            kwargs = {name: torch.from_numpy(np.asarray(array, dtype=np.int64))
                      for name, array in padded._asdict().items() if array is not None}
            hidden = model._forward(kwargs)
            hidden = hidden / hidden.norm(dim=-1, keepdim=True)
            tables.append(hidden[kwargs["attention_mask"].bool()])
        dim = tables[0].shape[-1] if tables else 1
        table = torch.cat([*tables, torch.zeros(1, dim)])
        dim, blank = table.shape[1], table.shape[0] - 1
        cand_len, ref_len = lengths[pairs[:, 0]], lengths[pairs[:, 1]]
        cand_at = np.concatenate([[0], np.cumsum(cand_len)])
        ref_at = np.concatenate([[0], np.cumsum(ref_len)])
        cand_out = torch.empty(int(cand_at[-1]))
        ref_out = torch.empty(int(ref_at[-1]))
        order = np.lexsort((-ref_len, -cand_len))

        def gather(texts, sizes):
            columns = np.arange(int(sizes.max()))
            valid = columns[None, :] < sizes[:, None]
            index = np.where(valid, starts[texts][:, None] + columns[None, :], blank)
            return table[torch.from_numpy(index)], torch.from_numpy(valid)

        at = 0
        while at < len(order):
            width = int(cand_len[order[at]]) + int(ref_len[order[at:]].max())
            size = max(1, matching.MATCH_CHUNK_FLOATS // (width * dim))
            chunk = order[at:at + size]
            at += len(chunk)
            cand, cand_valid = gather(pairs[chunk, 0], cand_len[chunk])
            ref, ref_valid = gather(pairs[chunk, 1], ref_len[chunk])
            sim = torch.bmm(cand, ref.transpose(1, 2))
            sim.masked_fill_(~(cand_valid[:, :, None] & ref_valid[:, None, :]), -2.0)
            for out, best, valid, start in (
                    (cand_out, sim.amax(dim=2), cand_valid, cand_at),
                    (ref_out, sim.amax(dim=1), ref_valid, ref_at)):
                where = start[chunk][:, None] + np.arange(valid.shape[1])[None, :]
                out[torch.from_numpy(where)[valid]] = best[valid]
        return cand_out.numpy(), ref_out.numpy()


def _per_pair_maxima(model, passes, starts, lengths, pairs):
    """Each pair's best cosines by a plain loop in float64 numpy, from the passes' hidden
    states (a second, independent reference)."""
    vectors = []
    with torch.inference_mode():
        for padded in passes:
            kwargs = {name: torch.from_numpy(np.asarray(array, dtype=np.int64))
                      for name, array in padded._asdict().items() if array is not None}
            hidden = model._forward(kwargs).numpy().astype(np.float64)
            vectors.append(hidden[padded.attention_mask.astype(bool)])
    table = np.concatenate(vectors)
    table /= np.linalg.norm(table, axis=1, keepdims=True)
    cand_max, ref_max = [], []
    for c, r in pairs:
        sim = table[starts[c]:starts[c] + lengths[c]] @ table[starts[r]:starts[r] + lengths[r]].T
        cand_max.append(sim.max(axis=1))
        ref_max.append(sim.max(axis=0))
    return np.concatenate(cand_max), np.concatenate(ref_max)


@pytest.fixture(scope="module")
def match_model(spec):
    return device.DeviceModel(uses.encoder_use(spec, 4, task="token_match"))


def _predictor_match_arguments(match_model):
    """What a `Predictor` hands `DeviceModel.match` for real text pairs: pairs of very
    different lengths, a text paired with itself, texts shared between pairs; and the
    same pairs again (a window may repeat a pair when it comes from the metric directly)."""
    from transforms.models import predictors

    captured = {}

    class Recording:
        def info(self):
            return match_model.info()

        def match(self, *args):
            captured["args"] = args
            return match_model.match(*args)

    long = ("the man in the video walks into the kitchen , opens the fridge , takes out a "
            "carton of milk and pours himself a glass before sitting down at the table")
    inputs = [(long, "yes"), ("yes", long), (long, long), ("a man", "a man"),
              ("a man", "the man in the kitchen"), ("no", "yes , it is"), ("", "a man"),
              ("he is young", long)]
    predictor = predictors.Predictor(uses.encoder_use(match_model.use.spec, 4,
                                                      task="token_match"),
                                     model=Recording(), max_batch_tokens=64, cache_size=0)
    predictor.predict(inputs)
    passes, starts, lengths, pairs = captured["args"]
    assert len(passes) > 1
    return passes, starts, lengths, np.concatenate([pairs, pairs[:3]])


def _synthetic_match_arguments(seed: int = 4):
    """Passes of random ids of several shapes, one text of a single token among them, and
    random pairs (self pairs and repeats included)."""
    rng = np.random.default_rng(seed)
    passes = []
    for rows, longest in ((4, 12), (6, 5), (3, 1)):
        passes.append(_passes(rows, longest, seed=int(rng.integers(1000)))[0])
    lengths = np.concatenate([p.attention_mask.sum(axis=1) for p in passes])
    assert (lengths == 1).any()
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    n = len(lengths)
    pairs = np.concatenate([rng.integers(0, n, size=(20, 2)), np.stack([np.arange(n)] * 2, 1),
                            [[0, n - 1], [n - 1, 0], [0, n - 1]]]).astype(np.int64)
    return passes, starts.astype(np.int64), lengths.astype(np.int64), pairs


@pytest.mark.parametrize("chunk_floats", [1 << 25, 384 * 40 * 3, 500])
@pytest.mark.parametrize("arguments", ["predictor", "synthetic"])
def test_the_greedy_match_equals_the_old_one_bit_for_bit(match_model, monkeypatch,
                                                         chunk_floats, arguments):
    """One chunk, a few pairs per chunk, one pair per chunk: the same maxima as the match
    before the rewrite (the same gathers and batched products, so bit for bit), and a
    float64 loop over the pairs agrees to float32 rounding."""
    monkeypatch.setattr(matching, "MATCH_CHUNK_FLOATS", chunk_floats)
    args = (_predictor_match_arguments(match_model) if arguments == "predictor"
            else _synthetic_match_arguments())
    cand_max, ref_max = match_model.match(*args)
    old_cand, old_ref = _old_match(match_model, *args)
    assert cand_max.dtype == np.float32 and ref_max.dtype == np.float32
    np.testing.assert_array_equal(cand_max, old_cand)
    np.testing.assert_array_equal(ref_max, old_ref)
    loop_cand, loop_ref = _per_pair_maxima(match_model, *args)
    np.testing.assert_allclose(cand_max, loop_cand, atol=2e-6)
    np.testing.assert_allclose(ref_max, loop_ref, atol=2e-6)


def test_a_match_of_no_pairs_is_empty(match_model):
    passes, starts, lengths, _ = _synthetic_match_arguments()
    cand_max, ref_max = match_model.match(passes, starts, lengths, np.zeros((0, 2), np.int64))
    assert cand_max.shape == (0,) and ref_max.shape == (0,)


@cuda
def test_on_a_gpu_the_match_never_makes_the_host_wait(match_model, monkeypatch):
    """Everything of `match` but the copy of its two results back runs under CUDA's sync
    debug mode "error", which raises at any host-device wait (a boolean mask, a copy from
    ordinary memory, `.item()`): the passes, the index copy, every chunk. Same maxima as
    on the CPU, up to half precision's rounding (a GPU loads the model in bfloat16, whose
    8-bit mantissa moves a cosine by a few thousandths)."""
    spec = loading.ModelSpec.of(None, device="cuda")
    model = device.DeviceModel(uses.encoder_use(spec, 4, task="token_match"))
    assert model._mask_form is not None  # else transformers' mask helper waits per pass
    monkeypatch.setattr(matching, "MATCH_CHUNK_FLOATS", 384 * 40 * 3)  # several chunks
    for args in (_predictor_match_arguments(match_model), _synthetic_match_arguments()):
        expected = model.match(*args)  # warm: kernels, memory pool, staging buffer
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            cand_max, ref_max = model._match_on_device(*args)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert cand_max.is_cuda and ref_max.is_cuda
        np.testing.assert_array_equal(cand_max.cpu().numpy(), expected[0])
        np.testing.assert_array_equal(ref_max.cpu().numpy(), expected[1])
        on_cpu = match_model.match(*args)
        np.testing.assert_allclose(expected[0], on_cpu[0], atol=1e-2)
        np.testing.assert_allclose(expected[1], on_cpu[1], atol=1e-2)


def test_the_match_calls_no_operator_that_waits_for_the_device(match_model):
    """The CPU's view of the GPU test above: no operator that makes the host wait on a
    GPU (a boolean mask's `nonzero`, `.item()`, `masked_select`, an index or a scatter by
    a boolean mask) runs before the results are copied back, model passes included."""
    from torch.utils._python_dispatch import TorchDispatchMode

    waiting = {torch.ops.aten.nonzero.default, torch.ops.aten._local_scalar_dense.default,
               torch.ops.aten.masked_select.default}

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            indices = args[1] if func in (torch.ops.aten.index.Tensor,
                                          torch.ops.aten.index_put_.default,
                                          torch.ops.aten.index_put.default) else ()
            if func in waiting or any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                      for i in indices):
                self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    for args in (_predictor_match_arguments(match_model), _synthetic_match_arguments()):
        with Record() as record:
            match_model._match_on_device(*args)
        assert record.seen == []
        with Record() as record:  # the check sees them: the old match
            _old_match(match_model, *args)
        assert "aten.index.Tensor" in record.seen


def test_a_window_too_large_for_int32_indices_is_refused(monkeypatch):
    passes, starts, lengths, pairs = _synthetic_match_arguments()
    matching.plan_match(passes, starts, lengths, pairs, 384)
    monkeypatch.setattr(matching, "INT32_MAX", sum(p.attention_mask.size for p in passes))
    with pytest.raises(ValueError, match="int32"):
        matching.plan_match(passes, starts, lengths, pairs, 384)


def test_a_copy_of_more_integers_than_int32_indexes_is_refused(spec, monkeypatch):
    model = device.DeviceModel(uses.encoder_use(spec, None, pooled=True))
    arrays = [np.arange(6, dtype=np.int32).reshape(2, 3), np.ones(4, dtype=np.int8)]
    views = model._copy(arrays)
    assert [v.tolist() for v in views] == [a.tolist() for a in arrays]
    monkeypatch.setattr(matching, "INT32_MAX", 9)
    with pytest.raises(ValueError, match="more than int32 can index"):
        model._copy(arrays)
