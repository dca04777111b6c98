"""The window encoder (`SegmentEncoder`): exactly layouts.encode_batch's ids and segment
ids (the tokenizer's own for one and two segments), on real judge inputs and on the
edge cases of truncation, empty texts and mixed windows; the segment memo; the template
check that sends other templates to the tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import SHARED_DATA
from transforms.metrics.judge import judge_reference
from transforms.models import batching, layouts, loading
from transforms.models.encoding import SegmentEncoder
from transforms.training import evouna

EVOUNA = SHARED_DATA / "judgments" / "evouna" / "TQ.json"


@pytest.fixture(scope="module")
def tokenizer():
    return loading.load_tokenizer(loading.ModelSpec(loading.packaged_model_path()))


@pytest.fixture(scope="module")
def judge_inputs() -> list[tuple[str, str, str]]:
    rows = evouna.judged_answers(evouna.read_questions(str(EVOUNA)))[:1500]
    return [(r.prediction, judge_reference(r.prediction, r.references, "marked"), r.question)
            for r in rows]


def _reference(tokenizer, inputs, max_length) -> list[layouts.Encoded]:
    return layouts.encode_batch(tokenizer, [x if isinstance(x, tuple) else (x,) for x in inputs],
                                max_length)


def _assert_equal(batch: batching.TokenBatch, expected: list[layouts.Encoded]) -> None:
    assert batch.num_inputs == len(expected)
    for k, e in enumerate(expected):
        ids, types = batch.row(k)
        assert ids.tolist() == list(e.input_ids), k
        assert types.tolist() == list(e.token_type_ids), k


ODD = [("",), ("", ""), ("a",), ("x " * 600,), ("x " * 300, "y " * 300),
       ("y " * 100, "z " * 600, "q"), ("", "", ""), "", "  ", "x " * 700,
       ("café, naïve — “quoted”",), ("Ross Bagdasarian (1919–1972)", "David Seville")]


@pytest.mark.parametrize("max_length", [512, 64, 12])
def test_equal_to_layouts_on_judge_inputs_pairs_texts_and_odd_cases(tokenizer, judge_inputs,
                                                                    max_length):
    encoder = SegmentEncoder(tokenizer, max_length)
    assert encoder.assembles_templates  # MiniLM's template is BERT's
    pairs = [(a, g) for a, g, _ in judge_inputs[:400]]
    texts = [a for a, _, _ in judge_inputs[:400]]
    for inputs in (judge_inputs, pairs, texts, ODD, [*ODD, *judge_inputs[:50], *pairs[:50]]):
        _assert_equal(encoder.encode(inputs), _reference(tokenizer, inputs, max_length))


def test_segments_are_tokenized_once_and_the_memo_is_bounded(tokenizer, monkeypatch):
    encoder = SegmentEncoder(tokenizer, 128, memo_size=5)
    calls = []
    real = encoder._tokenize
    monkeypatch.setattr(encoder, "_tokenize", lambda texts: calls.append(list(texts))
                        or real(texts))
    inputs = [("an answer", "the gold", "the question?"), ("another", "the gold", "the question?")]
    first = encoder.encode(inputs)
    assert calls == [["an answer", "the gold", "the question?", "another"]]
    again = encoder.encode(inputs[::-1])
    assert len(calls) == 1  # all four segments in the memo
    assert again.row(0)[0].tolist() == first.row(1)[0].tolist()
    encoder.encode([("1", "2", "3")])  # 4 + 3 new segments > 5: the memo starts again
    assert len(encoder._memo) == 3
    # a window of memo hits and enough new segments to overflow: the memo starts again
    # with the window's texts, the hits included (dropping them raised KeyError)
    mixed = [("1", "2", "3"), ("4", "5", "6")]
    _assert_equal(encoder.encode(mixed), _reference(tokenizer, mixed, 128))
    assert set(encoder._memo) == {"1", "2", "3", "4", "5", "6"}
    unmemoised = SegmentEncoder(tokenizer, 128, memo_size=0)
    _assert_equal(unmemoised.encode(inputs), _reference(tokenizer, inputs, 128))
    assert unmemoised._memo == {}


class _Backend:
    """The Rust tokenizer seen through a proxy: the batch calls it was asked for, and
    without `encode_batch_fast` when `fast` is False (as in older tokenizers)."""

    def __init__(self, real, fast: bool) -> None:
        self._real, self._fast, self.calls = real, fast, []

    def __getattr__(self, name):
        if name == "encode_batch_fast" and not self._fast:
            raise AttributeError(name)
        if name.startswith("encode_batch"):
            self.calls.append(name)
        return getattr(self._real, name)


@pytest.mark.parametrize("fast", [True, False])
def test_the_batch_call_without_offsets_gives_the_same_ids(tokenizer, judge_inputs,
                                                           monkeypatch, fast):
    from transforms.models import encoding

    backend = _Backend(tokenizer.backend_tokenizer, fast)
    monkeypatch.setattr(encoding, "_backend", lambda _: backend)
    inputs = [*judge_inputs[:300], *ODD]
    _assert_equal(SegmentEncoder(tokenizer, 512, memo_size=0).encode(inputs),
                  _reference(tokenizer, inputs, 512))
    assert set(backend.calls) == {"encode_batch_fast" if fast else "encode_batch"}


def test_other_templates_go_to_the_tokenizer(tokenizer, judge_inputs, monkeypatch):
    """A tokenizer whose pair template is not `[CLS] a [SEP] b [SEP]` (here: the pair
    call is made to add one more SEP, as RoBERTa's does) is detected by the probe, and its
    one- and two-segment inputs take its own encoding; three segments are still
    assembled."""

    class Roberta:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def __call__(self, *args, **kwargs):
            out = self._inner(*args, **kwargs)
            if len(args) == 2 and kwargs.get("add_special_tokens", True):
                ids = out["input_ids"]
                sep = self._inner.sep_token_id
                if ids and isinstance(ids[0], list):
                    out["input_ids"] = [x + [sep] for x in ids]
                    out["token_type_ids"] = [t + [1] for t in out["token_type_ids"]]
                else:
                    out["input_ids"] = ids + [sep]
                    out["token_type_ids"] = out["token_type_ids"] + [1]
            return out

    odd = Roberta(tokenizer)
    encoder = SegmentEncoder(odd, 128)
    assert not encoder.assembles_templates
    inputs = [(a, g) for a, g, _ in judge_inputs[:20]] + judge_inputs[:20]
    _assert_equal(encoder.encode(inputs), _reference(odd, inputs, 128))


def test_bad_inputs_are_refused(tokenizer):
    encoder = SegmentEncoder(tokenizer, 64)
    for bad in ([("a", "b", "c", "d")], [("a", 3)], [["a", "b"]], [()]):
        with pytest.raises(ValueError, match="a text or a tuple of 1..3 texts"):
            encoder.encode(bad)
    with pytest.raises(ValueError, match="max_length must be >= 4"):
        SegmentEncoder(tokenizer, 3)
    with pytest.raises(ValueError, match=r"got \('a', 3\)"):  # an iterator is read once
        encoder.encode(iter([("a", "b"), ("a", 3)]))
    # subclasses of str and tuple are inputs too (checked one by one, not by exact type)
    text, pair = type("Text", (str,), {}), type("Pair", (tuple,), {})
    plain = [("a man", "the man"), "yes"]
    odd = [pair((text("a man"), "the man")), text("yes")]
    for expected, got in zip(encoder.encode(plain), encoder.encode(odd)):
        assert np.array_equal(expected, got)


def test_assembly_leaves_long_pairs_to_the_tokenizer(tokenizer):
    """`_assemble` truncates three segments itself and leaves one or two that need
    truncating empty (length 0), listed for the tokenizer's own call."""
    encoder = SegmentEncoder(tokenizer, 8)
    inputs = [("a b",), ("x " * 9, "y"), ("x " * 9,), ("a", "b c", "d " * 9), ("a", "b")]
    batch, over = encoder._assemble(inputs, encoder._segments(
        [t for segs in inputs for t in segs]))
    assert over == [1, 2]
    assert batch.lengths.tolist() == [4, 0, 0, 8, 5]
    _assert_equal(encoder.encode(inputs), _reference(tokenizer, inputs, 8))


def test_token_batch_padding_and_merge():
    pieces = [np.array([1, 2, 3]), np.array([4]), np.array([5, 6])]
    batch = batching.TokenBatch.from_pieces(pieces, np.array([0, 1, 1, 0, 0, 1]),
                                            np.array([3, 1, 2]))
    assert batch.num_inputs == 3 and batch.lengths.tolist() == [3, 1, 2]
    padded = batching.pad_tokens(batch, [2, 0], pad_id=9)
    assert padded.input_ids.tolist() == [[5, 6, 9], [1, 2, 3]]
    assert padded.attention_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert padded.token_type_ids.tolist() == [[0, 1, 0], [0, 1, 1]]
    # what a shared model's proxy pickles: 4 + 1 + 4 bytes a token, widened on the device
    assert (padded.input_ids.dtype, padded.attention_mask.dtype,
            padded.token_type_ids.dtype) == (np.int32, np.int8, np.int32)
    assert batching.pad_tokens(batch, [1], 0, with_types=False).token_type_ids is None
    other = batching.TokenBatch.from_pieces([np.array([7, 7, 7, 7])], np.array([2] * 4),
                                            np.array([4]))
    merged = batching.TokenBatch.merge(batch, other, np.array([1]))
    assert [merged.row(k)[0].tolist() for k in range(3)] == [[1, 2, 3], [7, 7, 7, 7], [5, 6]]
    assert merged.row(1)[1].tolist() == [2] * 4
    encoded = [layouts.Encoded((1, 2), (0, 0)), layouts.Encoded((3,), None, (0, 1))]
    back = batching.TokenBatch.from_encoded(encoded)
    assert back.row(1)[1].tolist() == [0] and back.spans == (None, (0, 1))


def test_plan_batches_sorts_longest_first_with_ties_in_order():
    lengths = np.array([3, 5, 3, 1, 5])
    assert batching.plan_batches(lengths, max_rows=2, max_tokens=100) == [[1, 4], [0, 2], [3]]
    assert batching.plan_batches([3, 5, 3, 1, 5], max_rows=9, max_tokens=10) == [
        [1, 4], [0, 2, 3]]
    assert json.dumps(batching.plan_batches([], 1, 1)) == "[]"
