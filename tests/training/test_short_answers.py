"""Short-answer equivalence pairs: the WES pairs, splits without leaks, the
files `--format bem` and `--format judge` read, qa-score rows, the train mix (the SQuAD
pairs themselves: test_squad_pairs)."""

from __future__ import annotations

import collections
import json
import math

import pytest

from tests.training.conftest import FAST, SQUAD
from tests.training.test_squad_pairs import squad_article
from transforms.metrics.judge import judge_reference
from transforms.training import pair_data
from transforms.training import short_answers as sa
from transforms.training.answer_pair import AnswerPair
from transforms.training.squad_pairs import squad_pairs
from transforms.training.wes_pairs import WES_QUESTION


def test_records_carry_the_judges_marked_layout():
    pairs, _ = squad_pairs([squad_article()], identical_share=1.0)
    for p in pairs:
        rec = sa.to_record(p)
        assert rec["reference"] == judge_reference(p.candidate, p.golds, "marked")
        assert rec["reference"].startswith(("[found] ", "[not found] "))
        assert set(rec) == set(sa.JSONL_FIELDS)


def _wes_rows():
    rows = []
    for title, texts, split in (("Evolution", ["evolution", "evolutionary"], "train"),
                                ("Convergent evolution", ["convergent evolution",
                                                          "convergent"], "train"),
                                ("Helium", ["He", "helium"], "train"),
                                ("Ada Lovelace", ["Lovelace", "Ada"], "dev"),
                                ("Ada Air", ["Ada Air"], "dev")):
        rows += [{"title": title, "link_text": t, "label": 1, "split": split,
                  "source_title": None} for t in texts]
    rows += [{"title": "Evolution", "link_text": "He", "label": 0, "split": "train",
              "source_title": "Helium"},
             {"title": "Evolution", "link_text": "Ada", "label": 0, "split": "train",
              "source_title": "Ada Lovelace"},  # from another split: dropped
             {"title": "Helium", "link_text": "convergent", "label": 0, "split": "train",
              "source_title": "Convergent evolution"}]
    return rows


def test_wes_pairs():
    pairs, skipped = sa.wes_pairs(_wes_rows(), identical_share=0.0)
    got = {(p.group, p.kind, p.candidate, p.label) for p in pairs}
    assert ("Evolution", "positive", "evolutionary", 1) in got
    assert ("Evolution", "mined_negative", "He", 0) in got
    assert ("Evolution", "near_miss_negative", "convergent", 0) in got
    assert ("Convergent evolution", "near_miss_negative", "evolutionary", 0) in got
    assert ("Ada Lovelace", "near_miss_negative", "Ada Air", 0) in got
    assert not any(p.kind == "identical" for p in pairs)
    assert skipped["mined_negative:source_in_other_split"] == 1
    assert {p.split for p in pairs if p.group.startswith("Ada")} == {"dev"}
    assert all(p.question == WES_QUESTION and p.golds == (p.group,) for p in pairs)
    assert len({p.id for p in pairs}) == len(pairs)
    with pytest.raises(ValueError, match="in two splits"):
        sa.wes_pairs([*_wes_rows(), {**_wes_rows()[0], "split": "test"}])


def test_mix_train_keeps_the_proportion_and_every_dev_and_test_pair():
    def pair(i, source, split):
        return AnswerPair(f"{source}-{i}", source, f"g{i}", split, "positive", "q", "a",
                          ("a",), 1)

    pairs = ([pair(i, "squad", "train") for i in range(100)]
             + [pair(i, "evouna", "train") for i in range(30)]
             + [pair(i, "squad", "dev") for i in range(7)])
    mixed = sa.mix_train(pairs, {"squad": 2, "evouna": 1})
    train = collections.Counter(p.source for p in mixed if p.split == "train")
    assert train == {"squad": 60, "evouna": 30}
    assert sum(p.split == "dev" for p in mixed) == 7
    assert mixed == sa.mix_train(pairs, {"squad": 2, "evouna": 1})
    with pytest.raises(ValueError, match="give a weight to every source"):
        sa.mix_train(pairs, {"squad": 1})
    with pytest.raises(ValueError, match="unknown source"):
        sa.parse_mix("squad=1,nq=2")


@pytest.mark.slow
def test_real_data_splits_leak_no_article_or_title(squad_articles, wes_corpus):
    """No SQuAD article and no WES title is in two splits, and a WES negative's text
    comes from a title of its own split; every split has both labels."""
    squad, _ = squad_pairs(squad_articles)
    wes_rows = sa.read_wes_rows(str(wes_corpus))
    wes, _ = sa.wes_pairs(wes_rows)
    split_of = collections.defaultdict(set)
    for p in squad + wes:
        split_of[(p.source, p.group)].add(p.split)
    assert all(len(s) == 1 for s in split_of.values())
    for source in ("squad", "wes"):
        for split in sa.SPLITS:
            labels = {p.label for p in squad + wes if p.source == source and p.split == split}
            assert labels == {0, 1}, (source, split)
    title_split = {r["title"]: r["split"] for r in wes_rows}
    texts_of = collections.defaultdict(set)
    for r in wes_rows:
        if r["label"] == 1:
            texts_of[r["link_text"]].add(title_split[r["title"]])
    for p in wes:
        if p.label == 0:
            assert p.split in texts_of[p.candidate], p
    # The SQuAD candidates come from the question's own article.
    text_of = {a["title"]: " ".join(par["context"] for par in a["paragraphs"])
               for a in squad_articles}
    assert all(p.candidate in text_of[p.group] for p in squad if p.kind == "span_negative")
    assert len({p.id for p in squad + wes}) == len(squad) + len(wes)


@pytest.mark.slow
def test_command_writes_files_that_bem_and_judge_formats_read(wes_corpus, tmp_path):
    out = tmp_path / "short"
    assert sa.main([f"--squad={SQUAD}", f"--wes={wes_corpus}", f"--output={out}"]) == 0
    report = json.loads((out / "counts.json").read_text())
    for split in sa.SPLITS:
        n = sum(c["pairs"] for c in report["counts"][split].values())
        assert len((out / f"{split}.jsonl").read_text().splitlines()) == n
    bem = pair_data.read_jsonl(str(out / "dev.jsonl"), "bem")
    judged = pair_data.read_jsonl(str(out / "dev.jsonl"), "judge")  # marked by default
    assert bem == judged and len(bem) > 100
    best = pair_data.read_jsonl(str(out / "dev.jsonl"), "judge", gold_layout="best")
    assert best[0].segments[1] != bem[0].segments[1]
    # The SQuAD test split as qa-score rows.
    rows = [json.loads(x) for x in (out / "scoring" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == report["counts"]["test"]["squad"]["pairs"]
    assert set(rows[0]) == {"id", "system", "question", "prediction", "references", "human"}
    assert {r["human"] for r in rows} == {0, 1} and {r["system"] for r in rows} == {"squad"}
    # The judge metric, given a scoring row, builds the reference the pair was trained on.
    trained = {r["id"]: r for r in map(json.loads, (out / "test.jsonl").read_text().splitlines())}
    for row in rows[:300]:
        rec = trained[row["id"]]
        assert (row["prediction"], row["question"], row["human"]) == (
            rec["candidate"], rec["question"], rec["label"])
        assert judge_reference(row["prediction"], row["references"], "marked") == rec["reference"]


def test_judge_format_rejects_rows_without_golds(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"question": "q", "candidate": "a", "golds": [],
                                "label": 1}) + "\n")
    with pytest.raises(ValueError, match="line 1: golds must not be empty"):
        pair_data.read_jsonl(str(path), "judge")
    path.write_text(json.dumps({"question": "q", "candidate": "a", "label": 1}) + "\n")
    with pytest.raises(ValueError, match=r"missing field\(s\) \['golds'\]"):
        pair_data.read_jsonl(str(path), "judge")


@pytest.mark.slow
def test_judge_format_trains_a_judge_the_metric_reads_in_its_layout(tmp_path):
    from pipelines import train_cross_encoder
    from transforms.metrics.base import QAExample
    from transforms.metrics.corpus import score_corpus
    from transforms.metrics.judge import JudgeMetric

    pairs, _ = squad_pairs([squad_article(f"Article {i}") for i in range(40)],
                           identical_share=1.0)
    src = tmp_path / "short"
    sa.write_pairs(pairs, str(src))
    out = tmp_path / "judge"
    info = train_cross_encoder.run(["--format=judge", f"--input={src}", f"--output={out}",
                                    *FAST, "--max_length=48", "--batch_size=8",
                                    "--max_steps=2"])
    assert not math.isnan(info["best"]["value"])
    assert "[found] g" in info["layout"]
    saved = json.loads((out / "config.json").read_text())["qa_eval_judge_layout"]
    assert saved["gold_layout"] == "marked"
    judge = JudgeMetric(model=str(out))
    (row,) = score_corpus([judge], [QAExample("1884", ("in 1884",),
                                              question="When did Tesla move?")])
    assert 0 < row["judge"] < 1


def test_wes_negative_kinds_filter_train_and_dev_and_keep_test_whole():
    rows = [{"title": t, "link_text": x, "label": label, "split": split, "source_title": src,
             "pair_kind": kind}
            for split in ("train", "test")
            for t, x, label, src, kind in (
                (f"Oil {split}", "petroleum", 1, None, "title_link"),
                (f"Oil {split}", "crude", 1, None, "title_link"),
                (f"Oil {split}", "Paris", 0, "", "random"),
                (f"Oil {split}", "Oil painting", 0, "", "f1"))]
    every, skipped = sa.wes_pairs(rows, identical_share=1.0, near_misses=0)
    assert not skipped
    kept, skipped = sa.wes_pairs(rows, identical_share=1.0, near_misses=0,
                                 negative_kinds=("f1",))
    negatives = {(p.split, p.candidate) for p in kept if p.label == 0}
    assert negatives == {("train", "Oil painting"), ("test", "Paris"), ("test", "Oil painting")}
    assert skipped == {"mined_negative:kind_not_kept": 1}
    assert [p for p in kept if p.split == "test"] == [p for p in every if p.split == "test"]
    unkinded = [{k: v for k, v in r.items() if k != "pair_kind"} for r in rows]
    assert sa.wes_pairs(unkinded, identical_share=1.0, near_misses=0)[0] == every
    with pytest.raises(ValueError, match="needs a WES corpus with a pair_kind column .*"
                                         "'Paris' of 'Oil train' has none"):
        sa.wes_pairs(unkinded, near_misses=0, negative_kinds=("f1",))


def test_command_refuses_an_unknown_negative_kind(capsys):
    assert sa.main(["--wes", "x", "--negative_kinds", "title_link", "--output", "y"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"{sa.PROG}: error: --negative_kinds: unknown kind 'title_link'; known: "
        "random, f1, substring, word_cooccurrence, article_cooccurrence")
