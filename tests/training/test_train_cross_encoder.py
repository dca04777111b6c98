"""The cross-encoder entry point on a few rows of real data: loss, checkpoints, resume."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from pipelines import train_cross_encoder
from tests.models.checkpoints import write_malicious_pickle
from tests.training.conftest import FAST, main_exit_code
from transforms.metrics.base import QAExample
from transforms.metrics.corpus import score_corpus
from transforms.metrics.model_metrics import BEMMetric, SASMetric, SQuArEMetric, WESMetric
from transforms.models.loading import packaged_model_path

TINY = [*FAST, "--max_length=32", "--batch_size=8"]


def _sts_args(stsb_small, out, *extra):
    return ["--format=stsb", f"--input={stsb_small}", f"--output={out}", *TINY, *extra]


@pytest.mark.slow
def test_sts_loss_falls_and_best_checkpoint_round_trips(stsb_small, tmp_path):
    out = tmp_path / "sas"
    train = str(stsb_small / "sts-train.csv")
    info = train_cross_encoder.run(_sts_args(
        stsb_small, out, "--max_steps=8", "--lr=1e-4", "--eval_first", "--eval_every=4",
        f"--dev_file={train}", f"--test_file={train}"))
    history = info["dev_history"]
    assert [h["step"] for h in history] == [0, 4, 6, 8]  # every 4 steps and at epoch end
    assert history[-1]["loss"] < history[0]["loss"]
    assert [p[0] for p in info["loss_curve"]] == list(range(1, 9))
    # test = dev rows, scored by the best checkpoint reloaded from disk: same numbers.
    best = next(h for h in history if h["step"] == info["best"]["step"])
    assert info["best"]["metric"] == "spearman"
    for name in ("pearson", "spearman", "loss"):
        assert info["test"][name] == pytest.approx(best[name], abs=1e-5)
    card = (out / "model_card.md").read_text()
    for expected in ("sts-train.csv", "| train | 48 |", "| learning_rate | 0.0001 |",
                     "graded in [0, 1]", "pair_input(sentence1"):
        assert expected in card
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["data"]["rows"] == {"train": 48, "dev": 48, "test": 48}
    assert saved["training"]["stop_reason"] == "completed"
    assert saved["training"]["cpu_s"] > 0
    # The scorer loads it by path and its signature names it.
    metric = SASMetric(model=str(out))
    assert str(out) in metric.signature()["sas"]
    score = score_corpus([metric], [QAExample("A plane is taking off.",
                                          ("An air plane is taking off.",))])[0]["sas"]
    assert 0 < score < 1


@pytest.mark.slow
def test_wes_from_mined_shards(wes_corpus, tmp_path):
    out = tmp_path / "wes"
    info = train_cross_encoder.run([
        "--format=wes", f"--input={wes_corpus}", f"--output={out}", *FAST, "--max_length=24",
        "--batch_size=16", "--max_train_rows=96", "--max_dev_rows=64", "--max_test_rows=32",
        "--max_steps=4"])
    assert info["best"]["metric"] == "auroc"
    assert {"accuracy", "auroc", "loss"} <= set(info["dev_history"][-1])
    assert 0 <= info["test"]["auroc"] <= 1
    assert info["data"]["rows"] == {"train": 96, "dev": 64, "test": 32}
    assert info["data"]["targets"] == "binary 0/1"
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert len(config["id2label"]) == 1
    # The decision threshold chosen on dev is saved with the checkpoint and reported.
    calibration = info["calibration"]
    assert config["qa_eval_decision_threshold"] == calibration["threshold"]
    assert config["qa_eval_decision_threshold_source"]["split"] == "dev"
    assert calibration["split_rows"] == 64 and calibration["objective"] == "accuracy"
    assert calibration["value"] >= calibration["value_at_0.5"]
    assert 0 <= info["test"]["accuracy_at_threshold"] <= 1
    assert "## Decision threshold" in (out / "model_card.md").read_text()
    metric = WESMetric(model=str(out))
    assert metric.signature()["wes"].startswith(f"wes|v:1.0|model:{out}|")
    assert 0 < score_corpus([metric], [QAExample("Anarchism", ("Anarchy",))])[0]["wes"] < 1


@pytest.mark.slow
def test_curriculum_and_bad_init(wes_corpus, stsb_small, tmp_path):
    wes = tmp_path / "wes"
    train_cross_encoder.run(["--format=wes", f"--input={wes_corpus}", f"--output={wes}", *FAST,
                             "--max_length=24", "--batch_size=16", "--max_train_rows=32",
                             "--max_dev_rows=32", "--max_steps=2", "--skip_test"])
    info = train_cross_encoder.run(_sts_args(stsb_small, tmp_path / "sas", "--max_steps=2",
                                             f"--init_checkpoint={wes}", "--skip_test"))
    assert info["init_checkpoint"] == str(wes)
    assert info["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    with pytest.raises(ValueError, match="not a one-logit cross-encoder"):
        train_cross_encoder.run(_sts_args(stsb_small, tmp_path / "bad", "--max_steps=2",
                                          f"--init_checkpoint={packaged_model_path()}"))
    assert not (tmp_path / "bad").exists()


def _weights(path):
    return load_file(str(path / "last" / "model.safetensors"))


@pytest.mark.slow
def test_interrupted_runs_resume_to_the_same_weights(stsb_small, tmp_path):
    # 24 rows, batch 8: 3 steps per epoch, so the runs cross an epoch boundary.
    steps = ["--max_train_rows=24", "--max_steps=4", "--save_every=2", "--skip_test"]
    train_cross_encoder.run(_sts_args(stsb_small, tmp_path / "a", *steps))

    def crash(step):
        if step == 3:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        train_cross_encoder.run(_sts_args(stsb_small, tmp_path / "b", *steps), on_step=crash)
    state = json.loads((tmp_path / "b" / "last" / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    # Nothing the trainer writes is a pickle; a pickle planted beside the safetensors
    # weights of last/ is never read by the resumed run.
    written = {p.name for p in (tmp_path / "b").rglob("*") if p.is_file()}
    assert not {n for n in written if n.endswith((".pt", ".bin", ".pth", ".pkl", ".pickle"))}
    marker = tmp_path / "pwned"
    write_malicious_pickle(tmp_path / "b" / "last" / "pytorch_model.bin", marker)
    info = train_cross_encoder.run(_sts_args(stsb_small, tmp_path / "b", *steps, "--resume"))
    assert info["training"]["global_step"] == 4
    assert not marker.exists()
    # A wall-clock stop keeps the schedule; --resume finishes the same run.
    stopped = train_cross_encoder.run(_sts_args(stsb_small, tmp_path / "c", *steps,
                                                "--max_minutes=0.0001"))
    assert stopped["training"]["global_step"] == 1
    assert stopped["training"]["stop_reason"].startswith("time budget")
    train_cross_encoder.run(_sts_args(stsb_small, tmp_path / "c", *steps, "--resume"))
    reference = _weights(tmp_path / "a")
    for other in ("b", "c"):
        weights = _weights(tmp_path / other)
        assert weights.keys() == reference.keys()
        assert all(torch.equal(weights[k], reference[k]) for k in reference), other
    a = json.loads((tmp_path / "a" / "metrics.json").read_text())
    b = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert a["dev_history"][-1]["loss"] == b["dev_history"][-1]["loss"]
    # Resuming with other hyper-parameters, nothing to resume, or reusing an output fail.
    with pytest.raises(ValueError, match="learning_rate: 5e-05 -> 0.001"):
        train_cross_encoder.run(_sts_args(stsb_small, tmp_path / "a", *steps, "--resume",
                                          "--lr=1e-3"))
    with pytest.raises(ValueError, match="nothing to resume"):
        train_cross_encoder.run(_sts_args(stsb_small, tmp_path / "d", *steps, "--resume"))
    with pytest.raises(ValueError, match="already holds a training run"):
        train_cross_encoder.run(_sts_args(stsb_small, tmp_path / "a", *steps))


@pytest.mark.slow
@pytest.mark.parametrize("fmt, metric_cls", [("bem", BEMMetric), ("square", SQuArEMetric)])
def test_bem_and_square_rows_train_models_the_scorer_loads(bem_square_rows, tmp_path, fmt,
                                                           metric_cls):
    out = tmp_path / fmt
    info = train_cross_encoder.run([f"--format={fmt}", f"--input={bem_square_rows[fmt]}",
                                    f"--output={out}", *FAST, "--max_length=64",
                                    "--batch_size=8", "--max_steps=3"])
    assert info["best"]["metric"] == "auroc" and not math.isnan(info["best"]["value"])
    config = json.loads((out / "config.json").read_text())
    assert config["type_vocab_size"] == (3 if fmt == "bem" else 2)
    example = QAExample("Denver Broncos", ("the Broncos",), question="Who won Super Bowl 50?",
                        negative_references=("Carolina Panthers",))
    assert 0 < score_corpus([metric_cls(model=str(out))], [example])[0][fmt] < 1


@pytest.mark.parametrize("extra, message", [
    (["--format=stsb", "--input=/nonexistent/stsb"], "input folder /nonexistent/stsb does not exist"),
    (["--format=wes", "--input={stsb}"], "no train files for format wes"),
    (["--format=stsb", "--input={stsb}", "--best_metric=auroc"], "does not suit graded"),
    (["--format=stsb", "--input={stsb}", "--lr=0"], "learning_rate must be > 0"),
    (["--format=stsb", "--input={stsb}", "--model=/nonexistent/model"], "does not exist"),
    (["--format=stsb", "--input={stsb}", "--gold_layout=all"], "apply to formats evouna and judge only"),
    (["--format=stsb", "--input={stsb}", "--max_gold_chars=0"], "max_gold_chars must be >= 1"),
])
def test_bad_input_fails_before_training(stsb_small, tmp_path, extra, message):
    out = tmp_path / "out"
    args = [a.replace("{stsb}", str(stsb_small)) for a in extra]
    with pytest.raises(ValueError, match=message):
        train_cross_encoder.run([*args, f"--output={out}", *TINY])
    assert not out.exists()


def test_main_reports_bad_input_with_exit_status_2(tmp_path, capsys):
    code = main_exit_code(["--format=stsb", f"--input={tmp_path / 'nope'}",
                           f"--output={tmp_path / 'out'}"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m pipelines.train_cross_encoder: error: ")
    assert "does not exist" in err and err.count("\n") == 1


@pytest.mark.slow
def test_evouna_all_golds_and_balanced_classes_reach_the_card(tmp_path):
    from transforms.training import evouna

    records = []
    for i in range(120):
        rec = {"question": f"Question number {i}?", "golden_answer": f"gold {i}/alias {i}",
               "improper": False}
        for j, system in enumerate(evouna.SYSTEMS):
            right = (i + j) % 3 != 0
            rec[f"answer_{system}"] = f"it is {'alias' if right else 'wrong'} {i}"
            rec[f"judge_{system}"] = right
        records.append(rec)
    src = tmp_path / "TQ.json"
    src.write_text(json.dumps(records))
    out = tmp_path / "judge"
    info = train_cross_encoder.run(["--format=evouna", f"--input={src}", f"--output={out}",
                                    *TINY, "--max_steps=2", "--gold_layout=all",
                                    "--max_gold_chars=50", "--class_weight=balanced"])
    assert "distinct golds best match first" in info["layout"]
    assert "up to 50 characters" in info["layout"]
    assert info["hyperparameters"]["loss"].startswith("BCE with logits, class weights ")
    state = json.loads((out / "last" / "resume_state.json").read_text())
    fingerprint = json.dumps(state)
    assert '"gold_layout": "all"' in fingerprint and '"max_gold_chars": 50' in fingerprint
    # The scorer's judge metric reads the trained checkpoint in the same layout.
    from transforms.metrics.judge import JudgeMetric

    # The scorer's judge metric reads the trained layout from the checkpoint.
    saved = json.loads((out / "config.json").read_text())["qa_eval_judge_layout"]
    assert saved == {"gold_layout": "all", "max_gold_chars": 50}
    judge = JudgeMetric(model=str(out))
    assert (judge.gold_layout, judge.max_gold_chars) == ("all", 50)
    (row,) = score_corpus([judge], [QAExample("it is alias 3", ("gold 3", "alias 3"),
                                              question="Question number 3?")])
    assert 0 < row["judge"] < 1
    assert "|thr:" in judge.signature()["judge"] and "|refs:all<=50" in judge.signature()["judge"]
    with pytest.raises(ValueError, match="was trained with gold_layout='all'"):
        JudgeMetric(model=str(out), gold_layout="marked")
    assert 'JudgeMetric(model="' in info["usage"] and 'gold_layout="all")' in info["usage"]


@pytest.mark.slow
def test_wes_negative_kinds_and_the_hard_split_per_pair_kind(wes_mixed_corpus, tmp_path):
    import collections

    import pyarrow.dataset as ds

    out = tmp_path / "wes-random"
    info = train_cross_encoder.run([
        "--format=wes", f"--input={wes_mixed_corpus}", f"--output={out}", *FAST,
        "--max_length=24", "--batch_size=16", "--max_steps=2", "--negative_kinds=random"])
    mined = ds.dataset(str(wes_mixed_corpus), format="parquet").to_table().to_pylist()
    kinds = collections.Counter((r["split"], r["pair_kind"]) for r in mined)
    # train and dev: the positives and the random negatives only; test: every row
    for split in ("train", "dev"):
        assert info["data"]["rows"][split] == sum(
            n for (s, kind), n in kinds.items()
            if s == split and kind in ("title_link", "link_link", "random"))
    assert info["data"]["rows"]["test"] == sum(n for (s, _), n in kinds.items() if s == "test")
    assert info["data"]["negative_kinds"] == ["random"]
    by_kind = info["test_by_pair_kind"]
    assert {"title_link", "random", "f1", "word_cooccurrence"} <= set(by_kind)
    assert by_kind["f1"]["rows"] == kinds[("test", "f1")]
    assert all(0 <= v["accuracy"] <= 1 and 0 <= v["accuracy_at_threshold"] <= 1
               for v in by_kind.values())
    # the WES-hard split beside the corpus is found and scored, per kind too
    hard = ds.dataset(str(wes_mixed_corpus) + "-hard", format="parquet").to_table().to_pylist()
    assert info["data"]["rows"]["hard_test"] == len(hard) > 0
    assert info["data"]["files"]["hard_test"][0].endswith(
        "wes-k2-hard/test-00000-of-00001.parquet")
    assert 0 <= info["hard_test"]["auroc"] <= 1 and "accuracy_at_threshold" in info["hard_test"]
    assert "random" not in info["hard_test_by_pair_kind"]
    assert sum(v["rows"] for v in info["hard_test_by_pair_kind"].values()) == len(hard)
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["hard_test_by_pair_kind"] == info["hard_test_by_pair_kind"]
    card = (out / "model_card.md").read_text()
    for section in ("## Test results per pair kind", "## WES-hard test results (best checkpoint)",
                    "## WES-hard test results per pair kind", "- negative_kinds: `random`",
                    "| hard_test | "):
        assert section in card
    # skip_test skips both held-out splits
    info = train_cross_encoder.run([
        "--format=wes", f"--input={wes_mixed_corpus}", f"--output={tmp_path / 'skip'}",
        *FAST, "--max_length=24", "--batch_size=16", "--max_steps=1", "--max_train_rows=32",
        "--max_dev_rows=32", "--skip_test"])
    assert info["test"] is None and "hard_test" not in info and "hard_test" not in info["data"]["rows"]
