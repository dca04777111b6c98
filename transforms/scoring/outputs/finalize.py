"""Publishing a run's outputs: the temporary files moved in place of an earlier run's.

`FinalizeOutputs`, the last step of the scoring pipeline, waits for all writes (it
combines their file names) and calls `finalize`, which checks that the run still owns its
prefix and statistics file (transforms/io/ownership.py), refuses a statistics file that
appeared while the run ran (`check_statistics_target`), and puts the run's files, and its
saved corpus statistics if any, in place with one `transforms.io.publish.replace_outputs`
(summary.json, the completeness marker, last); temporary files of killed runs
(`outputs.leftover_temp_files`, `leftover_statistics_files`) are removed once the run is
in place. Why the outputs are written under temporary names: write.py.
"""

import functools
import logging
from collections.abc import Callable, Iterable, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.io.ownership import check_owner
from transforms.io.publish import replace_outputs
from transforms.scoring.outputs.paths import OutputPaths, leftover_temp_files

logger = logging.getLogger(__name__)

def check_statistics_target(temp: str, final: str, overwrite: bool) -> None:
    """Refuses to publish a run's saved corpus statistics (`--save_corpus_statistics`,
    written at `temp`) over a file that appeared at `final` while the run ran, unless
    `overwrite` (an existing file was refused at launch).

    Raises:
        RuntimeError: a file is at `final` and not `overwrite`; nothing is moved.
    """
    if not overwrite and FileSystems.exists(temp) and FileSystems.exists(final):
        raise RuntimeError(
            f"--save_corpus_statistics {final} was written by something else while this "
            f"run ran; this run's statistics are at {temp} (nothing was published; "
            "rerun with --overwrite to replace it)")


def leftover_statistics_files(final: str, run_id: str) -> list[str]:
    """Temporary statistics files of killed runs beside `final` (`<final>.tmp-<id>`, not
    this run's); an aside copy (`<final>.tmp-<id>.previous`, which may hold the only copy
    of an earlier file) is never among them."""
    own = f"{final}.tmp-{run_id}"
    return sorted(m.path for r in FileSystems.match([f"{final}.tmp-*"])
                  for m in r.metadata_list
                  if not m.path.startswith(own) and not m.path.endswith(".previous"))


def finalize(written: Iterable[str], renames: Sequence[tuple[str, str]],
             old_files: Iterable[str], aside_dir: str, overwrite: bool = True,
             leftovers: Callable[[], Iterable[str]] = tuple,
             statistics: tuple[str, str] | None = None,
             owners: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Puts the temporary outputs, and the run's saved corpus statistics if any, in place
    of an earlier run's and the earlier statistics file, as one `replace_outputs`: a
    failed move puts back both the earlier run and the earlier statistics file.

    Args:
        written: the temporary paths the writes reported.
        renames: (temporary, final) pairs, summary.json last.
        old_files: every final name an earlier run at the prefix may have (the ones
            that exist are replaced or removed).
        aside_dir: where the earlier run's files wait meanwhile.
        overwrite: False to refuse to replace a run that appeared while this one ran
            (the prefix was checked before the run started).
        leftovers: -> temporary files of killed runs, removed once this run is in place.
        statistics: (temporary, final) path of the saved corpus statistics, or None; an
            earlier file waits beside itself (`<temporary>.previous`), and killed runs'
            temporary statistics files beside it are removed once this run is in place.
        owners: (output, run id) pairs: the run must still own each output
            (transforms/io/ownership.py) before anything moves.

    Returns:
        The final paths (the run's outputs; the statistics file is logged).

    Raises:
        RuntimeError: a temporary output was not written, or vanished (nothing is
            replaced), or a move failed (the earlier run and statistics are put back).
        OwnershipLostError: an output is no longer this run's (nothing is moved).

    Idempotent: a retry after a partial move skips what is already in place.
    """
    written = set(written)
    missing = [temp for temp, _ in [*renames, *filter(None, [statistics])]
               if temp not in written]
    if missing:
        raise RuntimeError(f"outputs were not written: {missing}")
    for target, run_id in owners:
        check_owner(target, run_id)
    moves, aside_paths = list(renames), {}
    if statistics is not None:
        check_statistics_target(*statistics, overwrite)
        moves.insert(0, statistics)  # before the marker, summary.json, which stays last
        aside_paths[statistics[1]] = f"{statistics[0]}.previous"
    # The folder as written in the prefix ("" for one in the working directory), so that
    # every path is under it (`FileSystems.split` would make a local one absolute).
    root = renames[-1][1].rpartition("/")[0]
    finals = replace_outputs(moves, old_files, root, aside_dir, overwrite, aside_paths)
    for final in finals:
        logger.info("wrote %s", final)
    stale = list(leftovers())
    if statistics is not None:
        run_id = statistics[0].rpartition(".tmp-")[2]
        stale += [p for p in leftover_statistics_files(statistics[1], run_id)
                  if p not in stale]
    if stale:
        try:
            FileSystems.delete(stale)
            logger.info("removed %d temporary files of runs that did not finish", len(stale))
        except Exception as e:  # noqa: BLE001 - this run is complete; the next one retries
            logger.warning("could not remove temporary files of earlier runs: %s", e)
    return finals if statistics is None else finals[1:]


class FinalizeOutputs(beam.PTransform):
    """(written temporary paths, ...) -> final paths, moved in once every write is done,
    with the saved corpus statistics when `statistics` names their (temporary, final)
    path (see `finalize`). `owned`: the run owns its prefix and statistics file
    (transforms/io/ownership.py), checked before anything moves."""

    def __init__(self, paths: OutputPaths, with_report: bool, overwrite: bool = True,
                 statistics: tuple[str, str] | None = None, owned: bool = False) -> None:
        super().__init__()
        owners = [] if not owned else [
            (target, paths.run_id) for target in
            [paths.prefix, *([statistics[1]] if statistics else [])]]
        self._args = ([(paths.temp(f), f) for f in paths.finals(with_report)],
                      paths.every_final(), paths.aside_dir, overwrite,
                      functools.partial(leftover_temp_files, paths), statistics, owners)

    def expand(self, written) -> beam.PCollection:  # (PCollection of paths, ...)
        return (tuple(written)
                | "MergeWrittenPaths" >> beam.Flatten()
                | "WaitForAllWrites" >> beam.combiners.ToList()
                | "RenameToFinalNames" >> beam.Map(finalize, *self._args))
