"""The README's Dataflow command builds its job offline, with the `gcp` extra installed:
Beam's DataflowRunner validates the options, translates the graph into the job it would
submit and builds the project's sdist from `--setup_file ./setup.py`; `--dry_run true`
(Beam's own test option) stops it before it submits, and its staging is then run into a
local folder, which Beam's stager writes to directly (no bucket, no credentials).

The input and output are local files here: the launcher itself reads the input and
takes the output's lock, and gs:// paths are not reachable offline (docs/install.md).
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tests.packaging import REPO

pytestmark = pytest.mark.slow

README_FLAGS = ["--runner", "DataflowRunner", "--project", "my-project",
                "--region", "us-central1", "--temp_location", "gs://qa-eval-bucket/tmp",
                "--setup_file", "./setup.py"]


def _source_files() -> set[str]:
    return {str(p.relative_to(REPO)) for package in ("pipelines", "transforms")
            for p in (REPO / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_the_readme_dataflow_job_is_built_offline(tmp_path, monkeypatch):
    pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient",
                        reason="the gcp extra is not installed")
    pytest.importorskip("build", reason="Beam's stager needs `build` for --setup_file")
    from apache_beam.options.pipeline_options import GoogleCloudOptions
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
    from apache_beam.runners.dataflow.internal import apiclient

    import pipelines.score_predictions as score

    built = {}
    run_pipeline = DataflowRunner.run_pipeline

    def recording(self, pipeline, options, pipeline_proto=None):
        result = run_pipeline(self, pipeline, options, pipeline_proto)
        built.update(job=self.job, options=options)
        return result

    monkeypatch.setattr(DataflowRunner, "run_pipeline", recording)
    # a dry run writes no outputs, so there is no summary to log
    monkeypatch.setattr(score, "log_final_summary", lambda config, elapsed: [])
    monkeypatch.chdir(REPO)  # --setup_file ./setup.py, as in the README
    data = tmp_path / "preds.jsonl"
    data.write_text('{"prediction": "a b", "references": ["a b"]}\n')
    argv = ["--input", str(data), "--output", str(tmp_path / "scores" / "run1"),
            "--metrics", "em,f1,bleu1,bleu4,rougeL,meteor,cider", *README_FLAGS]
    assert score.main([*argv, "--dry_run", "true"]) == 0

    job, options = built["job"], built["options"]
    names = {t.unique_name for t in job.proto_pipeline.components.transforms.values()}
    assert {"ScorePredictions", "ScorePredictions/FinalizeOutputs"} <= names
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region) == ("my-project", "us-central1")
    # Beam's default staging location: a folder of the job's own under temp's
    assert cloud.staging_location.startswith("gs://qa-eval-bucket/tmp/beamapp-")
    assert not list((tmp_path / "scores").glob("*")), "a dry run wrote outputs"

    # Staging, into a local folder: the sdist of the project built from setup.py.
    staging = tmp_path / "staging"
    staging.mkdir()
    cloud.staging_location, cloud.no_auth = str(staging), True
    client = apiclient.DataflowApplicationClient(options, str(staging))
    staged = client._stage_resources(job.proto_pipeline, options)
    assert "workflow.tar.gz" in staged
    with tarfile.open(staging / "workflow.tar.gz") as sdist:
        names = {str(Path(*Path(n).parts[1:])) for n in sdist.getnames()}
    assert _source_files() <= names, sorted(_source_files() - names)[:5]
    assert "transforms/data/registry.json" in names and "setup.py" in names

