"""N-grams as 64-bit hashes: a batch's hashes as `gram_hash` makes them one by one, the
text form a statistics file keeps, and the sorted tables the shards hold."""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter

import numpy as np

from transforms.metrics.lexical import text_ngrams
from transforms.scoring.statistics import ngram_hashes
from transforms.scoring.statistics.ngram_hashes import (
    FOLD_PARTS,
    BatchNgrams,
    add_part,
    by_shard,
    fold_tables,
    gram_hash,
    gram_text,
    hashed_table,
    lookup,
    ngram_shard,
    smallest_uint,
    text_gram,
    word_hash,
)


def test_batch_ngrams_hash_every_ngram_as_gram_hash_does():
    texts = ["a man rides a horse", "", "one", "a man rides a bike a man rides"]
    ngrams = BatchNgrams(texts)
    expected = Counter()
    for number, text in enumerate(texts):
        for order in text_ngrams(text):
            for gram, tf in order.items():
                expected[(number, gram_hash(gram))] += tf
    assert Counter(zip(ngrams.texts.tolist(), ngrams.hashes.tolist())) == expected
    hashes, first = ngrams.first_occurrences()
    grams = ngrams.grams_at(first)
    assert [gram_hash(g) for g in grams] == hashes.tolist()
    assert ngrams.grams_at(first[[2, 0]]) == [grams[2], grams[0]]
    assert sorted(grams, key=str) == sorted({g for t in texts for o in text_ngrams(t)
                                             for g in o}, key=str)
    # documents count a text once per n-gram; distinct() reads the texts asked for
    counted, docs = ngrams.documents(np.array([0, -1, -1, 1]))
    got = dict(zip(counted.tolist(), docs.tolist(), strict=True))
    assert got[gram_hash(("a", "man"))] == 2 and got[gram_hash("bike")] == 1
    assert gram_hash("one") not in got
    assert ngrams.distinct(np.array([False, False, True, False])).tolist() == [
        gram_hash("one")]


def test_gram_text_round_trips_unigrams_and_tuples():
    for gram in ("mid", ("a", "man"), ("x", "y", "z", "w")):
        assert text_gram(gram_text(gram)) == gram
    assert gram_text("mid") == "mid"


def test_tables_are_sorted_sharded_folded_and_looked_up():
    table = {"x": 3, ("a", "b"): 5, "q": 2, "z": 1}
    hashes, dfs = hashed_table(table)
    assert list(hashes) == sorted(hashes)
    assert dict(zip(hashes.tolist(), dfs.tolist(), strict=True)) == {
        gram_hash(g): d for g, d in table.items()}
    parts = list(by_shard(hashes, 3, dfs))
    assert [shard for shard, _, _ in parts] == sorted({int(h) % 3 for h in hashes})
    for shard, part, (part_dfs,) in parts:
        assert all(int(h) % 3 == shard for h in part) and list(part) == sorted(part)
        assert part_dfs.tolist() == [table_df for h, table_df in zip(
            hashes.tolist(), dfs.tolist(), strict=True) if h % 3 == shard]
    ((folded, counts),) = fold_tables([(hashes, dfs), hashed_table({"x": 1, "new": 4})])
    assert dict(zip(folded.tolist(), counts.tolist(), strict=True)) == {
        **{gram_hash(g): d for g, d in table.items()}, gram_hash("x"): 4, gram_hash("new"): 4}
    asked = np.array([gram_hash("q"), gram_hash("absent")], dtype=np.uint64)
    found, at = lookup(folded, asked)
    assert found.tolist() == [True, False] and counts[at[0]] == 2
    assert not lookup(folded[:0], asked)[0].any()
    assert smallest_uint(np.array([0, 255])).dtype == np.uint8
    assert smallest_uint(np.array([0, 70_000])).dtype == np.uint32
    assert smallest_uint(np.array([], dtype=np.int64)).dtype == np.uint8


def _fresh_words(n: int) -> list[str]:
    """Words no memo of this process has seen (the memo outlives a test)."""
    stamp = uuid.uuid4().hex
    return [f"w{i}{stamp}" for i in range(n)]


def test_a_word_hash_is_blake2b_of_its_utf8_bytes_whatever_the_memo_holds(monkeypatch):
    # stable across processes and runs: a pinned value (BLAKE2b, 8 bytes, little endian)
    assert word_hash("cider") == 0x4752147BBE4F5B31
    for word in [*_fresh_words(3), "\ud83d" + uuid.uuid4().hex]:  # a lone surrogate too
        expected = int.from_bytes(hashlib.blake2b(
            word.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
        assert word_hash(word) == expected and word_hash(word) == expected  # memoised
    # the memo is bounded: it starts again past its size, and still hashes alike
    monkeypatch.setattr(ngram_hashes, "_WORD_HASH", {})
    monkeypatch.setattr(ngram_hashes, "_WORD_HASH_MAX", 4)
    words = _fresh_words(10)
    first = [word_hash(w) for w in words]
    assert len(ngram_hashes._WORD_HASH) <= 4
    assert [word_hash(w) for w in words] == first


def test_batch_ngrams_of_new_words_and_of_a_single_word():
    words = _fresh_words(3)
    ngrams = BatchNgrams([" ".join(words)])
    assert ngrams.hashes.tolist()[:3] == [word_hash(w) for w in words]
    assert ngrams.hashes.tolist()[3:] == [gram_hash(tuple(words[:2])),
                                          gram_hash(tuple(words[1:])), gram_hash(tuple(words))]
    single = BatchNgrams(["alone"])
    assert single.hashes.tolist() == [gram_hash("alone")] and single.texts.tolist() == [0]
    assert BatchNgrams([]).hashes.tolist() == []


def test_documents_count_an_ngram_once_per_document():
    ngrams = BatchNgrams(["x", "x", "y x"])
    hashes, docs = ngrams.documents(np.array([0, 1, 1]))
    assert dict(zip(hashes.tolist(), docs.tolist(), strict=True)) == {
        gram_hash("x"): 2, gram_hash("y"): 1, gram_hash(("y", "x")): 1}


def test_shards_keep_each_part_sorted_and_folds_sum_past_a_byte():
    hashes = np.sort(np.random.default_rng(0).integers(0, 2**63, 500, dtype=np.uint64))
    values = np.arange(500)
    seen = []
    for shard, part, (part_values,) in by_shard(hashes, 3, values):
        assert part.tolist() == sorted(part.tolist()) and (part % 3 == shard).all()
        assert hashes[part_values].tolist() == part.tolist()
        seen.append(shard)
    assert seen == [0, 1, 2]
    assert [ngram_shard(g, 7) for g in ("a", ("a", "b"))] == [
        gram_hash("a") % 7, gram_hash(("a", "b")) % 7]
    small = np.array([1, 2], dtype=np.uint64)
    ((folded, counts),) = fold_tables([(small, np.array([200, 1], dtype=np.uint8)),
                                       (small[:1], np.array([100], dtype=np.uint8))])
    assert folded.tolist() == [1, 2] and counts.tolist() == [300, 1]
    assert counts.dtype == np.uint16
    empty = np.array([], dtype=np.uint64)
    ((none, no_counts),) = fold_tables([(empty, empty.astype(np.uint8))] * 2)
    assert none.tolist() == [] and no_counts.dtype == np.uint8
    assert hashed_table({"x": 3})[1].dtype == np.int64


def test_parts_are_folded_past_fold_parts():
    part = (np.array([5], dtype=np.uint64), np.array([1], dtype=np.uint8))
    parts: list = []
    for _ in range(FOLD_PARTS):
        add_part(parts, part)
    assert len(parts) == FOLD_PARTS
    add_part(parts, part)
    assert len(parts) == 1 and parts[0][1].tolist() == [FOLD_PARTS + 1]


def test_lookup_finds_the_last_hash_and_answers_an_empty_table():
    table = np.array([3, 9, 20], dtype=np.uint64)
    found, at = lookup(table, np.array([20, 21, 3], dtype=np.uint64))
    assert found.tolist() == [True, False, True] and at[found].tolist() == [2, 0]
    found, at = lookup(table[:0], np.array([4], dtype=np.uint64))
    assert found.dtype == bool and at.dtype == np.int64 and not found.any()
    assert smallest_uint(np.array([2**32])).dtype == np.uint64
