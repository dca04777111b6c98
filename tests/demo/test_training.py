"""transforms/demo/training.py: the training plan and its lanes."""

from __future__ import annotations

import pytest

from tests.conftest import SHARED_DATA
from transforms.demo import training as demo


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
    assert not any(a.startswith(("--max_dev_rows", "--max_eval_examples"))
                   for lane in lanes for _, args in lane for a in args)


def test_a_quick_plan_samples_every_held_out_split(tmp_path):
    none = {m: None for m in (*demo.TRAINED, *demo.GIVEN_ONLY)}
    (wes, sas), (kpqa,) = demo.training_plan(SHARED_DATA, tmp_path, tmp_path / "m", 5.5, none,
                                             max_steps=2)
    rows = demo.QUICK_DEV_ROWS
    for _, args in (wes, sas):
        assert {"--max_steps=2", f"--max_dev_rows={rows}", f"--max_test_rows={rows}"} <= set(args)
    assert {"--max_steps=2", f"--max_eval_examples={rows}"} <= set(kpqa[1])
    assert [a for a in kpqa[1] if a.startswith("--max_steps")][-1] == "--max_steps=2"
    (wes, sas), (kpqa,) = demo.training_plan(SHARED_DATA, tmp_path, tmp_path / "m", 5.5, none,
                                             max_steps=2, eval_rows=40)
    assert {"--max_dev_rows=40", "--max_test_rows=40"} <= set(wes[1]) & set(sas[1])
    assert "--max_eval_examples=40" in kpqa[1]


def test_rest_of_the_budget_goes_to_the_next_run_of_a_lane(tmp_path):
    lane = [("first", ["pipelines.nothing", "--max_minutes=1.00"]),
            ("second", ["pipelines.nothing", f"--max_minutes={demo.REST}"])]
    with pytest.raises(RuntimeError, match="first training failed"):
        demo.run_lanes([lane], tmp_path, 2.0)
    assert not (tmp_path / "second.log").exists()  # a lane stops at its first failure


def test_judge_plan_continues_from_sas_on_evouna(tmp_path):
    (name, args), = demo.judge_plan(SHARED_DATA, tmp_path / "m", "/ck/sas", 100, 6.0)
    assert name == "judge" and args[0] == "pipelines.train_cross_encoder"
    assert "--format=evouna" in args and "--init_checkpoint=/ck/sas" in args
    assert f"--input={SHARED_DATA / 'judgments' / 'evouna'}" in args
    assert f"--output={tmp_path / 'm' / 'judge'}" in args
    # A fixed number of steps (the schedule), minutes only as a cap; one torch thread.
    assert "--max_steps=100" in args and "--max_minutes=6.00" in args
    assert "--skip_test" in args and "--num_threads=1" in args
    assert "--gold_layout=marked" in args and "--lr=1e-4" in args
    (_, capped), = demo.judge_plan(SHARED_DATA, tmp_path, "/ck/sas", 100, 6.0, max_steps=2)
    assert "--max_steps=2" in capped and f"--max_dev_rows={demo.QUICK_DEV_ROWS}" in capped
    (_, few), = demo.judge_plan(SHARED_DATA, tmp_path, "/ck/sas", 100, 6.0, max_steps=2,
                                eval_rows=40)
    assert "--max_dev_rows=40" in few
    assert not any(a.startswith("--max_dev_rows") for a in args)


def test_judge_plan_trains_on_the_short_answer_mix_when_given(tmp_path):
    (_, args), = demo.judge_plan(SHARED_DATA, tmp_path / "m", "/ck/sas", 100, 6.0,
                                 short=tmp_path / "short")
    assert "--format=judge" in args and f"--input={tmp_path / 'short'}" in args
    assert "--format=evouna" not in args and not any("judgments" in a for a in args)
    assert "--gold_layout=marked" in args and "--init_checkpoint=/ck/sas" in args


def test_judge_line_reports_the_calibrated_dev_accuracy(tmp_path):
    import json
    (tmp_path / "metrics.json").write_text(json.dumps({
        "training": {"global_step": 120, "total_steps": 120, "epochs_done": 0.55,
                     "wall_s": 170.0},
        "best": {"metric": "auroc", "value": 0.97, "step": 120},
        "dev_history": [{"step": 120, "auroc": 0.97, "accuracy": 0.95}],
        "calibration": {"threshold": 0.62, "value": 0.96}}))
    line = demo.describe_training("judge", tmp_path)
    assert line.startswith("EVOUNA-TQ dev split: AUROC 0.970, accuracy 0.960 at its "
                           "threshold 0.620 (chosen there; 0.950 at 0.5)")
