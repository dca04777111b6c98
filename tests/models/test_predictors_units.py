"""The host side of a `Predictor` against a stand-in device model (no torch forward): its
defaults by device and task, the counts `predict` returns, which pass row is whose
output, the LRU cache and the checks of its inputs. The real MiniLM tokenizer; the
device model's outputs are made from the token ids it is given, so every expected value
is worked out from the tokenizer's ids."""

from __future__ import annotations

import numpy as np
import pytest

from transforms.models import loading, predictors
from transforms.models.uses import ModelUse

SPEC = loading.ModelSpec.of(None, device="cpu")
SCORE_USE = ModelUse("sequence_score", SPEC, activation="sigmoid", segments=2)
TEXT_USE = ModelUse("sentence_embedding", SPEC, layer=6)
TOKENS_USE = ModelUse("token_embeddings", SPEC, layer=6)


class Device:
    """`DeviceModel.run` in outline: per pass, each row's sum of ids (sequence scores),
    [sum, count] of its real tokens (sentence embeddings) or its ids as one-wide vectors
    (token embeddings), its ids as its scores (token scores)."""

    def __init__(self, task: str, device: str = "cpu", type_vocab_size: int = 2,
                 positions: int | None = 512):
        self.task, self.device = task, device
        self.type_vocab_size, self.positions = type_vocab_size, positions
        self.passes: list = []

    def info(self):
        return {"max_position_embeddings": self.positions,
                "type_vocab_size": self.type_vocab_size, "device": self.device}

    def run(self, passes):
        self.passes += list(passes)
        out = []
        for p in passes:
            ids = (p.input_ids * p.attention_mask).astype(np.float64)
            if self.task == "sequence_score":
                out.append(ids.sum(axis=1))
            elif self.task == "sentence_embedding":
                out.append(np.stack([ids.sum(axis=1), p.attention_mask.sum(axis=1)], axis=1))
            elif self.task == "token_scores":
                out.append(ids)
            else:
                out.append(ids[:, :, None])
        return out


def test_defaults_follow_the_device_and_the_task():
    cpu = predictors.Predictor(SCORE_USE, Device("sequence_score"))
    assert (cpu.max_batch_rows, cpu.max_batch_tokens, cpu.cache_size) == (2048, 4096, 200_000)
    assert (cpu.device, cpu.max_length, cpu.pad_id, cpu.uses_token_types) == (
        "cpu", 512, 0, True)
    assert cpu._special_ids.tolist() == [101, 102]
    gpu = predictors.Predictor(TEXT_USE, Device("sentence_embedding", "cuda:0",
                                                positions=128))
    assert (gpu.max_batch_tokens, gpu.cache_size, gpu.device, gpu.max_length) == (
        65536, 50_000, "cuda:0", 128)
    given = predictors.Predictor(TOKENS_USE, Device("token_embeddings", "cuda:0"),
                                 max_batch_rows=3, max_batch_tokens=10, cache_size=0)
    assert (given.max_batch_rows, given.max_batch_tokens, given.cache_size) == (3, 10, 0)


def test_each_input_gets_its_own_rows_output_and_the_counts_add_up():
    device = Device("sequence_score")
    predictor = predictors.Predictor(SCORE_USE, device, max_batch_rows=2, cache_size=0)
    pairs = [("a man", "the man"), ("yes", "no"), ("a man", "the man"),
             ("he is young", "he is in his early twenties")]
    ids = {p: predictor.tokenizer(*p)["input_ids"] for p in dict.fromkeys(pairs)}
    outputs, stats = predictor.predict(pairs)
    assert outputs == [float(sum(ids[p])) for p in pairs]
    assert all(isinstance(x, float) for x in outputs)
    # each distinct pair once: 7, 5 and 12 tokens, in passes of at most 2 rows by length
    assert [len(v) for v in ids.values()] == [7, 5, 12]
    assert [p.input_ids.shape for p in device.passes] == [(2, 12), (1, 5)]
    for p in device.passes:  # padded with the pad id 0, segment ids passed on
        assert not p.input_ids[p.attention_mask == 0].any()
        assert p.token_type_ids is not None and p.token_type_ids.max() == 1
    assert stats == {"inputs": 4, "cache_hits": 0, "forward_passes": 2,
                     "real_tokens": 7 + 5 + 12, "padded_tokens": 2 * 12 + 5}


def test_the_cache_keeps_the_most_recent_outputs():
    device = Device("sentence_embedding")
    predictor = predictors.Predictor(TEXT_USE, device, cache_size=2)
    first, stats = predictor.predict(["a", "b", "a"])
    assert stats["cache_hits"] == 0 and len(device.passes) == 1
    assert [x.tolist() for x in first] == [[101 + 1037 + 102, 3], [101 + 1038 + 102, 3],
                                           [101 + 1037 + 102, 3]]
    again, stats = predictor.predict(["b", "a"])
    assert stats == {"inputs": 2, "cache_hits": 2, "forward_passes": 0, "real_tokens": 0,
                     "padded_tokens": 0}
    np.testing.assert_array_equal(again[0], first[1])
    predictor.predict(["c"])  # evicts "b", the least recently used
    assert predictor.predict(["a"])[1]["cache_hits"] == 1
    assert predictor.predict(["b"])[1]["cache_hits"] == 0


def test_token_embeddings_are_cut_to_each_inputs_tokens():
    predictor = predictors.Predictor(TOKENS_USE, Device("token_embeddings"), cache_size=0)
    [short, long], _ = predictor.predict(["yes", "he is young"])
    assert short.token_ids.tolist() == [101, 2748, 102]
    assert short.vectors[:, 0].tolist() == [101.0, 2748.0, 102.0]
    assert short.special.tolist() == [True, False, True]
    assert long.vectors.shape == (5, 1) and long.vectors.flags["C_CONTIGUOUS"]


def test_inputs_of_the_wrong_shape_are_refused():
    text = predictors.Predictor(TEXT_USE, Device("sentence_embedding"))
    with pytest.raises(ValueError, match="^encoder inputs must be strings$"):
        text.predict(["a", ("b",)])
    score = predictors.Predictor(SCORE_USE, Device("sequence_score"))
    with pytest.raises(ValueError, match=r"a cross-encoder input is a tuple of 1..3 strings, "
                                         r"got 'a man'"):
        score.predict([("a", "b"), "a man"])
    three = ModelUse("sequence_score", SPEC, activation="sigmoid", segments=3)
    strict = predictors.Predictor(three, Device("sequence_score", type_vocab_size=2))
    with pytest.raises(ValueError, match="segment id 2 needs type_vocab_size > 2; the "
                                         "model has 2"):
        strict.encode([("a", "b", "c")])
    one_type = predictors.Predictor(three, Device("sequence_score", type_vocab_size=1))
    with pytest.raises(ValueError, match="the model has 1"):
        one_type.encode([("a", "b")])
    assert strict.encode([("a", "b")]).types.max() == 1  # two segments fit two types
    # a model without token types (a tokenizer that gives none): segments never checked
    one_type.uses_token_types = False
    assert one_type.encode([("a", "b")]).types.max() == 1


def test_token_scores_cover_the_answer_word_pieces():
    use = ModelUse("token_scores", SPEC, label=0)
    predictor = predictors.Predictor(use, Device("token_scores"), cache_size=0)
    [out], _ = predictor.predict([("who wrote hamlet?", "william shakespeare")])
    answer = predictor.tokenizer("william shakespeare", add_special_tokens=False)
    assert out.tokens == ("william", "shakespeare")
    assert out.token_ids.tolist() == answer["input_ids"]
    assert out.scores.dtype == np.float32
    assert out.scores.tolist() == [float(t) for t in answer["input_ids"]]



class Matcher(Device):
    """`DeviceModel.match` in outline: the texts' tokens are the passes' real tokens in
    pass and row order, text i's at `starts[i]`; a token's best "cosine" is 1.0 when the
    other side has its id, else 0.0."""

    def match(self, passes, starts, lengths, pairs):
        self.passes += list(passes)
        flat = np.concatenate([p.input_ids[k, :p.attention_mask[k].sum()]
                               for p in passes for k in range(len(p.input_ids))])
        texts = [flat[s:s + n] for s, n in zip(starts, lengths)]
        cand, ref = [], []
        for c, r in pairs:
            cand.append(np.isin(texts[c], texts[r]).astype(np.float32))
            ref.append(np.isin(texts[r], texts[c]).astype(np.float32))
        return np.concatenate(cand), np.concatenate(ref)


def test_each_pair_is_matched_on_its_own_texts_tokens():
    use = ModelUse("token_match", SPEC, layer=6)
    device = Matcher("token_match")
    predictor = predictors.Predictor(use, device, max_batch_tokens=8, cache_size=0)
    pairs = [("a man", "the man"), ("yes", "a man"), ("he is young", "yes"),
             ("a man", "the man")]
    matches, stats = predictor.predict(pairs)
    assert len(device.passes) > 1  # texts in several passes, longest first
    # the distinct texts, each encoded once: 4 + 4 + 3 + 5 tokens
    assert stats["real_tokens"] == 16 and stats["inputs"] == 4
    ids = {t: predictor.tokenizer(t)["input_ids"] for p in pairs for t in p}
    for (c, r), m in zip(pairs, matches):
        assert m.cand_ids.tolist() == ids[c] and m.ref_ids.tolist() == ids[r]
        assert m.cand_max.tolist() == [float(t in ids[r]) for t in ids[c]]
        assert m.ref_max.tolist() == [float(t in ids[c]) for t in ids[r]]
        assert m.cand_special.tolist() == [t in (101, 102) for t in ids[c]]
        assert m.ref_special.tolist() == [t in (101, 102) for t in ids[r]]
    with pytest.raises(ValueError, match=r"a token_match input is a \(candidate, reference\) "
                                         r"pair of texts, got \('a',\)"):
        predictor.predict([("a",)])


def test_three_segments_are_clamped_to_the_models_token_types():
    three = ModelUse("sequence_score", SPEC, activation="sigmoid", segments=3,
                     segment_overflow="clamp")
    two = predictors.Predictor(three, Device("sequence_score", type_vocab_size=2))
    ids = two.tokenizer("a", "b")["input_ids"] + two.tokenizer("c")["input_ids"][1:]
    assert two.encode([("a", "b", "c")]).types.tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert two.encode([("a", "b", "c")]).ids.tolist() == ids
    one = predictors.Predictor(three, Device("sequence_score", type_vocab_size=1))
    assert one.encode([("a", "b", "c")]).types.tolist() == [0] * 7


@pytest.mark.parametrize("pad_token, pad_id", [("[unused0]", 1), (None, 0)])
def test_passes_are_padded_with_the_tokenizers_pad_id(monkeypatch, pad_token, pad_id):
    import copy

    tokenizer = copy.deepcopy(loading.load_tokenizer(SPEC))
    tokenizer.pad_token = pad_token
    monkeypatch.setattr(predictors.loading, "load_tokenizer", lambda spec: tokenizer)
    device = Device("sentence_embedding")
    predictor = predictors.Predictor(TEXT_USE, device)
    assert predictor.pad_id == pad_id
    predictor.predict(["yes", "he is young"])
    [padded] = device.passes
    assert padded.input_ids[padded.attention_mask == 0].tolist() == [pad_id] * 2


def test_load_predictor_gives_the_use_its_device_model(monkeypatch):
    made = []

    def device_model(use):
        made.append(use)
        return Device(use.task)

    monkeypatch.setattr(predictors, "DeviceModel", device_model)
    predictor = predictors.load_predictor(SCORE_USE, max_batch_rows=3)
    assert made == [SCORE_USE] and predictor.use is SCORE_USE
    assert isinstance(predictor.model, Device) and predictor.max_batch_rows == 3
