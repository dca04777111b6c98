"""Nightly re-scoring on Dataflow, scheduled by Apache Airflow (README: "Nightly re-scoring").

One task per night runs `pipelines.score_predictions` with the Apache Beam provider's
`BeamRunPythonPipelineOperator` (package `apache-airflow-providers-apache-beam`, plus
`apache-airflow-providers-google` for Dataflow). Each night writes a complete snapshot to
its own prefix, `SNAPSHOTS/date=YYYY-MM-DD/run`, incrementally from the last night that
succeeded (`--previous_run`; the first night, with none, is a full run). The task fails,
so Airflow alerts, when the run fails or when more than 1% of the rows were
dead-lettered (`--max_dead_letter_fraction`, exit status 3; the snapshot is written all
the same, for inspection). A retry of a night rewrites that night's snapshot
(`--overwrite`), which leaves the snapshot either the old one or the new one, never a mix.

Copy this file into your DAGs folder and set the constants; tests/scoring/
test_history.py checks that it compiles and that every option is a flag of qa-score.
"""

from __future__ import annotations

import datetime

from airflow import DAG
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.providers.google.cloud.operators.dataflow import DataflowConfiguration

PROJECT = "my-project"
REGION = "europe-west4"
BUCKET = "gs://my-bucket"
PREDICTIONS = f"{BUCKET}/predictions/*.parquet"  # every model's outputs, refreshed daily
SNAPSHOTS = f"{BUCKET}/scores"  # SNAPSHOTS/date=YYYY-MM-DD/run.{scores.parquet,summary.json,...}
SAS_MODEL = f"{BUCKET}/models/sas"  # a checkpoint folder; a new one recomputes sas only
# A checkout of this repository on the Airflow workers, installed there into the Python
# that runs the task (`pip install torch==... -r requirements.txt -e /opt/qa-eval-beam`).
SOURCE = "/opt/qa-eval-beam"

# Tonight's snapshot, and the last successful night's (empty on the first night: a full
# run). `prev_data_interval_start_success` is Airflow's; the `ds` filter formats a date.
TONIGHT = SNAPSHOTS + "/date={{ ds }}/run"
LAST_GOOD = ("{% if prev_data_interval_start_success %}" + SNAPSHOTS
             + "/date={{ prev_data_interval_start_success | ds }}/run{% endif %}")

with DAG(
    dag_id="qa_eval_nightly_rescoring",
    schedule="@daily",
    start_date=datetime.datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=1,  # a night builds on the one before
    default_args={"retries": 1, "retry_delay": datetime.timedelta(minutes=30)},
) as dag:
    BeamRunPythonPipelineOperator(
        task_id="score_predictions",
        runner="DataflowRunner",
        py_file=f"{SOURCE}/pipelines/score_predictions.py",
        pipeline_options={
            "input": PREDICTIONS,
            "output": TONIGHT,
            "previous_run": LAST_GOOD,
            "overwrite": True,
            "metrics": "em,f1,contains,rougeL,bertscore,sas",
            "sas_model": SAS_MODEL,
            "human_column": "human",
            "max_dead_letter_fraction": 0.01,
            "setup_file": f"{SOURCE}/setup.py",
            "temp_location": f"{BUCKET}/tmp",
        },
        dataflow_config=DataflowConfiguration(
            job_name="qa-eval-nightly-{{ ds_nodash }}", project_id=PROJECT,
            location=REGION, wait_until_finished=True),
    )
