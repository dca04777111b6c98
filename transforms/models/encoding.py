"""Model inputs -> token ids for a whole window of inputs at once, at the speed of the
tokenizer (no Python object per token, no tokenizer call per input).

`SegmentEncoder.encode` turns a list of model inputs (a text for encoders, a tuple of 1..3
text segments for cross-encoders, layouts.py) into one `batching.TokenBatch`: flat id and
segment-id arrays with offsets. It gives exactly the ids and segment ids of
`layouts.encode_batch` (and of the tokenizer's own call for one and two segments):

- every distinct segment string is tokenized once and kept in a bounded memo: gold
  answers and questions repeat across the rows of a window (every answer to a question
  has the same ones), and across windows. A BERT-style tokenizer's texts are tokenized
  word by word through a memo of their words (word_pieces.py: the same ids, a fraction
  of the time per new text); other tokenizers' by their batch call (their own threads
  where `TOKENIZERS_PARALLELISM` allows);
- inputs are then assembled from the segments' ids with numpy: `[CLS] a [SEP] b [SEP] ...`,
  each segment and its closing SEP carrying the segment's index, truncated longest-first
  as layouts.py does for three segments.

One and two segments follow the tokenizer's own template. The encoder checks on load that
the template is `[CLS] a [SEP] (b [SEP])` with segment ids 0/1 (BERT's, MiniLM's) by
comparing its assembly with the tokenizer's own output on probe texts; if so, inputs that
need no truncation are assembled, and the few that do (the tokenizer's pair truncation
splits ties differently from the per-token rule) go through the tokenizer's own call, as
does everything for other templates (RoBERTa's `<s> a </s></s> b </s>`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from transforms.models import layouts
from transforms.models.batching import TokenBatch
from transforms.models.word_pieces import WordPieces, backend_ids, make_room

# Distinct segments kept between calls; the memo is emptied when it is full (a bounded
# cache with no per-hit bookkeeping). 100,000 segments of 40 word-pieces: about 30 MB.
DEFAULT_MEMO_SIZE = 100_000
_PROBES = (("The Eiffel Tower, in Paris!", "a tower"), ("x", "Ross Bagdasarian (1919-1972)"))


def _backend(tokenizer: Any) -> Any:
    """The Rust tokenizer behind a transformers fast tokenizer, or None."""
    return getattr(tokenizer, "backend_tokenizer", None)


class SegmentEncoder:
    """Encodes model inputs into a `TokenBatch` (see the module docstring).

    Args:
        tokenizer: a transformers tokenizer (fast: the batch call runs in Rust).
        max_length: the truncation length, special tokens included.
        memo_size: distinct segments kept between calls (0: none kept, and no memo of
            words either: every text goes to the tokenizer).

    Raises:
        ValueError: max_length below 4 (three segments need four special tokens).
    """

    def __init__(self, tokenizer: Any, max_length: int,
                 memo_size: int = DEFAULT_MEMO_SIZE) -> None:
        if max_length < 4:
            raise ValueError(f"max_length must be >= 4, got {max_length}")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.memo_size = memo_size
        self._memo: dict[str, np.ndarray] = {}
        self._words = WordPieces.of(tokenizer) if memo_size else None
        cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
        self._specials = None
        if cls_id is not None and sep_id is not None:
            self._specials = (np.array([cls_id], dtype=np.int64),
                              np.array([sep_id], dtype=np.int64))
        self.assembles_templates = self._specials is not None and self._template_matches()

    def _template_matches(self) -> bool:
        """Whether one- and two-segment inputs assembled from their segments equal the
        tokenizer's own encoding (ids and segment ids) on the probe texts."""
        for pair in _PROBES:
            for segs in ((pair[0],), pair):
                own = self.tokenizer(*segs, truncation=True, max_length=self.max_length)
                mine = layouts._assemble([self._tokenize([s])[0].tolist() for s in segs],
                                         int(self._specials[0][0]),
                                         int(self._specials[1][0]), self.max_length)
                types = own.get("token_type_ids")
                if tuple(own["input_ids"]) != mine.input_ids:
                    return False
                if types is not None and tuple(types) != mine.token_type_ids:
                    return False
        return True

    def _tokenize(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Word-piece ids of each text, no special tokens, no truncation: word by word
        through a memo for BERT-style tokenizers (word_pieces.py), else by the Rust
        tokenizer's batch call."""
        if self._words is not None:
            return self._words.ids(texts)
        backend = _backend(self.tokenizer)
        if backend is not None:
            return [np.array(x, dtype=np.int64) for x in backend_ids(backend, list(texts))]
        ids = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [np.array(x, dtype=np.int64) for x in ids]

    def _segments(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Ids of every text, from the memo or one tokenizer call for the new ones. A
        memo that would overflow starts again with this window's texts only (the ones it
        already held included: the caller looks every text up in what is returned)."""
        memo = self._memo
        distinct = dict.fromkeys(texts)
        new = [t for t in distinct if t not in memo]
        if new:
            found = dict(zip(new, self._tokenize(new)))
            if not self.memo_size:
                return found
            make_room(memo, distinct, len(new), self.memo_size)
            memo.update(found)
        return memo

    def encode(self, inputs: Sequence[Hashable]) -> TokenBatch:
        """The inputs' ids and segment ids, in input order.

        Args:
            inputs: texts (`str`) or tuples of 1..3 text segments.

        Raises:
            ValueError: an input of another shape, or three segments with a tokenizer that
                has no CLS or SEP token.
        """
        inputs = inputs if isinstance(inputs, (list, tuple)) else list(inputs)
        segments = [(x,) if isinstance(x, str) else x for x in inputs]
        texts = [t for segs in segments if isinstance(segs, tuple) for t in segs]
        # the common case checked with C loops; otherwise input by input, to name it
        if not ({*map(type, segments)} <= {tuple} and {*map(len, segments)} <= {1, 2, 3}
                and {*map(type, texts)} <= {str}):
            for x, segs in zip(inputs, segments):
                if (not isinstance(segs, tuple) or not 1 <= len(segs) <= 3
                        or not all(isinstance(s, str) for s in segs)):
                    raise ValueError(f"a model input is a text or a tuple of 1..3 texts, "
                                     f"got {x!r}")
        if any(len(s) == 3 for s in segments) and self._specials is None:
            layouts._special_ids(self.tokenizer)  # raises, naming the tokenizer
        memo = self._segments(texts)
        mine = [i for i, segs in enumerate(segments)
                if len(segs) == 3 or self.assembles_templates]
        assembled, over = self._assemble([segments[i] for i in mine], memo)
        # the tokenizer's own call: one and two segments of other templates, and those
        # that need truncating (its pair truncation splits ties its own way)
        own = sorted({*(i for i, segs in enumerate(segments)
                        if len(segs) < 3 and not self.assembles_templates),
                      *(mine[j] for j in over)})
        if not own:  # every input assembled
            return assembled
        if len(mine) < len(segments):  # the others' lengths 0, for the merge to fill
            lengths = np.zeros(len(segments), dtype=np.int64)
            lengths[mine] = assembled.lengths
            assembled = assembled._replace(offsets=np.concatenate([[0], np.cumsum(lengths)]))
        return TokenBatch.merge(assembled, self._encode_own([segments[i] for i in own]),
                                np.array(own, dtype=np.int64))

    def _assemble(self, inputs: Sequence[tuple[str, ...]], memo: dict[str, np.ndarray]
                  ) -> tuple[TokenBatch, list[int]]:
        """`[CLS] a [SEP] b [SEP] ...` of every input from its segments' ids, with numpy
        gathers over one pool of the window's distinct segments (a Python loop per input
        cost about 6 µs an input), three segments truncated longest-first; and the inputs of
        one or two segments that need truncating, which are left empty (length 0) for the
        tokenizer's own call.

        Each piece of an input (its CLS; each segment and the SEP after it) is a run of
        the pool, whose first two entries are CLS and SEP; the ids are the pool gathered
        at every piece's positions, the segment ids every piece's segment index
        repeated."""
        if not inputs:
            return TokenBatch.from_pieces([], np.zeros(0, dtype=np.int64),
                                          np.zeros(0, dtype=np.int64)), []
        cls, sep = self._specials
        texts = [t for segs in inputs for t in segs]
        distinct = {t: j for j, t in enumerate(dict.fromkeys(texts))}
        arrays = [memo[t] for t in distinct]
        size = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        begin = 2 + np.cumsum(size) - size  # in the pool, after CLS and SEP
        seg = np.fromiter(map(distinct.__getitem__, texts), dtype=np.int64, count=len(texts))
        k = np.fromiter(map(len, inputs), dtype=np.int64, count=len(inputs))
        first = np.cumsum(k) - k  # each input's first segment
        seg_len = size[seg]
        total = np.add.reduceat(seg_len, first)
        over = np.flatnonzero(total > self.max_length - 1 - k).tolist()
        drop = np.zeros(len(inputs), dtype=bool)
        for i in over:  # truncate three segments; leave one or two to the tokenizer
            a, n = int(first[i]), int(k[i])
            if n < 3:
                drop[i] = True
                seg_len[a:a + n] = 0
            else:
                seg_len[a:a + n] = layouts._truncate_longest_first(
                    seg_len[a:a + n].tolist(), self.max_length - 1 - n)
        # pieces: per input its CLS, then per segment the segment's run and a SEP
        pieces = 1 + 2 * k
        at = np.cumsum(pieces) - pieces
        input_of_seg = np.repeat(np.arange(len(inputs)), k)
        index = np.arange(len(texts)) - first[input_of_seg]  # the segment's index
        seg_piece = at[input_of_seg] + 1 + 2 * index
        start = np.ones(int(pieces.sum()), dtype=np.int64)  # SEP unless set below
        length = np.ones_like(start)
        kind = np.zeros_like(start)
        start[at] = 0
        length[at] = np.where(drop, 0, 1)
        start[seg_piece] = begin[seg]
        length[seg_piece] = seg_len
        length[seg_piece + 1] = np.where(drop[input_of_seg], 0, 1)
        kind[seg_piece] = kind[seg_piece + 1] = index
        runs = np.cumsum(length) - length
        gather = np.repeat(start - runs, length) + np.arange(int(length.sum()))
        pool = np.concatenate([cls, sep, *arrays])
        offsets = np.concatenate([[0], np.cumsum(np.add.reduceat(length, at))])
        return (TokenBatch(pool[gather], np.repeat(kind, length), offsets),
                [i for i in over if drop[i]])

    def _encode_own(self, segments: Sequence[tuple[str, ...]]) -> TokenBatch:
        """One- and two-segment inputs encoded by the tokenizer's own call (its template
        and truncation); three-segment ones by layouts.encode_batch."""
        encoded = layouts.encode_batch(self.tokenizer, list(segments), self.max_length)
        return TokenBatch.from_encoded(encoded)
