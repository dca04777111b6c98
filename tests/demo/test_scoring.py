"""transforms/demo/scoring.py: the demo's scoring runs."""

from __future__ import annotations

import pytest

from tests.conftest import SHARED_DATA
from transforms.demo import scoring as demo
from transforms.metrics import judge


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


def test_sas_table_puts_the_paper_beside_the_run(tmp_path):
    import json

    report = {"scopes": [
        {"subset": "f1=0", "system": None, "rows": [
            {"metric": "sas", "pearson": 0.5}, {"metric": "f1", "pearson": None}]},
        {"subset": "f1>0", "system": None, "rows": [
            {"metric": "f1", "pearson": 0.2}, {"metric": "sas", "pearson": -0.7},
            {"metric": "wes", "pearson": 0.1}]},
        {"subset": "f1>0", "system": "a", "rows": [{"metric": "sas", "pearson": 0.99}]}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    lines = demo.sas_table(path).splitlines()
    assert lines[2:] == ["| sas | 0.500 | -0.700 | 0.56 / 0.75 |",  # by |r| on F1 > 0
                         "| f1 | n/a | 0.200 | 0.00 / 0.60 |",
                         "| wes | n/a | 0.100 | - |"]


def test_evouna_jobs_name_the_judge_and_the_dev_thresholds(tmp_path):
    rows = tmp_path / "test.jsonl"
    job = demo.evouna_job(rows, tmp_path / "t", list(demo.EVOUNA_MODEL),
                          {"sas": "/m/sas", "judge": "/m/judge"},
                          {"f1": 0.0081, "sas": 0.2, "bertscore": 0.31})
    assert f"--input={rows}" in job and "--human_column=human" in job
    assert "--metrics=bertscore,sas,judge" in job
    assert "--judge_model=/m/judge" in job and "--sas_model=/m/sas" in job
    # Only the thresholds of the run's own metrics (qa-score refuses unknown names).
    assert "--accuracy_threshold=bertscore=0.31,sas=0.2" in job
    lexical = demo.evouna_job(rows, tmp_path / "d", list(demo.EVOUNA_LEXICAL), {"sas": "/m"})
    assert "--metrics=em,f1,contains,token_recall" in lexical
    assert not any(a.startswith(("--bem_model", "--sas_model", "--accuracy_threshold"))
                   for a in lexical)
    no_sas = demo.evouna_job(rows, tmp_path / "d", list(demo.EVOUNA_MODEL), {"sas": None})
    assert "--metrics=bertscore" in no_sas


def test_evouna_rows_are_the_dev_and_test_splits(tmp_path):
    import json

    from transforms.training import evouna

    paths = demo.evouna_rows(SHARED_DATA, tmp_path)
    counts = evouna.counts(evouna.read_questions(
        str(SHARED_DATA / "judgments/evouna/TQ.json")))
    assert set(paths) == {"all", "best"}
    for split in ("dev", "test"):
        every = [json.loads(x) for x in paths["all"][split].read_text().splitlines()]
        best = [json.loads(x) for x in paths["best"][split].read_text().splitlines()]
        assert len(every) == len(best) == counts[split]["answers"]
        assert set(every[0]) >= {"prediction", "references", "human", "system"}
        # The same rows; `best` keeps the gold that the judge's training would pair.
        for a, b in zip(every, best):
            assert {k: v for k, v in a.items() if k != "references"} == {
                k: v for k, v in b.items() if k != "references"}
            assert b["references"] == [judge.best_gold(a["prediction"],
                                                           tuple(a["references"]))]
    assert max(len(r["references"]) for r in every) > 1
    short = demo.evouna_rows(SHARED_DATA, tmp_path / "short", max_rows=7)
    assert len(short["best"]["test"].read_text().splitlines()) == 7


def test_dev_thresholds_maximise_accuracy(tmp_path):
    import pandas as pd

    path = tmp_path / "dev.scores.parquet"
    pd.DataFrame({"human": [0, 0, 1, 1, 1], "f1": [0.0, 0.2, 0.3, 0.9, None],
                  "em": [1.0, 0.0, 0.0, 1.0, 1.0]}).to_parquet(path)
    thresholds = demo.dev_thresholds(path, ["f1", "em"])
    assert thresholds["f1"] == pytest.approx(0.25)  # separates 0.2 (0) from 0.3 (1)
    assert 0 < thresholds["em"] <= 1  # 1 counts as correct: 3 of 5 right either way


def test_judge_table_has_a_line_per_metric_and_a_column_per_system(tmp_path):
    import json

    def rows(acc):
        return [{"metric": "contains", "accuracy": acc, "threshold": 0.5,
                 "threshold_source": "flag", "auroc": 0.9},
                {"metric": "judge", "accuracy": acc + 0.02, "threshold": 0.6,
                 "threshold_source": "checkpoint", "auroc": 0.95}]

    report = {"scopes": [{"subset": None, "system": None, "rows": rows(0.90)},
                         {"subset": None, "system": "fid", "rows": rows(0.80)},
                         {"subset": None, "system": "gpt4", "rows": rows(0.95)},
                         {"subset": None, "system": None, "level": "system", "rows": []}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"scopes": [
        {"subset": None, "system": None, "rows": [{"metric": "f1", "accuracy": 0.5}]},
        {"subset": None, "system": "fid", "rows": [{"metric": "f1", "accuracy": 0.4}]}]}))
    lines = demo.judge_table([path, other]).splitlines()
    assert lines[0] == "| metric | threshold | accuracy | AUROC | acc. fid | acc. gpt4 |"
    assert lines[4] == "| f1 | n/a | 0.500 | n/a | 0.400 | n/a |"
    assert lines[2] == "| judge | 0.6000 (checkpoint) | 0.920 | 0.950 | 0.820 | 0.970 |"
    assert lines[3] == "| contains | 0.5000 (flag) | 0.900 | 0.900 | 0.800 | 0.950 |"


def test_short_rows_keep_the_first_rows_of_each_split_when_capped(tmp_path):
    for split, n in (("dev", 5), ("test", 9)):
        (tmp_path / f"{split}.jsonl").write_text(
            "".join(f'{{"id": "{split}-{i}"}}\n' for i in range(n)))
    scoring = {s: str(tmp_path / f"{s}.jsonl") for s in ("dev", "test")}
    assert demo.short_rows(scoring, tmp_path / "out") == {
        s: tmp_path / f"{s}.jsonl" for s in ("dev", "test")}
    capped = demo.short_rows(scoring, tmp_path / "out", max_rows=3)
    assert capped["test"].parent == tmp_path / "out" / "inputs" / "short"
    assert capped["test"].read_text().splitlines() == [
        '{"id": "test-0"}', '{"id": "test-1"}', '{"id": "test-2"}']
    assert len(capped["dev"].read_text().splitlines()) == 3


def test_judge_table_of_a_report_without_systems_has_no_empty_column(tmp_path):
    import json
    path = tmp_path / "short.json"
    path.write_text(json.dumps({"scopes": [{"subset": None, "system": None, "rows": [
        {"metric": "judge", "accuracy": 0.937, "threshold": 0.6672,
         "threshold_source": "checkpoint", "auroc": 0.983}]}]}))
    assert demo.judge_table([path]).splitlines() == [
        "| metric | threshold | accuracy | AUROC |", "|---|---:|---:|---:|",
        "| judge | 0.6672 (checkpoint) | 0.937 | 0.983 |"]
