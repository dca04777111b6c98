"""An earlier run's files and a new run's, and the helpers that lay them out in a folder
and swap them, for the tests of transforms/io/publish.py (test_publish.py and
test_publish_folders.py)."""

from __future__ import annotations

from pathlib import Path

from transforms.io.publish import replace_outputs
from transforms.wes.write import run_files

MARKER = "stats.json"


# An earlier run's files: a complete run with k = 2 and 5, and a file of someone else.
EARLIER = {
    "stats.json": b'{"run": "earlier"}',
    "dataset_card.md": b"# earlier",
    "redirects-00000-of-00001.parquet": b"r",
    "wes-k2/train-00000-of-00001.parquet": b"k2 train",
    "wes-k2-clusters/clusters-00000-of-00001.parquet": b"k2 clusters",
    "wes-k5/train-00000-of-00001.parquet": b"k5 train",
    "wes-k5/dev-00000-of-00001.parquet": b"k5 dev",
    "wes-k5-clusters/clusters-00000-of-00001.parquet": b"k5 clusters",
    "notes.txt": b"not a run file",
}
# The earlier run itself (what a reader of the folder takes for it).
EARLIER_RUN = {name: data for name, data in EARLIER.items() if name != "notes.txt"}
# A new run with k = 5 only.
NEW = {
    "redirects-00000-of-00001.parquet": b"new r",
    "wes-k5/train-00000-of-00002.parquet": b"new k5 train 0",
    "wes-k5/train-00001-of-00002.parquet": b"new k5 train 1",
    "wes-k5-clusters/clusters-00000-of-00001.parquet": b"new k5 clusters",
    "dataset_card.md": b"# new",
    "stats.json": b'{"run": "new"}',  # the marker, last
}


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (temporary folders included) -> its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _make(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def _stage(out: Path, temp: Path) -> list[tuple[str, str]]:
    """The new run's files under temporary names; its (temporary, final) moves."""
    moves = []
    for i, (name, data) in enumerate(NEW.items()):
        _make(temp, {f"staged-{i}": data})
        moves.append((str(temp / f"staged-{i}"), str(out / name)))
    return moves


def _replace(out: Path, temp: Path, moves, overwrite=True):
    return replace_outputs(moves, run_files(str(out)), str(out), str(temp / "previous"),
                           overwrite)


def _run_in(out: Path) -> dict[str, bytes]:
    """The files at final names in `out` (not in temporary folders), notes.txt aside."""
    return {name: data for name, data in _files(out).items()
            if not name.startswith(".temp-") and name != "notes.txt"}
