"""Output paths with a pattern character (`[`, `]`, `*`, `?`) are refused by every
command when its flags are parsed: one line naming the flag, the value and the
characters, exit status 2, nothing written; input flags still take globs."""

from __future__ import annotations

import json

import pytest

from pipelines import (
    demo,
    mine_wes,
    score_predictions,
    train_cross_encoder,
    train_keyphrase,
)
from transforms.io import cli
from transforms.training import evouna, short_answers

# (main, build_parser, the flags that name an output) of every command line.
COMMANDS = {
    "qa-score": (score_predictions.main, score_predictions.build_parser,
                 ("--output", "--save_corpus_statistics")),
    "wes-mine": (mine_wes.main, mine_wes.build_parser, ("--output",)),
    "train_cross_encoder": (train_cross_encoder.main, train_cross_encoder.build_parser,
                            ("--output",)),
    "train_keyphrase": (train_keyphrase.main, train_keyphrase.build_parser, ("--output",)),
    "demo": (demo.main, demo.build_parser, ("--output",)),
    "evouna": (evouna.main, evouna.build_parser, ("--output",)),
    "short_answers": (short_answers.main, short_answers.build_parser, ("--output",)),
}
# Flags whose value is a path that is read (a glob is fine there).
INPUT_FLAGS = {"--input", "--previous_run", "--corpus_statistics", "--data", "--squad",
               "--wes", "--evouna", "--train_file", "--dev_file", "--test_file"}


# `main` configures logging: put back after each test (conftest.py)
pytestmark = pytest.mark.usefixtures("restored_logging")


def _files(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _refusal(prog: str, flag: str, value: str, characters: str) -> str:
    return (f"{prog}: error: argument {flag}: {value!r} holds {characters}, which Beam's "
            "file systems and globs read as a pattern, so the run's own files could not "
            "be matched: an output path cannot hold [ ] * ?\n")


def test_qa_score_refuses_an_output_prefix_with_pattern_characters(tmp_path, capsys,
                                                                    no_pipeline):
    source = tmp_path / "in" / "preds.jsonl"
    source.parent.mkdir()
    source.write_text(json.dumps({"prediction": "a", "references": ["a"]}) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    prefix = str(out / "run[1]*")
    assert score_predictions.main(["--input", str(source), "--output", prefix,
                                   "--metrics", "em"]) == 2
    assert capsys.readouterr().err == _refusal("qa-score", "--output", prefix,
                                               "'[', ']', '*'")
    statistics = str(out / "df?.parquet")
    assert score_predictions.main(["--input", str(source), "--output", str(out / "run"),
                                   "--metrics", "cider", "--save_corpus_statistics",
                                   statistics]) == 2
    assert capsys.readouterr().err == _refusal("qa-score", "--save_corpus_statistics",
                                               statistics, "'?'")
    assert _files(tmp_path) == ["in", "in/preds.jsonl", "out"]


def test_wes_mine_refuses_an_output_folder_with_pattern_characters(tmp_path, capsys,
                                                                   no_pipeline, wiki_sample):
    out = tmp_path / "out"
    out.mkdir()
    folder = str(out / "wes[k2]")
    assert mine_wes.main(["--input", str(wiki_sample), "--output", folder]) == 2
    assert capsys.readouterr().err == _refusal("wes-mine", "--output", folder, "'[', ']'")
    assert _files(tmp_path) == ["out"]


@pytest.mark.parametrize("name", ["train_cross_encoder", "train_keyphrase", "demo",
                                  "evouna", "short_answers"])
def test_every_other_command_refuses_such_an_output(name, tmp_path, capsys, no_pipeline):
    main, build_parser, _ = COMMANDS[name]
    # inputs that do not exist: without the check, each command would fail fast on them
    missing = str(tmp_path / "missing")
    given = {"train_cross_encoder": ["--format", "stsb", "--input", missing],
             "train_keyphrase": ["--squad", missing], "demo": ["--data", missing],
             "evouna": ["--input", missing], "short_answers": ["--squad", missing]}[name]
    value = str(tmp_path / "out" / "model?")
    assert main([*given, "--output", value]) == 2
    prog = build_parser().prog
    assert capsys.readouterr().err == _refusal(prog, "--output", value, "'?'")
    assert _files(tmp_path) == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_output_flag_and_no_input_flag_is_checked(name):
    """Each command's output flags have the check as their type; its input flags (which
    take globs) do not."""
    _, build_parser, outputs = COMMANDS[name]
    checked = {flag: action.type is cli.output_path
               for action in build_parser()._actions for flag in action.option_strings}
    assert [flag for flag in outputs if not checked[flag]] == []
    assert [flag for flag in INPUT_FLAGS if checked.get(flag)] == []
    assert sorted(flag for flag, is_checked in checked.items() if is_checked) == sorted(outputs)


def test_input_globs_are_not_refused(tmp_path):
    args = cli.parse_flags(score_predictions.build_parser(),
                           ["--input", str(tmp_path / "preds[0-9]*.jsonl"), "--output",
                            str(tmp_path / "run"), "--metrics", "em"])
    assert args.input == str(tmp_path / "preds[0-9]*.jsonl")
