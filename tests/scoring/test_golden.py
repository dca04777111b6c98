"""Golden files of `qa-score` (tests/scoring/golden): every case of `make_golden.CASES` is
run again in process on the FnApiRunner, and its normalised outputs (scores, dead letters,
summary, report) must equal the expected files written by the code they froze. A failure
names the case, the file and the first record that differs; regenerate only deliberately
(tests/scoring/golden/README.md).

Scores, dead letters and summaries must be equal to the character. The report's statistics
come from numpy and scipy, whose vectorised sums take another order on another processor's
instructions: there a number may differ in its last bits (a Pearson r of
0.7380782885018752 against ...753), and nothing else may."""

from __future__ import annotations

import math
import re
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
    problems = [_difference(case, name, (folder / name).read_text("utf-8"), actual[name])
                for name in names]
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


# the files whose numbers are computed by numpy and scipy (the module docstring)
STATISTICS_FILES = ("report.json", "report.md")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
REL_TOL = 1e-12  # about 4,500 units in the last place of a double
ABS_TOL = 1e-15  # for a value that is 0 on one processor and a rounding error on another


def _same_but_last_bits(expected: str, actual: str) -> bool:
    """Whether two lines are the same text with numbers equal or within `REL_TOL`."""
    if _NUMBER.sub("#", expected) != _NUMBER.sub("#", actual):
        return False
    return all(a == b or (_is_float(a) and _is_float(b) and math.isclose(
        float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL))
        for a, b in zip(_NUMBER.findall(expected), _NUMBER.findall(actual), strict=True))


def _is_float(number: str) -> bool:
    """A computed value, not a count or an id (those must be equal)."""
    return any(c in number for c in ".eE")


def _difference(case: str, name: str, expected: str, actual: str) -> str | None:
    """`make_golden.first_difference`, the statistics' last bits aside."""
    problem = make_golden.first_difference(case, name, expected, actual)
    if problem is None or name not in STATISTICS_FILES:
        return problem
    want, got = expected.splitlines(), actual.splitlines()
    if len(want) == len(got) and all(a == b or _same_but_last_bits(a, b)
                                     for a, b in zip(want, got, strict=True)):
        return None
    return problem


def test_only_the_statistics_last_bits_may_differ():
    close = '  "pearson": 0.7380782885018753,'
    assert _difference("c", "report.json", '  "pearson": 0.7380782885018752,', close) is None
    assert _difference("c", "report.json", '  "r": 0.0, "n": 16', '  "r": 1e-17, "n": 16') is None
    for name, actual in (("scores.jsonl", close), ("report.json", '  "pearson": 0.7380783,'),
                         ("report.json", '  "spearman": 0.7380782885018753,'),
                         ("report.json", '  "pearson": 0.7380782885018753, 1')):
        assert _difference("c", name, '  "pearson": 0.7380782885018752,', actual)
    # a count or an id is equal or it differs, however close
    assert _difference("c", "report.json", '  "r": 0.5, "n": 1600000000000000',
                       '  "r": 0.5, "n": 1600000000000001')
