"""A scoring run's served models against another local process (model_channel.py): while
worker processes share one copy of the model, a process that reads its address file and
connects with Beam's fixed key, or sends a pickle with no handshake, runs nothing, and
the run's scores are those of a run in process; a served-model folder that others may
reach is refused at launch, in one line, before anything is written."""

from __future__ import annotations

import os
import pickle
import tempfile
import threading
import time
from multiprocessing import connection as mpc

import pandas as pd
import pyarrow.parquet as pq
import pytest

from pipelines.score_predictions import main, run
from tests.conftest import SHARED_DATA
from tests.runners import RUNNER_ARGS
from tests.scoring.payloads import Planted
from transforms.inference import model_channel, model_server

SAS = SHARED_DATA / "judgments" / "sas" / "SQuAD_SAS.csv"


def _attack(folder: str, marker: str, stop: threading.Event, tried: list[str]) -> None:
    """Another local process's attempts on every served copy that appears in `folder`."""
    payload = pickle.dumps(("encode", (Planted(marker),), {}))
    seen: set[str] = set()
    while not stop.is_set():
        for name in os.listdir(folder):
            if not name.endswith(".address") or name in seen:
                continue
            address = model_channel.read_address(
                model_channel.CopyFiles.of(folder, name[:-len(".address")]))
            if address is None:
                continue
            seen.add(name)
            try:  # no handshake: the payload at once
                with mpc.Client(address.address, address.family) as bare:
                    bare.send_bytes(payload)
                    tried.append("sent")
            except OSError:
                pass
            for authkey in (b"mps", b"guessed"):
                try:
                    conn = mpc.Client(address.address, address.family, authkey=authkey)
                    conn.send(payload)
                    tried.append("connected")
                except (mpc.AuthenticationError, AssertionError, OSError, EOFError):
                    tried.append("refused")
        time.sleep(0.02)


def _rows(tmp_path) -> str:
    frame = pd.read_csv(SAS).head(40)
    path = tmp_path / "sas.csv"
    frame.to_csv(path, index=False)
    return str(path)


@pytest.mark.slow
def test_a_run_with_served_models_runs_nothing_another_process_sends(tmp_path):
    path = _rows(tmp_path)
    common = ["--input", path, "--metrics", "bi_encoder", "--prediction_column", "answer1",
              "--references_column", "answer2", "--device", "cpu", "--model_batch_size", "8"]
    marker = str(tmp_path / "payload_ran")
    stop, tried = threading.Event(), []
    attacker = threading.Thread(target=_attack, args=(model_server.folder(), marker, stop,
                                                      tried), daemon=True)
    attacker.start()
    try:
        run([*common, "--output", str(tmp_path / "shared"), *RUNNER_ARGS["direct_multi_processing"],
             "--share_model_across_processes"], save_main_session=False)
    finally:
        stop.set()
        attacker.join(timeout=60)
    assert "refused" in tried and "connected" not in tried  # it did find the copy
    assert not os.path.exists(marker)
    run([*common, "--output", str(tmp_path / "alone"), *RUNNER_ARGS["direct_in_process"]],
        save_main_session=False)
    shared, alone = (pq.read_table(tmp_path / f"{name}.scores.parquet").to_pandas()
                     .sort_values("row").reset_index(drop=True) for name in ("shared", "alone"))
    assert len(shared) == 40
    pd.testing.assert_series_equal(shared["bi_encoder"], alone["bi_encoder"], atol=1e-5)


@pytest.mark.slow
def test_a_served_model_folder_others_may_reach_is_refused_at_launch(tmp_path, monkeypatch,
                                                                     capsys):
    path = _rows(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    planted = tmp_path / "tmp" / f"{model_server.FOLDER_NAME}-{os.getuid()}"
    planted.mkdir(parents=True, mode=0o777)
    os.chmod(planted, 0o777)  # made first by someone else's process, open to all
    out = tmp_path / "out"
    status = main(["--input", path, "--output", str(out), "--metrics", "bi_encoder",
                   "--prediction_column", "answer1", "--references_column", "answer2",
                   "--device", "cpu", *RUNNER_ARGS["direct_multi_processing"],
                   "--share_model_across_processes"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err[-1] == (f"qa-score: error: refusing to use {planted}: its permissions are "
                       "drwxrwxrwx: others may reach it (it must be drwx------); remove it "
                       "(or point TMPDIR at a folder of your own) and run again")
    assert sorted(os.listdir(tmp_path)) == ["sas.csv", "tmp"]
    assert os.listdir(planted) == []
