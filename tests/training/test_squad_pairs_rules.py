"""SQuAD pairs, rule by rule: the bounds of the answer kinds, leading words of names,
answer offsets that are checked before they are used, and every pair and skip count of a
hand-made article with the edge cases of a SQuAD file (no title, no context, no question,
empty answers, touching and misplaced spans)."""

from __future__ import annotations

import pytest

from transforms.training import squad_pairs as sp


@pytest.mark.parametrize("text, kind", [
    ("in the early years of 1884", "date"),  # six words: still a date
    ("in the very early years of 1884", "other"),  # seven: too long for a date or number
    ("a Super Bowl", "name"), ("an Apollo Mission", "name"),  # leading article skipped
    ("the Beatles", "name"),  # one article skipped, not two
    ("one, two, three, four, five, six, seven", "number"),  # number words, punctuated
    ("of the", "other"), ("Edison lamp", "other"),  # a name needs every word capitalised
    ("Alpha Beta Gamma Delta Epsilon Zeta Eta Theta", "name"),  # eight words
    ("Alpha Beta Gamma Delta Epsilon Zeta Eta Theta Iota", "other"),  # nine
    ("Super Bowl 5th", "name"),  # a word starting with a digit may sit in a name
    ("about 5 of the small ones", "number"), ("about 5 of the very small ones", "other"),
])
def test_answer_kind_bounds(text, kind):
    assert sp.answer_kind(text) == kind


def test_a_name_loses_a_leading_connector_or_number():
    context = "Von Braun built rockets. In 7 Super Bowl games he won."
    names = {context[s:e] for s, e, k in sp.passage_spans(context) if k == "name"}
    assert names == {"Braun", "Super Bowl"}


def test_underscores_in_a_title_are_spaces_for_the_split():
    for i in range(20):
        assert sp.group_split(f"Title_{i}_x") == sp.group_split(f"Title {i} x")


def _article() -> list[dict]:
    c1 = "The red brick house stood in 1884-1885 near the Old Mill."
    c2 = "A red-brick wall, alpha and omega."
    at1, at2 = c1.index, c2.index
    return [{"paragraphs": [  # no title: named by its position
        {"context": c1, "qas": [
            # spans that intersect ("red brick", "brick house"): equal, though neither
            # answer's words contain the other's
            {"id": "b1", "question": " What stood there? ", "answers": [
                {"text": "red brick", "answer_start": at1("red brick")},
                {"text": "brick house", "answer_start": at1("brick house")}]},
            # one answer each: "1884-" ends where the span "1885" starts, "-1885" starts
            # where "1884" ends (both spans are found twice: as a date and a number)
            {"id": "b2", "question": "When?", "answers": [
                {"text": "1884-", "answer_start": at1("1884-")}]},
            {"id": "b3", "question": "Until when?", "answers": [
                {"text": "-1885", "answer_start": at1("-1885")}]},
            {"id": "b4", "question": "Nothing?", "answers": []},
            {"id": "b5", "answers": [{"text": "Old Mill", "answer_start": at1("Old Mill")}]},
            {"id": "b6", "question": "Near what?", "answers": [  # a blank answer first
                {"text": " "}, {"text": "Old Mill", "answer_start": at1("Old Mill")}]}]},
        # no context, an answer without an offset
        {"qas": [{"id": "b7", "question": "Who?", "answers": [{"text": "Thomas Edison"}]}]},
        {"context": c2, "qas": [
            {"id": "b8", "question": "What wall?", "answers": [  # touching spans
                {"text": "red-", "answer_start": at2("red-")},
                {"text": "brick", "answer_start": at2("brick")}]},
            {"id": "b9", "question": "Which letters?", "answers": [  # "omega" misplaced
                {"text": "alpha", "answer_start": at2("alpha")},
                {"text": "omega", "answer_start": at2("alpha")}]}]},
        {}]},
        {"title": "No paragraphs"}]


def _pair(qid, kind, n, question, candidate, golds, label):
    return (f"squad-{qid}-{kind}-{n}", "squad", "article-0", "train", kind, question,
            candidate, golds, label)


B1_GOLDS = ("red brick", "brick house")
# One pair of each drawn kind per question (the defaults). b1 (kind "other"): no span
# negative; its question negatives are other questions' answers, of its kind first
# ("red-" shares "red" with a gold: drawn first, but related to it, so left out). b2, b3:
# the passage's other date (its date and number spans are one candidate); the other
# question's date. b6, b7 (names): no other name in the passage (none at all in b7's
# missing one); the other question's name. b8, b9: disjoint answers, other answers.
DEFAULT_PAIRS = [
    _pair("b1", "positive", 0, "What stood there?", "red brick", ("brick house",), 1),
    _pair("b1", "positive", 1, "What stood there?", "brick house", ("red brick",), 1),
    _pair("b1", "question_negative", 0, "What stood there?", "alpha", B1_GOLDS, 0),
    _pair("b2", "span_negative", 0, "When?", "1885", ("1884-",), 0),
    _pair("b2", "question_negative", 0, "When?", "-1885", ("1884-",), 0),
    _pair("b3", "span_negative", 0, "Until when?", "1884", ("-1885",), 0),
    _pair("b3", "question_negative", 0, "Until when?", "1884-", ("-1885",), 0),
    _pair("b6", "question_negative", 0, "Near what?", "Thomas Edison", ("Old Mill",), 0),
    _pair("b7", "question_negative", 0, "Who?", "Old Mill", ("Thomas Edison",), 0),
    _pair("b8", "question_negative", 0, "What wall?", "alpha", ("red-", "brick"), 0),
    _pair("b9", "question_negative", 0, "Which letters?", "red-", ("alpha", "omega"), 0),
]
SKIPPED = {"identical:single_answer": 4,  # b2, b3, b6, b7
           "positive:disjoint_answers": 4,  # b8, b9: two answers each
           "question:no_answer": 2,  # b4 (no answer), b5 (no question)
           "question_negative:none_found": 0,
           "span_negative:answer_kind_other": 3,  # b1, b8, b9
           "span_negative:none_found": 2}  # b6, b7


def test_every_pair_and_skip_of_a_hand_made_article():
    pairs, skipped = sp.squad_pairs(_article())
    assert [tuple(p) for p in pairs] == DEFAULT_PAIRS
    assert dict(skipped) == SKIPPED


def test_two_negatives_of_each_kind_are_drawn_in_a_seeded_order():
    pairs, skipped = sp.squad_pairs(_article(), span_negatives=2, question_negatives=2)
    # the same pairs, each question's second question negative after its first (of
    # another kind when its own has one); no second span negative anywhere
    second = {"b1": ("Old Mill", B1_GOLDS), "b2": ("red-", ("1884-",)),
              "b3": ("Thomas Edison", ("-1885",)), "b6": ("red-", ("Old Mill",)),
              "b7": ("1884-", ("Thomas Edison",)), "b8": ("Thomas Edison", ("red-", "brick")),
              "b9": ("red brick", ("alpha", "omega"))}
    expected = []
    for p in DEFAULT_PAIRS:
        expected.append(p)
        qid = p[0].split("-")[1]
        if p[4] == "question_negative":
            expected.append(_pair(qid, "question_negative", 1, p[5], *second[qid], 0))
    assert [tuple(p) for p in pairs] == expected
    # one of two span negatives missing in b2 and b3, both in b6 and b7
    assert dict(skipped) == {**SKIPPED, "span_negative:none_found": 6}
    # nine asked, six other questions' answers, fewer once related ones are left out
    many = sp.squad_pairs(_article(), question_negatives=9)[1]
    assert many["question_negative:none_found"] == 23


def test_a_seeded_share_of_all_identical_questions_gives_a_pair():
    qas = [{"id": f"i{k}", "question": "Capital?", "answers": [
        {"text": "Paris", "answer_start": 0}, {"text": "paris."}]} for k in range(1, 9)]
    articles = [{"title": "Capitals", "paragraphs": [{"context": "Paris is big.",
                                                      "qas": qas}]}]
    pairs, skipped = sp.squad_pairs(articles, identical_share=0.5, span_negatives=0,
                                    question_negatives=0)
    assert [p.id for p in pairs] == [f"squad-i{k}-identical-0" for k in (2, 5, 6, 7, 8)]
    assert tuple(pairs[0]) == ("squad-i2-identical-0", "squad", "Capitals", "train",
                               "identical", "Capital?", "Paris", ("paris.",), 1)
    assert dict(skipped) == {"identical:not_sampled": 3}


def test_each_span_negative_has_its_own_id():
    articles = [{"title": "Rain", "paragraphs": [{"context": "It rained in 1884 and in 1885.",
                                                  "qas": [{"id": "r1", "question": "When?",
                                                           "answers": [{"text": "1856"}]}]}]}]
    pairs, _ = sp.squad_pairs(articles, span_negatives=2, question_negatives=0)
    # both of the passage's other dates, in the seeded order, each with its own counter
    assert [(p.id, p.candidate, p.label) for p in pairs] == [
        ("squad-r1-span_negative-0", "1885", 0), ("squad-r1-span_negative-1", "1884", 0)]
