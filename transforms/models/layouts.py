"""Exact model inputs of the cross-encoder metrics, shared by scoring and training.

Two halves: text layouts (example -> a tuple of 1..3 text segments, the hashable model
input that metrics request) and encodings (segments -> token ids and segment ids for a
given tokenizer). The trainers build their inputs with the same functions, so a
trained model and its scorer cannot disagree on the layout.

| layout | segments | encoded as (BERT vocabulary) | segment ids |
|---|---|---|---|
| pair (SAS, WES) | (prediction, reference) | `[CLS] p [SEP] r [SEP]` | 0.. 1.. |
| BEM | (candidate, reference, question) | `[CLS] c [SEP] r [SEP] q [SEP]` | 0.. 1.. 2.. |
| SQuArE | (`Question: q Target: a Pos_Ref: r1 ... Neg_Ref: n1 ...`,) | `[CLS] text [SEP]` | 0.. |
| KPQA keyphrases | (question, answer) | `[CLS] q [SEP] a [SEP]` | 0.. 1.. |

One and two segments use the tokenizer's own template (so RoBERTa or DeBERTa checkpoints
get theirs); three segments are assembled BERT-style from the tokenizer's CLS and SEP ids,
each segment and its closing SEP carrying the segment's index. Truncation to `max_length`
is longest-first: one token at a time from the end of the currently longest segment (the
earlier one on ties), which for two segments is what Hugging Face tokenizers do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

Segments = tuple[str, ...]


class Encoded(NamedTuple):
    """One encoded model input.

    Attributes:
        input_ids: word-piece ids, special tokens included.
        token_type_ids: segment id per token, or None for tokenizers without them.
        span: [start, end) of the answer word-pieces (KPQA keyphrase inputs), else None.
    """

    input_ids: tuple[int, ...]
    token_type_ids: tuple[int, ...] | None
    span: tuple[int, int] | None = None


def pair_input(prediction: str, reference: str) -> Segments:
    """The SAS / WES cross-encoder input: (prediction, reference)."""
    return (prediction, reference)


def bem_input(candidate: str, reference: str, question: str) -> Segments:
    """The BEM input: candidate, reference, question (Bulian et al. 2022)."""
    return (candidate, reference, question)


def square_text(question: str, answer: str, positives: Sequence[str],
                negatives: Sequence[str] = ()) -> str:
    """`Question: q Target: a Pos_Ref: r1 ... Pos_Ref: rn Neg_Ref: s1 ... Neg_Ref: sm`."""
    parts = [f"Question: {question}", f"Target: {answer}"]
    parts += [f"Pos_Ref: {r}" for r in positives]
    parts += [f"Neg_Ref: {s}" for s in negatives]
    return " ".join(parts)


def square_input(question: str, answer: str, positives: Sequence[str],
                 negatives: Sequence[str] = ()) -> Segments:
    """The SQuArE input: one segment holding `square_text`."""
    return (square_text(question, answer, positives, negatives),)


def keyphrase_input(question: str | None, answer: str) -> tuple[str | None, str]:
    """The KPQA keyphrase-predictor input; question None gives `[CLS] a [SEP]`."""
    return (question, answer)


def _truncate_longest_first(lengths: list[int], budget: int) -> list[int]:
    lengths = list(lengths)
    excess = sum(lengths) - budget
    while excess > 0:
        lengths[lengths.index(max(lengths))] -= 1
        excess -= 1
    return lengths


def _special_ids(tokenizer: Any) -> tuple[int, int]:
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    if cls_id is None or sep_id is None:
        raise ValueError(
            f"three-segment layouts need a tokenizer with CLS and SEP tokens; "
            f"{type(tokenizer).__name__} has cls={cls_id}, sep={sep_id}")
    return cls_id, sep_id


def _assemble(pieces: Sequence[Sequence[int]], cls_id: int, sep_id: int,
              max_length: int) -> Encoded:
    budget = max_length - 1 - len(pieces)
    if budget < 0:
        raise ValueError(f"max_length {max_length} cannot hold {len(pieces)} segments")
    keep = _truncate_longest_first([len(p) for p in pieces], budget)
    ids, types = [cls_id], [0]
    for index, (piece, n) in enumerate(zip(pieces, keep)):
        ids += [*piece[:n], sep_id]
        types += [index] * (n + 1)
    return Encoded(tuple(ids), tuple(types))


def encode_batch(tokenizer: Any, inputs: Sequence[Segments], max_length: int) -> list[Encoded]:
    """Encodes cross-encoder inputs (1, 2 or 3 segments each) in as few tokenizer calls
    as possible.

    Raises:
        ValueError: an input that is not a tuple of 1..3 strings.
    """
    out: list[Encoded | None] = [None] * len(inputs)
    groups: dict[int, list[int]] = {}
    for i, segs in enumerate(inputs):
        if (not isinstance(segs, tuple) or not 1 <= len(segs) <= 3
                or not all(isinstance(s, str) for s in segs)):
            raise ValueError(f"a cross-encoder input is a tuple of 1..3 strings, got {segs!r}")
        groups.setdefault(len(segs), []).append(i)
    for n, idx in groups.items():
        if n <= 2:
            columns = [[inputs[i][k] for i in idx] for k in range(n)]
            enc = tokenizer(*columns, truncation=True, max_length=max_length)
            types = enc.get("token_type_ids")
            for j, i in enumerate(idx):
                out[i] = Encoded(tuple(enc["input_ids"][j]),
                                 tuple(types[j]) if types is not None else None)
        else:
            cls_id, sep_id = _special_ids(tokenizer)
            flat = [s for i in idx for s in inputs[i]]
            pieces = tokenizer(flat, add_special_tokens=False)["input_ids"]
            for j, i in enumerate(idx):
                out[i] = _assemble(pieces[3 * j: 3 * j + 3], cls_id, sep_id, max_length)
    return out  # type: ignore[return-value]


def encode(tokenizer: Any, segments: Segments, max_length: int) -> Encoded:
    """Encodes one cross-encoder input (see `encode_batch`)."""
    return encode_batch(tokenizer, [segments], max_length)[0]


def encode_keyphrase_batch(tokenizer: Any, inputs: Sequence[tuple[str | None, str]],
                           max_length: int) -> list[Encoded]:
    """Encodes KPQA keyphrase inputs `[CLS] q [SEP] a [SEP]`, segment ids 0 then 1.

    The segment ids follow the released KPQA *training* code (question part 0, answer
    part and its SEP 1); its inference script also gave [CLS] segment 1, which the model
    never saw in training, and is not copied. `span` marks the answer word-pieces.

    Raises:
        ValueError: an input that is not (question or None, answer).
    """
    with_q = [i for i, x in enumerate(inputs) if x[0] is not None]
    without_q = [i for i, x in enumerate(inputs) if x[0] is None]
    out: list[Encoded | None] = [None] * len(inputs)
    for idx, columns in ((with_q, 2), (without_q, 1)):
        if not idx:
            continue
        for i in idx:
            q, a = inputs[i]
            if not isinstance(a, str) or (q is not None and not isinstance(q, str)):
                raise ValueError(f"a keyphrase input is (question or None, answer), got {inputs[i]!r}")
        args = [[inputs[i][1] for i in idx]] if columns == 1 else \
            [[inputs[i][0] for i in idx], [inputs[i][1] for i in idx]]
        enc = tokenizer(*args, truncation=True, max_length=max_length)
        types = enc.get("token_type_ids")
        answer_seq = columns - 1
        for j, i in enumerate(idx):
            seq_ids = enc.sequence_ids(j)
            where = [k for k, s in enumerate(seq_ids) if s == answer_seq]
            span = (where[0], where[-1] + 1) if where else (len(seq_ids) - 1,) * 2
            out[i] = Encoded(tuple(enc["input_ids"][j]),
                             tuple(types[j]) if types is not None else None, span)
    return out  # type: ignore[return-value]
