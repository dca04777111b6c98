"""Tests for transforms/scoring/config.py: graph-build validation with helpful messages."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.scoring import fakes
from transforms.scoring.config import (
    build_config,
    parse_metric_options,
    resolve_columns,
)

WIDE = ["question", "answer", "reference1", "reference2", "reference10", "scores", "system"]


def test_resolve_defaults_use_what_is_present():
    mapping = resolve_columns(["prediction", "references", "human", "id", "extra"])
    assert (mapping.prediction, mapping.references, mapping.human, mapping.id,
            mapping.system, mapping.question) == (
        "prediction", ("references",), "human", "id", None, None)


def test_resolve_prefix_orders_numerically():
    mapping = resolve_columns(WIDE, prediction_column="answer", reference_prefix="reference",
                              max_references=2, human_column="scores")
    assert mapping.references == ("reference1", "reference2", "reference10")
    assert (mapping.max_references, mapping.human, mapping.system, mapping.question) == (
        2, "scores", "system", "question")


@pytest.mark.parametrize("kwargs, message", [
    ({}, r"prediction column 'prediction' is not in the input; available columns: \['question'"),
    ({"prediction_column": "answer"}, "references column 'references'"),
    ({"prediction_column": "answer", "reference_columns": "reference1,ref9"},
     r"\['ref9'\] are not in the input"),
    ({"prediction_column": "answer", "reference_prefix": "gold"}, "no column is named gold"),
    ({"prediction_column": "answer", "reference_prefix": "reference",
      "reference_columns": "reference1"}, "contradict"),
    ({"prediction_column": "answer", "reference_prefix": "reference",
      "references_column": "reference1"}, "contradict"),
    ({"prediction_column": "answer", "reference_prefix": "reference", "max_references": 0},
     "max_references"),
    ({"prediction_column": "answer", "reference_prefix": "reference",
      "human_column": "label"}, "human column 'label'"),
    ({"prediction_column": "answer", "reference_columns": "reference1",
      "human_column": "reference1"}, "mapped both"),
])
def test_resolve_errors_list_what_is_available(kwargs, message):
    with pytest.raises(ValueError, match=message):
        resolve_columns(WIDE, **kwargs)


def test_parse_metric_options():
    assert parse_metric_options('{"cider": {"sigma": 6}}') == {"cider": {"sigma": 6}}
    assert parse_metric_options(None) == {}
    for bad in ("{", "[1]"):
        with pytest.raises(ValueError, match="metric_options"):
            parse_metric_options(bad)


@pytest.fixture
def csv_input(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("prediction,references,label\na,b,1\n")
    return str(path)


def test_build_config(csv_input, tmp_path, monkeypatch):
    fakes.install(monkeypatch)
    config = build_config(input=csv_input, output=str(tmp_path / "o"),
                          metrics="fake_len,em", human_column="label",
                          report_subsets="em>0", accuracy_threshold="0.4", run_id="r")
    assert config.metric_columns == ("em", "fake_len")
    # fake_len declares a corpus statistic: its signature names the source (issue 14)
    assert config.signatures["fake_len"] == "fake_len|impl:fake|v:1|stats:run"
    assert config.with_human and config.report.default_threshold == 0.4
    assert config.paths.temp(config.paths.scores).endswith("o.scores.parquet.tmp-r")


@pytest.mark.parametrize("kwargs, message", [
    ({"metrics": "em,nope"}, r"unknown metric name\(s\) \['nope'\]; available: \["),
    ({"metrics": ""}, "--metrics is required; available"),
    ({"metrics": "em", "report_subsets": "em>0"}, "need a human column"),
    ({"metrics": "em", "human_column": "label", "report_subsets": "f1>0"},
     r"available: \['em', 'human'\]"),
    ({"metrics": "em", "output_format": "csv"}, "unknown output format"),
    ({"metrics": "em", "input_format": "xml"}, "unknown input format"),
    ({"metrics": "em", "max_batch_size": 0}, "max_batch_size"),
    ({"metrics": "em", "max_text_chars": -1}, r"--max_text_chars must be >= 1 \(or 0"),
])
def test_build_config_errors(csv_input, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_config(input=csv_input, output=str(tmp_path / "o"), **kwargs)


def test_build_config_requires_input_and_output(csv_input):
    with pytest.raises(ValueError, match="--input is required"):
        build_config(input=None, output="o", metrics="em")
    with pytest.raises(ValueError, match="--output is required"):
        build_config(input=csv_input, output=None, metrics="em")


def test_build_config_refuses_inputs_without_columns(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="offer no columns"):
        build_config(input=str(tmp_path / "empty.jsonl"), output=str(tmp_path / "o"),
                     metrics="em")


def test_max_text_chars_defaults_to_100000_and_0_is_no_limit(csv_input, tmp_path):
    config = build_config(input=csv_input, output=str(tmp_path / "o"), metrics="em")
    assert config.max_text_chars == 100_000
    assert config.summary_metadata()["max_text_chars"] == 100_000
    unlimited = build_config(input=csv_input, output=str(tmp_path / "o"), metrics="em",
                             max_text_chars=0)
    assert unlimited.max_text_chars is None


def test_an_unreadable_input_file_fails_the_configuration_naming_it(tmp_path):
    half = tmp_path / "half.parquet"
    pq.write_table(pa.table({"prediction": ["a"] * 50, "references": [["b"]] * 50}), half)
    data = half.read_bytes()
    half.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=f"^input file {half}: .*magic bytes"):
        build_config(input=str(half), output=str(tmp_path / "o"), metrics="em")
