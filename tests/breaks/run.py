"""Deliberate breaks of the production code, each of which a named test must catch.

Each `tests/breaks/<name>.patch` starts with header lines, then a `git diff`:

    Break: <file: function, the change>
    Test: tests/io/test_ownership.py::test_name
    Test: <more node ids, one a line>

    diff --git a/transforms/... b/transforms/...

For each patch, `python -m tests.breaks.run [NAME ...]` copies the working tree (the files
`git ls-files -co --exclude-standard` lists: tracked, and untracked but not ignored) into
a temporary folder, applies the patch there with `git apply`, and runs pytest on the
patch's tests in the copy. The break is caught only when pytest reports failed tests
(exit status 1). A patch that no longer applies, every test passing (0), or pytest
interrupted, failing inside, misused or collecting nothing (2, 3, 4, 5) is a break not
caught. One line per patch; the exit status is 1 when any break was not caught.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from transforms.data.registry import default_data_dir

REPO = Path(__file__).resolve().parents[2]
BREAKS = Path(__file__).resolve().parent
# A break whose tests have not finished in this time counts as not caught.
TIMEOUT_S = 1200
PYTEST_STATUS = {0: "every test passed", 2: "pytest was interrupted",
                 3: "pytest failed internally", 4: "pytest was misused",
                 5: "no tests were collected"}


@dataclasses.dataclass(frozen=True)
class Break:
    """One patch: its name (the file's stem), what it breaks, the tests that catch it."""

    name: str
    path: Path
    description: str
    tests: tuple[str, ...]


def read_break(path: Path) -> Break:
    """The header of a patch file (the lines before its first `diff --git`).

    Raises:
        ValueError: the file has no diff, no `Break:` line or no `Test:` line.
    """
    text = path.read_text()
    head, found, _ = text.partition("diff --git ")
    if not found:
        raise ValueError(f"{path}: no `diff --git` in the file")
    fields: dict[str, list[str]] = {"Break": [], "Test": []}
    for line in head.splitlines():
        key, colon, value = line.partition(":")
        if colon and key in fields and value.strip():
            fields[key].append(value.strip())
    if len(fields["Break"]) != 1 or not fields["Test"]:
        raise ValueError(f"{path}: the header needs one `Break:` line and at least one "
                         "`Test:` line")
    return Break(path.stem, path, fields["Break"][0], tuple(fields["Test"]))


def all_breaks(names: Sequence[str] = ()) -> list[Break]:
    """The patches in tests/breaks (all, or those named, in the order named).

    Raises:
        ValueError: a name has no patch.
    """
    found = {p.stem: p for p in sorted(BREAKS.glob("*.patch"))}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise ValueError(f"no such break: {', '.join(unknown)} (there are: "
                         f"{', '.join(found) or 'none'})")
    return [read_break(found[n]) for n in (names or found)]


def copy_tree(dest: Path, repo: Path = REPO) -> None:
    """Copies the working tree's files (tracked, and untracked but not ignored) to `dest`,
    which becomes a git repository of its own so that `git apply` takes its paths from
    there wherever the temporary folder lies."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"],
                            cwd=repo, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = repo / name
        if not source.exists() and not source.is_symlink():
            continue  # tracked but deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)


def apply(patch: Path, tree: Path, check: bool = False) -> str | None:
    """Applies a patch to a copy (`check`: only tests that it would apply); returns why it
    does not apply, or None."""
    done = subprocess.run(["git", "apply", *(["--check"] if check else []), str(patch)],
                          cwd=tree, capture_output=True, text=True)
    return None if done.returncode == 0 else (done.stderr.strip() or done.stdout.strip())


def check_break(item: Break, keep_output: int = 3000) -> tuple[bool, str, str]:
    """Runs one break: (caught, the verdict, pytest's last output when not caught)."""
    with tempfile.TemporaryDirectory(prefix=f"break-{item.name}-") as folder:
        tree = Path(folder)
        copy_tree(tree)
        why = apply(item.path, tree)
        if why is not None:
            return False, "NOT caught: the patch does not apply", why
        env = {**os.environ, "PYTHONPATH": str(tree),
               "QA_EVAL_SHARED_DATA": os.environ.get(
                   "QA_EVAL_SHARED_DATA", str(default_data_dir()))}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "-p", "no:xdist", *item.tests]
        try:
            done = subprocess.run(command, cwd=tree, env=env, capture_output=True,
                                  text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False, f"NOT caught: its tests ran past {TIMEOUT_S} s", ""
        output = (done.stdout + done.stderr)[-keep_output:]
        if done.returncode == 1:
            return True, "caught", ""
        status = PYTEST_STATUS.get(done.returncode, "unexpected exit status")
        return False, f"NOT caught: pytest exit {done.returncode} ({status})", output


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.breaks.run",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="breaks to run (patch file names without .patch); all when "
                             "none is given")
    args = parser.parse_args(argv)
    try:
        breaks = all_breaks(args.names)
    except ValueError as e:
        parser.error(str(e))
    if not breaks:
        print(f"no patches in {BREAKS}")
        return 1
    width = max(len(b.name) for b in breaks)
    missed = []
    for item in breaks:
        started = time.monotonic()
        caught, verdict, output = check_break(item)
        print(f"{item.name:<{width}}  {verdict}  {time.monotonic() - started:.1f} s",
              flush=True)
        if not caught:
            missed.append(item.name)
            if output:
                print("    " + output.replace("\n", "\n    "), flush=True)
    print(f"{len(breaks) - len(missed)} of {len(breaks)} breaks caught"
          + (f"; not caught: {', '.join(missed)}" if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
