"""The short-answer pair record and the seeded draws every source makes it with.

`AnswerPair` is one candidate answer judged against gold answers. The SQuAD pairs
(`squad_pairs`), the WES and EVOUNA pairs (`short_answers`) all build it, and the
command in `short_answers` mixes and writes it. Every random choice is a function of
the seed and a key (a question id, a title), never of the order of the input, so the
pairs do not change when the sources are read in another order or one at a time.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import NamedTuple

SOURCES = ("squad", "wes", "evouna")
KINDS = ("positive", "identical", "span_negative", "question_negative", "mined_negative",
         "near_miss_negative", "judged")
DEFAULT_SEED = 13
DEFAULT_IDENTICAL_SHARE = 0.1


class AnswerPair(NamedTuple):
    """One candidate answer judged against gold answers.

    Attributes:
        id: stable and unique: source, question id or title, kind, a counter.
        source: "squad", "wes" or "evouna".
        group: what the split is made by: the SQuAD article, the WES title, the EVOUNA
            question.
        split: train, dev or test.
        kind: how the pair was made (`KINDS`).
        question: the question (`wes_pairs.WES_QUESTION` for WES).
        candidate: the answer being judged.
        golds: the gold answers it is judged against (at least one).
        label: 1 equivalent (correct), 0 not.
    """

    id: str
    source: str
    group: str
    split: str
    kind: str
    question: str
    candidate: str
    golds: tuple[str, ...]
    label: int


def made(base: AnswerPair, kind: str, candidate: str, golds: Sequence[str], label: int,
         n: int = 0) -> AnswerPair:
    """A pair from its group's template: the id gains the kind and a counter."""
    return base._replace(id=f"{base.id}-{kind}-{n}", kind=kind, candidate=candidate,
                         golds=tuple(golds), label=label)


def seeded_rng(seed: int, *keys: str) -> random.Random:
    """A random generator determined by the seed and the keys alone."""
    digest = hashlib.sha256("\x00".join([str(seed), *keys]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def seeded_share(seed: int, key: str) -> float:
    """A deterministic number in [0, 1) for `key`."""
    digest = hashlib.sha256(f"{seed}\x00share\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
