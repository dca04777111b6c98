"""The scoring pipeline with model-backed metrics: wiring (fake handler), a real MiniLM run,
and the build-time errors."""

from __future__ import annotations

import json
import logging
import os
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from pipelines.score_predictions import run
from tests.conftest import SHARED_DATA
from tests.runners import RUNNER_ARGS
from transforms.metrics import registry
from transforms.metrics.base import QAExample
from transforms.metrics.corpus import score_corpus
from transforms.scoring.config import build_config
from transforms.scoring.outputs.write import read_signatures

SAS = SHARED_DATA / "judgments" / "sas" / "SQuAD_SAS.csv"
AVSD = SHARED_DATA / "judgments" / "kpqa" / "avsd_all.csv"


class OverlapHandler(ModelHandler):
    """Scores a cross-encoder input by token overlap of its first two parts; 'BOOM' fails.

    One row per batch, so a failing batch holds exactly the failing input.
    """

    built: list[tuple[str, dict]] = []

    def __init__(self, use, **handler_kwargs):
        super().__init__(min_batch_size=1, max_batch_size=1)
        OverlapHandler.built.append((use.task, dict(handler_kwargs)))

    def load_model(self):
        return None

    def run_inference(self, batch, model, inference_args=None):
        out = []
        for x in batch:
            a, b = x[0].split(), x[1].split()
            if "BOOM" in a:
                raise RuntimeError("the model broke on this batch")
            out.append(PredictionResult(x, len(set(a) & set(b)) / max(len(set(a)), 1)))
        return out


ROWS = [
    {"id": "r1", "system": "s", "question": "who?", "prediction": "the man",
     "references": ["the man", "a man"], "human": 1.0},
    {"id": "r2", "system": "s", "question": "what?", "prediction": "a red car",
     "references": ["the car"], "human": 0.0},
    {"id": "boom", "system": "s", "question": "why?", "prediction": "BOOM now",
     "references": ["now"], "human": 0.0},
    {"id": "no-question", "system": "t", "question": None, "prediction": "yes",
     "references": ["yes"], "human": 1.0},
    {"id": "r5", "system": "t", "question": "when?", "prediction": "in 1990",
     "references": ["1990", "in the year 1990"], "human": 1.0},
]


def _jsonl(tmp_path, rows) -> str:
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["direct_in_process", "direct_multi_processing"])
def test_model_branch_is_joined_with_the_lexical_one(tmp_path, cross_encoder_path, bem_path,
                                                     runner):
    OverlapHandler.built.clear()
    prefix = str(tmp_path / "out")
    run(["--input", _jsonl(tmp_path, ROWS), "--output", prefix, "--metrics", "f1,sas,bem",
         "--sas_model", cross_encoder_path, "--bem_model", bem_path,
         "--model_batch_size", "8", "--model_first_batch_size", "2", "--max_batch_tokens", "512",
         *RUNNER_ARGS[runner]],
        save_main_session=False, handler_factory=OverlapHandler)
    # sas and bem are two different checkpoints: two handlers inside the one
    # RunInference, both given the handler flags (built on the launcher).
    assert sorted(t for t, _ in OverlapHandler.built) == ["sequence_score"] * 2
    assert all(kw == {"max_batch_size": 8, "min_batch_size": 2, "max_batch_tokens": 512}
               for _, kw in OverlapHandler.built)

    scores = pq.read_table(prefix + ".scores.parquet").to_pandas().set_index("id")
    assert sorted(scores.index) == ["r1", "r2", "r5"]
    assert scores.loc["r1", "sas"] == 1.0 and scores.loc["r1", "f1"] == 1.0
    assert scores.loc["r2", "sas"] == pytest.approx(1 / 3)
    assert scores.loc["r2", "bem"] == pytest.approx(1 / 3)  # candidate [SEP] reference first
    assert scores.loc["r5", "sas"] == 1.0  # max over references
    signatures = read_signatures(prefix + ".scores.parquet")  # the Parquet metadata
    assert signatures["sas"].startswith("sas|v:") and cross_encoder_path in signatures["sas"]
    assert "rev:sha256:" in signatures["sas"] and "act:sigmoid" in signatures["sas"]
    assert bem_path in signatures["bem"] and "segments:0/1/2" in signatures["bem"]

    dead = {d["id"]: d for d in map(json.loads, open(prefix + ".dead_letter.jsonl"))}
    assert sorted(dead) == ["boom", "no-question"]
    assert "inference failed" in dead["boom"]["detail"]
    assert "the model broke" in dead["boom"]["detail"]
    assert "bem needs a question" in dead["no-question"]["detail"]

    summary = json.load(open(prefix + ".summary.json"))
    overall = summary["overall"]
    assert (overall["in"], overall["scored"], overall["dead_lettered"]) == (5, 3, 2)
    assert overall["dead_lettered_by_reason"] == {"inference_failed": 1,
                                                  "metric_input_error": 1}
    assert dead["boom"]["reason"] == "inference_failed"
    assert summary["signatures"]["sas"] == signatures["sas"]


@pytest.mark.slow
def test_model_metrics_alone(tmp_path, cross_encoder_path):
    prefix = str(tmp_path / "out")
    rows = [r for r in ROWS if r["id"] != "boom"]
    run(["--input", _jsonl(tmp_path, rows), "--output", prefix, "--metrics", "wes",
         "--wes_model", cross_encoder_path, *RUNNER_ARGS["direct_in_process"]],
        save_main_session=False, handler_factory=OverlapHandler)
    scores = pq.read_table(prefix + ".scores.parquet").to_pandas()
    assert len(scores) == 4 and "wes" in scores.columns and "signature" not in scores.columns
    assert cross_encoder_path in read_signatures(prefix + ".scores.parquet")["wes"]
    assert "em" not in scores.columns


def _parent(pid: int) -> int:
    """The parent process of `pid` (-1 once it has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except FileNotFoundError:
        return -1


def _served_copies(tags: list[str], timeout_s: float = 30.0) -> dict[str, int]:
    """The live copies of these tags listed in the private folder (tag -> pid), once
    those that this process did not start (ending with their workers) are gone."""
    from transforms.inference import model_channel, model_server

    deadline = time.monotonic() + timeout_s
    folder = model_server.folder()
    while True:
        copies = {}
        for tag in (f"{t}-0" for t in tags):
            address = model_channel.read_address(model_channel.CopyFiles.of(folder, tag))
            if address is not None and model_channel.alive(address.pid):
                copies[tag] = address.pid
        if all(_parent(pid) == os.getpid() for pid in copies.values()):
            return copies
        if time.monotonic() > deadline:
            return copies
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("runner, extra, fmt", [
    ("direct_in_process", [], "csv"),
    # one copy of each model, in a process of its own (model_server.py), fed by both
    # workers; a CSV is one split, so the batches are reshuffled over the workers
    ("direct_multi_processing", ["--share_model_across_processes"], "csv"),
    # JSONL in ranges of a few rows: each worker scores the splits it reads; run as the
    # command line runs it (`tune_local`): the launcher starts the copy while the workers
    # start, and each worker's tokenizer gets its share of the cores
    ("direct_multi_processing", ["--share_model_across_processes"], "jsonl"),
])
def test_real_minilm_end_to_end(tmp_path, cross_encoder_path, keyphrase_path, runner, extra,
                                fmt, monkeypatch, caplog):
    """A small run with the real handlers: values equal the metrics run in plain Python,
    in process and with worker processes sharing one copy of each model."""
    from transforms.inference import model_server
    from transforms.scoring.reading import read

    frame = pd.read_csv(AVSD).head(12)
    path = tmp_path / f"avsd.{fmt}"
    if fmt == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True)
        monkeypatch.setattr(read, "MIN_SPLIT_BYTES", 64)  # 12 rows: a dozen splits
    prefix = str(tmp_path / "out")
    caplog.set_level(logging.INFO, logger="transforms.scoring.score_predictions")
    tune_local = fmt == "jsonl"
    monkeypatch.setenv("RAYON_NUM_THREADS", "-")  # recorded, so what the run sets goes after
    monkeypatch.delenv("RAYON_NUM_THREADS")
    # the real freeze would keep this test process's cycles (test_cli checks the call)
    monkeypatch.setattr("pipelines.score_predictions.freeze_startup_objects", lambda: None)
    paused = []  # only where this process reads the rows: in none of these cases (the
    # tuned run is the multi-process one)
    monkeypatch.setattr("pipelines.score_predictions.pause_collector_until_rows",
                        lambda: paused.append(1))
    started = len(model_server._STARTED_HERE)
    tags = []  # the run's served models

    def new_serving(name, made=model_server.new_serving):
        tags.append(made(name))
        return tags[-1]

    monkeypatch.setattr(model_server, "new_serving", new_serving)
    argv = ["--input", str(path), "--output", prefix,
         "--metrics", "bleu1,bertscore,bertscore_recall,bi_encoder,sas,kpqa_bleu1,"
                      "kpqa_rougeL,kpqa_bertscore",
         "--prediction_column", "answer", "--reference_prefix", "reference",
         "--max_references", "3", "--human_column", "scores",
         "--bertscore_layer", "4", "--bertscore_idf", "--sas_model", cross_encoder_path,
         "--kpqa_model", keyphrase_path, "--device", "cpu", "--model_batch_size", "5",
         *RUNNER_ARGS[runner], *extra]
    run(argv, save_main_session=False, tune_local=tune_local)
    launched = model_server._STARTED_HERE[started:]
    copies = _served_copies([t.tag for t in tags])
    for model in launched:  # a copy started here lives as long as this process: ended
        model.stop()
    assert paused == []
    if extra and tune_local:
        # one copy for all the run's models, started here, and the workers joined it:
        # the address of its tag still names the launcher's copy (a worker that started
        # one of its own would have replaced it, and removed it when it ended)
        (model,) = launched
        assert list(copies) == [model._tags[0]]
        assert _parent(copies[model._tags[0]]) == os.getpid()
    elif extra:  # started by a worker: it ended with the workers, its files with it
        assert launched == [] and copies == {}
    assert ("RAYON_NUM_THREADS" in os.environ) == tune_local
    scores = pq.read_table(prefix + ".scores.parquet").to_pandas().sort_values("row")
    assert len(scores) == 12
    if runner != "direct_in_process":
        where = "scored where they are read" if fmt == "jsonl" else "spread over the workers"
        assert f"batches {where}" in caplog.text

    config = build_config(
        input=str(path), output=str(tmp_path / "x"),
        metrics="bertscore,bertscore_recall,bi_encoder,sas,kpqa_bleu1,kpqa_rougeL,"
                "kpqa_bertscore",
        prediction_column="answer", reference_prefix="reference", max_references=3,
        model_flags={"bertscore_layer": 4, "bertscore_idf": True,
                     "sas_model": cross_encoder_path, "kpqa_model": keyphrase_path,
                     "device": "cpu"})
    examples = [QAExample(r.answer, tuple(getattr(r, f"reference{i}") for i in (1, 2, 3)),
                          question=r.question) for r in frame.itertuples()]
    expected = dict(enumerate(score_corpus(config.metrics, examples)))
    for i, row in enumerate(scores.itertuples()):
        for column, value in expected[i].items():
            assert getattr(row, column) == pytest.approx(value, abs=1e-5), (i, column)
    report = open(prefix + ".report.md").read()
    assert "bertscore" in report and "kpqa_bertscore" in report and "sas" in report
    signatures = read_signatures(prefix + ".scores.parquet")
    assert "layer:4" in signatures["bertscore"] and "idf:yes" in signatures["bertscore"]
    assert keyphrase_path in signatures["kpqa_bleu1"]


@pytest.mark.parametrize(("metrics", "flags", "match"), [
    ("sas", {}, r"--sas_model.*train_cross_encoder"),
    ("wes", {}, r"--wes_model.*mine_wes"),
    ("kpqa_rougeL", {}, r"--kpqa_model.*train_keyphrase"),
    ("sas", {"sas_model": "/no/such/checkpoint"}, "does not exist"),
    ("f1", {"sas_model": "x"}, "no sas metric is requested"),
    ("bertscore", {"bertscore_layer": 99}, r"layer must be in 0\.\.6"),
    ("bertscore", {"device": "cpu", "dtype": "bfloat16"}, "needs CUDA"),
    ("bertscore", {"model_batch_size": 0}, "--model_batch_size must be >= 1"),
    ("bertscore", {"model_copies": 2}, "--model_copies needs --share_model_across_processes"),
    ("bertscore", {"model_first_batch_size": 4096},
     "--model_first_batch_size 4096 is larger than --model_batch_size 2048"),
    ("bertscore", {"model_first_batch_size": 512, "model_batch_size": 256},
     "--model_first_batch_size 512 is larger than --model_batch_size 256"),
])
def test_bad_model_configuration_fails_at_build_time(tmp_path, metrics, flags, match):
    path = _jsonl(tmp_path, ROWS)
    with pytest.raises(ValueError, match=match):
        build_config(input=path, output=str(tmp_path / "o"), metrics=metrics, model_flags=flags)


def test_flag_and_metric_options_must_agree(tmp_path):
    with pytest.raises(ValueError, match="contradicts --metric_options"):
        build_config(input=_jsonl(tmp_path, ROWS), output=str(tmp_path / "o"),
                     metrics="bertscore", metric_options='{"bertscore": {"layer": 3}}',
                     model_flags={"bertscore_layer": 4})


def test_a_sequence_classifier_is_not_an_encoder_metric_model(tmp_path, keyphrase_path):
    with pytest.raises(ValueError, match="not a sequence classifier"):
        build_config(input=_jsonl(tmp_path, ROWS), output=str(tmp_path / "o"),
                     metrics="sas", model_flags={"sas_model": keyphrase_path})


def test_question_column_is_required_by_bem(tmp_path, bem_path):
    rows = [{k: v for k, v in r.items() if k != "question"} for r in ROWS]
    with pytest.raises(ValueError, match="need a question column"):
        build_config(input=_jsonl(tmp_path, rows), output=str(tmp_path / "o"),
                     metrics="bem", model_flags={"bem_model": bem_path})


def test_offline_hub_id_is_left_to_the_workers(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level(logging.WARNING):
        config = build_config(input=_jsonl(tmp_path, ROWS), output=str(tmp_path / "o"),
                              metrics="bi_encoder",
                              model_flags={"bi_encoder_model": "someone/not-cached-encoder"})
    assert "someone/not-cached-encoder" in config.signatures["bi_encoder"]
    assert "not in the local Hugging Face cache" in caplog.text


def test_every_model_metric_is_in_the_registry():
    names = set(registry.available_metrics())
    assert {"bertscore", "bertscore_precision", "bertscore_recall", "bi_encoder", "sas", "wes",
            "bem", "square", "kpqa_bleu1", "kpqa_rougeL", "kpqa_bertscore"} <= names


def test_a_folder_without_config_is_not_a_checkpoint(tmp_path):
    empty = tmp_path / "not_a_checkpoint"
    empty.mkdir()
    with pytest.raises(ValueError, match="has no config.json"):
        build_config(input=_jsonl(tmp_path, ROWS), output=str(tmp_path / "o"),
                     metrics="sas", model_flags={"sas_model": str(empty)})


@pytest.mark.parametrize("argv, warned", [
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], True),
    (["--runner=DirectRunner", "--direct_running_mode=multi_threading"], True),
    (["--direct_running_mode=in_memory"], False),
    ([], False),
    (["--runner=DataflowRunner", "--direct_running_mode=multi_processing"], False),
])
def test_model_metrics_on_the_multiprocess_direct_runner_warn(argv, warned, caplog):
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.scoring.score_predictions import warn_multiprocess_direct_runner

    with caplog.at_level(logging.WARNING):
        assert warn_multiprocess_direct_runner(PipelineOptions(argv)) is warned
        # workers that feed one shared copy of each model (a GPU) are the way to go
        assert not warn_multiprocess_direct_runner(PipelineOptions(argv), shared=True)
    assert ("multiprocess_cogroupbykey" in caplog.text) is warned


@pytest.mark.slow
def test_a_judges_saved_threshold_is_in_the_signature_and_used_by_the_report(
        cross_encoder_path, tmp_path):
    """A binary judge's checkpoint with `qa_eval_decision_threshold` (as
    train_cross_encoder's calibration writes it): qa-score puts it in the sas signature
    and the report's accuracy uses it; --accuracy_threshold overrides it."""
    import shutil

    import numpy as np

    from transforms.scoring.outputs.write import read_signatures
    from transforms.training.best_checkpoint import THRESHOLD_KEY

    plain, judge = tmp_path / "plain_judge", tmp_path / "judge"
    shutil.copytree(cross_encoder_path, plain)
    shutil.copytree(cross_encoder_path, judge)
    config = json.loads((judge / "config.json").read_text())
    rows = pd.read_csv(SAS).head(40)
    rows = rows.assign(label=(rows["label"] >= 0.5).astype(int))
    path = tmp_path / "in.csv"
    rows.to_csv(path, index=False)

    def report(prefix, *extra, model=judge):
        run(["--input", str(path), "--output", prefix, "--metrics", "sas,f1",
             "--prediction_column", "answer1", "--references_column", "answer2",
             "--human_column", "label", "--sas_model", str(model), "--device", "cpu",
             *extra, *RUNNER_ARGS["direct_in_process"]], save_main_session=False)
        with open(prefix + ".report.json") as f:
            scope = json.load(f)["scopes"][0]
        return {r["metric"]: r for r in scope["rows"]}, pd.read_parquet(
            prefix + ".scores.parquet")

    # A threshold between the scores, so that it decides differently from 0.5.
    first, scores = report(str(tmp_path / "plain"), model=plain)  # no threshold saved
    sas = scores.sort_values("row")["sas"].to_numpy()
    threshold = float(np.round(np.median(sas), 6))
    assert first["sas"]["threshold_source"] == "default" and first["sas"]["threshold"] == 0.5
    config[THRESHOLD_KEY] = threshold
    (judge / "config.json").write_text(json.dumps(config))

    saved, scores = report(str(tmp_path / "saved"))
    labels = rows["label"].to_numpy()
    assert saved["sas"]["threshold"] == threshold
    assert saved["sas"]["threshold_source"] == "checkpoint"
    assert saved["sas"]["accuracy"] == pytest.approx(np.mean((sas >= threshold) == (labels == 1)))
    assert saved["f1"]["threshold_source"] == "default"
    assert f"|thr:{threshold:g}|" in read_signatures(str(tmp_path / "saved.scores.parquet"))["sas"]

    override, _ = report(str(tmp_path / "flag"), "--accuracy_threshold", "sas=0.5")
    assert (override["sas"]["threshold"], override["sas"]["threshold_source"]) == (0.5, "flag")
    assert override["sas"]["accuracy"] == first["sas"]["accuracy"]
