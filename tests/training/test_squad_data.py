"""Keyphrase examples from real SQuAD: sentences, article split, word-piece labels."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.training.conftest import SQUAD
from transforms.models import layouts, loading
from transforms.training.batching import IGNORE_INDEX
from transforms.training.squad_data import (
    KEYPHRASE,
    OTHER,
    answer_sentence,
    build_examples,
    encode_examples,
    read_squad,
    sentence_spans,
    split_articles,
)


@pytest.fixture(scope="module")
def tokenizer():
    return loading.load_tokenizer(loading.ModelSpec(loading.packaged_model_path()))


@pytest.mark.parametrize("text, sentences", [
    ("One. Two!  Three?", ["One.", "Two!", "Three?"]),
    ("The U.S. Army won in Jan. 2016. Then Dr. J. Smith left.",
     ["The U.S. Army won in Jan. 2016.", "Then Dr. J. Smith left."]),
    ('He said "Stop." Then 3 left.', ['He said "Stop."', "Then 3 left."]),
    ("version 2.0 shipped. it was lower case", ["version 2.0 shipped. it was lower case"]),
    ("  padded  ", ["padded"]),
    ("", []),
])
def test_sentence_spans(text, sentences):
    assert [text[s:e] for s, e in sentence_spans(text)] == sentences


def test_answer_sentence_and_spans_across_a_boundary():
    context = "Alpha beta. Gamma delta. Epsilon."
    assert answer_sentence(context, 12, 17) == ("Gamma delta.", 0, 5)
    sentence, s, e = answer_sentence(context, 6, 17)  # "beta. Gamma"
    assert sentence == "Alpha beta. Gamma delta." and sentence[s:e] == "beta. Gamma"


def test_examples_of_the_real_dev_file(squad_articles):
    examples, skipped = build_examples(squad_articles[:2])
    questions = sum(len(p["qas"]) for a in squad_articles[:2] for p in a["paragraphs"])
    assert len(examples) == questions and not skipped
    first = examples[0]
    assert first.sentence[first.start:first.end] == "Denver Broncos"
    assert first.sentence.startswith("The American Football Conference (AFC) champion")
    assert all(x.sentence[x.start:x.end] for x in examples)


def test_article_split_is_seeded_and_disjoint(squad_articles):
    train, held = split_articles(squad_articles, 40, 8, seed=13)
    assert len(train) == 40 and len(held) == 8
    assert not {a["title"] for a in train} & {a["title"] for a in held}
    again = split_articles(squad_articles, 40, 8, seed=13)
    assert [a["title"] for a in again[1]] == [a["title"] for a in held]
    assert [a["title"] for a in split_articles(squad_articles, 40, 8, seed=14)[1]] != \
        [a["title"] for a in held]
    with pytest.raises(ValueError, match="has 48"):
        split_articles(squad_articles, 45, 8, seed=0)


def test_labels_on_first_word_piece_of_answer_words(squad_articles, tokenizer):
    examples, _ = build_examples(squad_articles[:1])
    features, dropped = encode_examples(tokenizer, examples[:50], 96)
    assert len(features) + sum(dropped.values()) == 50
    encoded = layouts.encode_keyphrase_batch(
        tokenizer, [(x.question, x.sentence) for x in examples[:1]], 96)[0]
    f = features[0]
    assert (f.input_ids, f.token_type_ids) == (encoded.input_ids, encoded.token_type_ids)
    start, end = encoded.span
    assert all(label == IGNORE_INDEX for label in f.label[:start] + f.label[end:])
    pieces = tokenizer.convert_ids_to_tokens(list(f.input_ids))
    keyphrase = [pieces[k] for k, label in enumerate(f.label) if label == KEYPHRASE]
    assert keyphrase == ["denver", "broncos"]
    # Continuation pieces and the punctuation glued to a word carry no label.
    assert all(f.label[k] == IGNORE_INDEX for k in range(start, end) if pieces[k].startswith("##"))
    assert f.label.count(OTHER) == len(examples[0].sentence.split()) - 2


def test_truncated_answers_are_dropped_and_counted(squad_articles, tokenizer):
    examples, _ = build_examples(squad_articles[:1])
    features, dropped = encode_examples(tokenizer, examples, 24)
    assert dropped["answer_truncated"] > 0
    assert len(features) + dropped["answer_truncated"] == len(examples)
    assert all(KEYPHRASE in f.label for f in features)


def test_bad_squad_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_squad(str(tmp_path / "missing.json"))
    (tmp_path / "x.json").write_text('{"data": []}')
    with pytest.raises(ValueError, match="non-empty 'data' list"):
        read_squad(str(tmp_path / "x.json"))
    (tmp_path / "y.json.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="SQuAD file .*y.json.gz: cannot be read: BadGzipFile"):
        read_squad(str(tmp_path / "y.json.gz"))
    with gzip.open(SQUAD, "rt") as f:
        article = json.load(f)["data"][0]
    broken = {"title": "t", "paragraphs": [{"qas": article["paragraphs"][0]["qas"]}]}
    with pytest.raises(ValueError, match="no 'context' string"):
        build_examples([broken], "f.json")
