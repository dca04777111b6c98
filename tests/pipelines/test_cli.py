"""The command line of every entry point: --help lists every flag of ours (compared
against the parser), typos fail with exit 2 before any pipeline is built, user mistakes
end in one line, progress lines appear during local runs."""

import argparse
import gc
import json
import logging
import os
import re

import pytest
from apache_beam.options import pipeline_options

from pipelines import (
    demo,
    mine_wes,
    score_predictions,
    train_cross_encoder,
    train_keyphrase,
)
from tests.runners import RUNNER_ARGS
from transforms.io import progress
from transforms.io.options import InputOutputOptions, RuntimeOptions
from transforms.metrics import registry
from transforms.training import evouna, short_answers

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIKI_SAMPLE = os.path.join(os.environ.get("QA_EVAL_SHARED_DATA",
                                          os.path.join(_REPO, "..", "shared", "data")),
                           "wiki", "enwiki-20160501-p10p30302-sample.xml.bz2")

# (main, build_parser) of every entry point.
ENTRY_POINTS = {
    "qa-score": (score_predictions.main, score_predictions.build_parser),
    "wes-mine": (mine_wes.main, mine_wes.build_parser),
    "train_cross_encoder": (train_cross_encoder.main, train_cross_encoder.build_parser),
    "train_keyphrase": (train_keyphrase.main, train_keyphrase.build_parser),
    "demo": (demo.main, demo.build_parser),
    "evouna": (evouna.main, evouna.build_parser),
    "short_answers": (short_answers.main, short_answers.build_parser),
}


# `main` configures logging: put back after each test (conftest.py)
pytestmark = pytest.mark.usefixtures("restored_logging")


def _our_flags(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions for s in a.option_strings
            if s.startswith("--") and s != "--help"]


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_help_lists_every_flag_with_its_default(name, capsys):
    main, build_parser = ENTRY_POINTS[name]
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    parser = build_parser()
    flags = _our_flags(parser)
    assert len(flags) >= 4
    for action in parser._actions:
        if not action.option_strings or action.option_strings[0] == "-h":
            continue
        flag = action.option_strings[0]
        assert re.search(rf"^  {re.escape(flag)}\b", text, re.M), flag
        # Every flag's help states its default (argparse wraps lines: join them).
        entry = text.split(f"  {flag}", 1)[1].split("\n  --", 1)[0]
        assert "default" in " ".join(entry.split()).lower(), flag
    assert "--verbose" in flags


@pytest.mark.parametrize("name", ["qa-score", "wes-mine"])
def test_help_of_the_beam_pipelines_is_grouped_and_points_to_beams_flags(name, capsys):
    main, _ = ENTRY_POINTS[name]
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for group in ("input:", "output:", "runtime:"):
        assert f"\n{group}\n" in text
    assert "--runner" in text and "--direct_num_workers" in text
    assert "https://beam.apache.org/documentation/" in " ".join(text.split())


def test_qa_score_help_lists_every_metric_with_a_description(capsys):
    with pytest.raises(SystemExit):
        score_predictions.main(["--help"])
    text = capsys.readouterr().out
    assert "\nmetrics:\n" in text and "\nmodels (" in text
    for metric, description in registry.describe_metrics().items():
        assert re.search(rf"^  {metric} +{re.escape(description)}$", text, re.M), metric


@pytest.mark.parametrize(("name", "options_classes"), [
    ("qa-score", [score_predictions.ScoreOptions]),
    ("wes-mine", [mine_wes.MineWesOptions]),
])
def test_the_help_parser_is_the_flags_beam_knows(name, options_classes):
    # One source of truth: the flags --help shows are the flags declared to Beam.
    beam_side = pipeline_options._BeamArgumentParser()
    for cls in [*options_classes, InputOutputOptions, RuntimeOptions]:
        cls._add_argparse_args(beam_side)
    assert sorted(_our_flags(ENTRY_POINTS[name][1]())) == sorted(_our_flags(beam_side))


TYPOS = {
    "qa-score": [
        ["--input", "x.jsonl", "--output", "o", "--metrics", "em", "--humn_column", "h"],
        ["--input", "x.jsonl", "--output", "o", "--metrics", "em", "--direct_num_worker=2"],
        ["--inputs", "x.jsonl"],
    ],
    "wes-mine": [
        ["--input", "x.xml", "--output", "o", "--min_incomming_links", "5"],
        ["--input", "x.xml", "--output", "o", "--runer", "FnApiRunner"],
    ],
    "train_cross_encoder": [["--format", "stsb", "--output", "o", "--epoch", "1"]],
    "train_keyphrase": [["--output", "o", "--train_article", "3"]],
    "demo": [["--train_minute", "1"]],
    "evouna": [["--input", "TQ.json", "--output", "o", "--seeds", "1"]],
}
CLOSEST = {"--humn_column": "--human_column", "--direct_num_worker": "--direct_num_workers",
           "--inputs": "--input", "--min_incomming_links": "--min_incoming_links",
           "--runer": "--runner", "--epoch": "--epochs", "--train_article": "--train_articles",
           "--train_minute": "--train_minutes", "--seeds": "--seed"}


@pytest.mark.parametrize(("name", "argv"), [(n, a) for n, typos in TYPOS.items()
                                            for a in typos])
def test_a_typo_fails_with_status_2_before_a_pipeline_is_built(name, argv, capsys,
                                                               no_pipeline):
    main, _ = ENTRY_POINTS[name]
    assert main(argv) == 2
    err = capsys.readouterr().err
    typo = next(a.split("=")[0] for a in argv if a.split("=")[0] in CLOSEST)
    assert err.count("\n") == 1
    assert f"unknown flag {typo}; did you mean {CLOSEST[typo]}?" in err


def _judged_jsonl(tmp_path, n=3):
    path = tmp_path / "preds.jsonl"
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"r{i}", "system": "s" + str(i % 3),
                                "question": f"question {i}?", "prediction": f"answer {i % 4}",
                                "references": [f"answer {i % 5}", "other"],
                                "human": float(i % 3), "note": {"k": i}}) + "\n")
    return str(path)


@pytest.mark.parametrize(("extra", "message"), [
    (["--metrics", "em,bleu9"], "unknown metric name(s) ['bleu9']"),
    (["--metrics", "em", "--prediction_column", "answer"],
     "prediction column 'answer' is not in the input"),
    (["--metrics", "sas", "--sas_model", "/nonexistent/model"], "/nonexistent/model"),
    (["--metrics", "em", "--keep_input_columns", "question,notes"],
     "--keep_input_columns: ['notes'] are not input columns"),
    (["--metrics", "em", "--output_format", "xml"], "argument --output_format: invalid choice"),
])
def test_qa_score_user_mistakes_end_in_one_line(extra, message, tmp_path, capsys,
                                                no_pipeline):
    argv = ["--input", _judged_jsonl(tmp_path), "--output", str(tmp_path / "o"), *extra]
    assert score_predictions.main(argv) == 2
    err = capsys.readouterr().err
    # The error is the last line, one line; before it only the INFO lines of the checks
    # that ran (e.g. the columns the input offers), no traceback.
    *before, last = err.rstrip("\n").split("\n")
    assert last.startswith("qa-score: error: ") and message in last
    assert all(" INFO " in line for line in before) and "Traceback" not in err
    assert score_predictions.main([*argv, "--verbose"]) == 2
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_missing_files_end_in_one_line(tmp_path, capsys, no_pipeline):
    assert score_predictions.main(["--input", str(tmp_path / "none.jsonl"), "--output",
                                   str(tmp_path / "o"), "--metrics", "em"]) == 2
    assert capsys.readouterr().err == (
        f"qa-score: error: --input '{tmp_path / 'none.jsonl'}' matches no file\n")
    assert mine_wes.main(["--input", str(tmp_path / "none.xml.bz2"), "--output",
                          str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wes-mine: error: ") and err.count("\n") == 1
    assert evouna.main(["--input", str(tmp_path / "none.json"), "--output", "o"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m transforms.training.evouna: error: ")
    assert err.count("\n") == 1
    assert short_answers.main(["--squad", str(tmp_path / "none.json.gz"), "--output",
                               str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m transforms.training.short_answers: error: SQuAD file ")
    assert err.count("\n") == 1


def _assert_beam_reads_our_type_hints(caplog):
    # Beam's INFO "Converting string literal type hint to Any" (string annotations) and
    # its WARNING "type hint will be ignored" (hints it cannot use) are gone.
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "string literal type hint" in m]
    assert not [m for m in messages if "type hint will be ignored" in m]


def _progress_lines(caplog, word):
    return [r.getMessage() for r in caplog.records
            if r.getMessage().startswith("progress") and word in r.getMessage()]


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["direct_in_process", "direct_multi_processing"])
def test_scoring_logs_progress_and_a_final_summary(runner, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    prefix = str(tmp_path / "out" / "run")
    score_predictions.run(["--input", _judged_jsonl(tmp_path, 600), "--output", prefix,
                           "--metrics", "em,f1,rougeL", "--progress_interval", "0.05",
                           *RUNNER_ARGS[runner]], save_main_session=False)
    lines = _progress_lines(caplog, "rows read")
    assert len(lines) >= 2
    # Counts from the workers (in process, or written by the worker processes) arrive
    # while the run goes on.
    read = [int(re.search(r"([\d,]+) rows read", line)[1].replace(",", "")) for line in lines]
    assert max(read) == 600 and read == sorted(read)
    assert any("600 scored" in line for line in lines)
    messages = [r.getMessage() for r in caplog.records]
    done = next(m for m in messages if m.startswith("done in"))
    assert "600 rows read, 600 scored, 0 dead-lettered" in done
    outputs = next(m for m in messages if m.startswith("outputs: "))
    for suffix in ("scores.parquet", "dead_letter.jsonl", "summary.json", "report.md",
                   "report.png", "report.json"):
        assert f"{prefix}.{suffix}" in outputs
    _assert_beam_reads_our_type_hints(caplog)


@pytest.mark.slow
def test_mining_logs_progress_and_a_final_summary(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    out = str(tmp_path / "wes")
    mine_wes.run([f"--input={WIKI_SAMPLE}", f"--output={out}", "--min_incoming_links=5",
                  "--progress_interval=0.1", *RUNNER_ARGS["direct_in_process"]],
                 save_main_session=False)
    lines = _progress_lines(caplog, "pages read")
    assert lines
    last = lines[-1]
    assert re.search(r"[1-9][\d,]* pages read", last) and "MB/s" in last
    assert re.search(r"[1-9][\d.]* MB read", last) and re.search(r"[1-9][\d,]* links", last)
    messages = [r.getMessage() for r in caplog.records]
    done = next(m for m in messages if m.startswith("done in"))
    assert "206 pages read" in done and "wes-k5: " in done
    outputs = next(m for m in messages if m.startswith("outputs: "))
    assert f"{out}/stats.json" in outputs and f"{out}/wes-k5/ (3 files)" in outputs
    _assert_beam_reads_our_type_hints(caplog)


@pytest.mark.slow
def test_keep_input_columns_and_signatures_in_the_parquet_metadata(tmp_path):
    import pyarrow.parquet as pq

    from transforms.scoring.outputs.write import SIGNATURES_KEY, read_signatures

    prefix = str(tmp_path / "run")
    score_predictions.run(["--input", _judged_jsonl(tmp_path, 5), "--output", prefix,
                           "--metrics", "em,f1", "--keep_input_columns",
                           *RUNNER_ARGS["direct_in_process"]], save_main_session=False)
    table = pq.read_table(prefix + ".scores.parquet")
    assert "signature" not in table.column_names
    signatures = json.loads(table.schema.metadata[SIGNATURES_KEY])
    assert set(signatures) == {"em", "f1"} and signatures == read_signatures(
        prefix + ".scores.parquet")
    summary = json.load(open(prefix + ".summary.json"))
    assert summary["signatures"] == signatures
    rows = sorted(table.to_pylist(), key=lambda r: r["row"])
    assert rows[1]["question"] == "question 1?" and rows[1]["prediction"] == "answer 1"
    assert rows[1]["references"] == ["answer 1", "other"]
    # A list of columns: an input column of any type comes as a string (JSON).
    score_predictions.run(["--input", _judged_jsonl(tmp_path, 5), "--output", prefix,
                           "--metrics", "em", "--keep_input_columns=prediction,note",
                           "--output_format", "jsonl", "--overwrite", *RUNNER_ARGS["direct_in_process"]],
                          save_main_session=False)
    rows = sorted(map(json.loads, open(prefix + ".scores.jsonl")), key=lambda r: r["row"])
    assert rows[2]["note"] == '{"k": 2}' and rows[2]["prediction"] == "answer 2"
    assert "question" not in rows[2] and "signature" not in rows[2]


def test_qa_score_tunes_malloc_only_in_a_process_of_its_own(monkeypatch, tmp_path):
    """glibc's fixed mmap threshold cannot be undone and slows torch, so `run()` called
    by a program (the demo scores text metrics, then model metrics, in one process)
    leaves malloc alone; the command line (`main()` reading sys.argv) tunes it, and the
    workers' tokenizer threads, and freezes its start-up's objects."""
    tuned = []
    monkeypatch.setattr(score_predictions, "tune_local_malloc",
                        lambda options, runs_models: tuned.append(runs_models) or {})
    divided = []
    monkeypatch.setattr(score_predictions, "divide_local_cores",
                        lambda options, runs_models: divided.append(runs_models) or {})
    frozen = []  # the real one would keep this test process's cycles
    monkeypatch.setattr(score_predictions, "freeze_startup_objects",  # outputs yet?
                        lambda: frozen.append(os.path.exists(tmp_path / "o1.summary.json")))
    # the collector's pause ends with a freeze too: was the collector still off then, had
    # this run read its rows, had it written its outputs?
    resumed = []
    rows_key = "read/passed"
    monkeypatch.setattr(progress, "freeze_startup_objects", lambda: resumed.append(
        (gc.isenabled(), progress._TALLY.snapshot().get(rows_key, 0) - rows_before[0],
         os.path.exists(tmp_path / "o1.summary.json"))))
    rows_before = [0]
    seen = []

    def fake_run(argv, *, tune_local):  # stops before a pipeline is built
        seen.append(tune_local)

    real_run = score_predictions.run
    monkeypatch.setattr(score_predictions, "run", fake_run)
    argv = ["--input", "in.jsonl", "--output", "o", "--metrics", "em"]
    assert score_predictions.main(argv) == 0
    monkeypatch.setattr("sys.argv", ["qa-score", *argv])
    assert score_predictions.main() == 0
    assert seen == [False, True]
    # run() itself tunes only when asked, and says whether model metrics run
    monkeypatch.setattr(score_predictions, "run", real_run)
    assert gc.isenabled()
    for n, tune in enumerate((False, True)):
        rows_before[0] = progress._TALLY.snapshot().get(rows_key, 0)
        real_run(["--input", _judged_jsonl(tmp_path), "--output", str(tmp_path / f"o{n}"),
                  "--metrics", "em", *RUNNER_ARGS["direct_in_process"]],
                 save_main_session=False, tune_local=tune)
        assert gc.isenabled()
    assert tuned == [False] and divided == [False]
    # when the run starts and once its graph is built, both before the pipeline runs
    assert frozen == [False, False] and os.path.exists(tmp_path / "o1.summary.json")
    # the tuned run's collector was off from its start to its first rows read (all 3),
    # and on again before its end
    assert resumed == [(False, 3, False)]
