"""transforms/scoring/score_flags.py: the flags of `qa-score`, declared once for the
pipeline's parser (with `--input`/`--output`) and its `PipelineOptions` (without them)."""

from __future__ import annotations

import argparse

import pytest

from transforms.io import cli
from transforms.scoring.report.report_spec import DEFAULT_MIN_N, DEFAULT_RESAMPLES
from transforms.scoring.score_flags import add_score_arguments


def _parser(with_io: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_score_arguments(parser, with_io=with_io)
    return parser


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def test_input_and_output_only_with_io_and_every_other_flag_either_way():
    full, without = _flags(_parser(True)), _flags(_parser(False))
    assert set(full) - set(without) == {"--input", "--output", "--overwrite"}
    assert set(without) <= set(full)
    groups = [g.title for g in _parser(True)._action_groups]
    assert groups[2:5] == ["input", "output", "metrics"] and groups[5].startswith("models")


def test_defaults():
    args = _parser(True).parse_args([])
    assert (args.output_format, args.max_batch_size, args.input_checksums) == (
        "parquet", 512, "auto")
    assert (args.report_min_n, args.report_resamples) == (DEFAULT_MIN_N, DEFAULT_RESAMPLES)
    assert args.keep_input_columns is None and args.previous_run is None
    assert args.save_corpus_statistics is None and args.metrics is None


def test_outputs_are_checked_as_outputs_and_inputs_take_globs():
    flags = _flags(_parser(True))
    outputs = {flag for flag, action in flags.items() if action.type is cli.output_path}
    assert outputs == {"--output", "--save_corpus_statistics"}
    args = _parser(True).parse_args(["--input", "data/*.jsonl", "--corpus_statistics",
                                     "stats/[ab].parquet"])
    assert (args.input, args.corpus_statistics) == ("data/*.jsonl", "stats/[ab].parquet")
    with pytest.raises(SystemExit):  # argparse's own error for a bad value
        _parser(True).parse_args(["--save_corpus_statistics", "stats/run*.parquet"])


def test_keep_input_columns_alone_keeps_the_scored_texts():
    args = _parser(True).parse_args(["--keep_input_columns"])
    assert args.keep_input_columns == "question,prediction,references"
    args = _parser(True).parse_args(["--keep_input_columns", "id,answer"])
    assert args.keep_input_columns == "id,answer"
