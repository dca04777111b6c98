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


def test_rest_of_the_budget_goes_to_the_next_run_of_a_lane(tmp_path):
    lane = [("first", ["pipelines.nothing", "--max_minutes=1.00"]),
            ("second", ["pipelines.nothing", f"--max_minutes={demo.REST}"])]
    with pytest.raises(RuntimeError, match="first training failed"):
        demo.run_lanes([lane], tmp_path, 2.0)
    assert not (tmp_path / "second.log").exists()  # a lane stops at its first failure
