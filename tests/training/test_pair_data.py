"""Cross-encoder rows from the real inputs, in the scorer's layouts; bad inputs fail early."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.training.conftest import STSB
from transforms.models import layouts
from transforms.training.pair_data import (
    load_pairs,
    read_jsonl,
    read_stsb,
    read_wes,
    split_files,
)


def test_stsb_first_seven_fields_and_score_over_five():
    rows = read_stsb(str(STSB / "sts-train.csv"))
    assert len(rows) == 5749
    assert rows[0].segments == layouts.pair_input("A plane is taking off.",
                                                  "An air plane is taking off.")
    assert rows[0].label == 1.0 and rows[1].label == pytest.approx(3.8 / 5)
    # Line 5553 has two extra source columns; a CSV reader would get it wrong.
    assert rows[5552].segments == ("Driver backs into stroller with child, drives off",
                                   "Driver backs into mom, stroller with child then drives off")
    assert rows[5552].label == pytest.approx(0.8)


@pytest.mark.slow
def test_wes_shards_pair_link_text_with_title(wes_corpus):
    files = split_files("wes", str(wes_corpus))
    assert all(files[s] for s in ("train", "dev", "test"))
    rows = read_wes(files["dev"][0])
    table = pq.read_table(files["dev"][0]).to_pylist()
    assert [r.segments for r in rows] == [layouts.pair_input(t["link_text"], t["title"])
                                          for t in table]
    assert {r.label for r in rows} == {0.0, 1.0}


def test_bem_and_square_rows_use_the_scorer_layouts(bem_square_rows):
    bem = read_jsonl(str(bem_square_rows["bem"] / "train.jsonl"), "bem")
    first = json.loads((bem_square_rows["bem"] / "train.jsonl").read_text().splitlines()[0])
    assert bem[0].segments == layouts.bem_input(first["candidate"], first["reference"],
                                                first["question"])
    square = read_jsonl(str(bem_square_rows["square"] / "train.jsonl"), "square")
    first = json.loads((bem_square_rows["square"] / "train.jsonl").read_text().splitlines()[0])
    assert square[0].segments == layouts.square_input(
        first["question"], first["target"], first["positive_references"],
        first["negative_references"])
    assert square[0].segments[0].startswith("Question: ")


def test_row_caps_are_seeded_samples(stsb_small):
    files = split_files("stsb", str(stsb_small))
    a = load_pairs("stsb", files, seed=1, limits={"train": 10})
    assert len(a["train"]) == 10 and len(a["dev"]) == 24
    assert a["train"] == load_pairs("stsb", files, seed=1, limits={"train": 10})["train"]
    full = load_pairs("stsb", files, seed=1)["train"]
    assert [full.index(r) for r in a["train"]] == sorted(full.index(r) for r in a["train"])


def _parquet(path, **columns):
    pq.write_table(pa.table(columns), path)
    return str(path)


def _bad_wes(tmp_path, name, **columns):
    d = tmp_path / name
    d.mkdir()
    base = {"title": ["A", "B"], "link_text": ["a", "b"], "label": [1, 0],
            "split": ["train", "train"]}
    base.update(columns)
    _parquet(d / "train-00000-of-00001.parquet", **{k: v for k, v in base.items() if v is not None})
    dev = {**base, "split": ["dev", "dev"]}
    _parquet(d / "dev-00000-of-00001.parquet", **{k: v for k, v in dev.items() if v is not None})
    return d


@pytest.mark.parametrize("columns, message", [
    ({"label": None}, r"missing column\(s\) \['label'\]"),
    ({"link_text": None}, r"missing column\(s\) \['link_text'\]"),
    ({"label": [1, 2]}, "column label must be 0 or 1, got 2"),
    ({"split": ["train", "dev"]}, "column split says 'dev' in a train shard"),
    ({"title": ["A", ""]}, "non-empty strings"),
])
def test_bad_wes_shards_name_file_and_column(tmp_path, columns, message):
    d = _bad_wes(tmp_path, "bad", **columns)
    with pytest.raises(ValueError, match=message) as e:
        load_pairs("wes", split_files("wes", str(d)), seed=0)
    assert "-00000-of-00001.parquet" in str(e.value)


def test_missing_and_empty_splits(tmp_path, stsb_small):
    with pytest.raises(ValueError, match="does not exist"):
        split_files("stsb", str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="train file .* does not exist"):
        split_files("stsb", None, {"train": str(tmp_path / "nope.csv")})
    (tmp_path / "sts-train.csv").write_text((stsb_small / "sts-train.csv").read_text())
    with pytest.raises(ValueError, match="no dev files for format stsb"):
        load_pairs("stsb", split_files("stsb", str(tmp_path)), seed=0)
    (tmp_path / "sts-dev.csv").write_text("\n")
    with pytest.raises(ValueError, match="the dev split is empty"):
        load_pairs("stsb", split_files("stsb", str(tmp_path)), seed=0)


@pytest.mark.parametrize("line, message", [
    ("g\tf\t2012\t1\t5.5\ta\tb", "line 1: column score must be in"),
    ("g\tf\t2012\t1\tfive\ta\tb", "line 1: column score is not a number"),
    ("g\tf\t2012\t1\t3.0\ta", "line 1: 6 TAB-separated fields"),
])
def test_bad_stsb_lines(tmp_path, line, message):
    path = tmp_path / "sts-train.csv"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=message) as e:
        read_stsb(str(path))
    assert str(path) in str(e.value)


@pytest.mark.parametrize("fmt, obj, message", [
    ("bem", {"question": "q", "reference": "r", "label": 1}, r"missing field\(s\) \['candidate'\]"),
    ("bem", {"question": "q", "reference": "r", "candidate": "c", "label": 1.5},
     r"label must be a number in \[0, 1\]"),
    ("bem", {"question": "q", "reference": "r", "candidate": 3, "label": 1}, "candidate must be a string"),
    ("square", {"question": "q", "target": "t", "positive_references": [], "label": 0},
     "positive_references must not be empty"),
    ("square", {"question": "q", "target": "t", "positive_references": "r", "label": 0},
     "positive_references must be a list of strings"),
    ("square", {"question": "q", "target": "t", "positive_references": ["r"],
                "negative_references": [1], "label": 0}, "negative_references must be a list"),
])
def test_bad_jsonl_rows(tmp_path, fmt, obj, message):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(obj) + "\n")
    with pytest.raises(ValueError, match=message) as e:
        read_jsonl(str(path), fmt)
    assert f"{path} line 1" in str(e.value)


def test_invalid_json_and_single_valued_dev(tmp_path, bem_square_rows):
    path = tmp_path / "train.jsonl"
    path.write_text('{"question": "q",\n')
    with pytest.raises(ValueError, match="line 1: not valid JSON"):
        read_jsonl(str(path), "bem")
    dev = tmp_path / "dev.jsonl"
    dev.write_text(json.dumps({"question": "q", "reference": "r", "candidate": "c",
                               "label": 1}) + "\n")
    files = {"train": [str(bem_square_rows["bem"] / "train.jsonl")], "dev": [str(dev)]}
    with pytest.raises(ValueError, match="single target value"):
        load_pairs("bem", files, seed=0)


def test_any_shard_may_serve_as_dev_through_explicit_files(wes_corpus):
    files = split_files("wes", None, {"train": str(wes_corpus / "train-*.parquet"),
                                      "dev": str(wes_corpus / "test-*.parquet")})
    rows = load_pairs("wes", files, seed=0)
    assert len(rows["dev"]) == len(read_wes(files["dev"][0])) and rows["test"] == []
