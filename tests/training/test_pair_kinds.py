"""WES pair kinds in the cross-encoder trainer: the filter of negative kinds, accuracy per
kind, and the WES-hard test split's files (pair_kinds.py), on small shards written here."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import train_cross_encoder
from tests.training.conftest import FAST, main_exit_code
from transforms.training.pair_data import load_pairs, split_files
from transforms.training.pair_kinds import (
    NEGATIVE_KINDS,
    POSITIVE_KINDS,
    hard_test_files,
    kind_accuracy,
    parse_negative_kinds,
)

# (title, link_text, label, pair_kind) of each split: two titles, every kind.
ROWS = [("Oil", "petroleum", 1, "title_link"), ("Oil", "Oil painting", 0, "f1"),
        ("Oil", "Paris", 0, "random"), ("Gas", "natural gas", 1, "title_link"),
        ("Gas", "gas station", 0, "substring"), ("Gas", "France", 0, "random")]


def _shards(folder, kinded=True, rows=ROWS):
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        columns = {"title": [r[0] for r in rows], "link_text": [r[1] for r in rows],
                   "label": pa.array([r[2] for r in rows], pa.int8()),
                   "split": [split] * len(rows)}
        if kinded:
            columns["pair_kind"] = [r[3] for r in rows]
        pq.write_table(pa.table(columns), folder / f"{split}-00000-of-00001.parquet")
    return folder


def test_the_kinds_are_the_minings():
    from transforms.wes.hard_test import hard_folder
    from transforms.wes.negative_mix import LINK_LINK, TITLE_LINK
    from transforms.wes.negative_mix import NEGATIVE_KINDS as MINED

    assert NEGATIVE_KINDS == MINED and POSITIVE_KINDS == (TITLE_LINK, LINK_LINK)
    assert hard_test_files(None, "/x/wes-k2/") == [] and hard_folder("wes-k2") == "wes-k2-hard"


@pytest.mark.parametrize("spec, kinds", [
    (None, None), ("random", ("random",)), (" f1 , random,f1", ("random", "f1")),
    ("article_cooccurrence,substring", ("substring", "article_cooccurrence"))])
def test_parse_negative_kinds(spec, kinds):
    assert parse_negative_kinds(spec) == kinds


@pytest.mark.parametrize("spec, message", [
    ("random,bogus", "unknown kind 'bogus'; known: random, f1"), (",", "no kind given"),
    ("title_link", "unknown kind 'title_link'")])
def test_parse_negative_kinds_refuses(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_negative_kinds(spec)


def test_train_and_dev_keep_positives_and_the_kinds_asked_test_stays_whole(tmp_path):
    files = split_files("wes", str(_shards(tmp_path / "wes-k2")))
    splits = load_pairs("wes", files, seed=0, negative_kinds=("random",))
    for split in ("train", "dev"):
        assert [(r.segments[0], r.kind) for r in splits[split]] == [
            ("petroleum", "title_link"), ("Paris", "random"), ("natural gas", "title_link"),
            ("France", "random")]
    assert [r.kind for r in splits["test"]] == [r[3] for r in ROWS]
    whole = load_pairs("wes", files, seed=0)
    assert [r.kind for r in whole["train"]] == [r[3] for r in ROWS]


def test_a_kind_the_shards_lack_fails(tmp_path):
    files = split_files("wes", str(_shards(tmp_path / "wes-k2")))
    with pytest.raises(ValueError, match="the train split has no negatives of these kinds "
                                         r"\(its negatives are f1, random, substring\)"):
        load_pairs("wes", files, seed=0, negative_kinds=("word_cooccurrence",))


def test_shards_without_pair_kind_fail_with_the_shard_named(tmp_path):
    files = split_files("wes", str(_shards(tmp_path / "wes-k2", kinded=False)))
    assert {r.kind for r in load_pairs("wes", files, seed=0)["train"]} == {None}
    with pytest.raises(ValueError, match="needs shards with a pair_kind column .*/"
                                         "train-00000-of-00001.parquet has none"):
        load_pairs("wes", files, seed=0, negative_kinds=("random",))


def test_accuracy_per_kind_at_half_and_at_the_threshold():
    kinds = ["title_link", "f1", "f1", "random", "title_link"]
    labels = [1, 0, 0, 0, 1]
    scores = [0.9, 0.6, 0.2, 0.1, 0.45]
    out = kind_accuracy(kinds, labels, scores, threshold=0.4)
    assert list(out) == ["title_link", "random", "f1"]
    assert out["title_link"] == {"rows": 2, "accuracy": 0.5, "accuracy_at_threshold": 1.0}
    assert out["f1"] == {"rows": 2, "accuracy": 0.5, "accuracy_at_threshold": 0.5}
    assert kind_accuracy(kinds, labels, scores)["random"] == {"rows": 1, "accuracy": 1.0}
    assert kind_accuracy([None] * 5, labels, scores) is None
    assert kind_accuracy([], [], []) is None


def test_the_hard_split_is_found_beside_the_corpus_or_named(tmp_path):
    corpus = _shards(tmp_path / "wes-k2")
    assert hard_test_files(None, str(corpus)) == []
    hard = tmp_path / "wes-k2-hard"
    hard.mkdir()
    (hard / "test-00000-of-00001.parquet").write_bytes(b"")
    assert hard_test_files(None, str(corpus) + "/") == [str(hard / "test-00000-of-00001.parquet")]
    assert hard_test_files(str(corpus / "dev-*.parquet"), None) == [
        str(corpus / "dev-00000-of-00001.parquet")]
    with pytest.raises(ValueError, match="hard test file .*nope.parquet does not exist"):
        hard_test_files(str(tmp_path / "nope.parquet"), str(corpus))


@pytest.mark.parametrize("kinded, flag, message", [
    (True, "--negative_kinds=random,bogus", "--negative_kinds: unknown kind 'bogus'"),
    (False, "--negative_kinds=random", "needs shards with a pair_kind column"),
])
def test_bad_kinds_end_in_one_usage_line(tmp_path, capsys, kinded, flag, message):
    corpus = _shards(tmp_path / "wes-k2", kinded=kinded)
    code = main_exit_code(["--format=wes", f"--input={corpus}", flag,
                           f"--output={tmp_path / 'out'}", *FAST])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m pipelines.train_cross_encoder: error: ")
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_kinds_apply_to_wes_only(tmp_path):
    with pytest.raises(ValueError, match="apply to format wes only"):
        train_cross_encoder.run(["--format=stsb", f"--input={tmp_path}", "--negative_kinds=f1",
                                 f"--output={tmp_path / 'out'}", *FAST])
