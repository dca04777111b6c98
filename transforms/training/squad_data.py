"""KPQA keyphrase-predictor examples from SQuAD-format JSON.

One example per question: (question, answer sentence, answer span), where the answer
sentence is the sentence of the context that holds the first annotated answer (SQuAD
train has one answer per question; on the dev file the first of the annotators' answers
is used), or the run of sentences the span crosses. Sentences come from a rule-based
splitter (sentence-final punctuation followed by a capital, a digit or a quote; common
abbreviations and single initials do not end a sentence): no NLTK data is needed.

Labels follow the released KPQA training code: input `[CLS] question [SEP] sentence [SEP]`
(built by `layouts.encode_keyphrase_batch`, segment ids 0 then 1), words are the
sentence's whitespace-separated tokens, a word is a keyphrase word (K) when it overlaps
the answer span, and only the first word-piece of each sentence word carries a label;
question, special and continuation pieces get -100. Label ids: K = 0, O = 1 (the
release's order, which the scorer reads from `id2label`).

Articles are split into train and held-out sets by a seeded shuffle of article titles.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple

from transforms.models import layouts
from transforms.training.batching import IGNORE_INDEX, Features
from transforms.training.data_files import read_json

LABELS = ("K", "O")
KEYPHRASE, OTHER = 0, 1
_BOUNDARY = re.compile(r"[.!?][\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr prof gen col lt sgt capt rev gov sen rep vs etc inc ltd co corp "
    "no nos vol fig approx est dept univ mt ft ave blvd jan feb mar apr jun jul aug sep sept "
    "oct nov dec e.g i.e u.s u.k a.d b.c".split())


class KeyphraseExample(NamedTuple):
    """One (question, answer sentence, answer span) example.

    Attributes:
        qid: the SQuAD question id.
        article: the article title.
        question: the question.
        sentence: the answer sentence (or sentences the answer crosses).
        start: answer start, a character offset into `sentence`.
        end: answer end (exclusive).
    """

    qid: str
    article: str
    question: str
    sentence: str
    start: int
    end: int


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) character spans of the sentences of `text` (whitespace trimmed)."""
    spans, start = [], len(text) - len(text.lstrip())
    for m in _BOUNDARY.finditer(text, start):
        before = text[start:m.start()].rsplit(None, 1)
        last_word = before[-1].lower().rstrip(".") if before else ""
        if last_word in _ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha()):
            continue
        spans.append((start, m.start() + len(m.group().rstrip())))
        start = m.end()
    spans.append((start, len(text.rstrip())))
    return [(s, e) for s, e in spans if e > s]


def answer_sentence(context: str, start: int, end: int) -> tuple[str, int, int]:
    """The sentence(s) of `context` overlapping [start, end), and the span inside it."""
    spans = [s for s in sentence_spans(context) if s[0] < end and start < s[1]]
    if not spans:  # a span on whitespace between sentences: take the whole context
        spans = [(0, len(context))]
    lo, hi = min(spans[0][0], start), max(spans[-1][1], end)
    return context[lo:hi], start - lo, end - lo


def read_squad(path: str) -> list[dict[str, Any]]:
    """The `data` list (articles) of a SQuAD JSON file, plain or compressed
    (`data_files.open_text`).

    Raises:
        TrainingDataError: a missing, unreadable, cut short or corrupt file, or not JSON.
        ValueError: not SQuAD-shaped.
    """
    obj = read_json("SQuAD file", path)
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: expected a JSON object with a non-empty 'data' list of articles")
    for i, article in enumerate(data):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise ValueError(f"{path}: article {i} has no 'paragraphs' list")
    return data


def build_examples(articles: Sequence[dict[str, Any]], path: str = "<squad>"
                   ) -> tuple[list[KeyphraseExample], Counter]:
    """One example per answered question; counts of what was skipped and why.

    Raises:
        ValueError: a paragraph without a context string, a question without text.
    """
    examples, skipped = [], Counter()
    for a_index, article in enumerate(articles):
        title = str(article.get("title", f"article-{a_index}"))
        for p_index, paragraph in enumerate(article["paragraphs"]):
            context = paragraph.get("context")
            if not isinstance(context, str):
                raise ValueError(f"{path}: {title} paragraph {p_index} has no 'context' string")
            for qa in paragraph.get("qas", []):
                question = qa.get("question")
                if not isinstance(question, str) or not question.strip():
                    raise ValueError(f"{path}: {title} question {qa.get('id')} has no text")
                answers = qa.get("answers") or []
                if not answers:
                    skipped["no_answer"] += 1
                    continue
                text, start = answers[0].get("text"), answers[0].get("answer_start")
                if (not isinstance(text, str) or not isinstance(start, int) or not text.strip()
                        or context[start:start + len(text)] != text):
                    skipped["answer_not_in_context"] += 1
                    continue
                sentence, s, e = answer_sentence(context, start, start + len(text))
                examples.append(KeyphraseExample(str(qa.get("id", "")), title, question,
                                                 sentence, s, e))
    return examples, skipped


def split_articles(articles: Sequence[dict[str, Any]], n_train: int, n_eval: int,
                   seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Seeded shuffle of the articles; the first `n_train` train, the next `n_eval` are
    held out.

    Raises:
        ValueError: fewer articles than n_train + n_eval, or a count below 1.
    """
    if n_train < 1 or n_eval < 1:
        raise ValueError(f"need at least one train and one held-out article, got {n_train}, {n_eval}")
    if n_train + n_eval > len(articles):
        raise ValueError(f"{n_train} train + {n_eval} held-out articles requested but the file "
                         f"has {len(articles)}")
    order = list(range(len(articles)))
    random.Random(seed).shuffle(order)
    return ([articles[i] for i in order[:n_train]],
            [articles[i] for i in order[n_train:n_train + n_eval]])


def _word_index(sentence: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Per character, the index of its whitespace word (-1 on spaces); the word spans."""
    owner = [-1] * len(sentence)
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", sentence)]
    for w, (s, e) in enumerate(words):
        owner[s:e] = [w] * (e - s)
    return owner, words


def encode_examples(tokenizer: Any, examples: Sequence[KeyphraseExample], max_length: int
                    ) -> tuple[list[Features], Counter]:
    """Encodes examples with word-piece labels; drops those whose answer was truncated away.

    Returns:
        The features (label per token: K, O or -100) and counts of dropped examples.

    Raises:
        ValueError: the tokenizer has no offset mapping (a slow tokenizer), or its ids
            disagree with `layouts.encode_keyphrase_batch`.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("keyphrase labelling needs a fast tokenizer (character offsets)")
    pairs = [layouts.keyphrase_input(x.question, x.sentence) for x in examples]
    encoded = layouts.encode_keyphrase_batch(tokenizer, pairs, max_length)
    offsets = tokenizer([x.question for x in examples], [x.sentence for x in examples],
                        truncation=True, max_length=max_length, return_offsets_mapping=True)
    features, dropped = [], Counter()
    for j, (x, enc) in enumerate(zip(examples, encoded)):
        if tuple(offsets["input_ids"][j]) != enc.input_ids:
            raise ValueError("the tokenizer's offsets disagree with layouts.encode_keyphrase_batch")
        owner, words = _word_index(x.sentence)
        gold_words = {w for w, (s, e) in enumerate(words) if s < x.end and x.start < e}
        labels = [IGNORE_INDEX] * len(enc.input_ids)
        seen: set[int] = set()
        start, end = enc.span
        for k in range(start, end):
            char = offsets["offset_mapping"][j][k][0]
            w = owner[char] if char < len(owner) else -1
            if w < 0 or w in seen:
                continue
            seen.add(w)
            labels[k] = KEYPHRASE if w in gold_words else OTHER
        if KEYPHRASE not in labels:
            dropped["answer_truncated"] += 1
            continue
        features.append(Features(enc.input_ids, enc.token_type_ids, tuple(labels)))
    return features, dropped
