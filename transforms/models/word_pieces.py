"""Word-piece ids of texts with a tokenizer call per new word, not per text.

A BERT-style fast tokenizer (`BertNormalizer`, `BertPreTokenizer`, `WordPiece`: BERT's,
MiniLM's) turns a text into ids word by word: it cleans and lowercases the text, splits it
at whitespace and around every punctuation character, and gives each word its word
pieces, whatever its neighbours. Its batch call costs 18.5-50 µs for a 120-character
model answer on the 2-core machine, while a corpus of model outputs repeats its words far
more than its texts (EVOUNA-TQ's answers made new 100,000 times hold about 16,000). `WordPieces` splits a text into the same words in Python (one regex over the
lowered text) and looks each word up in a bounded memo; only new words reach the
tokenizer's model. The ids are the tokenizer's own, for these texts:

- **Characters the split knows.** Printable ASCII and `\\t \\n \\r` as BERT's rules say.
  Each other character is learnt once from the tokenizer itself, by encoding it alone,
  twice and between two letters: a character it turns into a space (U+00A0), one it keeps
  as a word of its own (curly quotes, dashes, CJK ideographs), with the ids it gives, one
  it leaves as it is within the word around it (`ł`, `σ`, `£`), or a letter its
  normaliser turns into ASCII letters or digits (`é` -> `e` for an uncased tokenizer,
  which strips accents). Text with any other character goes to the tokenizer's own call,
  whole: a control or format character, a combining mark, a capital lowered to a
  non-ASCII letter, a syllable the normaliser decomposes (Hangul), private-use and
  unassigned code points. The table of characters is bounded (`MAX_CHARACTERS`).
- **Added tokens** (`[SEP]`, `[MASK]`, ...), which the tokenizer matches as written (case
  included) before it splits: a text holding one goes to the tokenizer's own call.
- **Checked on load.** Other tokenizers (RoBERTa's byte-level BPE, normalizers other
  than BERT's, added tokens matched after normalising) get no `WordPieces`
  (`WordPieces.of` gives None), nor does one whose ids differ from its own call's on
  probe texts.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

import numpy as np

# distinct words kept between calls; the memo is emptied when full (as the segment memo)
DEFAULT_MEMO_SIZE = 200_000
# non-ASCII characters learnt; the table starts again when it holds more
MAX_CHARACTERS = 20_000
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
# ASCII control characters: BERT's cleaning removes most and makes some spaces
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# what the tokenizer makes of a non-ASCII character
_SPACE, _OWN_WORD, _JOINS, _LETTER = " ", "word", "joins", "letter"
_PROBES = ("The Chipmunks were created by Ross Bagdasarian Sr. (1919–1972), a.k.a. "
           "“David Seville”.", "x" * 120 + " ok", "Tab\tand\nnew\r\nlines; 3.5% of $1,000!",
           "[SEP] not [sep] a [MASK]x", "café naïve İstanbul ﬁne 東京 😀 a\u00a0b",
           "a\x0bb\x0cc\x00d\u200be\u0301f", "Łódź £5, σ² at 10°C: Straße", "")


def make_room(memo: dict, wanted: Iterable, new: int, size: int) -> None:
    """Empties a bounded memo that `new` more entries would take past `size`, keeping the
    `wanted` keys it holds (the caller's own): no bookkeeping per hit."""
    if len(memo) + new > size:
        kept = {k: memo[k] for k in wanted if k in memo}
        memo.clear()
        memo.update(kept)


def _split_pattern(spaces: set[str], joins: set[str]) -> re.Pattern:
    """BERT's split of printable ASCII, with these non-ASCII characters as spaces and as
    parts of words too: runs of letters, digits and the joining characters; every other
    character that is not a space is a word of its own (Rust's is_ascii_punctuation is
    exactly the ASCII ones)."""
    space, join = ("".join(sorted(map(re.escape, chars))) for chars in (spaces, joins))
    return re.compile(rf"[A-Za-z0-9{join}]+|[^ \t\n\rA-Za-z0-9{space}{join}]")


def backend_ids(backend: Any, texts: list[str]) -> list[list[int]]:
    """Each text's ids from the Rust tokenizer, no special tokens, truncation or padding
    (a checkpoint's saved settings are switched off on the backend for good; transformers'
    own call sets its settings again on every call): the batch call that computes no
    character offsets (only the ids are read: the same ids, about a fifth less time per
    text and a cheaper drop of the encodings), where the tokenizer has it."""
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    encode = getattr(backend, "encode_batch_fast", None) or backend.encode_batch
    return [e.ids for e in encode(texts, add_special_tokens=False)]


def _components(backend: Any) -> dict | None:
    """The tokenizer's lowercasing and added tokens when its normalizer, pre-tokenizer and
    model are BERT's and every added token is matched in the text as written (BERT's
    special tokens are; a token matched after normalising, found in texts whose raw form
    differs, is not looked for here), else None."""
    try:
        state = json.loads(backend.to_str())
    except (AttributeError, TypeError, ValueError):
        return None
    normalizer, pre, model = (state.get(k) or {} for k in ("normalizer", "pre_tokenizer",
                                                          "model"))
    added = state.get("added_tokens") or []
    if (normalizer.get("type") != "BertNormalizer" or not normalizer.get("clean_text")
            or pre.get("type") != "BertPreTokenizer" or model.get("type") != "WordPiece"
            or any(t.get("normalized") for t in added)):
        return None
    return {"lowercase": bool(normalizer.get("lowercase")),
            "added": [t["content"] for t in added]}


class WordPieces:
    """Word-piece ids of texts, word by word through a memo (see the module docstring).

    Args:
        backend: the Rust tokenizer (`tokenizers.Tokenizer`) of a BERT-style fast tokenizer
            (its truncation and padding are switched off, as `backend_ids` says).
        lowercase: whether its normalizer lowercases.
        added: its added tokens' texts.
        memo_size: distinct words kept between calls.
    """

    def __init__(self, backend: Any, lowercase: bool, added: Sequence[str],
                 memo_size: int = DEFAULT_MEMO_SIZE) -> None:
        self._backend = backend
        self._lowercase = lowercase
        added = [t for t in added if t]
        # matched as written, as the tokenizer matches a token it does not normalise
        self._added = re.compile("|".join(map(re.escape, added))) if added else None
        # the characters an added token can start with: a text with none needs no search
        self._added_first = re.compile(
            "[" + "".join({re.escape(t[0]) for t in added}) + "]") if added else None
        self.memo_size = memo_size
        self._memo: dict[str, tuple[int, ...]] = {}
        self._chars: dict[str, str | None] = {}  # non-ASCII character -> its kind
        self._spaces: set[str] = set()  # the characters learnt to be spaces
        self._joins: set[str] = set()  # ... and to be parts of words, as they are
        self._split: re.Pattern | None = None  # the word regex, made on the first split
        self._stale = True  # a space or joining character learnt since it was made
        self._own: dict[str, tuple[int, ...]] = {}  # ids of the word-of-its-own kind
        self._letters: dict[int, str] = {}  # str.translate's table of the letter kind
        self._letter = tuple(backend_ids(backend, ["a"])[0])

    @classmethod
    def of(cls, tokenizer: Any, memo_size: int = DEFAULT_MEMO_SIZE) -> WordPieces | None:
        """`WordPieces` for a transformers fast tokenizer with BERT's components whose ids
        equal its own call's on the probe texts; None for any other."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        found = _components(backend)
        if found is None:
            return None
        words = cls(backend, found["lowercase"], found["added"], memo_size)
        own = backend_ids(backend, list(_PROBES))
        if [x.tolist() for x in words.ids(_PROBES)] != own:
            return None
        return words

    def _kind(self, char: str) -> str | None:
        """What the tokenizer makes of a non-ASCII character, learnt from its ids alone,
        twice and between two letters: a space, a word of its own (its ids kept), a part
        of the word around it, left as it is (`ł`, `σ`, `£`), a letter it normalises to
        ASCII letters or digits (`é` -> `e` where it strips accents), or None (anything
        else: the text goes to the tokenizer)."""
        if char not in self._chars:
            kind, category = None, unicodedata.category(char)[0]
            probes = [char, char * 2, f"a{char}a"]
            alone, twice, between = backend_ids(self._backend, probes)
            a = self._letter
            plain = self._backend.normalizer.normalize_str(char)
            # a character the split keeps as it is (a capital is lowered with the text)
            same = category not in "MC" and (not self._lowercase or char.lower() == char)
            if same and tuple(between) == a + a:
                kind = _SPACE
                self._spaces.add(char)
            elif (same and alone and twice == alone * 2
                  and tuple(between) == (*a, *alone, *a)):
                kind = _OWN_WORD
                self._own[char] = tuple(alone)
            elif same and plain == char and [alone, twice, between] == [
                    [t.id for t in self._backend.model.tokenize(p)] for p in probes]:
                kind = _JOINS
                self._joins.add(char)
            elif (category == "L" and plain.isascii() and plain.isalnum()
                  and (not self._lowercase or plain.islower() or plain.isdigit())
                  and backend_ids(self._backend, [plain, plain * 2, f"a{plain}a"])
                  == [alone, twice, between]):
                kind = _LETTER
                self._letters[ord(char)] = plain
            self._stale = self._stale or kind in (_SPACE, _JOINS)
            self._chars[char] = kind
        return self._chars[char]

    def split(self, text: str) -> list[str] | None:
        """The text's words as the tokenizer splits them, or None when the text goes to
        the tokenizer whole."""
        return self._words(text, self._learn_characters([text])[0])

    def _words(self, text: str, chars: set[str] | None) -> list[str] | None:
        """`split` of a text whose non-ASCII characters (`chars`; None: none) are learnt."""
        if self._added is not None and self._added_first.search(text) \
                and self._added.search(text):
            return None
        if chars:
            kinds, letters = self._chars, False
            for c in chars:
                kind = kinds[c]
                if kind is None:
                    return None
                letters = letters or kind == _LETTER
            if letters:
                text = text.translate(self._letters)
        if _ASCII_CONTROL.search(text):
            return None
        if self._stale:  # once for all the characters learnt since
            self._split, self._stale = _split_pattern(self._spaces, self._joins), False
        return self._split.findall(text.lower() if self._lowercase else text)

    def _learn(self, words: list[str]) -> None:
        """Word pieces of the words the memo lacks, from the tokenizer's model (a word of
        the split reaches the model as it is); a memo that would overflow starts again
        with these words only."""
        memo = self._memo
        distinct = dict.fromkeys(words)
        new = [w for w in distinct if w not in memo]
        if not new:
            return
        make_room(memo, distinct, len(new), self.memo_size)
        tokenize = self._backend.model.tokenize
        for w in new:
            own = self._own.get(w)
            memo[w] = own if own is not None else tuple(t.id for t in tokenize(w))

    def _learn_characters(self, texts: Sequence[str]) -> list[set[str] | None]:
        """Learns every non-ASCII character of the texts not yet known (the word regex is
        then made again once, not once a character), a table past `MAX_CHARACTERS`
        characters starting again first; each text's non-ASCII characters (None: none)."""
        if len(self._chars) > MAX_CHARACTERS:
            self._chars, self._own, self._letters = {}, {}, {}
            self._spaces, self._joins, self._stale = set(), set(), True
        chars = [None if t.isascii() else {*_NON_ASCII.findall(t)} for t in texts]
        known = self._chars
        for c in set().union(*filter(None, chars)):
            if c not in known:
                self._kind(c)
        return chars

    def ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's word-piece ids (int64), no special tokens, no truncation: the
        tokenizer's own ids."""
        split = list(map(self._words, texts, self._learn_characters(texts)))
        out: list[np.ndarray | None] = [None] * len(texts)
        known = [(i, w) for i, w in enumerate(split) if w is not None]
        if known:
            self._learn(list(chain.from_iterable(w for _, w in known)))
            get = self._memo.__getitem__
            for i, words in known:
                out[i] = np.fromiter(chain.from_iterable(map(get, words)), dtype=np.int64)
        rest = [i for i, w in enumerate(split) if w is None]
        if rest:
            for i, ids in zip(rest, backend_ids(self._backend, [texts[i] for i in rest])):
                out[i] = np.array(ids, dtype=np.int64)
        return out
