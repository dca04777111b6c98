"""`WriteParquetShards`: WES rows, clusters and redirects -> Parquet shards with explicit
schemas, all outputs of a run in one write; `PublishRun`: the run's files, once all are
written, in place of an earlier run's.

Layout per corpus: `<dir>/wes-k<k>/{train,dev,test}-SSSSS-of-NNNNN.parquet` and, beside
it, `<dir>/wes-k<k>-clusters/clusters-SSSSS-of-NNNNN.parquet` (a sibling folder, so that
`pyarrow.dataset("<dir>/wes-k<k>")` sees one schema). Every split gets at least one
(possibly empty) shard, so a reader always finds the schema.

Everything a run writes goes first to its own temporary folder, `<dir>/.temp-<uuid>/`;
nothing else in `<dir>` is touched until the last step, `PublishRun`, which moves the
files of an earlier run aside, the new ones in (`stats.json`, the completeness marker,
last: see `replace_outputs`) and removes every `.temp-*` folder. A run that fails or is
killed before it leaves the earlier run as it was (and its temporary folder, which the
next run that succeeds removes). Two runs into one folder at the same time are not
supported: the first to finish removes the other's temporary folder (which then fails),
and one without `--overwrite` refuses to replace the run the other published meanwhile.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem

from transforms.counting import in_global_window
from transforms.wes.clusters import redirect_pair
from transforms.wes.sampling import SPLIT_NAMES
from transforms.wiki.dump import Page

logger = logging.getLogger(__name__)

PAIR_SCHEMA = pa.schema([
    pa.field("title", pa.string(), nullable=False),
    pa.field("link_text", pa.string(), nullable=False),
    pa.field("label", pa.int8(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("cluster_id", pa.int64(), nullable=False),
    pa.field("source_title", pa.string()),
    pa.field("source_cluster_id", pa.int64()),
])

CLUSTER_SCHEMA = pa.schema([
    pa.field("title", pa.string(), nullable=False),
    pa.field("cluster_id", pa.int64(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("incoming_links", pa.int64(), nullable=False),
    pa.field("link_texts", pa.list_(pa.string()), nullable=False),
])

REDIRECT_SCHEMA = pa.schema([
    pa.field("title", pa.string(), nullable=False),
    pa.field("target", pa.string(), nullable=False),
])

# An earlier run's files in its output directory (`wes-k*` also matches the
# `wes-k<k>-clusters` folders).
RUN_FILES = ("stats.json", "dataset_card.md", "redirects-*.parquet", "wes-k*/*.parquet")
TEMP_PREFIX = ".temp-"


def run_files(output_dir: str) -> list[str]:
    """The files of a run in `output_dir` (complete or not), each once, sorted."""
    patterns = [FileSystems.join(output_dir, f) for f in RUN_FILES]
    return sorted({m.path for r in FileSystems.match(patterns) for m in r.metadata_list})


def new_temp_dir(output_dir: str) -> str:
    """A run's own temporary folder in its output directory."""
    return FileSystems.join(output_dir, f"{TEMP_PREFIX}{uuid.uuid4().hex}")


def _files_under(folder: str) -> list[str]:
    return [m.path for r in FileSystems.match([FileSystems.join(folder, "**")])
            for m in r.metadata_list]


def temp_dirs(output_dir: str) -> list[str]:
    """The `.temp-*` folders in `output_dir`: ones with files (any file system) and, on a
    local disk, empty ones."""
    prefix = FileSystems.join(output_dir, TEMP_PREFIX)
    found = {prefix + path[len(prefix):].split("/", 1)[0]
             for path in _files_under(FileSystems.join(output_dir, f"{TEMP_PREFIX}*"))}
    if isinstance(FileSystems.get_filesystem(output_dir), LocalFileSystem) and \
            os.path.isdir(output_dir):
        found.update(os.path.join(output_dir, name) for name in os.listdir(output_dir)
                     if name.startswith(TEMP_PREFIX))
    return sorted(found)


def check_output_dir(output_dir: str, overwrite: bool) -> None:
    """Refuses, before anything runs, an output directory that holds a run, unless
    `overwrite` (the run is then replaced by `PublishRun`, the pipeline's last step,
    and kept until then). Logs the temporary folders of runs that did not finish.

    Raises:
        ValueError: the directory holds outputs of an earlier run and not `overwrite`.
    """
    existing = run_files(output_dir)
    if existing and not overwrite:
        raise ValueError(
            f"{output_dir} already holds the outputs of a run ({len(existing)} files, e.g. "
            f"{existing[0]}); pass --overwrite to replace them or choose another --output")
    leftovers = temp_dirs(output_dir)
    if leftovers:
        logger.warning("%s holds %d temporary folders of runs that did not finish (%s); "
                       "this run removes them when it succeeds. Running two pipelines into "
                       "one directory at once is not supported.", output_dir,
                       len(leftovers), ", ".join(leftovers))


def _make_parent_dirs(path: str) -> None:
    parent = FileSystems.split(path)[0]
    if not FileSystems.exists(parent):
        try:
            FileSystems.mkdirs(parent)  # a no-op on object stores
        except OSError:
            if not FileSystems.exists(parent):  # not a race with another process
                raise


def _move(source: str, destination: str) -> None:
    _make_parent_dirs(destination)
    FileSystems.rename([source], [destination])


def _relative(path: str, root: str) -> str:
    base = root.rstrip("/") + "/"
    if not path.startswith(base):
        raise ValueError(f"{path} is not under {root}")
    return path[len(base):]


def delete_tree(folder: str) -> None:
    """Deletes a folder and everything in it (on object stores: the objects under it)."""
    if FileSystems.exists(folder):  # a local folder, deleted with its content
        FileSystems.delete([folder])
        return
    files = _files_under(folder)
    if files:
        FileSystems.delete(files)


def replace_outputs(moves: Sequence[tuple[str, str]], old_files: Iterable[str], root: str,
                    aside_dir: str, overwrite: bool = True) -> list[str]:
    """Puts the files of a new run in place of an earlier run's, so that a reader finds
    one run or the other, or no completeness marker: never a mix that looks complete.

    The last of `moves` is the new run's completeness marker (stats.json, summary.json);
    an earlier run's file at the marker's final name is taken for its marker. In order:
    1. the earlier run's marker is moved aside into `aside_dir` (keeping its path under
       `root`), then its other files;
    2. the new files are moved from their temporary names to their final ones, the
       marker last;
    3. `aside_dir` is deleted, and folders that the earlier run's files leave empty.
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
    old = [p for p in dict.fromkeys(old_files) if p not in done]
    old += [f for _, f in pending if f not in old and FileSystems.exists(f)]
    old.sort(key=lambda p: p != marker)  # the marker first (a stable sort)
    if old and not overwrite:
        raise FileExistsError(
            f"{root} holds the outputs of another run ({len(old)} files, e.g. {old[0]}), "
            "written while this one ran: two runs into one folder at once are not "
            "supported; nothing was replaced")
    aside = [(p, FileSystems.join(aside_dir, _relative(p, root))) for p in old]
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
        _put_back(error, moved_in, moved_aside, root, aside_dir)
    if moved_aside:
        logger.info("replaced %d files of an earlier run in %s", len(moved_aside), root)
    try:
        # Also what an earlier attempt moved aside.
        earlier = [_relative(p, aside_dir) for p in _files_under(aside_dir)]
        delete_tree(aside_dir)
        emptied = {FileSystems.join(root, rel.rsplit("/", 1)[0]) for rel in earlier if "/" in rel}
        for folder in sorted(emptied, key=len, reverse=True):  # deepest first
            if FileSystems.exists(folder) and not _files_under(folder):
                FileSystems.delete([folder])
    except Exception as e:  # noqa: BLE001 - the new run is in place whatever happens here
        logger.warning("the new outputs are in place in %s, but removing the earlier "
                       "ones failed: %s", root, e)
    return [final for _, final in moves]


def _put_back(error: Exception, moved_in: Sequence[tuple[str, str]],
              moved_aside: Sequence[tuple[str, str]], root: str, aside_dir: str):
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
    if _files_under(aside_dir):  # moved aside by an attempt that died
        raise RuntimeError(
            f"replacing the outputs in {root} failed ({error}); what this attempt moved is "
            f"back, but files of the earlier run moved aside before are still in "
            f"{aside_dir}") from error
    raise RuntimeError(f"replacing the outputs in {root} failed ({error}); the earlier "
                       "outputs were put back as they were") from error


def publish_run(moves: Iterable[tuple[str, str]], output_dir: str, temp_dir: str,
                marker: str, overwrite: bool) -> list[str]:
    """The last step of a mining run: its files in place of an earlier run's (see
    `replace_outputs`; `marker`, a name in `output_dir`, last), then every `.temp-*`
    folder in `output_dir` removed, its own and those of runs that did not finish.

    Raises:
        ValueError: the marker is not among the moves.
    """
    marker_path = FileSystems.join(output_dir, marker)
    moves = sorted({tuple(m) for m in moves}, key=lambda m: (m[1] == marker_path, m[1]))
    if not moves or moves[-1][1] != marker_path:
        raise ValueError(f"the run has no {marker} to publish")
    finals = replace_outputs(moves, run_files(output_dir), output_dir,
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

    def __init__(self, output_dir: str, temp_dir: str, marker: str, overwrite: bool):
        super().__init__()
        self._args = (output_dir, temp_dir, marker, overwrite)

    def expand(self, moves):
        return (moves
                | "WaitForAllFiles" >> beam.combiners.ToList()
                | "ReplaceEarlierRun" >> beam.FlatMap(publish_run, *self._args))


def redirect_row(page: Page):
    """The redirects output row of a redirect page (none when a title is invalid)."""
    pair = redirect_pair(page)
    if pair is not None:
        yield {"title": pair[0], "target": pair[1]}


class _ShardWriter:
    """One temporary Parquet file of one destination, written in row groups."""

    ROWS_PER_GROUP = 10_000

    def __init__(self, path: str, schema: pa.Schema):
        self.path = path
        self._schema = schema
        self._buffer: list[dict] = []
        self._file = FileSystems.create(path)
        self._writer = pq.ParquetWriter(self._file, schema)

    def add(self, row: dict) -> None:
        self._buffer.append(row)
        if len(self._buffer) >= self.ROWS_PER_GROUP:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.Table.from_pylist(self._buffer, schema=self._schema))
            self._buffer = []

    def close(self) -> None:
        self._flush()
        self._writer.close()
        self._file.close()


def _temp_name(destination: str, suffix: str) -> str:
    return f"{destination.replace('/', '__')}-{suffix}.parquet"


class _WriteTempShardsFn(beam.DoFn):
    """(destination, row) -> per bundle and destination one temporary file; emits
    (destination, temporary path) for each when the bundle finishes.

    A bundle that fails and is retried leaves its partial file behind in the temporary
    folder, but never emits it: only files of committed bundles are renamed."""

    def __init__(self, temp_dir: str, schemas: Mapping[str, pa.Schema]):
        self._temp_dir = temp_dir
        self._schemas = dict(schemas)

    def start_bundle(self):
        self._shards: dict[str, _ShardWriter] = {}

    def process(self, element):
        destination, row = element
        shard = self._shards.get(destination)
        if shard is None:
            if destination not in self._schemas:
                raise ValueError(f"unknown output destination {destination!r}; "
                                 f"known: {sorted(self._schemas)}")
            shard = self._shards[destination] = _ShardWriter(
                FileSystems.join(self._temp_dir, _temp_name(destination, uuid.uuid4().hex)),
                self._schemas[destination])
        shard.add(row)

    def finish_bundle(self):
        for destination, shard in self._shards.items():
            shard.close()
            yield in_global_window((destination, shard.path))
        self._shards = {}


class _NameShardsFn(beam.DoFn):
    """Gives the temporary files their final names, `<prefix>-SSSSS-of-NNNNN.parquet` per
    destination (an empty shard for a destination without rows, so readers find its
    schema), and yields the (temporary, final) pairs: `PublishRun` moves them. Files of
    bundles that failed and were retried are never named, and go with the folder."""

    def __init__(self, output_dir: str, temp_dir: str, schemas: Mapping[str, pa.Schema]):
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._schemas = dict(schemas)

    def process(self, _, written):
        temps: dict[str, list[str]] = {d: [] for d in self._schemas}
        for destination, path in written:
            temps[destination].append(path)
        for destination in sorted(temps):
            paths = sorted(temps[destination])
            if not paths:
                empty = _ShardWriter(FileSystems.join(self._temp_dir,
                                                      _temp_name(destination, "empty")),
                                     self._schemas[destination])
                empty.close()
                paths = [empty.path]
            prefix = FileSystems.join(self._output_dir, destination)
            for i, temp in enumerate(paths):
                yield temp, f"{prefix}-{i:05d}-of-{len(paths):05d}.parquet"


class WriteParquetShards(beam.PTransform):
    """(destination, row dict) -> Parquet shards in the temporary folder; yields
    (temporary path, final path `<output_dir>/<destination>-SSSSS-of-NNNNN.parquet`)
    pairs, for `PublishRun`.

    One write for every output of a run (instead of one `WriteToParquet` each, 13 for
    three thresholds, whose 120 ParDos were half of the graph): rows go to temporary
    files under `temp_dir`, one per bundle and destination, and one naming step, which
    waits for all of them (a side input), gives them their final names. Runner-determined
    sharding, as `WriteToParquet`'s default: one shard per bundle that wrote to the
    destination, at least one per destination.
    """

    def __init__(self, output_dir: str, schemas: Mapping[str, pa.Schema],
                 temp_dir: str | None = None):
        super().__init__()
        self._output_dir = output_dir
        self._schemas = dict(schemas)
        self.temp_dir = temp_dir or new_temp_dir(output_dir)

    def expand(self, keyed_rows):
        written = keyed_rows | "WriteTempShards" >> beam.ParDo(
            _WriteTempShardsFn(self.temp_dir, self._schemas))
        return (keyed_rows.pipeline
                | "NamingImpulse" >> beam.Create([None])
                | "NameShards" >> beam.ParDo(
                    _NameShardsFn(self._output_dir, self.temp_dir, self._schemas),
                    written=beam.pvalue.AsList(written)))


def corpus_outputs(name: str, corpus) -> tuple[list, dict[str, pa.Schema]]:
    """The keyed rows and destination schemas of one corpus: its splits in `<name>/`,
    its clusters in `<name>-clusters/`."""
    keyed = [
        corpus["rows"] | f"KeyRows[{name}]" >> beam.Map(
            lambda r, name=name: (f"{name}/{r['split']}", r)),
        corpus["clusters"] | f"KeyClusters[{name}]" >> beam.Map(
            lambda r, name=name: (f"{name}-clusters/clusters", r)),
    ]
    schemas = {f"{name}/{split}": PAIR_SCHEMA for split in SPLIT_NAMES}
    schemas[f"{name}-clusters/clusters"] = CLUSTER_SCHEMA
    return keyed, schemas
