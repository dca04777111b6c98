"""Exact model inputs of every layout, on hand-written examples (packaged MiniLM vocabulary:
the bert-base-uncased word-pieces)."""

from __future__ import annotations

import pytest

from transforms.models import layouts, loading

CLS, SEP = 101, 102
SHAKESPEARE, WILLIAM = 8101, 2520
WHO, WROTE, HAMLET, QMARK = 2040, 2626, 8429, 1029


@pytest.fixture(scope="module")
def tokenizer():
    return loading.load_tokenizer(loading.ModelSpec.of(None))


def test_pair_layout_sas_wes(tokenizer):
    segments = layouts.pair_input("Shakespeare", "William Shakespeare")
    assert segments == ("Shakespeare", "William Shakespeare")
    enc = layouts.encode(tokenizer, segments, max_length=512)
    # [CLS] shakespeare [SEP] william shakespeare [SEP]
    assert enc.input_ids == (CLS, SHAKESPEARE, SEP, WILLIAM, SHAKESPEARE, SEP)
    assert enc.token_type_ids == (0, 0, 0, 1, 1, 1)
    assert enc.span is None


def test_bem_layout_candidate_reference_question(tokenizer):
    segments = layouts.bem_input("Shakespeare", "William Shakespeare", "Who wrote Hamlet?")
    enc = layouts.encode(tokenizer, segments, max_length=512)
    # [CLS] shakespeare [SEP] william shakespeare [SEP] who wrote hamlet ? [SEP]
    assert enc.input_ids == (CLS, SHAKESPEARE, SEP, WILLIAM, SHAKESPEARE, SEP,
                             WHO, WROTE, HAMLET, QMARK, SEP)
    assert enc.token_type_ids == (0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2)


def test_square_layout_text_and_ids(tokenizer):
    segments = layouts.square_input("who wrote hamlet?", "shakespeare",
                                    ["william shakespeare"], ["marlowe"])
    assert segments == ("Question: who wrote hamlet? Target: shakespeare "
                        "Pos_Ref: william shakespeare Neg_Ref: marlowe",)
    enc = layouts.encode(tokenizer, segments, max_length=512)
    question, colon, target, po, s_, under, ref = 3160, 1024, 4539, 13433, 2015, 1035, 25416
    ne, g_, mar, lowe = 11265, 2290, 9388, 27663
    assert enc.input_ids == (
        CLS, question, colon, WHO, WROTE, HAMLET, QMARK, target, colon, SHAKESPEARE,
        po, s_, under, ref, colon, WILLIAM, SHAKESPEARE,
        ne, g_, under, ref, colon, mar, lowe, SEP)
    assert enc.token_type_ids == (0,) * 25


def test_square_text_several_references_in_order():
    text = layouts.square_text("q", "a", ["p1", "p2"], ["n1", "n2"])
    assert text == "Question: q Target: a Pos_Ref: p1 Pos_Ref: p2 Neg_Ref: n1 Neg_Ref: n2"
    assert layouts.square_text("q", "a", ["p"]) == "Question: q Target: a Pos_Ref: p"


def test_keyphrase_layout_with_question(tokenizer):
    [enc] = layouts.encode_keyphrase_batch(
        tokenizer, [layouts.keyphrase_input("who wrote hamlet?", "william shakespeare")], 512)
    # [CLS] who wrote hamlet ? [SEP] william shakespeare [SEP]
    assert enc.input_ids == (CLS, WHO, WROTE, HAMLET, QMARK, SEP, WILLIAM, SHAKESPEARE, SEP)
    assert enc.token_type_ids == (0, 0, 0, 0, 0, 0, 1, 1, 1)
    assert enc.span == (6, 8)


def test_keyphrase_layout_without_question_and_empty_answer(tokenizer):
    with_none, empty = layouts.encode_keyphrase_batch(
        tokenizer, [(None, "william shakespeare"), ("who?", "")], 512)
    assert with_none.input_ids == (CLS, WILLIAM, SHAKESPEARE, SEP)
    assert with_none.span == (1, 3)
    assert empty.input_ids == (CLS, WHO, QMARK, SEP, SEP)
    assert empty.span[0] == empty.span[1]


def test_bem_truncation_is_longest_first_earlier_on_ties(tokenizer):
    enc = layouts.encode(tokenizer, ("Shakespeare", "William Shakespeare", "Who wrote Hamlet?"),
                         max_length=8)
    # lengths 1, 2, 4 in a budget of 8 - 4 specials: 4 -> 3 -> 2, then the tie 2/2 cuts
    # the earlier (reference) segment: 1, 1, 2
    assert enc.input_ids == (CLS, SHAKESPEARE, SEP, WILLIAM, SEP, WHO, WROTE, SEP)
    assert enc.token_type_ids == (0, 0, 0, 1, 1, 2, 2, 2)


@pytest.mark.parametrize("max_length", [4, 5, 6, 7, 9, 12, 40])
def test_assembled_two_segments_truncate_like_the_tokenizer(tokenizer, max_length):
    a, b = "the quick brown fox jumps", "over the lazy dog today again"
    pieces = tokenizer([a, b], add_special_tokens=False)["input_ids"]
    ours = layouts._assemble(pieces, CLS, SEP, max_length)
    theirs = tokenizer(a, b, truncation=True, max_length=max_length)
    assert list(ours.input_ids) == theirs["input_ids"]
    assert list(ours.token_type_ids) == theirs["token_type_ids"]


def test_encode_batch_keeps_input_order_across_kinds(tokenizer):
    inputs = [("a",), ("a", "b", "c"), ("a", "b"), ("b",)]
    out = layouts.encode_batch(tokenizer, inputs, 512)
    assert [len(e.input_ids) for e in out] == [3, 7, 5, 3]
    assert out[3] == layouts.encode(tokenizer, ("b",), 512)


@pytest.mark.parametrize("bad", [["a", "b"], ("a", "b", "c", "d"), (), ("a", None)])
def test_encode_batch_rejects_malformed_inputs(tokenizer, bad):
    with pytest.raises(ValueError, match="tuple of 1..3 strings"):
        layouts.encode_batch(tokenizer, [bad], 512)


def test_three_segments_need_room(tokenizer):
    with pytest.raises(ValueError, match="cannot hold"):
        layouts.encode(tokenizer, ("a", "b", "c"), max_length=3)
