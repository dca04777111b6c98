"""End-to-end tests of pipelines/score_predictions.py: outputs, broken input, runners, and
the papers' and the released figures reproduced on the real judgment files."""

from __future__ import annotations

import glob
import gzip
import json
import math
import os
import re

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from pipelines.score_predictions import run
from tests.runners import RUNNER_ARGS, local_job_service
from tests.scoring import fakes
from transforms.metrics import registry
from transforms.scoring.outputs.write import read_signatures

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JUDGMENTS = os.path.join(os.environ.get("QA_EVAL_SHARED_DATA",
                                        os.path.join(_REPO, "..", "shared", "data")),
                         "judgments")
SAS = os.path.join(JUDGMENTS, "sas", "SQuAD_SAS.csv")
AVSD = os.path.join(JUDGMENTS, "kpqa", "avsd_all.csv")
AVSD_RELEASED = os.path.join(JUDGMENTS, "kpqa", "released_metric_scores", "avsd_all.csv")


def _run(argv: list[str], runner: str = "direct_in_process") -> None:
    run([*argv, *RUNNER_ARGS[runner]], save_main_session=False)


def _outputs(prefix: str) -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(prefix + "*"))


def _good(i: int, system: str) -> dict:
    return {"id": f"g{i}", "system": system, "prediction": f"answer {i}",
            "references": [f"answer {i}", "other"], "human": i % 2}


BROKEN_LINES = [
    json.dumps(_good(1, "a")),
    '{"id": "bad-json", "prediction": "x", ',
    json.dumps({"id": "no-pred", "system": "a", "references": ["x"]}),
    json.dumps({"id": "null-pred", "system": "b", "prediction": None, "references": ["x"]}),
    json.dumps({"id": "int-pred", "system": "b", "prediction": 42, "references": ["x"]}),
    json.dumps({"id": "no-refs", "system": "a", "prediction": "x", "references": []}),
    json.dumps({"id": "empty-pred", "system": "a", "prediction": "", "references": ["x"]}),
    json.dumps({"id": "empty-ref", "system": "a", "prediction": "x", "references": [""]}),
    json.dumps({"id": "rejected", "system": "b", "prediction": fakes.REJECT,
                "references": ["x"]}),
    json.dumps(_good(2, "b")),
    json.dumps(_good(3, "b")),
]
EXPECTED_DEAD = {
    (2, None, "malformed_json"), (3, "no-pred", "missing_prediction"),
    (4, "null-pred", "null_prediction"), (5, "int-pred", "non_string_prediction"),
    (6, "no-refs", "empty_references"), (7, "empty-pred", "empty_prediction"),
    (8, "empty-ref", "empty_references"), (9, "rejected", "metric_input_error")}


@pytest.mark.slow
def test_broken_input_is_dead_lettered_and_counts_add_up(tmp_path, monkeypatch):
    fakes.install(monkeypatch)
    source = tmp_path / "preds.jsonl"
    source.write_text("\n".join(BROKEN_LINES) + "\n")
    prefix = str(tmp_path / "out" / "run")
    _run(["--input", str(source), "--output", prefix, "--output_format", "jsonl",
          "--metrics", "em,f1,fake_len,fake_corpus"])
    assert _outputs(prefix) == ["run.dead_letter.jsonl", "run.report.json", "run.report.md",
                                "run.report.png", "run.scores.jsonl", "run.summary.json"]
    with open(prefix + ".dead_letter.jsonl") as f:
        dead = [json.loads(line) for line in f]
    assert {(d["row"], d["id"], d["reason"]) for d in dead} == EXPECTED_DEAD
    assert all(d["file"] == str(source) and d["line"] == d["row"] for d in dead)
    with open(prefix + ".scores.jsonl") as f:
        scores = sorted((json.loads(line) for line in f), key=lambda r: r["row"])
    assert [(r["id"], r["system"], r["em"], r["fake_len"]) for r in scores] == [
        ("g1", "a", 1.0, 8.0), ("g2", "b", 1.0, 8.0), ("g3", "b", 1.0, 8.0)]
    # The corpus statistic counts every row that reached the metrics (the rejected one too).
    assert {r["fake_corpus"] for r in scores} == {4.0}
    # JSONL scores keep the signatures in the summary, not on every row.
    assert "signature" not in scores[0]
    assert read_signatures(prefix + ".scores.jsonl")["fake_len"] == "fake_len|v:1|impl:fake|stats:run"
    # fake_len declares a corpus statistic: its signature names the source
    with open(prefix + ".summary.json") as f:
        summary = json.load(f)
    assert summary["signatures"]["fake_len"] == "fake_len|v:1|impl:fake|stats:run"
    overall = summary["overall"]
    assert (overall["in"], overall["scored"], overall["dead_lettered"]) == (11, 3, 8)
    assert overall["metrics"]["fake_len"] == {"count": 3, "mean": 8.0}
    blocks = [*summary["systems"].values(), summary["without_system"]]
    assert sum(b["in"] for b in blocks) == overall["in"]
    assert summary["systems"]["b"]["dead_lettered_by_reason"] == {
        "metric_input_error": 1, "non_string_prediction": 1, "null_prediction": 1}
    for block in blocks:
        assert block["in"] == block["scored"] + block["dead_lettered"]


def test_bad_configuration_fails_before_running(tmp_path):
    source = tmp_path / "p.csv"
    source.write_text("answer,gold\na,b\n")
    prefix = str(tmp_path / "run")
    with pytest.raises(ValueError, match=r"unknown metric name.*available"):
        _run(["--input", str(source), "--output", prefix, "--metrics", "em,bleu9",
              "--prediction_column", "answer", "--references_column", "gold"])
    with pytest.raises(ValueError, match=r"available columns: \['answer', 'gold'\]"):
        _run(["--input", str(source), "--output", prefix, "--metrics", "em"])
    assert _outputs(prefix) == []


@pytest.mark.slow
def test_a_failed_run_leaves_no_final_output(tmp_path, monkeypatch):
    fakes.install(monkeypatch)
    source = tmp_path / "p.jsonl"
    source.write_text(json.dumps({"prediction": fakes.CRASH, "references": ["x"]}) + "\n")
    prefix = str(tmp_path / "run")
    with pytest.raises(Exception, match="fake metric crashed"):
        _run(["--input", str(source), "--output", prefix, "--metrics", "fake_len"])
    finals = [n for n in _outputs(prefix) if ".tmp-" not in n]
    assert finals == []


@pytest.mark.slow
def test_a_rerun_without_a_human_column_leaves_no_report_of_the_earlier_run(tmp_path):
    judged = tmp_path / "judged.jsonl"
    judged.write_text("".join(json.dumps(_good(i, "a")) + "\n" for i in range(6)))
    prefix = str(tmp_path / "run")
    _run(["--input", str(judged), "--output", prefix, "--metrics", "em,f1",
          "--output_format", "jsonl"])
    assert _outputs(prefix) == [
        "run.dead_letter.jsonl", "run.report.json", "run.report.md", "run.report.png",
        "run.scores.jsonl", "run.summary.json"]
    unjudged = tmp_path / "unjudged.jsonl"
    unjudged.write_text("".join(
        json.dumps({k: v for k, v in _good(i, "b").items() if k != "human"}) + "\n"
        for i in range(4)))
    with pytest.raises(ValueError, match=r"holds a complete run .*--overwrite"):
        _run(["--input", str(unjudged), "--output", prefix, "--metrics", "em,f1"])
    assert len(_outputs(prefix)) == 6  # refused before anything ran
    _run(["--input", str(unjudged), "--output", prefix, "--metrics", "em,f1", "--overwrite"])
    assert _outputs(prefix) == ["run.dead_letter.jsonl", "run.scores.parquet",
                                "run.summary.json"]
    summary = json.loads((tmp_path / "run.summary.json").read_text())
    assert summary["overall"]["in"] == 4
    assert pq.read_table(prefix + ".scores.parquet").column("system").to_pylist() == ["b"] * 4


def test_every_model_flag_of_the_table_is_a_pipeline_flag():
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.score_predictions import ScoreOptions
    from transforms.inference.model_flags import MODEL_FLAGS

    opts = PipelineOptions(["--bertscore_layer=3", "--device=cpu", "--bertscore_idf",
                            "--model_copies=2", "--wes_model=/m/wes"]).view_as(ScoreOptions)
    assert (opts.bertscore_layer, opts.device, opts.bertscore_idf, opts.model_copies,
            opts.wes_model) == (3, "cpu", True, 2, "/m/wes")
    defaults = PipelineOptions([]).view_as(ScoreOptions)
    assert {flag: getattr(defaults, flag) for flag in MODEL_FLAGS} == {
        flag: False if flag in ("bertscore_idf", "share_model_across_processes") else None
        for flag in MODEL_FLAGS}


@pytest.mark.slow
def test_a_cut_gzip_input_fails_the_run_naming_the_file(tmp_path):
    # 3,000 rows, the gzip cut at 60%: a reader that ends a cut file silently would
    # succeed with 1,788 rows in and 1,212 gone without a trace.
    rows = [json.dumps(_good(i, "ab"[i % 2])) for i in range(3000)]
    data = gzip.compress(("\n".join(rows) + "\n").encode())
    source = tmp_path / "preds.jsonl.gz"
    source.write_bytes(data[: int(len(data) * 0.6)])
    prefix = str(tmp_path / "out" / "run")
    with pytest.raises(Exception, match=re.escape(f"input file {source}: cannot be read after "
                                                  "row ") + r"\d+: EOFError"):
        _run(["--input", str(source), "--output", prefix, "--metrics", "em,f1"])
    assert [n for n in _outputs(prefix) if ".tmp-" not in n] == []


LONE = json.loads('"\\ud83d"')  # a lone surrogate, as JSON's escape makes it
TWO_MB = 2_000_000
BAD_TEXT_LINES = [  # (record, expected dead-letter reason or None, human missing)
    ({**_good(1, "a"), "human": 1}, None, False),
    ({**_good(2, "a"), "id": LONE}, "invalid_text", False),
    ({**_good(3, "b"), "system": LONE}, "invalid_text", False),
    ({**_good(4, "a"), "prediction": f"answer {LONE}"}, "invalid_text", False),
    ({**_good(5, "b"), "references": ["x", LONE]}, "invalid_text", False),
    ({**_good(6, "a"), "question": f"why {LONE}?"}, "invalid_text", False),
    ({**_good(7, "a"), "human": "n/a"}, None, True),
    ({**_good(8, "b"), "human": "NA"}, None, True),
    ({**_good(9, "b"), "human": None}, None, True),
    ({**_good(10, "a"), "human": math.nan}, None, True),
    ({**_good(11, "b"), "human": ""}, None, True),
    ({**_good(12, "a"), "human": "good"}, "non_numeric_human", False),
    ({**_good(13, "b"), "prediction": "p " * (TWO_MB // 2), "references": ["r " * (TWO_MB // 2)]},
     "text_too_long", False),
    ({**_good(14, "b"), "human": 0}, None, False),
]


@pytest.mark.slow
def test_bad_text_missing_labels_and_huge_rows_are_accounted_for(tmp_path):
    # In one run: unencodable text is dead-lettered
    # (invalid_text), a missing human value is scored without a label (human_missing),
    # a 2 MB prediction against a 2 MB reference is dead-lettered (text_too_long).
    source = tmp_path / "preds.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r, _, _ in BAD_TEXT_LINES))
    prefix = str(tmp_path / "out" / "run")
    metrics = ["em", "f1", *[m for m in ("rougeL",) if m in registry.available_metrics()]]
    _run(["--input", str(source), "--output", prefix, "--output_format", "jsonl",
          "--metrics", ",".join(metrics)])
    with open(prefix + ".dead_letter.jsonl", encoding="utf-8") as f:
        dead = {d["line"]: d for d in map(json.loads, f)}
    expected = {line: reason for line, (_, reason, _) in enumerate(BAD_TEXT_LINES, start=1)
                if reason}
    assert {line: d["reason"] for line, d in dead.items()} == expected
    assert all(d["file"] == str(source) and d["row"] == line for line, d in dead.items())
    assert (dead[2]["id"], dead[3]["system"]) == ("\\ud83d", "\\ud83d")
    assert dead[2]["detail"].startswith("'id' holds a lone surrogate U+D83D")
    assert dead[5]["detail"].startswith("'references'[1] holds a lone surrogate")
    assert dead[13]["detail"] == ("'prediction' is 2,000,000 characters long, more than the "
                                  "limit of 100,000 (--max_text_chars)")
    with open(prefix + ".summary.json") as f:
        summary = json.load(f)
    overall = summary["overall"]
    missing = sum(m for _, _, m in BAD_TEXT_LINES)
    assert (overall["in"], overall["scored"], overall["dead_lettered"]) == (14, 7, 7)
    assert overall["in"] == overall["scored"] + overall["dead_lettered"]
    assert overall["human_missing"] == missing == 5
    assert overall["dead_lettered_by_reason"] == {"invalid_text": 5, "non_numeric_human": 1,
                                                  "text_too_long": 1}
    blocks = [*summary["systems"].values(), summary.get("without_system")]
    assert sum(b["human_missing"] for b in blocks if b) == missing
    with open(prefix + ".scores.jsonl") as f:
        humans = {r["id"]: r["human"] for r in map(json.loads, f)}
    assert humans == {"g1": 1.0, "g7": None, "g8": None, "g9": None, "g10": None,
                      "g11": None, "g14": 0.0}
    assert _report_rows(prefix, "All rows")["em"]["n"] == 2  # the two labelled rows


def _write_runner_inputs(directory) -> str:
    rows = [{"id": f"r{i}", "system": "ab"[i % 2], "prediction": p, "references": refs,
             "human": float(i % 3)}
            for i, (p, refs) in enumerate([
                ("the Eiffel tower", ["Eiffel Tower", "the tower"]),
                ("1889", ["in 1889"]), ("Paris, France", ["Paris"]),
                ("a cat", ["the dog"]), ("blue whale", ["the blue whale", "whale"])])]
    with open(directory / "part1.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows[:2])
    pd.DataFrame([{**r, "references": json.dumps(r["references"])} for r in rows[2:4]]
                 ).to_csv(directory / "part2.csv", index=False)
    pq.write_table(pa.Table.from_pylist(rows[4:]), directory / "part3.parquet")
    return str(directory / "part*")


def _scores(prefix: str) -> list[dict]:
    table = pq.read_table(prefix + ".scores.parquet").to_pylist()
    return sorted(table, key=lambda r: r["row_key"])


@pytest.mark.slow
def test_runners_give_the_same_scores(tmp_path, monkeypatch):
    fakes.install(monkeypatch)
    pattern = _write_runner_inputs(tmp_path)
    lexical = [m for m in ("bleu1", "bleu4", "rougeL", "meteor", "cider")
               if m in registry.available_metrics()]
    metrics = ["em", "f1", *lexical, "fake_len", "fake_overlap", "fake_corpus"]
    argv = ["--input", pattern, "--metrics", ",".join(metrics)]
    results = {}
    for runner in ("direct_in_process", "direct_multi_processing"):
        prefix = str(tmp_path / runner)
        _run([*argv, "--output", prefix], runner)
        results[runner] = _scores(prefix)
    with local_job_service() as portable_args:
        prefix = str(tmp_path / "portable")
        run([*argv, "--output", prefix, *portable_args], save_main_session=False)
        results["portable"] = _scores(prefix)
    reference = results["direct_in_process"]
    assert len(reference) == 5
    assert {r["fake_corpus"] for r in reference} == {5.0}
    assert [r["f1"] for r in reference][:2] == [1.0, pytest.approx(2 / 3)]
    assert all(reference[0][m] is not None for m in metrics)
    for runner, rows in results.items():
        assert rows == reference, runner


def _report_rows(prefix: str, title: str) -> dict[str, dict]:
    with open(prefix + ".report.json") as f:
        scopes = json.load(f)["scopes"]
    scope = next(s for s in scopes if s["title"] == title)
    return {row["metric"]: {**row, "scope_n": scope["n"]} for row in scope["rows"]}


@pytest.mark.slow
def test_sas_f1_positive_subset_matches_the_paper(tmp_path):
    metrics = ["em", "f1"] + [m for m in ("rougeL",) if m in registry.available_metrics()]
    prefix = str(tmp_path / "sas")
    _run(["--input", SAS, "--output", prefix, "--metrics", ",".join(metrics),
          "--prediction_column", "answer1", "--references_column", "answer2",
          "--human_column", "label", "--report_subsets", "f1>0,f1=0"])
    positive = _report_rows(prefix, "Subset f1>0")
    assert positive["f1"]["scope_n"] == 376
    assert _report_rows(prefix, "Subset f1=0")["f1"]["scope_n"] == 566
    assert positive["f1"]["pearson"] == pytest.approx(0.60, abs=0.02)
    if "rougeL" not in metrics:
        pytest.skip("rougeL is not registered yet; F1 checked, ROUGE-L not")
    assert positive["rougeL"]["pearson"] == pytest.approx(0.56, abs=0.02)


AVSD_METRICS = {"bleu1": "BLEU-1", "bleu4": "BLEU-4", "rougeL": "ROUGE-L", "meteor": "METEOR",
                "cider": "CIDEr"}


@pytest.mark.slow
def test_avsd_report_pearson_equals_the_released_columns(tmp_path):
    missing = sorted(set(AVSD_METRICS) - set(registry.available_metrics()))
    if missing:
        pytest.skip(f"metrics {missing} are not registered yet")
    prefix = str(tmp_path / "avsd")
    _run(["--input", AVSD, "--output", prefix, "--metrics", ",".join(AVSD_METRICS),
          "--prediction_column", "answer", "--reference_prefix", "reference",
          "--max_references", "5", "--human_column", "scores"])
    rows = _report_rows(prefix, "All rows")
    released = pd.read_csv(AVSD_RELEASED)
    scores = pd.read_parquet(prefix + ".scores.parquet").sort_values("row")
    for metric, column in AVSD_METRICS.items():
        tolerance = 1e-3 if metric == "meteor" else 1e-6
        assert scores[metric].to_numpy() == pytest.approx(released[column].to_numpy(),
                                                          abs=tolerance), metric
        expected = stats.pearsonr(released[column], released["Human"])[0]
        assert rows[metric]["n"] == 1000
        assert rows[metric]["pearson"] == pytest.approx(expected, abs=tolerance), metric


@pytest.mark.slow
def test_summary_records_the_run(tmp_path):
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps(_good(i, "a")) + "\n" for i in range(3)))
    prefix = str(tmp_path / "run")
    _run(["--input", str(data), "--output", prefix, "--metrics", "em,f1"])
    summary = json.loads(open(prefix + ".summary.json").read())
    assert summary["code"]["package"] == "qa-eval-beam" and "git_commit" in summary["code"]
    assert summary["started_at"] <= summary["finished_at"]
    (entry,) = summary["inputs"]
    assert entry["path"] == str(data) and entry["size"] == data.stat().st_size
    assert entry["checksum"].startswith("sha256:")
    assert set(summary["signatures"]) == {"em", "f1"}


@pytest.mark.slow
def test_a_run_that_fails_leaves_the_earlier_one_whole(tmp_path, monkeypatch):
    from transforms.scoring.outputs import write

    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps(_good(i, "a")) + "\n" for i in range(3)))
    prefix = str(tmp_path / "run")
    stats = ["--save_corpus_statistics", prefix + ".stats.parquet"]
    _run(["--input", str(data), "--output", prefix, "--metrics", "em,f1,cider", *stats])
    before = {p: open(p, "rb").read() for p in glob.glob(prefix + "*")}
    assert prefix + ".stats.parquet" in before
    open(prefix + ".scores.parquet.tmp-killed", "w").write("a killed run's file")

    def broken(self, summary, *side_inputs):
        raise OSError("disk full")
    monkeypatch.setattr(write.WriteSummaryFn, "process", broken)
    other = tmp_path / "other.jsonl"  # other statistics, which must not replace the saved
    other.write_text("".join(json.dumps(_good(i, "b")) + "\n" for i in range(5, 9)))
    with pytest.raises(Exception, match="disk full"):
        _run(["--input", str(other), "--output", prefix, "--metrics", "em,cider",
              "--overwrite", *stats])
    after = {p: open(p, "rb").read() for p in glob.glob(prefix + "*")
             if ".tmp-" not in p}
    assert after == before  # the earlier run and its statistics, byte for byte
    monkeypatch.undo()
    _run(["--input", str(data), "--output", prefix, "--metrics", "em", "--overwrite"])
    assert _outputs(prefix) == [  # the killed runs' temporary files are gone
        "run.dead_letter.jsonl", "run.report.json", "run.report.md", "run.report.png",
        "run.scores.parquet", "run.stats.parquet", "run.summary.json"]


@pytest.mark.slow
def test_too_many_dead_letters_exit_with_status_3(tmp_path, capsys):
    from pipelines.score_predictions import main

    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps(_good(i, "a")) + "\n" for i in range(3))
                    + '{"id": "broken", \n')
    prefix = str(tmp_path / "run")
    argv = ["--input", str(data), "--output", prefix, "--metrics", "em",
            *RUNNER_ARGS["direct_in_process"]]
    assert main([*argv, "--max_dead_letter_fraction", "0.25"]) == 0
    assert main([*argv, "--max_dead_letter_fraction", "0.2", "--overwrite"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"qa-score: 1 of 4 rows (25.00%) were dead-lettered in {prefix}, "
                       "more than --max_dead_letter_fraction 0.2 allows (malformed_json 1)")
    assert _outputs(prefix)[-1] == "run.summary.json"  # written all the same
