"""transforms/demo/scoring.py: the demo's scoring runs."""

from __future__ import annotations

from tests.conftest import SHARED_DATA
from transforms.demo import scoring as demo


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
