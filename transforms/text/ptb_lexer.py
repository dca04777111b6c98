"""CoreNLP 3.4.1's PTBLexer, run in Python on the jar's own JFlex tables.

`PTBLexer.class` in the CoreNLP jar shipped by pycocoevalcap is a JFlex 1.4 scanner: a DFA
(character-class map, row map, transition table, state attributes, state -> action table)
stored as packed string constants, and a switch over 54 actions. We read the packed tables
from the class file itself (so no CoreNLP code or data is copied into this repository),
run the same longest-match loop, and re-implement the 54 actions as they are compiled in
this class with the options `PTBTokenizer -preserveLines` uses (",tokenizeNLs", all other
flags at their defaults: latex quotes, -LRB-/-RRB-, ptb3 dashes and ellipsis, currency
and fraction normalisation, no americanize, no slash escaping, untokenizable characters
deleted). The action numbers, the lookahead start states and the lexical start state below
were read from the class's bytecode; `EXPECTED_SHA256` pins that class file, and a
different class makes `from_jar` refuse (the caller then uses the jar).

JFlex general lookahead (`r1 / r2` with variable lengths) is reproduced with the same
forward/backward scan over the DFA that the generated code performs.
"""

from __future__ import annotations

import hashlib
import logging
import re
import struct
import zipfile

logger = logging.getLogger(__name__)

CLASS_PATH = "edu/stanford/nlp/process/PTBLexer.class"
EXPECTED_SHA256 = "715fdfb3652cc6796f90f28442378a0c71c92b5909f1fc934f698497987b6dd0"
_START_STATE = 2  # ZZ_LEXSTATE[YyTraditionalTreebank3 = 4]
_TRANS_PARTS = 9

# action -> (forward start state, backward start state) of its general lookahead
_LOOKAHEAD = {24: (13, 14), 30: (3, 4), 40: (5, 6), 41: (16, 17), 43: (15, 14),
              44: (9, 10), 47: (7, 8), 49: (11, 12)}
_TEXT = frozenset({3, 9, 19, 31, 45, 52, 24, 41, 43})
_SOFT_HYPHENS = frozenset({6, 12, 29, 30, 40})
_SKIP = frozenset({1, 7, 23})
_FIXED = {2: "<", 10: ">", 11: "--", 13: "...", 16: "-RCB-", 17: "-LRB-", 18: "-RRB-",
          20: "-LCB-", 21: "-RSB-", 22: "-LSB-"}
_PUSHBACK_TEXT = {25: 1, 42: 2, 48: 2, 50: 3, 53: 4}
_TRAILING_SPACE = frozenset(" \t\n\u000b\u000c\r\u0085")
NEWLINE_TOKEN = "*NL*"
_WORD_MEMO_SIZE = 1 << 17
_MISSING = object()

_QUOTE_TABLE = str.maketrans({"\u0091": "`", "\u2018": "`", "\u201b": "`", "\u2039": "`",
                              "\u0092": "'", "\u2019": "'", "\u203a": "'",
                              "\u0093": "``", "\u201c": "``", "\u00ab": "``",
                              "\u0094": "''", "\u201d": "''", "\u00bb": "''"})
_CURRENCY_TABLE = str.maketrans({"\u00a2": "cents", "\u00a3": "#", "\u0080": "$",
                                 "\u00a4": "$", "\u20a0": "$", "\u20ac": "$"})
_FRACTION_TABLE = str.maketrans({"\u00bc": "1/4", "\u00bd": "1/2", "\u00be": "3/4",
                                 "\u2153": "1/3", "\u2154": "2/3"})
_PAREN_TABLE = str.maketrans({"(": "-LRB-", ")": "-RRB-"})
# Java's (?i:&amp;) folds ASCII letters only.
_AMP = re.compile("&amp;", re.IGNORECASE | re.ASCII)


def _latex_quotes(s: str, probably_left: bool) -> str:
    if probably_left:
        s = s.replace("&apos;", "`").replace("'", "`")
        s = s.replace('"', "``").replace("&quot;", "``")
    else:
        s = s.replace("&apos;", "'").replace("'", "'")
        s = s.replace('"', "''").replace("&quot;", "''")
    return s.translate(_QUOTE_TABLE)


def _remove_soft_hyphens(s: str) -> str:
    if "\u00ad" not in s:
        return s
    return s.replace("\u00ad", "") or "-"


def _normalize_amp(s: str) -> str:
    return _AMP.sub("&", s)


def _read_class_constants(data: bytes) -> dict[str, str]:
    """Static final String constants (ConstantValue attributes) of a class file."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a Java class file")
    count = struct.unpack_from(">H", data, 8)[0]
    pool: list = [None] * count
    pos, i = 10, 1
    sizes = {3: 4, 4: 4, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4,
             19: 2, 20: 2}
    while i < count:
        tag = data[pos]
        if tag == 1:
            (length,) = struct.unpack_from(">H", data, pos + 1)
            raw = data[pos + 3: pos + 3 + length].replace(b"\xc0\x80", b"\x00")
            pool[i] = raw.decode("utf-8", "surrogatepass")  # modified UTF-8 = UTF-16 units
            pos += 3 + length
        elif tag in (5, 6):
            pos += 9
            i += 1
        elif tag == 8:
            pool[i] = ("string", struct.unpack_from(">H", data, pos + 1)[0])
            pos += 3
        else:
            pos += 1 + sizes[tag]
        i += 1
    pos += 6
    (n_interfaces,) = struct.unpack_from(">H", data, pos)
    pos += 2 + 2 * n_interfaces
    (n_fields,) = struct.unpack_from(">H", data, pos)
    pos += 2
    constants = {}
    for _ in range(n_fields):
        _, name_idx, _, n_attrs = struct.unpack_from(">HHHH", data, pos)
        pos += 8
        for _ in range(n_attrs):
            attr_idx, length = struct.unpack_from(">HI", data, pos)
            if pool[attr_idx] == "ConstantValue":
                entry = pool[struct.unpack_from(">H", data, pos + 6)[0]]
                if isinstance(entry, tuple):
                    constants[pool[name_idx]] = pool[entry[1]]
            pos += 6 + length
    return constants


def actions_of(action: list[int], attribute: list[int], state: int) -> int | None:
    """The action of an accepting state, None for a non-accepting one."""
    return action[state] if attribute[state] & 1 else None


def _unpack_runs(packed: str, offset: int = 0) -> list[int]:
    out: list[int] = []
    for i in range(0, len(packed), 2):
        out.extend([ord(packed[i + 1]) - offset] * ord(packed[i]))
    return out


class PTBLexer:
    """The DFA tables of CoreNLP's PTBLexer and a Python driver for them."""

    def __init__(self, cmap: list[int], action: list[int], rowmap: list[int],
                 trans: list[int], attribute: list[int]) -> None:
        self._cmap = cmap
        self._action = action
        self._rowmap = rowmap
        self._trans = trans
        self._attr = attribute
        # Words separated by single spaces are lexed one by one (and memoised) when the DFA
        # provably cannot cross the space: the word's own scans die on it, and a scan that
        # starts on the space (a whitespace token) dies on the next word's first character.
        self._space_class = cmap[ord(" ")]
        on_space = trans[rowmap[_START_STATE] + self._space_class]
        if on_space == -1 or actions_of(action, attribute, on_space) not in _SKIP:
            raise ValueError("PTB lexer: a single space is not a whitespace token")
        row = rowmap[on_space]
        self._word_start_ok = [trans[row + k] == -1 for k in range(max(cmap) + 1)]
        self._words: dict[str, list[str] | None] = {}

    @classmethod
    def from_class_bytes(cls, data: bytes) -> PTBLexer:
        """Builds the lexer from the bytes of PTBLexer.class.

        Raises:
            ValueError: the class is not the pinned CoreNLP 3.4.1 PTBLexer.
        """
        digest = hashlib.sha256(data).hexdigest()
        if digest != EXPECTED_SHA256:
            raise ValueError(f"PTBLexer.class has sha256 {digest}, expected {EXPECTED_SHA256}")
        c = _read_class_constants(data)
        cmap = _unpack_runs(c["ZZ_CMAP_PACKED"])
        trans = _unpack_runs("".join(c[f"ZZ_TRANS_PACKED_{k}"] for k in range(_TRANS_PARTS)),
                             offset=1)
        row = c["ZZ_ROWMAP_PACKED_0"]
        rowmap = [(ord(row[i]) << 16) | ord(row[i + 1]) for i in range(0, len(row), 2)]
        return cls(cmap, _unpack_runs(c["ZZ_ACTION_PACKED_0"]), rowmap, trans,
                   _unpack_runs(c["ZZ_ATTRIBUTE_PACKED_0"]))

    @classmethod
    def from_jar(cls, jar_path: str) -> PTBLexer:
        """Builds the lexer from the CoreNLP jar (see `from_class_bytes`)."""
        with zipfile.ZipFile(jar_path) as jar:
            return cls.from_class_bytes(jar.read(CLASS_PATH))

    def _lookahead(self, buf: str, start: int, marked: int, fstate: int, bstate: int) -> int:
        """JFlex's general trailing-context resolution; returns the new end of the token."""
        trans, rowmap, cmap, attr = self._trans, self._rowmap, self._cmap, self._attr
        fin = [False] * (marked - start + 2)
        state, pos = fstate, start
        while state != -1 and pos < marked:
            fin[pos - start] = attr[state] & 1 == 1
            state = trans[rowmap[state] + cmap[ord(buf[pos])]]
            pos += 1
        if state != -1:
            fin[pos - start] = attr[state] & 1 == 1
        state, pos = bstate, marked
        while not fin[pos - start] or attr[state] & 1 != 1:
            pos -= 1
            state = trans[rowmap[state] + cmap[ord(buf[pos])]]
        return pos

    def tokenize_line(self, text: str) -> list[str] | None:
        """Tokens of one line as `PTBTokenizer -preserveLines` prints them (before lower-casing).

        The line is scanned followed by a newline, as in coco's file. Returns None when the
        scanner reports an error (the caller then asks the jar).
        """
        if not text.isascii() and max(text) > "\uffff":
            # Java sees UTF-16 code units; scan those, and re-join surrogate pairs after.
            raw = text.encode("utf-16-le", "surrogatepass")
            units = "".join(map(chr, struct.unpack(f"<{len(raw) // 2}H", raw)))
            tokens = self._scan(units + "\n")
            if tokens is None:
                return None
            return [t.encode("utf-16-le", "surrogatepass").decode("utf-16-le") for t in tokens]
        return self._scan_by_words(text)

    def _scan_by_words(self, line: str) -> list[str] | None:
        """`_scan(line + "\\n")`, lexing space-separated words one at a time where safe."""
        words = line.split(" ")
        if len(words) < 2 or "" in words:
            return self._scan(line + "\n")
        cmap, ok, memo = self._cmap, self._word_start_ok, self._words
        tokens: list[str] = []
        last = len(words) - 1
        for i, word in enumerate(words):
            if i < last:
                if not ok[cmap[ord(words[i + 1][0])]]:
                    return self._scan(line + "\n")
            else:
                word += "\n"  # the line's end: scanned to the end, memoised under this key
            word_tokens = memo.get(word, _MISSING)
            if word_tokens is _MISSING:
                if i < last:
                    word_tokens = self._scan(word + " ", stop_at_space=True)
                else:
                    word_tokens = self._scan(word)
                if len(memo) >= _WORD_MEMO_SIZE:
                    memo.clear()
                memo[word] = word_tokens
            if word_tokens is None:
                return self._scan(line + "\n")
            tokens += word_tokens
        return tokens

    def first_line(self, text: str) -> list[str] | None:
        """Tokens of the first line of a multi-line `text` (the later lines are context)."""
        return self._scan(text, stop_at_newline=True)

    def _scan(self, buf: str, stop_at_space: bool = False,
              stop_at_newline: bool = False) -> list[str] | None:
        """Tokens of `buf`; None on a scanner error.

        With `stop_at_space`, `buf` is one word and a final space: scanning stops at the
        space, and None is returned if any scan could continue through it. With
        `stop_at_newline`, scanning stops at the first newline token.
        """
        trans, rowmap, cmap, attr, actions = (self._trans, self._rowmap, self._cmap,
                                              self._attr, self._action)
        n = len(buf)
        end = n - 1 if stop_at_space else n
        classes = [cmap[ord(ch)] for ch in buf]
        tokens: list[str] = []
        pos = 0
        while pos < end:
            start = pos
            state = _START_STATE
            accept = state if attr[state] & 1 else -1
            marked = start
            cur = start
            while cur < n:
                nxt = trans[rowmap[state] + classes[cur]]
                cur += 1
                if nxt == -1:
                    break
                if cur == n and stop_at_space:
                    return None
                state = nxt
                a = attr[state]
                if a & 1:
                    accept = state
                    marked = cur
                    if a & 8:
                        break
            if accept < 0:
                logger.debug("PTB lexer: no match at %d in %r", start, buf)
                return None
            act = actions[accept]
            token, marked = self._act(act, buf, start, marked)
            if marked <= start:
                logger.debug("PTB lexer: empty match (action %d) in %r", act, buf)
                return None
            if token == NEWLINE_TOKEN:
                if stop_at_newline:
                    return tokens
            elif token is not None:
                tokens.append(token)
            pos = marked
        return tokens

    def _act(self, act: int, buf: str, start: int, marked: int) -> tuple[str | None, int]:
        """Runs action `act` on buf[start:marked]; returns (token or None, new end)."""
        if act in _LOOKAHEAD:
            marked = self._lookahead(buf, start, marked, *_LOOKAHEAD[act])
        if act in _TEXT:
            return buf[start:marked], marked
        if act in _SKIP:
            return None, marked
        if act in _FIXED:
            return _FIXED[act], marked
        if act in _SOFT_HYPHENS:
            return _remove_soft_hyphens(buf[start:marked]), marked
        if act in _PUSHBACK_TEXT:
            marked -= _PUSHBACK_TEXT[act]
            return buf[start:marked], marked
        text = buf[start:marked]
        if act == 4:
            return ("--" if 3 <= len(text) <= 4 else text), marked
        if act == 5:
            return NEWLINE_TOKEN, marked
        if act == 8:
            return _latex_quotes(text, False), marked
        if act == 14:
            return text.translate(_FRACTION_TABLE), marked
        if act == 15:
            return text.translate(_CURRENCY_TABLE), marked
        if act in (26, 36):
            return _latex_quotes(text[:-1], act == 26), marked - 1
        if act in (27, 38, 39):
            return text.replace(" ", "\u00a0"), marked
        if act == 28:
            return text.translate(_PAREN_TABLE), marked
        if act in (32, 46):
            return _remove_soft_hyphens(text[:-1]), marked - 1
        if act in (33, 49):
            return text, marked - 1  # the period is returned again as its own token
        if act == 34:
            return text[:-1].translate(_PAREN_TABLE), marked - 1
        if act == 35:
            return _latex_quotes(buf[start], True), start + 1
        if act == 37:
            return _normalize_amp(text), marked
        if act == 51:
            return _normalize_amp(text[:-1]), marked - 1
        if act == 54:
            return text.replace(" ", "\u00a0").translate(_PAREN_TABLE), marked
        if act in (44, 47):
            while marked > start and buf[marked - 1] in _TRAILING_SPACE:
                marked -= 1
            text = buf[start:marked]
            if act == 44:
                return text, marked
            if len(text) == 2:
                return text[:1], marked - 1
            return text, marked - 1
        raise ValueError(f"PTB lexer: unknown action {act}")
