"""Tests for transforms/scoring/config.py: graph-build validation with helpful messages."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.scoring import fakes
from transforms.scoring.config import build_config, parse_metric_options


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
    # fake_len declares a corpus statistic: its signature names the source
    assert config.signatures["fake_len"] == "fake_len|v:1|impl:fake|stats:run"
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


def _judge_checkpoint(folder, threshold):
    """A binary one-logit judge's checkpoint folder as train_cross_encoder leaves it:
    config.json with the calibrated threshold (no real weights needed to build a config)."""
    import json

    from transforms.training.best_checkpoint import THRESHOLD_KEY

    folder.mkdir()
    config = {"architectures": ["BertForSequenceClassification"], "num_labels": 1,
              "id2label": {"0": "LABEL_0"}, "type_vocab_size": 2,
              "max_position_embeddings": 512}
    if threshold is not None:
        config[THRESHOLD_KEY] = threshold
        config[f"{THRESHOLD_KEY}_source"] = {"objective": "accuracy", "split": "dev"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"not read here")
    return str(folder)


def test_saved_threshold_reaches_the_signature_and_the_report(csv_input, tmp_path):
    judge = _judge_checkpoint(tmp_path / "judge", 0.62)
    common = {"input": csv_input, "output": str(tmp_path / "o"), "metrics": "sas,f1",
              "human_column": "label", "model_flags": {"sas_model": judge}, "run_id": "r"}
    config = build_config(**common)
    assert "|thr:0.62|" in config.signatures["sas"]
    assert (config.report.threshold("sas"), config.report.threshold_source("sas")) == (
        0.62, "checkpoint")
    assert (config.report.threshold("f1"), config.report.threshold_source("f1")) == (
        0.5, "default")
    assert build_config(**common, accuracy_threshold="sas=0.3").report.threshold("sas") == 0.3
    overall = build_config(**common, accuracy_threshold="0.4").report
    assert (overall.threshold("sas"), overall.threshold_source("sas")) == (0.4, "flag")
    plain = build_config(**{**common, "model_flags": {
        "sas_model": _judge_checkpoint(tmp_path / "plain", None)}})
    assert "thr:" not in plain.signatures["sas"] and plain.report.threshold("sas") == 0.5


def test_bad_saved_threshold_and_min_n_fail(csv_input, tmp_path):
    judge = _judge_checkpoint(tmp_path / "judge", "high")
    with pytest.raises(ValueError, match="qa_eval_decision_threshold must be a finite number"):
        build_config(input=csv_input, output=str(tmp_path / "o"), metrics="sas",
                     model_flags={"sas_model": judge})
    with pytest.raises(ValueError, match="--report_min_n must be >= 1"):
        build_config(input=csv_input, output=str(tmp_path / "o"), metrics="f1",
                     human_column="label", report_min_n=0)


def test_report_resamples_reach_the_report_spec(csv_input, tmp_path):
    config = build_config(input=csv_input, output=str(tmp_path / "o"), metrics="em",
                          human_column="label", report_resamples=200)
    assert config.report.resamples == 200
    assert build_config(input=csv_input, output=str(tmp_path / "o"), metrics="em",
                        human_column="label").report.resamples == 1000
    with pytest.raises(ValueError, match="--report_resamples must be >= 100"):
        build_config(input=csv_input, output=str(tmp_path / "o"), metrics="em",
                     human_column="label", report_resamples=10)
