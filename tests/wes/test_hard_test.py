"""The WES-hard test split's choice of rows and its summary (hard_test.py)."""

from __future__ import annotations

import pytest

from transforms.wes.hard_test import (
    hard_destination,
    hard_rows,
    hard_stat_keys,
    hard_summary,
    has_hard_test,
)
from transforms.wes.negative_mix import parse_negative_mix


def _row(kind, label, text="x"):
    return {"title": "Oil", "link_text": text, "label": label, "pair_kind": kind}


@pytest.mark.parametrize("spec, hard", [
    ("random=1", False), ("random=1,f1=0", False), ("f1=1", True),
    ("random=3,article_cooccurrence=1", True), ("substring=1,word_cooccurrence=1", True)])
def test_only_a_mix_with_an_adversarial_kind_writes_it(spec, hard):
    assert has_hard_test(parse_negative_mix(spec)) is hard
    assert has_hard_test(None) is False


def test_a_test_title_keeps_its_positives_and_adversarial_negatives():
    rows = [_row("title_link", 1, "oil"), _row("link_link", 1, "petroleum"),
            _row("random", 0, "Paris"), _row("f1", 0, "Oil painting"),
            _row("word_cooccurrence", 0, "gas")]
    assert hard_rows("test", rows) == [rows[0], rows[1], rows[3], rows[4]]
    assert hard_rows("train", rows) == hard_rows("dev", rows) == []


def test_a_title_with_random_negatives_only_is_left_out():
    rows = [_row("title_link", 1, "oil"), _row("random", 0, "Paris")]
    assert hard_rows("test", rows) == []


def test_summary_counts_per_kind():
    counts = {"wes-k5/test_hard:titles": 2, "wes-k5/test_hard:title_link": 5,
              "wes-k5/test_hard:link_link": 1, "wes-k5/test_hard:f1": 3,
              "wes-k5/test_hard:substring": 1, "wes-k2/test_hard:f1": 9}
    block = hard_summary(counts, "wes-k5")
    assert block["path"] == f"{hard_destination('wes-k5')}-*.parquet" == "wes-k5-hard/test-*.parquet"
    assert (block["titles"], block["positives"], block["negatives"]) == (2, 6, 4)
    assert block["pair_kinds"]["article_cooccurrence"] == 0
    assert {f"test_hard:{k}" for k in block["pair_kinds"]} | {"test_hard:titles"} == set(
        hard_stat_keys())
