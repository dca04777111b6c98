"""N-grams as 64-bit hashes, and the sorted (hashes, counts) tables made of them: the
representation CIDEr-D's frequencies travel in between the stages of corpus_stats.py, and
that the text n-grams of a statistics file (statistics_file.py) are turned into.

An n-gram's hash (`gram_hash`) is BLAKE2b of each word (`word_hash`, memoised), folded
per n-gram with its length as seed; `BatchNgrams` folds a whole batch's n-grams at once
with numpy, the same arithmetic modulo 2**64, so no Python object is made per n-gram. 8
bytes instead of their text, in numpy arrays instead of Python objects: a million rows
request about 50 million n-grams. Two different n-grams that share a hash would share a
frequency: with 10 million distinct n-grams the chance that any two do is about 3 in a
million (docs/decisions.md). Hashes are stable across processes and runs; a statistics
file keeps n-grams as text (`gram_text`, `text_gram`), so no hash outlives a run.

An n-gram's shard is its hash modulo the number of shards (`ngram_shard`, `by_shard`). A
table is two numpy arrays, the hashes sorted and distinct and their counts
(`hashed_table`, `fold_tables`), read with `searchsorted` (`lookup`); counts and answers
are kept in the narrowest unsigned dtype that holds them (`smallest_uint`: a batch's
partial counts take a byte or two, where int64 took eight). An answer marks the n-grams it
found with one bit each and gives their frequencies a byte each, the few that do not fit
apart (`narrow_frequencies`; `found_frequencies` reads it): one common word among a batch's
n-grams would otherwise make every frequency of its answer four bytes. An answer travels as
one `bytes` (`pack_answer`, `unpack_answer`), not as pickled arrays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence

import numpy as np

from transforms.metrics.lexical import MAX_N

_MASK = (1 << 64) - 1
# An answer's frequency of this or more travels apart (`narrow_frequencies`).
WIDE = 255
_FOLD = 0x9E3779B97F4A7C15  # odd: multiplication by it is a bijection mod 2**64


def gram_text(gram: str | tuple[str, ...]) -> str:
    """An n-gram as text: its tokens joined by single spaces (unigrams are plain strings in
    `bleu.ngram_counts`, longer n-grams tuples; tokens hold no whitespace)."""
    return gram if isinstance(gram, str) else " ".join(gram)


def text_gram(text: str) -> str | tuple[str, ...]:
    """The n-gram key `gram_text` wrote: a unigram as a str, longer ones as tuples."""
    tokens = text.split(" ")
    return tokens[0] if len(tokens) == 1 else tuple(tokens)


_WORD_HASH: dict[str, int] = {}
_WORD_HASH_MAX = 1 << 20


def word_hash(word: str) -> int:
    """A word's 64-bit hash (BLAKE2b), memoised; stable across processes and runs (Python's
    own hash of a str is not)."""
    value = _WORD_HASH.get(word)
    if value is None:
        if len(_WORD_HASH) >= _WORD_HASH_MAX:
            _WORD_HASH.clear()
        digest = hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8)
        value = _WORD_HASH[word] = int.from_bytes(digest.digest(), "little")
    return value


def gram_hash(gram: str | tuple[str, ...]) -> int:
    """An n-gram's 64-bit hash: a unigram's is its word's; a longer n-gram folds its
    words' hashes, seeded with its length."""
    if isinstance(gram, str):
        return word_hash(gram)
    value = len(gram)
    for word in gram:
        value = (value * _FOLD + word_hash(word)) & _MASK
    return value


def ngram_shard(gram: str | tuple[str, ...], shards: int) -> int:
    """The shard of an n-gram: its hash modulo `shards`."""
    return gram_hash(gram) % shards


def by_shard(hashes: np.ndarray, shards: int, *values: np.ndarray
              ) -> Iterator[tuple[int, np.ndarray, tuple[np.ndarray, ...]]]:
    """(shard, its hashes, its values...) of sorted `hashes`; each part stays sorted."""
    shard_of = hashes % np.uint64(shards)
    order = np.argsort(shard_of, kind="stable")
    ordered = shard_of[order]
    cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    for part in np.split(order, cuts):
        if len(part):
            yield int(shard_of[part[0]]), hashes[part], tuple(v[part] for v in values)


class BatchNgrams:
    """The n-grams (orders 1 to `MAX_N`) of a batch's token strings, hashed at once.

    Words are hashed one by one (`word_hash`, memoised); n-gram hashes are folded from
    them with numpy over the whole batch (`gram_hash`'s arithmetic, modulo 2**64), so no
    Python object is made per n-gram. Texts are numbered in the order given.

    Attributes:
        hashes: the hash of every n-gram occurrence, order by order, text by text.
        texts: the text number of each occurrence.
    """

    def __init__(self, texts: Sequence[str]) -> None:
        split = [t.split() for t in texts]
        lengths = np.fromiter(map(len, split), dtype=np.int64, count=len(split))
        self._words = [w for words in split for w in words]
        get = _WORD_HASH.get
        words = np.array([h if (h := get(w)) is not None else word_hash(w)
                          for w in self._words], dtype=np.uint64)
        text_of = np.repeat(np.arange(len(split)), lengths)
        end_of = np.repeat(np.cumsum(lengths), lengths)  # where each word's text ends
        start = np.arange(len(words))
        hashes, numbers, orders, starts = [], [], [], []
        fold = np.uint64(_FOLD)
        for k in range(1, MAX_N + 1):
            n = max(len(words) - k + 1, 0)
            if k == 1:
                value = words
            else:
                value = np.full(n, k, dtype=np.uint64)
                for i in range(k):
                    value = value * fold + words[i: i + n]
            valid = start[:n] + k <= end_of[:n]
            hashes.append(value[valid])
            numbers.append(text_of[:n][valid])
            starts.append(start[:n][valid])
            orders.append(np.full(len(starts[-1]), k, dtype=np.int8))
        self.hashes = np.concatenate(hashes)
        self.texts = np.concatenate(numbers)
        self._starts = np.concatenate(starts)  # each occurrence's first word
        self._orders = np.concatenate(orders)  # and its order

    def documents(self, document_of_text: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(hashes, documents holding each), hashes sorted, for the documents that
        `document_of_text` maps the texts to (-1: a text in no document); a document
        counts an n-gram once, however often its texts hold it."""
        document = document_of_text[self.texts]
        kept = document >= 0
        hashes, document = self.hashes[kept], document[kept]
        order = np.lexsort((document, hashes))
        hashes, document = hashes[order], document[order]
        first = np.ones(len(hashes), dtype=bool)
        first[1:] = (hashes[1:] != hashes[:-1]) | (document[1:] != document[:-1])
        return np.unique(hashes[first], return_counts=True)

    def distinct(self, in_text: np.ndarray) -> np.ndarray:
        """The sorted distinct hashes of the texts where `in_text` (a mask) is True."""
        return np.unique(self.hashes[in_text[self.texts]])

    def first_occurrences(self) -> tuple[np.ndarray, np.ndarray]:
        """(the batch's distinct hashes, sorted; the first occurrence of each)."""
        return np.unique(self.hashes, return_index=True)

    def grams_at(self, occurrences: np.ndarray) -> list:
        """The n-grams at these occurrences, as `lexical.text_ngrams` keys them (unigrams
        str, longer ones tuples): made only for the n-grams asked for."""
        words = self._words
        return [words[p] if k == 1 else tuple(words[p:p + k]) for k, p in
                zip(self._orders[occurrences].tolist(), self._starts[occurrences].tolist())]


def hashed_table(table: dict) -> tuple[np.ndarray, np.ndarray]:
    """{n-gram: df} -> (hashes, dfs), hashes sorted: a shard's table as the join takes it."""
    hashes = np.fromiter((gram_hash(g) for g in table), dtype=np.uint64, count=len(table))
    dfs = np.fromiter(table.values(), dtype=np.int64, count=len(table))
    order = np.argsort(hashes)
    return hashes[order], dfs[order]


def fold_tables(parts: list[tuple[np.ndarray, np.ndarray]]
                ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Partial (hashes, counts) arrays -> one pair, hashes sorted and distinct, counts
    summed (in the narrowest unsigned dtype that holds them)."""
    if len(parts) == 1:
        return parts
    hashes = np.concatenate([h for h, _ in parts])
    counts = np.concatenate([c for _, c in parts])  # summed as (u)int64 by reduceat
    if not len(hashes):
        return [(hashes, smallest_uint(counts))]
    order = np.argsort(hashes)
    hashes, counts = hashes[order], counts[order]
    starts = np.flatnonzero(np.concatenate(([True], hashes[1:] != hashes[:-1])))
    return [(hashes[starts], smallest_uint(np.add.reduceat(counts, starts)))]


# partial (hashes, counts) parts of one key are folded into one past this many
FOLD_PARTS = 64


def add_part(parts: list[tuple[np.ndarray, np.ndarray]],
             part: tuple[np.ndarray, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """`parts` with `part` appended, folded into one table (`fold_tables`) once they
    are more than `FOLD_PARTS`; the same list."""
    parts.append(part)
    if len(parts) > FOLD_PARTS:
        parts[:] = fold_tables(parts)
    return parts


def lookup(table: np.ndarray, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mask of `hashes` found in sorted `table`, their positions there)."""
    if not len(table):
        return np.zeros(len(hashes), dtype=bool), np.zeros(len(hashes), dtype=np.int64)
    at = np.minimum(np.searchsorted(table, hashes), len(table) - 1)
    return table[at] == hashes, at


def smallest_uint(values: np.ndarray) -> np.ndarray:
    """`values` (>= 0) in the narrowest unsigned dtype that holds them."""
    top = int(values.max()) if len(values) else 0
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values.astype(np.uint64)


def narrow_frequencies(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Frequencies (>= 0) -> (one byte each, `WIDE` for one that does not fit in less; the
    values at `WIDE` or above, in order, in the narrowest unsigned dtype that holds them)."""
    return (np.minimum(values, WIDE).astype(np.uint8),
            smallest_uint(values[values >= WIDE]))


def pack_answer(answer: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> bytes:
    """An answer, {corpus key: (bits, narrow, wide)}, as one `bytes`: the number of corpora,
    five int32 per corpus (its key, the lengths of its three arrays, a wide frequency's
    bytes), then each corpus's arrays in turn. A small numpy array pickles with about 130
    bytes of its own, more than most answers' data (`unpack_answer` reads it)."""
    header = np.array([(key, len(bits), len(narrow), len(wide), wide.itemsize)
                       for key, (bits, narrow, wide) in answer.items()], dtype=np.int32)
    return b"".join([np.int32(len(answer)).tobytes(), header.tobytes(),
                     *(array.tobytes() for arrays in answer.values() for array in arrays)])


def unpack_answer(packed: bytes) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """`pack_answer`'s bytes -> the answer (read-only arrays over them); RuntimeError when
    the bytes do not hold what their header says."""
    try:
        (corpora,) = np.frombuffer(packed, np.int32, 1).tolist()
        header = np.frombuffer(packed, np.int32, 5 * corpora, 4).reshape(corpora, 5)
        at = 4 + header.nbytes
        answer = {}
        for key, bits, narrow, wide, itemsize in header.tolist():
            arrays = []
            for count, dtype in ((bits, np.uint8), (narrow, np.uint8), (wide, f"u{itemsize}")):
                arrays.append(np.frombuffer(packed, dtype, count, at))
                at += arrays[-1].nbytes
            answer[key] = tuple(arrays)
    except (ValueError, TypeError) as e:
        raise RuntimeError(f"an answer of {len(packed)} bytes is cut short: {e}") from e
    if at != len(packed):
        raise RuntimeError(f"an answer of {len(packed)} bytes holds {at} bytes of frequencies")
    return answer


def found_frequencies(answer: tuple[np.ndarray, np.ndarray, np.ndarray], requested: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """An answer of `answer_requests` to a request of `requested` n-grams, (bits, and the
    frequencies of the n-grams found as `narrow_frequencies` gives them) -> (mask of the
    request's n-grams found, their dfs as int64); RuntimeError when they do not match."""
    bits, narrow, wide = answer
    if len(bits) != (requested + 7) // 8:
        raise RuntimeError(f"an answer for {len(bits) * 8} n-grams came back for a request "
                           f"of {requested}")
    found = np.unpackbits(bits, count=requested).view(bool)
    if int(np.count_nonzero(found)) != len(narrow):
        raise RuntimeError(f"an answer names {np.count_nonzero(found)} n-grams and holds "
                           f"{len(narrow)} frequencies")
    dfs = narrow.astype(np.int64)
    at = narrow == WIDE
    if int(np.count_nonzero(at)) != len(wide):
        raise RuntimeError(f"an answer marks {np.count_nonzero(at)} frequencies as wide and "
                           f"holds {len(wide)}")
    dfs[at] = wide
    return found, dfs
