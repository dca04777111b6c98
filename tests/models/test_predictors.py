"""Predictors on the real packaged MiniLM: batching never changes a number."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transforms.models import layouts, loading, predictors, uses

SENTENCES = ["it is a man in the video", "he looks like he is in his early 20 ' s .",
             "yes", "", "the person in the video is a man .", "yes"]


@pytest.fixture(scope="module")
def spec():
    return loading.ModelSpec.of(None, device="cpu")


@pytest.fixture(scope="module")
def reference_model(spec):
    return loading.load_tokenizer(spec), loading.load_model(spec)


def _alone(tokenizer, model, text, layer):
    batch = tokenizer([text], return_tensors="pt", truncation=True)
    with torch.inference_mode():
        out = model(**batch, output_hidden_states=True)
    return batch["input_ids"][0].numpy(), out.hidden_states[layer][0].numpy()


def test_token_embeddings_match_unbatched_forward(spec, reference_model):
    tokenizer, model = reference_model
    # tiny token budget: several passes, each padded differently
    predictor = predictors.load_predictor(uses.encoder_use(spec, 4), max_batch_rows=3,
                                      max_batch_tokens=24, cache_size=0)
    outputs, stats = predictor.predict(SENTENCES)
    assert stats["forward_passes"] >= 3
    assert stats["inputs"] == len(SENTENCES)
    for text, out in zip(SENTENCES, outputs):
        ids, hidden = _alone(tokenizer, model, text, 4)
        np.testing.assert_array_equal(out.token_ids, ids)
        np.testing.assert_allclose(out.vectors, hidden, atol=2e-5)
        assert out.special.tolist() == [t in (101, 102) for t in ids]


def test_sentence_embeddings_agree_with_sentence_transformers(spec, minilm_path):
    from sentence_transformers import SentenceTransformer
    predictor = predictors.load_predictor(uses.encoder_use(spec, None, pooled=True))
    ours, _ = predictor.predict(SENTENCES[:5])
    theirs = SentenceTransformer(minilm_path, device="cpu").encode(SENTENCES[:5])
    ours = np.stack(ours)
    ours /= np.linalg.norm(ours, axis=1, keepdims=True)
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    np.testing.assert_allclose(ours @ ours.T, theirs @ theirs.T, atol=1e-5)


def test_cache_and_order(spec):
    predictor = predictors.load_predictor(uses.encoder_use(spec, None, pooled=True),
                                      cache_size=2)
    first, stats = predictor.predict(["a", "b", "c"])
    assert (stats["cache_hits"], stats["forward_passes"]) == (0, 1)
    again, stats = predictor.predict(["c", "b", "a"])
    # an LRU of two keeps b and c
    assert stats["cache_hits"] == 2 and stats["real_tokens"] == 3
    for x, y in zip(first, again[::-1]):
        np.testing.assert_allclose(x, y, atol=1e-6)


def test_cross_encoder_scores_match_a_direct_forward(cross_encoder_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    spec = loading.ModelSpec.of(cross_encoder_path, device="cpu")
    predictor = predictors.load_predictor(uses.cross_encoder_use(spec),
                                      max_batch_tokens=20)
    pairs = [("a man", "the man in the video"), ("yes", "no"), ("", "it is"),
             ("he is young", "he is in his early twenties , i think")]
    scores, _ = predictor.predict(pairs)
    tokenizer = AutoTokenizer.from_pretrained(cross_encoder_path)
    model = AutoModelForSequenceClassification.from_pretrained(cross_encoder_path).eval()
    for pair, score in zip(pairs, scores):
        with torch.inference_mode():
            logit = model(**tokenizer(*pair, return_tensors="pt")).logits[0, 0]
        assert score == pytest.approx(float(torch.sigmoid(logit)), abs=1e-6)
        assert 0.0 < score < 1.0


def test_bem_three_segments_on_a_three_type_model(bem_path):
    spec = loading.ModelSpec.of(bem_path, device="cpu")
    use = uses.cross_encoder_use(spec, segments=3)
    assert (use.activation, use.label) == ("softmax", 1)
    predictor = predictors.load_predictor(use)
    [score], _ = predictor.predict([layouts.bem_input("shakespeare", "william shakespeare",
                                                      "who wrote hamlet?")])
    assert 0.0 < score < 1.0


def test_three_segments_on_a_two_type_model_fail_or_clamp(cross_encoder_path):
    spec = loading.ModelSpec.of(cross_encoder_path, device="cpu")
    with pytest.raises(ValueError, match="type_vocab_size=2"):
        uses.cross_encoder_use(spec, segments=3)
    triple = ("shakespeare", "william shakespeare", "who wrote hamlet?")
    clamped = predictors.load_predictor(
        uses.cross_encoder_use(spec, segments=3, segment_overflow="clamp"))
    _, types = clamped.encode([triple]).row(0)
    assert types.tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]
    # the same input on an unclamped use (a bypassed check) fails on the worker
    strict = predictors.load_predictor(uses.ModelUse(
        "sequence_score", spec, activation="sigmoid", segments=3))
    with pytest.raises(ValueError, match="segment id 2"):
        strict.predict([triple])


def test_keyphrase_scores_cover_the_answer_word_pieces(keyphrase_path):
    from transformers import AutoModelForTokenClassification, AutoTokenizer
    spec = loading.ModelSpec.of(keyphrase_path, device="cpu")
    use = uses.token_classifier_use(spec)
    assert use.label == 0  # "K" in id2label
    predictor = predictors.load_predictor(use)
    [out], _ = predictor.predict([("who wrote hamlet?", "william shakespeare")])
    assert out.tokens == ("william", "shakespeare")
    tokenizer = AutoTokenizer.from_pretrained(keyphrase_path)
    model = AutoModelForTokenClassification.from_pretrained(keyphrase_path).eval()
    with torch.inference_mode():
        logits = model(**tokenizer("who wrote hamlet?", "william shakespeare",
                                   return_tensors="pt")).logits[0]
    expected = torch.softmax(logits, -1)[6:8, 0].numpy()
    np.testing.assert_allclose(out.scores, expected, atol=1e-6)


def test_predictor_rejects_wrong_input_types(spec):
    predictor = predictors.load_predictor(uses.encoder_use(spec, 1))
    with pytest.raises(ValueError, match="must be strings"):
        predictor.predict([("a", "b")])


def test_a_window_reaches_the_device_as_one_buffer_viewed_per_pass(spec):
    """Every pass of a window comes out of the one staging copy as its own int64 arrays,
    equal to the host's: with and without segment ids, passes of different shapes."""
    device = predictors.DeviceModel(uses.encoder_use(spec, None, pooled=True))
    rng = np.random.default_rng(0)
    passes = []
    for rows, longest, with_types in ((3, 7, True), (1, 1, False), (5, 2, True)):
        ids = rng.integers(0, 30_000, size=(rows, longest))
        mask = (np.arange(longest)[None, :] < rng.integers(1, longest + 1, rows)[:, None])
        types = rng.integers(0, 3, size=(rows, longest)) if with_types else None
        passes.append(predictors.batching.Padded(ids, mask.astype(np.int64), types))
    window = device._window(passes)
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
    return [predictors.batching.Padded(ids * mask, mask, np.zeros_like(ids))]


@pytest.mark.parametrize("implementation, form", [("sdpa", "bool"), ("eager", "additive")])
def test_a_prepared_mask_gives_the_outputs_of_the_plain_one(spec, implementation, form):
    """The 4-D mask that spares transformers' per-pass `.all()` is used only where the
    probe found it equal; and it is: per token and pooled, on padded passes."""
    for use in (uses.encoder_use(spec, None, pooled=True), uses.encoder_use(spec, 4)):
        device = predictors.DeviceModel(use)
        device.model.set_attn_implementation(implementation)
        device._mask_form = device._probe_mask_form()
        assert device._mask_form == form
        prepared = device.run(_passes())
        device._mask_form = None
        plain = device.run(_passes())
        mask = _passes()[0].attention_mask.astype(bool)
        for a, b in zip(prepared, plain):
            if a.ndim == 3:
                a, b = a[mask], b[mask]
            np.testing.assert_allclose(a, b, atol=2e-5)


def test_a_model_that_reads_the_prepared_mask_differently_keeps_the_plain_one(spec):
    class Inverted(predictors.DeviceModel):
        def _model_kwargs(self, kwargs):
            if self._mask_form is None:
                return kwargs
            return {**kwargs, "attention_mask": ~kwargs["attention_mask"][:, None, None, :].bool()}

    device = Inverted(uses.encoder_use(spec, None, pooled=True))
    assert device._mask_form is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_the_staging_buffer_is_reused_and_windows_stay_whole():
    """Page-locked, kept per thread and grown when a window needs more; each window's
    tensors equal its host arrays even when the next window reuses the buffer at once."""
    spec = loading.ModelSpec.of(None, device="cuda")
    device = predictors.DeviceModel(uses.encoder_use(spec, None, pooled=True))
    small, large = _passes(3, 5, seed=2), _passes(64, 300, seed=3)
    first = device._window(small)
    buffer = device._local.staging
    assert buffer.is_pinned()
    second = device._window(small)
    assert device._local.staging.data_ptr() == buffer.data_ptr()  # reused
    third = device._window(large)  # grown
    for window, passes in ((first, small), (second, small), (third, large)):
        for name, array in passes[0]._asdict().items():
            np.testing.assert_array_equal(window[0][name].cpu().numpy(), array)
