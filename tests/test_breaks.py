"""tests/breaks: every deliberate break still names tests that exist and still applies to
the code as it is now, so that `make breaks` cannot rot silently. (Whether its tests catch
it is `make breaks`' own check: it runs them, which takes minutes.)"""

from __future__ import annotations

import re

import pytest

from tests.breaks.run import BREAKS, REPO, all_breaks, apply, copy_tree, read_break

PATCHES = sorted(BREAKS.glob("*.patch"))


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """One copy of the working tree for every `git apply --check`."""
    folder = tmp_path_factory.mktemp("tree")
    copy_tree(folder)
    return folder


def test_there_are_breaks():
    assert PATCHES
    assert [b.name for b in all_breaks()] == [p.stem for p in PATCHES]


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.stem)
def test_each_break_names_existing_tests_and_still_applies(patch, tree):
    item = read_break(patch)
    assert item.description.count(":") >= 1, "Break: <file: function, the change>"
    for node in item.tests:
        path, _, name = node.partition("::")
        assert (REPO / path).is_file(), f"{node}: no file {path}"
        function = re.sub(r"\[.*\]$", "", name.rpartition("::")[2])
        assert function and re.search(rf"^\s*def {re.escape(function)}\(",
                                      (REPO / path).read_text(), re.M), \
            f"{node}: no test {function} in {path}"
    assert apply(patch, tree, check=True) is None


def test_a_patch_header_needs_a_break_and_a_test(tmp_path):
    diff = "diff --git a/x.py b/x.py\n"
    good = tmp_path / "good.patch"
    good.write_text("Break: x.py: f, a change\nTest: tests/a.py::test_a\n"
                    "Test: tests/b.py::test_b[1]\n\n" + diff)
    assert read_break(good).tests == ("tests/a.py::test_a", "tests/b.py::test_b[1]")
    assert read_break(good).description == "x.py: f, a change"
    for name, text in {"no_test": "Break: x.py: f\n\n" + diff,
                       "no_break": "Test: tests/a.py::test_a\n\n" + diff,
                       "no_diff": "Break: x.py: f\nTest: tests/a.py::test_a\n"}.items():
        (tmp_path / f"{name}.patch").write_text(text)
        with pytest.raises(ValueError, match=f"{name}.patch"):
            read_break(tmp_path / f"{name}.patch")
