"""`make demo` end to end at a tiny scale: mine -> train (2 steps each) -> score 40 rows
(its parts: tests/demo/)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import demo
from transforms.scoring.outputs.write import read_signatures


def test_bad_budget_is_refused(capsys):
    assert demo.main(["--train_minutes", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "python -m pipelines.demo: error: --train_minutes must be > 0, got 0.0")
    assert demo.main(["--judge_minutes", "-1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "python -m pipelines.demo: error: --judge_minutes must be > 0, got -1.0")
    assert demo.main(["--max_steps", "2", "--max_eval_rows", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "python -m pipelines.demo: error: --max_eval_rows must be >= 1, got 0")


@pytest.mark.slow
def test_demo_end_to_end_tiny(tmp_path, capsys):
    out = tmp_path / "demo"
    assert demo.main(["--output", str(out), "--max_steps", "2", "--max_rows", "40",
                      "--max_eval_rows", "40", "--train_minutes", "2"]) == 0
    printed = capsys.readouterr().out
    for name in ("wes", "sas", "keyphrase", "judge"):
        card = (out / "models" / name / "model_card.md").read_text()
        assert "| global_step | 2 |" in card  # the card states the steps trained
        assert (out / "models" / name / "config.json").is_file()
        training = json.loads((out / "models" / name / "metrics.json").read_text())["training"]
        assert training["global_step"] == 2  # --max_steps reached every training run
    assert "as the SAS paper's Table 2" in printed and "| sas |" in printed
    scores = pq.read_table(out / "scores" / "avsd.scores.parquet").to_pandas()
    assert len(scores) == 40
    assert {"sas", "wes", "kpqa_bertscore", "bertscore", "meteor"} <= set(scores.columns)
    signature = read_signatures(str(out / "scores" / "avsd.scores.parquet"))
    assert str(out / "models" / "sas") in signature["sas"]
    assert str(out / "models" / "keyphrase") in signature["kpqa_rougeL"]
    summary = json.loads((out / "scores" / "squad_sas.summary.json").read_text())
    assert summary["overall"]["in"] == 40
    assert summary["overall"]["scored"] + summary["overall"]["dead_lettered"] == 40
    assert Path(str(out / "scores" / "squad_sas.report.png")).is_file()
    # The judge: trained from the demo's sas on EVOUNA-TQ, calibrated on dev, scoring test.
    judge_config = json.loads((out / "models" / "judge" / "config.json").read_text())
    assert 0 < judge_config["qa_eval_decision_threshold"] < 1
    lexical = pq.read_table(out / "scores" / "evouna_tq_all.scores.parquet").to_pandas()
    model = pq.read_table(out / "scores" / "evouna_tq_best.scores.parquet").to_pandas()
    assert len(lexical) == len(model) == 40
    assert {"em", "f1", "contains", "token_recall", "judge"} <= set(lexical.columns)
    assert {"bertscore", "sas"} <= set(model.columns)
    judge_signature = read_signatures(str(out / "scores" / "evouna_tq_all.scores.parquet"))[
        "judge"]
    assert str(out / "models" / "judge") in judge_signature and "|refs:best" in judge_signature
    assert "EVOUNA-TQ test split: accuracy at the dev-chosen threshold" in printed
    assert "| judge |" in printed and "(checkpoint)" in printed
    # The judge trained on the short-answer pairs with EVOUNA-TQ; the short-answer test
    # split scored beside EVOUNA-TQ's, every metric at its dev threshold.
    assert json.loads((out / "models" / "judge" / "metrics.json").read_text())[
        "data"]["format"] == "judge"
    short = pq.read_table(out / "scores" / "short_test.scores.parquet").to_pandas()
    assert len(short) == 40 and set(short["system"]) == {"squad"}
    assert {"f1", "contains", "sas", "judge"} <= set(short.columns)
    assert "Short-answer test split: accuracy at the dev-chosen threshold" in printed
    assert (out / "short" / "counts.json").is_file()
