"""The README a newcomer reads: its size, its first scoring command, and its commands,
which run (```` {.run} ````) or parse (```` {.flags} ````) as written."""

from __future__ import annotations

import importlib
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docs.blocks import (
    OTHER_PROGRAMS,
    README,
    REPO,
    blocks,
    commands,
    console_scripts,
    pages,
    program,
)

BEAM_PIPELINES = {"pipelines.score_predictions", "pipelines.mine_wes"}
SHELLS = {"bash", "sh", "shell", "console"}


def test_the_readme_reads_in_five_minutes():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 250, f"{len(lines)} lines (at most 250)"
    assert len(text.split()) <= 2000, f"{len(text.split())} words (at most 2,000)"
    long = [(n, len(line)) for n, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, f"lines over 120 characters (line, length): {long}"
    first = next(n for n, line in enumerate(lines, 1)
                 if line.startswith("qa-score --input") and ".jsonl" in line)
    assert first <= 80, f"the first command scoring a JSONL is on line {first}"


def test_every_readme_block_and_every_shell_block_of_the_docs_is_tagged():
    untagged = [b.where() for b in blocks(README) if len(b.tags) != 1]
    untagged += [b.where() for page in pages()[1:] for b in blocks(page)
                 if b.lang in SHELLS and len(b.tags) != 1]
    assert not untagged, f"blocks without exactly one of {{.run}}, {{.flags}}: {untagged}"


def _parse(module: str, argv: list[str]) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.io import cli

    parser = importlib.import_module(module).build_parser()
    beam = module in BEAM_PIPELINES
    cli.parse_flags(parser, argv, beam=beam)  # UsageError on a flag nobody knows
    if beam:
        _, rest = parser.parse_known_args(argv)
        PipelineOptions(rest).get_all_options(retain_unknown_options=False)


def _flag_blocks():
    return [b for page in pages() for b in blocks(page) if "flags" in b.tags
            and b.lang in SHELLS]


@pytest.mark.parametrize("block", _flag_blocks(), ids=lambda b: b.where())
def test_flags_blocks_parse_with_the_commands_own_parsers(block):
    scripts = console_scripts()
    for argv in commands(block.body):
        module, args = program(argv, scripts)
        if module is None:
            assert argv[0] in OTHER_PROGRAMS, f"{block.where()}: unknown program {argv[0]!r}"
            continue
        _parse(module, args)


def test_a_misspelt_flag_fails_the_flags_check():
    from transforms.io import cli

    with pytest.raises(cli.UsageError, match="did you mean --temp_location"):
        _parse("pipelines.score_predictions", ["--input", "a", "--output", "b", "--metrics",
                                               "em", "--runner", "DataflowRunner",
                                               "--temp_locaton", "gs://b/tmp"])


def test_the_readme_gpu_and_dataflow_commands_ship_the_project():
    flagged = [argv for b in blocks(README) if "flags" in b.tags for argv in commands(b.body)]
    dataflow = [argv for argv in flagged if "DataflowRunner" in argv]
    assert dataflow
    for argv in dataflow:
        assert argv[argv.index("--setup_file") + 1] == "./setup.py", argv
    gpu = [argv for argv in dataflow if any("worker_accelerator" in a for a in argv)]
    assert gpu and all("--sdk_container_image" in argv for argv in gpu)
    assert "docs/containers/gpu.Dockerfile" in README.read_text()


def _shims(folder: Path) -> None:
    """A console script for each of setup.py's, running this checkout's code."""
    for name, module in console_scripts().items():
        shim = folder / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "import sys; '
                        f'from {module} import main; sys.exit(main())" "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)


@pytest.mark.slow
def test_the_readme_run_blocks_run_as_written(tmp_path, wiki_sample):
    """Every {.run} block, in order, in one empty folder: shell blocks through bash with
    the console scripts on the PATH, Python blocks through this interpreter. The data
    comes from the shared data folder as a mirror, as `make data` fetches it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _shims(bin_dir)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO), "QA_EVAL_DATA_DIR": str(tmp_path / "cache"),
           "QA_EVAL_DATA_MIRROR": str(wiki_sample.parents[1]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    ran = []
    for block in blocks(README):
        if "run" not in block.tags:
            continue
        runner = ["bash", "-euo", "pipefail", "-c"] if block.lang in SHELLS else \
            [sys.executable, "-c"]
        start = time.monotonic()
        done = subprocess.run([*runner, block.body], cwd=work, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, f"{block.where()}:\n{done.stdout}\n{done.stderr}"
        ran.append((block.where(), round(time.monotonic() - start, 1)))
    assert len(ran) >= 4, ran
    assert (work / "out" / "run.scores.parquet").exists()
    assert (work / "out" / "wes" / "stats.json").exists()
