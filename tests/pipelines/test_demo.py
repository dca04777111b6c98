"""`make demo` end to end at a tiny scale: mine -> train (2 steps each) -> score 40 rows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import demo
from tests.conftest import SHARED_DATA


def test_training_plan_lanes_and_given_checkpoints(tmp_path):
    none = {m: None for m in (*demo.TRAINED, *demo.GIVEN_ONLY)}
    lanes = demo.training_plan(SHARED_DATA, tmp_path / "wes-k2", tmp_path / "m", 5.5, none)
    assert [[name for name, _ in lane] for lane in lanes] == [["wes", "sas"], ["kpqa"]]
    wes_args, sas_args = lanes[0][0][1], lanes[0][1][1]
    assert "--max_minutes=2.48" in wes_args and f"--max_minutes={demo.REST}" in sas_args
    assert "--init_checkpoint" in sas_args and "--epochs=1" in sas_args
    assert "--max_minutes=5.50" in lanes[1][0][1] and "--max_steps=330" in lanes[1][0][1]
    long = demo.training_plan(SHARED_DATA, tmp_path, tmp_path / "m", 20, none)
    assert "--epochs=3" in long[0][1][1] and "--epochs=2" in long[1][0][1]
    given = demo.training_plan(SHARED_DATA, tmp_path, tmp_path / "m", 5.5,
                               {**none, "wes": "/my/wes", "kpqa": "/my/kp"})
    assert [[name for name, _ in lane] for lane in given] == [["sas"]]
    assert "--init_checkpoint" not in given[0][0][1]


def test_scoring_jobs_use_every_metric_that_has_a_model(tmp_path):
    models = {"sas": "/m/sas", "wes": "/m/wes", "kpqa": "/m/kp", "bem": None, "square": "/m/sq"}
    jobs = demo.scoring_jobs(SHARED_DATA, tmp_path, models)
    avsd = next(a for a in jobs["avsd"] if a.startswith("--metrics=")).split("=")[1]
    assert avsd.split(",") == [*demo.LEXICAL_METRICS, "bertscore", "bi_encoder", "sas", "wes",
                               "square", *demo.KPQA_METRICS]
    assert "--square_model=/m/sq" in jobs["avsd"] and "--kpqa_model=/m/kp" in jobs["avsd"]
    sas = next(a for a in jobs["squad_sas"] if a.startswith("--metrics=")).split("=")[1]
    assert "kpqa_bleu1" not in sas and "square" not in sas and "sas" in sas.split(",")
    assert not any(a.startswith("--kpqa_model") for a in jobs["squad_sas"])


def test_rest_of_the_budget_goes_to_the_next_run_of_a_lane(tmp_path):
    lane = [("first", ["pipelines.nothing", "--max_minutes=1.00"]),
            ("second", ["pipelines.nothing", f"--max_minutes={demo.REST}"])]
    with pytest.raises(RuntimeError, match="first training failed"):
        demo.run_lanes([lane], tmp_path, 2.0)
    assert not (tmp_path / "second.log").exists()  # a lane stops at its first failure


def test_bad_budget_is_refused():
    with pytest.raises(SystemExit):
        demo.main(["--train_minutes", "0"])


@pytest.mark.slow
def test_demo_end_to_end_tiny(tmp_path, capsys):
    out = tmp_path / "demo"
    assert demo.main(["--output", str(out), "--max_steps", "2", "--max_rows", "40",
                      "--train_minutes", "2"]) == 0
    printed = capsys.readouterr().out
    for name in ("wes", "sas", "keyphrase"):
        card = (out / "models" / name / "model_card.md").read_text()
        assert "2" in card and (out / "models" / name / "config.json").is_file()
        training = json.loads((out / "models" / name / "metrics.json").read_text())["training"]
        assert training["global_step"] == 2  # --max_steps reached every training run
    assert "as the SAS paper's Table 2" in printed and "| sas |" in printed
    scores = pq.read_table(out / "scores" / "avsd.scores.parquet").to_pandas()
    assert len(scores) == 40
    assert {"sas", "wes", "kpqa_bertscore", "bertscore", "meteor"} <= set(scores.columns)
    signature = dict(scores.iloc[0]["signature"])
    assert str(out / "models" / "sas") in signature["sas"]
    assert str(out / "models" / "keyphrase") in signature["kpqa_rougeL"]
    summary = json.loads((out / "scores" / "squad_sas.summary.json").read_text())
    assert summary["overall"]["in"] == 40
    assert summary["overall"]["scored"] + summary["overall"]["dead_lettered"] == 40
    assert Path(str(out / "scores" / "squad_sas.report.png")).is_file()
