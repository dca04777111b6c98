"""Predictors on the real packaged MiniLM: batching never changes a number."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transforms.models import layouts, loading, predictors, torch_models, uses

SENTENCES = ["it is a man in the video", "he looks like he is in his early 20 ' s .",
             "yes", "", "the person in the video is a man .", "yes"]


@pytest.fixture(scope="module")
def spec():
    return loading.ModelSpec.of(None, device="cpu")


@pytest.fixture(scope="module")
def reference_model(spec):
    return loading.load_tokenizer(spec), torch_models.load_model(spec)


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


# An LRU of two, call after call: the inputs, then the cache hits. Each one-character
# input is 3 tokens ([CLS] x [SEP]), so a call's real tokens are 3 per miss.
LRU_CALLS = [
    (["a", "b", "c"], 0),  # a, the oldest, is evicted: b and c are kept
    (["c", "b"], 2),  # both kept; b is now the most recently used
    (["a"], 0),  # a comes back and evicts c, the least recently used (not b)
    (["b", "a"], 2),
    (["c"], 0),
]


def test_cache_and_order(spec):
    predictor = predictors.load_predictor(uses.encoder_use(spec, None, pooled=True),
                                      cache_size=2)
    expected = {}
    for inputs, hits in LRU_CALLS:
        outputs, stats = predictor.predict(inputs)
        expected = expected or dict(zip(inputs, outputs))  # the first call computes all
        misses = len(inputs) - hits
        assert (stats["cache_hits"], stats["forward_passes"], stats["real_tokens"]) == (
            hits, int(misses > 0), 3 * misses), inputs
        for x, y in zip(inputs, outputs):  # in input order, cached or computed
            np.testing.assert_allclose(y, expected[x], atol=1e-6)


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
