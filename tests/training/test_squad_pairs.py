"""SQuAD short-answer pairs: answer kinds, passage spans, relatedness, the
pairs of a hand-made article, and the hard negatives drawn first."""

from __future__ import annotations

import collections

import pytest

from transforms.training import answer_pair
from transforms.training import squad_pairs as sp


@pytest.mark.parametrize("text, kind", [
    ("1884", "date"), ("the 1990s", "date"), ("24 March 1879", "date"),
    ("20th century", "date"), ("February 7, 2016", "date"), ("300 BC", "date"),
    ("Sebastian Vettel", "name"), ("the Moscone Center", "name"),
    ("University of Chicago", "name"), ("Super Bowl 50", "name"),
    ("26", "number"), ("304,016", "number"), ("$5 million", "number"), ("six", "number"),
    ("One", "number"), ("six quadrangles", "number"),
    ("labor inputs", "other"), ("deflate", "other"), ("", "other"),
])
def test_answer_kind(text, kind):
    assert sp.answer_kind(text) == kind


def test_passage_spans_find_dates_numbers_and_names():
    context = ("However, Tesla moved to New York City in June 1884 with four letters. "
               "He earned $2.50 a day at the Edison Machine Works.")
    spans = {(context[s:e], k) for s, e, k in sp.passage_spans(context)}
    assert {("Tesla", "name"), ("New York City", "name"), ("June 1884", "date"),
            ("four", "number"), ("Edison Machine Works", "name")} <= spans
    assert not any(text.startswith("However") for text, _ in spans)


def test_names_keep_initials_and_stop_at_a_sentence_end():
    context = ("Tesla was born in Smiljan. He worked for Glenn L. Martin and the U.S. Army. "
               "In 1884 Super Bowl 50 was held.")
    names = {context[s:e] for s, e, k in sp.passage_spans(context) if k == "name"}
    assert names == {"Tesla", "Smiljan", "Glenn L. Martin", "U.S. Army", "Super Bowl 50"}


@pytest.mark.parametrize("a, b, expected", [
    ("Vettel", "Sebastian Vettel", True), ("the Broncos", "Broncos", True),
    ("George Washington", "George Bush", False), ("1994", "the 1990s", False),
    ("The", "anything", True),  # normalises to nothing: never a safe negative
])
def test_related(a, b, expected):
    assert sp.related(a, b) is expected and sp.related(b, a) is expected


def squad_article(title="Nikola_Tesla", ids="q"):
    """One article, four questions (ids `ids`1..4): overlapping, contained, identical,
    disjoint answers."""
    context = ("Tesla was born on 10 July 1856 in Smiljan. He moved to New York City in "
               "1884 and worked for Thomas Edison. Tesla died in 1943 at the New Yorker "
               "Hotel.")
    at = context.index
    return {"title": title, "paragraphs": [{"context": context, "qas": [
        {"id": f"{ids}1", "question": "When did Tesla move to New York?", "answers": [
            {"text": "1884", "answer_start": at("1884")},
            {"text": "in 1884", "answer_start": at("in 1884")}]},
        {"id": f"{ids}2", "question": "Who did Tesla work for?", "answers": [
            {"text": "Thomas Edison", "answer_start": at("Thomas Edison")},
            {"text": "Edison", "answer_start": at("Edison")},
            {"text": "Thomas Edison", "answer_start": at("Thomas Edison")}]},
        {"id": f"{ids}3", "question": "Where did Tesla die?", "answers": [
            {"text": "New Yorker Hotel", "answer_start": at("New Yorker Hotel")},
            {"text": "the New Yorker Hotel", "answer_start": at("the New Yorker Hotel")}]},
        {"id": f"{ids}4", "question": "What did Tesla do in New York?", "answers": [
            {"text": "worked for Thomas Edison", "answer_start": at("worked")},
            {"text": "Smiljan", "answer_start": at("Smiljan")}]},
    ]}]}


def test_squad_pairs_on_a_hand_made_article():
    pairs, skipped = sp.squad_pairs([squad_article()], identical_share=1.0)
    by = collections.defaultdict(list)
    for p in pairs:
        by[(p.id.split("-")[1], p.kind)].append(p)
        assert p.group == "Nikola_Tesla" and p.source == "squad"
    # q1: two distinct forms that overlap: two positives, each against the other.
    assert sorted((p.candidate, p.golds) for p in by[("q1", "positive")]) == [
        ("1884", ("in 1884",)), ("in 1884", ("1884",))]
    # Span negatives are dates of the same passage, away from the answers' spans.
    (neg,) = by[("q1", "span_negative")]
    assert neg.candidate in ("10 July 1856", "1943") and neg.label == 0
    assert neg.golds == ("1884", "in 1884")
    # q2's answers are names: another name of the passage, never one with "Edison".
    (neg,) = by[("q2", "span_negative")]
    assert neg.candidate in ("Tesla", "New York City", "Smiljan", "New Yorker Hotel")
    # q3 normalises to one form: an identical pair (share 1.0).
    (same,) = by[("q3", "identical")]
    assert (same.candidate, same.golds, same.label) == ("New Yorker Hotel",
                                                        ("the New Yorker Hotel",), 1)
    # q4's answers are disjoint spans: no positive; the first answer's kind is "other".
    assert not by[("q4", "positive")]
    assert skipped["positive:disjoint_answers"] == 2
    assert skipped["span_negative:answer_kind_other"] == 1
    # Other questions' answers: never one related to a gold of the question.
    for (_qid, kind), got in by.items():
        if kind.endswith("negative"):
            for p in got:
                assert not any(sp.related(p.candidate, g) for g in p.golds), p
    assert all(p.label == 0 for (_, k), ps in by.items() if "negative" in k for p in ps)
    # Deterministic; and the identical share 0 keeps none.
    assert sp.squad_pairs([squad_article()], identical_share=1.0)[0] == pairs
    assert not [p for p in sp.squad_pairs([squad_article()], identical_share=0.0)[0]
                if p.kind == "identical"]


# (title, question ids, its split at the default seed: sha256 of the seed and the title,
# underscores read as spaces, against 70/10/20); two spellings of one title, one split
SPLIT_ARTICLES = [("Nikola_Tesla", "t", "train"), ("Nikola Tesla", "n", "train"),
                  ("Oxygen", "o", "dev"), ("Apollo_program", "a", "test")]


def test_an_article_and_its_title_are_in_one_split():
    articles = [squad_article(title, ids) for title, ids, _ in SPLIT_ARTICLES]
    pairs, _ = sp.squad_pairs(articles, identical_share=1.0)
    assert {p.id.split("-")[1] for p in pairs} == {  # every question gave pairs
        f"{ids}{n}" for _, ids, _ in SPLIT_ARTICLES for n in range(1, 5)}
    by_article, by_title = collections.defaultdict(set), collections.defaultdict(set)
    for p in pairs:
        by_article[p.group].add(p.split)
        by_title[p.group.replace("_", " ")].add(p.split)
    assert by_article == {title: {split} for title, _, split in SPLIT_ARTICLES}
    assert by_title == {"Nikola Tesla": {"train"}, "Oxygen": {"dev"},
                        "Apollo program": {"test"}}
    # the proportions are the articles' shares
    assert {p.split for p in sp.squad_pairs(articles, proportions=(0, 1, 0))[0]} == {"dev"}


def test_negatives_sharing_a_word_with_the_gold_are_drawn_first():
    tiers = sp._shared_first([["Edison Machine Works", "Tesla", "New York City"],
                              ["Thomas Paine", "Smiljan"]], ["Thomas Edison"])
    assert tiers == [["Edison Machine Works"], ["Tesla", "New York City"], ["Thomas Paine"],
                     ["Smiljan"]]
    rng = answer_pair.seeded_rng
    picked = sp._pick(rng(1, "x"), tiers, ["Thomas Edison"], 2)
    assert picked[0] == "Edison Machine Works" and picked[1] in ("Tesla", "New York City")
    # "Thomas Edison" itself, or a part of it, is never a negative.
    assert sp._pick(rng(1, "x"), [["Edison", "Thomas Edison"]], ["Thomas Edison"], 2) == []
