"""Golden files of `qa-score` (tests/scoring/golden): every case of `make_golden.CASES` is
run again in process on the FnApiRunner, and its normalised outputs (scores, dead letters,
summary, report) must equal the expected files written by the code they froze. A failure
names the case, the file and the first record that differs; regenerate only deliberately
(tests/scoring/golden/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scoring.golden import make_golden
from tests.scoring.golden.make_golden import BY_NAME, CASES, EXPECTED, INPUTS


@pytest.fixture(scope="module")
def golden_run(tmp_path_factory):
    """`name -> (root, prefix)`: runs a case (and the full run its --previous_run is) once
    per module, in one folder."""
    root = tmp_path_factory.mktemp("golden")
    done: dict[str, Path] = {}

    def run(name: str) -> tuple[Path, Path]:
        make_golden.run_all(root, (BY_NAME[name],), done)
        return root, done[name]
    return run


@pytest.mark.slow
@pytest.mark.parametrize("case", [case.name for case in CASES])
def test_outputs_equal_the_golden_files(case, golden_run):
    root, prefix = golden_run(case)
    actual = make_golden.normalised_outputs(prefix, root)
    folder = EXPECTED / case
    names = sorted(p.name for p in folder.iterdir())
    assert sorted(actual) == names, (
        f"golden case {case!r}: files {sorted(actual)}, expected {names}")
    problems = [make_golden.first_difference(case, name, (folder / name).read_text("utf-8"),
                                             actual[name]) for name in names]
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems) + (
        "\n(an intended change? regenerate deliberately: tests/scoring/golden/README.md)")


def test_inputs_are_the_ones_the_generator_writes(tmp_path):
    # Catches a hand edit, or a checkout that rewrote line ends (.gitattributes: -text).
    make_golden.write_inputs(tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in INPUTS.iterdir())
    for name in written:
        assert (tmp_path / name).read_bytes() == (INPUTS / name).read_bytes(), name


def test_every_case_has_expected_files():
    assert sorted(p.name for p in EXPECTED.iterdir()) == sorted(BY_NAME)


def test_a_difference_names_the_case_file_and_first_record():
    message = make_golden.first_difference("c", "scores.jsonl", "a\nb\nc\n", "a\nB\nc\n")
    assert message is not None and "'c'" in message and "scores.jsonl" in message
    assert "record 2 of 3" in message and "expected: b" in message and "actual:   B" in message
    message = make_golden.first_difference("c", "dead_letter.jsonl", "a\n", "a\nz\n")
    assert "1 records expected, 2 actual" in message and "actual:   z" in message
    assert make_golden.first_difference("c", "summary.json", "x\n", "x\n") is None
