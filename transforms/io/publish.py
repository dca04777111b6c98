"""The one way a run's outputs appear: written under temporary names, then moved in all
at once in place of an earlier run's, the completeness marker (`stats.json`,
`summary.json`) last; on failure the earlier run is put back (`replace_outputs`).

Both pipelines use it: mining writes into its own `<dir>/.temp-<uuid>/` folder and
publishes with `PublishRun` (`publish_run`); scoring writes `<final>.tmp-<run_id>` files
beside its final names and publishes with `transforms.scoring.outputs.finalize.FinalizeOutputs`.
Beam `FileSystems` throughout, so it works on object stores too.
"""

import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem

from transforms.io.ownership import check_owner

logger = logging.getLogger(__name__)

TEMP_PREFIX = ".temp-"


def new_temp_dir(output_dir: str) -> str:
    """A run's own temporary folder in its output directory."""
    return FileSystems.join(output_dir, f"{TEMP_PREFIX}{uuid.uuid4().hex}")


def files_under(folder: str) -> list[str]:
    return [m.path for r in FileSystems.match([FileSystems.join(folder, "**")])
            for m in r.metadata_list]


def temp_dirs(output_dir: str) -> list[str]:
    """The `.temp-*` folders in `output_dir`: ones with files (any file system) and, on a
    local disk, empty ones."""
    prefix = FileSystems.join(output_dir, TEMP_PREFIX)
    found = {prefix + path[len(prefix):].split("/", 1)[0]
             for path in files_under(FileSystems.join(output_dir, f"{TEMP_PREFIX}*"))}
    if isinstance(FileSystems.get_filesystem(output_dir), LocalFileSystem) and \
            os.path.isdir(output_dir):
        found.update(os.path.join(output_dir, name) for name in os.listdir(output_dir)
                     if name.startswith(TEMP_PREFIX))
    return sorted(found)


def check_output_dir(output_dir: str, overwrite: bool,
                     list_run_files: Callable[[str], list[str]]) -> None:
    """Refuses, before anything runs, an output directory that holds a run, unless
    `overwrite` (the run is then replaced by `PublishRun`, the pipeline's last step,
    and kept until then). Logs the temporary folders of runs that did not finish.

    Args:
        output_dir: the run's output directory.
        overwrite: whether an earlier run may be replaced.
        list_run_files: output_dir -> the files of a run in it (the pipeline's own list).

    Raises:
        ValueError: the directory holds outputs of an earlier run and not `overwrite`.
    """
    existing = list_run_files(output_dir)
    if existing and not overwrite:
        raise ValueError(
            f"{output_dir} already holds the outputs of a run ({len(existing)} files, e.g. "
            f"{existing[0]}); pass --overwrite to replace them or choose another --output")
    leftovers = temp_dirs(output_dir)
    if leftovers:
        logger.warning("%s holds %d temporary folders of runs that did not finish (%s); "
                       "this run removes them when it succeeds", output_dir,
                       len(leftovers), ", ".join(leftovers))


def _make_parent_dirs(path: str) -> None:
    parent = FileSystems.split(path)[0]
    if parent and not FileSystems.exists(parent):
        try:
            FileSystems.mkdirs(parent)  # a no-op on object stores
        except OSError:
            if not FileSystems.exists(parent):  # not a race with another process
                raise


def _move(source: str, destination: str) -> None:
    _make_parent_dirs(destination)
    FileSystems.rename([source], [destination])


def _relative(path: str, root: str) -> str:
    if not root:  # paths relative to the working directory, e.g. a scoring prefix "run"
        return path
    base = root.rstrip("/") + "/"
    if not path.startswith(base):
        raise ValueError(f"{path} is not under {root}")
    return path[len(base):]


def delete_tree(folder: str) -> None:
    """Deletes a folder and everything in it (on object stores: the objects under it)."""
    if FileSystems.exists(folder):  # a local folder, deleted with its content
        FileSystems.delete([folder])
        return
    files = files_under(folder)
    if files:
        FileSystems.delete(files)


def replace_outputs(moves: Sequence[tuple[str, str]], old_files: Iterable[str], root: str,
                    aside_dir: str, overwrite: bool = True,
                    aside_paths: Mapping[str, str] | None = None) -> list[str]:
    """Puts the files of a new run in place of an earlier run's, so that a reader finds
    one run or the other, or no completeness marker: never a mix that looks complete.

    The last of `moves` is the new run's completeness marker (stats.json, summary.json);
    an earlier run's file at the marker's final name is taken for its marker. In order:
    1. the earlier run's marker is moved aside into `aside_dir` (keeping its path under
       `root`), then its other files;
    2. the new files are moved from their temporary names to their final ones, the
       marker last;
    3. `aside_dir` (and `aside_paths`) is deleted, and folders that the earlier run's
       files leave empty.
    When 1 or 2 fails, everything moved is moved back (the new files to their temporary
    names, the earlier run's to their places, its marker last) and RuntimeError says so;
    when moving back fails too, it names what is where. A failure in 3 is logged: the new
    run is in place. Beam `FileSystems` throughout, so it works on object stores, where a
    rename is a copy and a delete (there the earlier run's files are copied twice).

    Meant to be retried: a move already done by an earlier attempt (temporary name gone,
    final name there) is skipped, and files at final names that such an attempt moved in
    are not taken for the earlier run's.

    Args:
        moves: (temporary, final) pairs of every file of the new run, marker last.
        old_files: the earlier run's files, as listed by the caller: every file at a
            final name of `moves` is one too. Ones that do not exist are skipped.
        root: the folder holding every final path and old file.
        aside_dir: where the earlier run's files wait (a new folder, on the same file
            system as `root`).
        overwrite: False to refuse to replace an earlier run (a run without `--overwrite`
            that finds one written meanwhile).
        aside_paths: final path -> where its earlier file waits, for files published
            with the run that need not lie under `root` (a saved statistics file, moved
            aside beside itself: a rename never crosses file systems).

    Returns:
        The final paths, in the order of `moves`.

    Raises:
        ValueError: no moves.
        FileExistsError: not `overwrite` and there is an earlier run; nothing is moved.
        RuntimeError: a temporary file is missing (nothing is moved), or a move failed.
    """
    if not moves:
        raise ValueError("no files to move in: a run has at least its completeness marker")
    marker = moves[-1][1]
    pending, done = [], set()
    for temp, final in moves:
        if FileSystems.exists(temp):
            pending.append((temp, final))
        elif FileSystems.exists(final):
            done.add(final)  # moved in by an earlier attempt
        else:
            raise RuntimeError(f"{temp}, to become {final}, is missing; nothing was replaced")
    old = [p for p in dict.fromkeys(old_files) if p not in done and FileSystems.exists(p)]
    old += [f for _, f in pending if f not in old and FileSystems.exists(f)]
    old.sort(key=lambda p: p != marker)  # the marker first (a stable sort)
    if old and not overwrite:
        raise FileExistsError(
            f"{root} holds the outputs of another run ({len(old)} files, e.g. {old[0]}), "
            "written while this one ran: two runs into one folder at once are not "
            "supported; nothing was replaced")
    aside_paths = dict(aside_paths or {})
    aside = [(p, aside_paths.get(p) or FileSystems.join(aside_dir, _relative(p, root)))
             for p in old]
    moved_aside: list[tuple[str, str]] = []
    moved_in: list[tuple[str, str]] = []
    try:
        for path, spare in aside:
            if FileSystems.exists(path):
                _move(path, spare)
                moved_aside.append((path, spare))
        for temp, final in pending:
            _move(temp, final)
            moved_in.append((temp, final))
    except Exception as error:  # noqa: BLE001 - whatever failed, the earlier run goes back
        _put_back(error, moved_in, moved_aside, root, aside_dir, aside_paths.values())
    if moved_aside:
        logger.info("replaced %d files of an earlier run in %s", len(moved_aside), root)
    try:
        # Also what an earlier attempt moved aside.
        earlier = [_relative(p, aside_dir) for p in files_under(aside_dir)]
        delete_tree(aside_dir)
        spares = [p for p in aside_paths.values() if FileSystems.exists(p)]
        if spares:
            FileSystems.delete(spares)
        emptied = {FileSystems.join(root, rel.rsplit("/", 1)[0]) for rel in earlier if "/" in rel}
        for folder in sorted(emptied, key=len, reverse=True):  # deepest first
            if FileSystems.exists(folder) and not files_under(folder):
                FileSystems.delete([folder])
    except Exception as e:  # noqa: BLE001 - the new run is in place whatever happens here
        logger.warning("the new outputs are in place in %s, but removing the earlier "
                       "ones failed: %s", root, e)
    return [final for _, final in moves]


def _put_back(error: Exception, moved_in: Sequence[tuple[str, str]],
              moved_aside: Sequence[tuple[str, str]], root: str, aside_dir: str,
              aside_files: Iterable[str] = ()):
    """Undoes a failed `replace_outputs` (last move first) and raises what happened."""
    failures = []
    for temp, final in reversed(moved_in):
        try:
            _move(final, temp)
        except Exception as e:  # noqa: BLE001 - every file gets its try; all are reported
            failures.append(f"{final} -> {temp}: {e}")
    for path, spare in reversed(moved_aside):  # the marker last
        try:
            _move(spare, path)
        except Exception as e:  # noqa: BLE001 - as above
            failures.append(f"{spare} -> {path}: {e}")
    if failures:
        raise RuntimeError(
            f"replacing the outputs in {root} failed ({error}), and so did putting the "
            f"earlier ones back: {'; '.join(failures)}. The earlier run's files that are "
            f"not back are in {aside_dir}; the folder holds no complete run") from error
    if files_under(aside_dir) or any(FileSystems.exists(p) for p in aside_files):
        # moved aside by an attempt that died
        raise RuntimeError(
            f"replacing the outputs in {root} failed ({error}); what this attempt moved is "
            f"back, but files of the earlier run moved aside before are still in "
            f"{aside_dir}") from error
    raise RuntimeError(f"replacing the outputs in {root} failed ({error}); the earlier "
                       "outputs were put back as they were") from error


def publish_run(moves: Iterable[tuple[str, str]], output_dir: str, temp_dir: str,
                marker: str, overwrite: bool,
                list_run_files: Callable[[str], list[str]],
                owner: str | None = None) -> list[str]:
    """The last step of a run into a folder of its own: its files in place of an earlier
    run's (see `replace_outputs`; `marker`, a name in `output_dir`, last; the earlier
    run's files are `list_run_files(output_dir)`), then every `.temp-*` folder in
    `output_dir` removed, its own and those of runs that did not finish (no other run
    can be writing into the folder while this one owns it).

    Args:
        owner: the run id that owns `output_dir` (transforms/io/ownership.py), checked
            before anything moves; None: not checked.

    Raises:
        ValueError: the marker is not among the moves.
        OwnershipLostError: `owner` no longer owns the folder; nothing is moved.
    """
    marker_path = FileSystems.join(output_dir, marker)
    moves = sorted({tuple(m) for m in moves}, key=lambda m: (m[1] == marker_path, m[1]))
    if not moves or moves[-1][1] != marker_path:
        raise ValueError(f"the run has no {marker} to publish")
    if owner is not None:
        check_owner(output_dir, owner, folder=True)
    finals = replace_outputs(moves, list_run_files(output_dir), output_dir,
                             FileSystems.join(temp_dir, "previous"), overwrite)
    for folder in temp_dirs(output_dir):
        try:
            delete_tree(folder)
        except Exception as e:  # noqa: BLE001 - the run is complete; the next one retries
            logger.warning("could not remove the temporary folder %s: %s", folder, e)
    return finals


class PublishRun(beam.PTransform):
    """(temporary, final) paths of every file of a run -> its final paths, once all are
    written; see `publish_run`."""

    def __init__(self, output_dir: str, temp_dir: str, marker: str, overwrite: bool,
                 list_run_files: Callable[[str], list[str]], owner: str | None = None):
        super().__init__()
        self._args = (output_dir, temp_dir, marker, overwrite, list_run_files, owner)

    def expand(self, moves):
        return (moves
                | "WaitForAllFiles" >> beam.combiners.ToList()
                | "ReplaceEarlierRun" >> beam.FlatMap(publish_run, *self._args))


