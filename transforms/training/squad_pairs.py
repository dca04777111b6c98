"""SQuAD short-answer pairs: answer kinds, passage spans, and the pairs mined from them.

A SQuAD question has several annotators' answers, each a span of the passage. From the
v1.1 dev file this module makes (candidate, golds, question, label) pairs (`AnswerPair`)
for the judge (`short_answers` mixes them with the WES and EVOUNA pairs and writes
them). Per question (`squad_pairs`):
- positives (`positive`): each distinct answer (SQuAD-normalised) against the question's
  other distinct answers that overlap it in the passage (their spans intersect, or one's
  tokens contain the other's); answers that name disjoint spans ("reduced productivity"
  and "distribution and price disruptions") are not taken as equivalent, and a question
  whose answers are all disjoint gives no positive;
- identical answers (`identical`): a question whose answers all normalise to one string
  gives its first answer against the others for a seeded share of questions only
  (`identical_share`, 10%): the trivial case must be seen, not dominate;
- span negatives (`span_negative`): other spans of the same passage (`passage_spans`) of
  the same kind (`answer_kind`: date, number, name) as the first answer, not overlapping
  any answer's span and not containing or contained in any answer (tokens; `related`);
- question negatives (`question_negative`): answers of other questions about the same
  article, of the same kind when there is one, with the same exclusion.
Among the candidates of a kind, those sharing a content word with a gold (not all of
it: that would be containment) are drawn first: the hard negatives that lexical
metrics score high ("Edison Machine Works" against "Thomas Edison").
Negatives are judged against every distinct answer of the question.

An article goes to train, dev or test by a hash of (seed, normalised title)
(`group_split`: `evouna.question_split`, 70/10/20 by default), so no article is in two
splits.
"""

from __future__ import annotations

import collections
import functools
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.metrics.squad import normalize_answer
from transforms.training import evouna
from transforms.training.answer_pair import (
    DEFAULT_IDENTICAL_SHARE,
    DEFAULT_SEED,
    AnswerPair,
    made,
    seeded_rng,
    seeded_share,
)

DEFAULT_PROPORTIONS = (70, 10, 20)

_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
           "December")
_NUMBER_WORDS = ("one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|"
                 "fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|"
                 "fifty|sixty|seventy|eighty|ninety|hundred|thousand|million|billion|"
                 "trillion|dozen|half")
_DATE_TEST = re.compile(
    rf"\b(?:{_MONTHS})\b|\b(?:1\d{{3}}|20\d{{2}})s?\b|\b\d{{1,2}}(?:st|nd|rd|th)[- ]century\b"
    r"|\bcentur(?:y|ies)\b|\b\d+\s*(?:BC|BCE|AD|CE)\b", re.IGNORECASE)
_DATE_SPAN = re.compile(
    rf"\b(?:(?:\d{{1,2}}\s+)?(?:{_MONTHS})(?:\s+\d{{1,2}})?,?\s+)?(?:1\d{{3}}|20\d{{2}})s?\b"
    rf"|\b(?:{_MONTHS})\s+\d{{1,2}}\b"
    r"|\b\d{1,2}(?:st|nd|rd|th)[- ]centur(?:y|ies)\b")
_NUMBER_TEST = re.compile(rf"\d|\b(?:{_NUMBER_WORDS})\b", re.IGNORECASE)
_NUMBER_WORD = re.compile(rf"(?:{_NUMBER_WORDS})(?:-(?:{_NUMBER_WORDS}))*", re.IGNORECASE)
_NUMBER_SPAN = re.compile(
    rf"(?<![\w.,])\d[\d,]*(?:\.\d+)?(?:\s?(?:%|percent|{_NUMBER_WORDS}))?\b"
    rf"|\b(?:{_NUMBER_WORDS})(?:[- ](?:{_NUMBER_WORDS}))*\b", re.IGNORECASE)
# A name: capitalised words (an initial keeps its period: "Glenn L. Martin", "U.S."),
# connectors inside; a word's own period ends the name, so it never crosses a sentence.
_NAME_WORD = r"(?:[A-Z]\.(?:[A-Z]\.)*|[A-Z][\w'’&-]*)"
_NAME_SPAN = re.compile(
    rf"\b{_NAME_WORD}(?:\s+(?:(?:of|the|de|von|van|da|del|du|la|le|for|on)\s+)*"
    rf"(?:{_NAME_WORD}|\d[\w-]*))*")
# Connectors that may sit inside a name ("University of Chicago") but not start it.
_NAME_CONNECTORS = frozenset("of the and de von van da del du la le for on & a an".split())
# Capitalised words that start sentences rather than names.
_SENTENCE_STARTERS = frozenset(
    "the a an in on at by for from with as after before during however this that these "
    "those it its he she they his her their when while although but and or of to since "
    "many some most all there other another each both such several following".split())
# Words too common to make a negative "hard" by sharing them with the gold.
_CONTENT_STOPWORDS = frozenset("of and in on at to for by with from or is was were be as "
                               "it its that this".split())

def answer_kind(text: str) -> str:
    """The kind of a short answer, a simple heuristic: "date" (a month, a year from 1000
    to 2099, a decade "1990s", a century, BC/AD), else "name" (every word capitalised or
    a digit, connectors such as "of" inside, a leading article allowed), else "number" (a
    digit or a number word), else "other"."""
    text = text.strip()
    if not text:
        return "other"
    words = text.split()
    if _DATE_TEST.search(text) and len(words) <= 6:
        return "date"
    while words and words[0].lower() in ("the", "a", "an"):
        words = words[1:]
    if words and all(_NUMBER_WORD.fullmatch(w.strip(".,")) for w in words):
        return "number"
    if words and words[0][:1].isupper() and len(words) <= 8 and all(
            w[:1].isupper() or w[:1].isdigit() or w.lower() in _NAME_CONNECTORS
            for w in words) and not all(w[:1].isdigit() for w in words):
        return "name"
    if _NUMBER_TEST.search(text) and len(words) <= 6:
        return "number"
    return "other"


def passage_spans(context: str) -> list[tuple[int, int, str]]:
    """Candidate answer spans of a passage: dates, numbers and capitalised names, as
    (start, end, kind); a name loses leading sentence-starting words ("However") and
    numbers ("In 1884 Super Bowl 50" -> "Super Bowl 50")."""
    spans = []
    for pattern in (_DATE_SPAN, _NUMBER_SPAN, _NAME_SPAN):
        for m in pattern.finditer(context):
            start, end = m.start(), m.start() + len(m.group().rstrip(",;:'’-"))
            if pattern is _NAME_SPAN:
                words = list(re.finditer(r"\S+", context[start:end]))
                while words and (words[0].group().lower() in _SENTENCE_STARTERS
                                 or words[0].group().lower() in _NAME_CONNECTORS
                                 or words[0].group()[0].isdigit()):
                    words.pop(0)
                if not words:
                    continue
                start += words[0].start()
            if end > start:
                spans.append((start, end, answer_kind(context[start:end])))
    return spans


@functools.lru_cache(maxsize=1 << 16)
def _tokens(text: str) -> frozenset[str]:
    # Memoised: an article's spans are compared against every question's answers (6 M
    # calls on SQuAD dev, 100 s of 130 without the memo).
    return frozenset(normalize_answer(text).split())


def related(a: str, b: str) -> bool:
    """Whether two answers may name the same thing: they normalise to the same string,
    or one's tokens contain the other's ("Vettel", "Sebastian Vettel"). Empty answers
    are related to everything (never a safe negative)."""
    ta, tb = _tokens(a), _tokens(b)
    return not ta or not tb or ta <= tb or tb <= ta

def group_split(name: str, seed: int = DEFAULT_SEED,
                proportions: Sequence[int] = DEFAULT_PROPORTIONS) -> str:
    """The split of an article or title (underscores read as spaces)."""
    return evouna.question_split(name.replace("_", " "), seed, proportions)


def _distinct(answers: Sequence[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    """One (text, start) per normalised form, first occurrence first."""
    seen, out = set(), []
    for text, start in answers:
        key = normalize_answer(text)
        if key not in seen:
            seen.add(key)
            out.append((text, start))
    return out


def _overlap(a: tuple[str, int | None], b: tuple[str, int | None]) -> bool:
    """Two answers of one question name the same thing: their spans intersect or one's
    tokens contain the other's."""
    (ta, sa), (tb, sb) = a, b
    if sa is not None and sb is not None and sa < sb + len(tb) and sb < sa + len(ta):
        return True
    return related(ta, tb)


def _answers(qa: Mapping[str, Any], context: str) -> list[tuple[str, int | None]]:
    """The answers of a question with their start in the passage (None when the offset
    does not point at the text)."""
    out = []
    for ans in qa.get("answers") or []:
        text, start = ans.get("text"), ans.get("answer_start")
        if not isinstance(text, str) or not text.strip():
            continue
        ok = isinstance(start, int) and context[start:start + len(text)] == text
        out.append((text.strip(), start if ok else None))
    return out


def squad_pairs(articles: Sequence[Mapping[str, Any]], seed: int = DEFAULT_SEED,
                proportions: Sequence[int] = DEFAULT_PROPORTIONS,
                identical_share: float = DEFAULT_IDENTICAL_SHARE, span_negatives: int = 1,
                question_negatives: int = 1) -> tuple[list[AnswerPair], collections.Counter]:
    """The SQuAD pairs of every article (see the module docstring).

    Args:
        articles: the `data` list of a SQuAD file (`squad_data.read_squad`).
        seed: split and sampling seed.
        proportions: train, dev, test shares of the articles.
        identical_share: the share of all-identical questions that give a pair.
        span_negatives: span negatives per question (at most).
        question_negatives: other questions' answers per question (at most).

    Returns:
        The pairs, in file order, and counts of what was skipped and why.
    """
    pairs: list[AnswerPair] = []
    skipped: collections.Counter = collections.Counter()
    for a_index, article in enumerate(articles):
        title = str(article.get("title", f"article-{a_index}"))
        split = group_split(title, seed, proportions)
        questions = []
        for paragraph in article.get("paragraphs", []):
            context = paragraph.get("context") or ""
            for qa in paragraph.get("qas", []):
                answers = _answers(qa, context)
                if answers and isinstance(qa.get("question"), str):
                    questions.append((str(qa.get("id")), qa["question"].strip(), context,
                                      answers))
                else:
                    skipped["question:no_answer"] += 1
        others = [(qid, answers[0][0], answer_kind(answers[0][0]))
                  for qid, _, _, answers in questions]
        for qid, question, context, answers in questions:
            base = AnswerPair(f"squad-{qid}", "squad", title, split, "", question, "", (), 0)
            distinct = _distinct(answers)
            golds = [t for t, _ in distinct]
            if len(distinct) == 1:
                if len(answers) > 1 and seeded_share(seed, qid) < identical_share:
                    pairs.append(made(base, "identical", answers[0][0],
                                     [t for t, _ in answers[1:]], 1))
                else:
                    skipped["identical:not_sampled" if len(answers) > 1
                            else "identical:single_answer"] += 1
            else:
                for n, a in enumerate(distinct):
                    equal = [t for t, s in distinct if (t, s) != a and _overlap(a, (t, s))]
                    if equal:
                        pairs.append(made(base, "positive", a[0], equal, 1, n))
                    else:
                        skipped["positive:disjoint_answers"] += 1
            rng = seeded_rng(seed, "squad", qid)
            kind = answer_kind(answers[0][0])
            if span_negatives:
                if kind == "other":
                    skipped["span_negative:answer_kind_other"] += 1
                else:
                    taken = _pick(rng, _shared_first(
                        [_span_candidates(context, kind, answers)], golds), golds,
                        span_negatives)
                    skipped["span_negative:none_found"] += span_negatives - len(taken)
                    pairs += [made(base, "span_negative", c, golds, 0, n)
                              for n, c in enumerate(taken)]
            if question_negatives:
                tiers = ([t for other, t, k in others if other != qid and k == kind],
                         [t for other, t, k in others if other != qid and k != kind])
                taken = _pick(rng, _shared_first(tiers, golds), golds, question_negatives)
                skipped["question_negative:none_found"] += question_negatives - len(taken)
                pairs += [made(base, "question_negative", c, golds, 0, n)
                          for n, c in enumerate(taken)]
    return pairs, skipped

def _span_candidates(context: str, kind: str,
                     answers: Sequence[tuple[str, int | None]]) -> list[str]:
    """The passage's spans of `kind` that overlap no answer's span."""
    placed = [(s, s + len(t)) for t, s in answers if s is not None]
    return [context[s:e] for s, e, k in passage_spans(context)
            if k == kind and not any(s < pe and ps < e for ps, pe in placed)]


@functools.lru_cache(maxsize=1 << 16)
def _content_words(text: str) -> frozenset[str]:
    return _tokens(text) - _CONTENT_STOPWORDS


def _shared_first(tiers: Sequence[Sequence[str]], golds: Sequence[str]) -> list[list[str]]:
    """Each tier cut in two, the candidates that share a content word with a gold first:
    the hardest negatives ("Edison Machine Works" for "Thomas Edison") are taken when a
    passage or an article has them."""
    words = frozenset().union(*(_content_words(g) for g in golds))
    out = []
    for tier in tiers:
        shared, rest = [], []
        for c in tier:
            (shared if _content_words(c) & words else rest).append(c)
        out += [shared, rest]
    return out


def _pick(rng: random.Random, tiers: Sequence[Sequence[str]], golds: Sequence[str],
          n: int) -> list[str]:
    """Up to n candidates, distinct after normalisation and related to no gold, drawn at
    random from the first tier, then the next (the preferred kind first)."""
    seen, out = set(), []
    for tier in tiers:
        tier = list(tier)
        rng.shuffle(tier)
        for c in tier:
            key = normalize_answer(c)
            if key and key not in seen and not any(related(c, g) for g in golds):
                seen.add(key)
                out.append(c)
                if len(out) == n:
                    return out
    return out
