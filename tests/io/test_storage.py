"""A file system or runner whose libraries are missing ends a command in one line naming
the extra to install (exit status 2), before anything is read or written
(transforms/io/storage.py). The libraries are made to fail to import here."""

from __future__ import annotations

import sys

import pytest

from transforms.io import storage
from transforms.io.cli import UsageError

GCS_MISSING = ("google.cloud.storage", "apache_beam.io.gcp.gcsfilesystem")
GCP_RUNNER_MISSING = ("apache_beam.runners.dataflow.internal.apiclient",)


@pytest.fixture
def without(monkeypatch):
    """`without(*modules)`: importing any of them fails from here to the test's end."""
    def block(*modules: str) -> None:
        for module in modules:
            monkeypatch.setitem(sys.modules, module, None)
    return block


@pytest.fixture
def nothing_written(monkeypatch):
    """Fails the test when a command takes a lock or builds a pipeline."""
    from transforms.io import ownership

    def refuse(*args, **kwargs):
        raise AssertionError("a lock was taken: something was written")
    monkeypatch.setattr(ownership.OutputLock, "acquire", refuse)


@pytest.mark.parametrize("path, missing, expected", [
    ("gs://bucket/run", GCS_MISSING,
     "Beam has no file system for gs:// here; pip install 'qa-eval-beam[gcp]'"),
    ("s3://bucket/run", ("boto3",),
     "Beam has no file system for s3:// here; pip install 'qa-eval-beam[aws]'"),
    ("hdfs://dumps/x.xml", ("hdfs",),
     "Beam has no file system for hdfs:// here; pip install hdfs"),
])
def test_a_scheme_whose_library_is_missing_names_what_to_install(without, path, missing,
                                                                 expected):
    without(*missing)
    assert storage.path_problem(path) == expected


def test_local_paths_and_present_file_systems_pass(without, tmp_path):
    assert storage.path_problem(str(tmp_path / "run")) is None
    assert storage.path_problem("relative/run") is None
    pytest.importorskip("boto3")
    assert storage.path_problem("s3://bucket/run") is None


def test_a_scheme_no_file_system_serves_lists_those_that_work(without):
    without("boto3")
    problem = storage.path_problem("foo://bucket/run")
    assert problem.startswith("Beam has no file system for foo:// (file systems here: ")
    assert "s3://" not in problem


@pytest.mark.parametrize("runner", ["DataflowRunner", "dataflow", "TestDataflowRunner",
                                    "apache_beam.runners.dataflow.DataflowRunner"])
def test_the_dataflow_runner_without_the_gcp_extra(without, runner):
    without(*GCP_RUNNER_MISSING)
    assert storage.runner_problem(runner) == (
        f"Beam's {runner} needs libraries that are not installed here; "
        "pip install 'qa-eval-beam[gcp]'")
    assert storage.runner_problem("FnApiRunner") is None
    assert storage.runner_problem(None) is None


def test_check_paths_names_the_flag_and_the_first_bad_path_of_a_list(without):
    without("boto3")
    with pytest.raises(UsageError, match=r"^--input s3://b/2\.jsonl: Beam has no file "):
        storage.check_paths({"--output": "/tmp/run", "--input": "/tmp/1.jsonl,s3://b/2.jsonl"},
                            comma_separated=("--input",))
    storage.check_paths({"--output": None, "--previous_run": ""})


def test_beam_path_flags_are_checked_too(without):
    without(*GCS_MISSING)
    with pytest.raises(UsageError, match=r"^--temp_location gs://bucket/tmp: .*\[gcp\]'$"):
        storage.check_launch({"--output": "/tmp/run"},
                             ["--temp_location", "gs://bucket/tmp"])


def test_check_launch_hands_the_options_to_file_systems(monkeypatch):
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import S3Options

    monkeypatch.setattr(FileSystems, "_pipeline_options", None)
    assert storage.check_launch({"--output": "/tmp/run"},
                                ["--s3_endpoint_url", "http://127.0.0.1:1"]) == []
    options = FileSystems._pipeline_options
    assert options.view_as(S3Options).s3_endpoint_url == "http://127.0.0.1:1"


def test_a_run_on_s3_corrects_the_s3_client_of_its_workers(monkeypatch):
    pytest.importorskip("boto3")
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import SetupOptions

    monkeypatch.setattr(FileSystems, "_pipeline_options", None)
    extra = storage.check_launch({"--input": "/tmp/a.jsonl,s3://bucket/b.jsonl"}, [],
                                 comma_separated=("--input",))
    assert extra == ["--beam_plugins=transforms.io.s3_fixes"]
    assert FileSystems._pipeline_options.view_as(SetupOptions).beam_plugins == [
        "transforms.io.s3_fixes"]
    from apache_beam.io.aws import s3io
    assert getattr(s3io.S3Uploader.finish, "_qa_eval_corrected", False)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_qa_score_to_gcs_without_the_extra(tmp_path, capsys, without, nothing_written):
    from pipelines.score_predictions import main

    without(*GCS_MISSING)
    data = tmp_path / "preds.jsonl"
    data.write_text('{"prediction": "a", "references": ["a"]}\n')
    argv = ["--input", str(data), "--output", "gs://bucket/run", "--metrics", "em"]
    assert main([*argv, "--runner", "FnApiRunner"]) == 2
    assert _one_line(capsys) == ("qa-score: error: --output gs://bucket/run: Beam has no "
                                 "file system for gs:// here; pip install 'qa-eval-beam[gcp]'")
    # The README's Dataflow command: the runner is named first.
    assert main([*argv, "--runner", "DataflowRunner", "--project", "my-project",
                 "--region", "r", "--temp_location", "gs://bucket/tmp",
                 "--setup_file", "./setup.py"]) == 2
    assert _one_line(capsys) == (
        "qa-score: error: --runner DataflowRunner: Beam's DataflowRunner needs libraries "
        "that are not installed here; pip install 'qa-eval-beam[gcp]'")


@pytest.mark.parametrize("flag", ["--input", "--previous_run", "--corpus_statistics",
                                  "--save_corpus_statistics"])
def test_every_path_flag_of_qa_score_is_checked(tmp_path, capsys, without, nothing_written,
                                               flag):
    from pipelines.score_predictions import main

    without("boto3")
    data = tmp_path / "preds.jsonl"
    data.write_text('{"prediction": "a", "references": ["a"]}\n')
    argv = {"--input": str(data), "--output": str(tmp_path / "run"), "--metrics": "em,cider"}
    argv[flag] = "s3://bucket/x"
    assert main([x for kv in argv.items() for x in kv]) == 2
    assert _one_line(capsys) == (f"qa-score: error: {flag} s3://bucket/x: Beam has no file "
                                 "system for s3:// here; pip install 'qa-eval-beam[aws]'")
    assert not list(tmp_path.glob("run*"))


def test_wes_mine_checks_its_inputs_and_output(tmp_path, capsys, without, nothing_written):
    from pipelines.mine_wes import main

    without("boto3")
    assert main(["--input", "dump.xml.bz2", "--output", "s3://bucket/wes"]) == 2
    assert _one_line(capsys).startswith("wes-mine: error: --output s3://bucket/wes: Beam "
                                        "has no file system for s3:// here")


@pytest.mark.parametrize("module, argv, flag", [
    ("train_keyphrase", ["--squad", "gs://bucket/squad.json"], "--squad"),
    ("train_cross_encoder", ["--format", "stsb", "--train_file", "s3://bucket/train.tsv"],
     "--train_file"),
])
def test_the_trainers_refuse_paths_on_object_stores(tmp_path, capsys, module, argv, flag):
    main = __import__(f"pipelines.{module}", fromlist=["main"]).main
    assert main([*argv, "--output", str(tmp_path / "model")]) == 2
    line = _one_line(capsys)
    assert f"error: {flag} " in line and "read and write local files only" in line
    assert not (tmp_path / "model").exists()


def test_a_runner_option_validation_error_is_one_line(tmp_path, capsys):
    pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient")
    from pipelines.score_predictions import main

    data = tmp_path / "preds.jsonl"
    data.write_text('{"prediction": "a", "references": ["a"]}\n')
    assert main(["--input", str(data), "--output", str(tmp_path / "run"), "--metrics", "em",
                 "--runner", "DataflowRunner", "--project", "p", "--region", "r",
                 "--temp_location", "gs://qa-eval-bucket/tmp", "--dry_run", "true"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "qa-score: error: Pipeline has validation errors: Invalid Project ID (p).")
    assert not list(tmp_path.glob("run*"))
