"""transforms/io/cli.py: unknown flags, Beam's flags, help defaults, one-line errors,
logging."""

import argparse
import logging

import pytest

from transforms.io import cli


@pytest.fixture
def restore_logging():
    """configure_logging replaces the root handlers and sets levels: put them back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in (*cli.OUR_LOGGERS, "apache_beam")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)


def _parser():
    parser = cli.ArgumentParser(prog="tool")
    group = parser.add_argument_group("input")
    group.add_argument("--human_column", default=None, help="the human column")
    group.add_argument("--max_batch_size", type=int, default=512, help="rows per batch")
    group.add_argument("--flag", action="store_true", help="a switch")
    return parser


@pytest.mark.parametrize("argv", [
    ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
     "--direct_num_workers", "2"],
    # Dataflow's, Flink's, the portable runner's, Prism's: PipelineOptions subclasses.
    ["--runner", "DataflowRunner", "--project", "p", "--region", "europe-west1",
     "--temp_location", "gs://b/tmp", "--setup_file", "./setup.py", "--max_num_workers=4"],
    ["--runner=FlinkRunner", "--flink_master", "localhost:8081", "--parallelism=2"],
    ["--runner=PortableRunner", "--job_endpoint=localhost:8099",
     "--environment_type", "LOOPBACK"],
    ["--runner=SparkRunner", "--spark_master_url", "local[2]"],
    ["--runner=PrismRunner", "--prism_location", "/tmp/prism"],
    ["--save_main_session", "--experiments=use_runner_v2"],
    # the DaskRunner's, known once its module is imported
    ["--runner=transforms.io.dask_runner.DaskRunner",
     "--dask_client_address=tcp://127.0.0.1:8786", "--dask_npartitions", "4"],
])
def test_beams_and_the_runners_flags_pass_through(argv):
    args = cli.parse_flags(_parser(), ["--human_column", "h", *argv])
    assert args.human_column == "h"


@pytest.mark.parametrize(("argv", "message"), [
    (["--humn_column", "x"], "unknown flag --humn_column; did you mean --human_column?"),
    (["--max_batch_sise=3"], "unknown flag --max_batch_sise; did you mean --max_batch_size?"),
    (["--direct_num_worker", "2"],
     "unknown flag --direct_num_worker; did you mean --direct_num_workers?"),
    (["--runer", "DataflowRunner"], "unknown flag --runer; did you mean --runner?"),
    (["--human"], "unknown flag --human; did you mean --human_column?"),  # no prefixes
    (["--dsak_npartitions=4"], "unknown flag --dsak_npartitions; did you mean "
                               "--dask_npartitions?"),
    (["stray"], "unexpected argument 'stray'"),
    (["--max_batch_size", "many"], "argument --max_batch_size: invalid int value: 'many'"),
])
def test_unknown_or_bad_flags_are_one_line_usage_errors(argv, message):
    with pytest.raises(cli.UsageError) as raised:
        cli.parse_flags(_parser(), argv)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_without_beam_every_unknown_argument_is_an_error():
    with pytest.raises(cli.UsageError, match="unknown flag --runner"):
        cli.parse_flags(_parser(), ["--runner=DirectRunner"], beam=False)


def test_a_typo_is_reported_before_a_missing_required_flag():
    parser = _parser()
    parser.add_argument("--output", required=True)
    with pytest.raises(cli.UsageError, match="did you mean --output"):
        cli.parse_flags(parser, ["--outptu", "x"], beam=False)
    with pytest.raises(cli.UsageError, match="required: --output"):
        cli.parse_flags(parser, [], beam=False)
    assert cli.parse_flags(parser, ["--output", "o"], beam=False).output == "o"


def test_help_states_every_default():
    text = _parser().format_help()
    assert "the human column (default: none)" in text
    assert "rows per batch (default: 512)" in text
    assert "a switch (default: off)" in text


def _fails(_argv):
    raise cli.UsageError("--input 'x.jsonl' matches\n no file")


def _breaks(_argv):
    raise RuntimeError("a fault")


def test_run_main_one_line_and_status_2(capsys, restore_logging):
    assert cli.run_main("tool", _fails, ["--input", "x"]) == 2
    err = capsys.readouterr().err
    assert err == "tool: error: --input 'x.jsonl' matches no file\n"


def test_run_main_verbose_adds_the_traceback(capsys, restore_logging):
    assert cli.run_main("tool", _fails, ["--verbose"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.rstrip().endswith("tool: error: --input 'x.jsonl' matches no file")


def test_run_main_lets_faults_through(restore_logging):
    with pytest.raises(RuntimeError, match="a fault"):
        cli.run_main("tool", _breaks, [])


def test_configure_logging_works_after_beam_configured_the_root_logger(
        capsys, restore_logging):
    import apache_beam  # noqa: F401  (its import gives the root logger a handler)

    logging.getLogger().addHandler(logging.StreamHandler())  # as Beam's first warning does
    cli.configure_logging()
    logging.getLogger("pipelines.x").info("our line")
    logging.getLogger("apache_beam.x").info("beam's info")
    logging.warning("apitools not found, and bigquery client libraries are not available")
    err = capsys.readouterr().err
    assert "INFO pipelines.x: our line" in err
    assert "beam's info" not in err and "apitools" not in err


WORKER_ERROR = """Pipeline job failed: Traceback (most recent call last):
  File "apache_beam/runners/common.py", line 1512, in process
transforms.scoring.reading.inputs.InputFileError: input file /data/p.jsonl.gz: cannot be read \
after row 1788: EOFError: cut short [while running 'ScorePredictions/ReadAndValidateRows']
"""


def _worker_file_error(_argv):
    raise RuntimeError(WORKER_ERROR)  # what a runner with worker processes raises


def _file_error_in_process(_argv):
    from transforms.scoring.statistics.statistics_file import StatisticsFileError

    try:
        raise StatisticsFileError("--corpus_statistics s.parquet: cannot be read "
                                  "(row group 2): OSError: bad [while running 'Read']")
    except StatisticsFileError as e:
        raise KeyError("wrapped by a runner") from e


def test_a_file_the_user_handed_in_ends_in_one_line_wherever_it_failed(capsys,
                                                                        restore_logging):
    assert cli.run_main("tool", _worker_file_error, []) == 2
    assert capsys.readouterr().err == (
        "tool: error: input file /data/p.jsonl.gz: cannot be read after row 1788: "
        "EOFError: cut short\n")
    assert cli.run_main("tool", _file_error_in_process, []) == 2
    assert capsys.readouterr().err == (
        "tool: error: --corpus_statistics s.parquet: cannot be read (row group 2): "
        "OSError: bad\n")
    # Beam's own log of the worker's error (with its traceback) is not printed.
    cli.configure_logging()
    logging.getLogger("apache_beam.runners.common").error("%s", WORKER_ERROR)
    logging.getLogger("apache_beam.runners.common").error("a real fault")
    err = capsys.readouterr().err
    assert "InputFileError" not in err and "a real fault" in err


def test_every_user_file_error_class_is_listed():
    """`FILE_ERROR_NAMES` names every class marked `user_file_error` (a runner may hand
    back only their text)."""
    import ast
    from pathlib import Path

    marked = set()
    for path in Path(__file__).resolve().parents[2].joinpath("transforms").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(s, ast.Assign) and any(
                        getattr(t, "id", "") == "user_file_error" for t in s.targets)
                    for s in node.body):
                marked.add(node.name)
    assert marked == set(cli.FILE_ERROR_NAMES)


def test_the_dask_runners_module_is_imported_only_for_its_flags():
    """Importing the DaskRunner (dask.distributed) to know its flags costs 0.4 s a run;
    runs without a `--dask...` flag do not pay it (a fresh interpreter: another test may
    have imported it in this one)."""
    import subprocess
    import sys

    code = """if True:
        import argparse, sys
        from transforms.io import cli
        dask = "apache_beam.runners.dask.dask_runner"
        cli.parse_flags(argparse.ArgumentParser(), ["--runner=FnApiRunner"])
        print(dask in sys.modules)
        cli.parse_flags(argparse.ArgumentParser(), ["--dask_npartitions=2"])
        print(dask in sys.modules)
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["False", "True"]


@pytest.mark.parametrize(("value", "characters"), [
    ("out/run[1]*", "'[', ']', '*'"),
    ("out/run?", "'?'"),
    ("out/run]", "']'"),
    ("gs://bucket/scores/run*", "'*'"),
    ("out[2]/run", "'[', ']'"),
])
def test_an_output_path_with_pattern_characters_is_refused(value, characters):
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        cli.output_path(value)
    message = str(refused.value)
    assert message.startswith(f"{value!r} holds {characters}, which Beam's file systems")
    assert "read as a pattern" in message and "\n" not in message


@pytest.mark.parametrize("value", ["out/run1", "gs://bucket/scores/run-1", "out/a b{1}", ""])
def test_an_output_path_without_them_is_kept_as_it_is(value):
    assert cli.output_path(value) == value


def test_a_refused_output_path_is_one_line_naming_the_flag(capsys, restore_logging):
    """The parser's error: flag, value and characters in one line, exit status 2."""
    def body(argv):
        parser = cli.ArgumentParser(prog="tool")
        parser.add_argument("--input")
        parser.add_argument("--output", type=cli.output_path)
        cli.parse_flags(parser, argv, beam=False)

    assert cli.run_main("tool", body, ["--input", "data/*.jsonl", "--output", "o"]) == 0
    assert cli.run_main("tool", body, ["--input", "data/*.jsonl", "--output", "o/r[1]"]) == 2
    assert capsys.readouterr().err == (
        "tool: error: argument --output: 'o/r[1]' holds '[', ']', which Beam's file "
        "systems and globs read as a pattern, so the run's own files could not be "
        "matched: an output path cannot hold [ ] * ?\n")
