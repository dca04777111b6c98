"""Nightly snapshots read as one dataset (the README's layout and code), and the Airflow
recipe in docs/examples."""

from __future__ import annotations

import ast
import glob
import json
import os

import pytest

from tests.runners import RUNNER_ARGS

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAG_FILE = os.path.join(_REPO, "docs", "examples", "nightly_rescoring_dag.py")


def _dag_pipeline_options() -> dict[str, ast.expr]:
    tree = ast.parse(open(DAG_FILE).read(), DAG_FILE)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "pipeline_options":
            return {k.value: v for k, v in zip(node.value.keys, node.value.values,
                                                strict=True)}
    raise AssertionError("the DAG passes no pipeline_options")


def test_the_airflow_dag_compiles_and_uses_only_real_flags():
    from apache_beam.options.pipeline_options import PipelineOptions

    import pipelines.score_predictions  # noqa: F401 - registers qa-score's flags

    compile(open(DAG_FILE).read(), DAG_FILE, "exec")
    known = PipelineOptions([]).get_all_options()
    options = _dag_pipeline_options()
    unknown = [name for name in options if name not in known]
    assert not unknown, f"the DAG passes flags qa-score does not have: {unknown}"
    assert {"input", "output", "previous_run", "max_dead_letter_fraction"} <= set(options)


def test_the_dag_builds_tonight_from_the_last_good_night():
    source = open(DAG_FILE).read()
    assert '"/date={{ ds }}/run"' in source
    assert "prev_data_interval_start_success | ds" in source


def _night(tmp_path, date: str, rows: list[dict], previous: str | None = None) -> str:
    from pipelines.score_predictions import run

    data = tmp_path / f"{date}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prefix = str(tmp_path / "scores" / f"date={date}" / "run")
    run(["--input", str(data), "--output", prefix, "--metrics", "em,f1",
         *(["--previous_run", previous] if previous else []),
         *RUNNER_ARGS["direct_in_process"]], save_main_session=False)
    return prefix


@pytest.mark.slow
def test_nightly_snapshots_read_as_one_table_with_the_date(tmp_path, monkeypatch):
    rows = [{"id": f"q{i}", "system": "a", "prediction": f"answer {i}",
             "references": [f"answer {i}"]} for i in range(5)]
    first = _night(tmp_path, "2026-11-21", rows)
    _night(tmp_path, "2026-11-22", [*rows[1:], {**rows[0], "prediction": "other"}], first)
    monkeypatch.chdir(tmp_path)
    # The README's code, as written there.
    import pyarrow.dataset as ds

    files = sorted(glob.glob("scores/date=*/run.scores.parquet"))
    table = ds.dataset(files, format="parquet", partitioning="hive",
                       partition_base_dir="scores").to_table()
    assert table.num_rows == 10
    by_date = table.group_by("date").aggregate([("em", "sum")]).to_pylist()
    assert sorted((r["date"], r["em_sum"]) for r in by_date) == [
        ("2026-11-21", 5.0), ("2026-11-22", 4.0)]
    import datasets

    history = datasets.Dataset(table)
    assert history.num_rows == 10 and "date" in history.column_names
