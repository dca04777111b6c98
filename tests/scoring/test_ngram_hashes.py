"""N-grams as 64-bit hashes: a batch's hashes as `gram_hash` makes them one by one, the
text form a statistics file keeps, and the sorted tables the shards hold."""

from __future__ import annotations

from collections import Counter

import numpy as np

from transforms.metrics.lexical import text_ngrams
from transforms.scoring.statistics.ngram_hashes import (
    BatchNgrams,
    by_shard,
    fold_tables,
    gram_hash,
    gram_text,
    hashed_table,
    lookup,
    smallest_uint,
    text_gram,
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
