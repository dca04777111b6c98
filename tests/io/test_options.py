"""transforms/io/options.py: both pipelines' flags parse in one process."""

from __future__ import annotations

import os

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.mine_wes import MineWesOptions
from pipelines.score_predictions import ScoreOptions
from transforms.io.options import (
    InputOutputOptions,
    absolute_if_local_file,
    absolute_local,
)


def test_both_pipelines_options_coexist():
    # Beam parses the flags of every imported PipelineOptions subclass together: two
    # classes declaring --input would make get_all_options raise.
    options = PipelineOptions(["--input=a.jsonl", "--output=out/x", "--metrics=em",
                               "--min_incoming_links=5"])
    assert options.get_all_options()["input"] == "a.jsonl"
    io = options.view_as(InputOutputOptions)
    assert (io.input, io.output) == ("a.jsonl", "out/x")
    assert options.view_as(ScoreOptions).metrics == "em"
    assert options.view_as(MineWesOptions).min_incoming_links == "5"


@pytest.mark.parametrize("path, expected", [
    ("out/run", "{cwd}/out/run"),
    ("./a/../b.jsonl", "{cwd}/b.jsonl"),
    ("/data/x.jsonl", "/data/x.jsonl"),
    ("gs://bucket/preds/*.jsonl", "gs://bucket/preds/*.jsonl"),
    ("hdfs:///dumps/enwiki-*.xml.bz2", "hdfs:///dumps/enwiki-*.xml.bz2"),
    (None, None),
    ("", ""),
])
def test_local_paths_go_into_the_graph_absolute(tmp_path, monkeypatch, path, expected):
    monkeypatch.chdir(tmp_path)
    want = expected.format(cwd=tmp_path) if expected else expected
    assert absolute_local(path) == want


def test_existing_local_files_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "sas").mkdir(parents=True)
    assert absolute_if_local_file("models/sas") == os.path.join(tmp_path, "models", "sas")
    # a Hugging Face Hub id is not a local folder: left as it is
    assert absolute_if_local_file("cross-encoder/stsb-roberta-large") == (
        "cross-encoder/stsb-roberta-large")
    assert absolute_if_local_file(None) is None
