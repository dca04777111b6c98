"""`WriteParquetShards`: WES rows, clusters and redirects -> Parquet shards with explicit
schemas, all outputs of a run in one write.

Layout per corpus: `<dir>/wes-k<k>/{train,dev,test}-SSSSS-of-NNNNN.parquet` and, beside
it, `<dir>/wes-k<k>-clusters/clusters-SSSSS-of-NNNNN.parquet` (a sibling folder, so that
`pyarrow.dataset("<dir>/wes-k<k>")` sees one schema). Every split gets at least one
(possibly empty) shard, so a reader always finds the schema.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from transforms.counting import in_global_window
from transforms.wes.clusters import redirect_pair
from transforms.wes.sampling import SPLIT_NAMES
from transforms.wiki.dump import Page

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

# What a run writes directly under its output directory, besides the corpus folders.
RUN_FILES = ("stats.json", "dataset_card.md", "redirects-*.parquet")


def prepare_output_dir(output_dir: str, thresholds, overwrite: bool) -> None:
    """Refuses to mix two runs in one directory; with `overwrite`, deletes the old run.

    Raises:
        ValueError: the directory holds outputs of an earlier run and not `overwrite`.
    """
    patterns = [FileSystems.join(output_dir, f) for f in RUN_FILES]
    patterns += [FileSystems.join(output_dir, f"wes-k*{suffix}", "*.parquet")
                 for suffix in ("", "-clusters")]
    existing = [m.path for r in FileSystems.match(patterns) for m in r.metadata_list]
    if existing and not overwrite:
        raise ValueError(
            f"{output_dir} already holds the outputs of a run ({len(existing)} files, e.g. "
            f"{existing[0]}); pass --overwrite to replace them or choose another --output")
    if existing:
        FileSystems.delete(existing)


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


def _make_parent_dirs(path: str) -> None:
    parent = FileSystems.split(path)[0]
    if not FileSystems.exists(parent):
        try:
            FileSystems.mkdirs(parent)  # a no-op on object stores
        except OSError:
            if not FileSystems.exists(parent):  # not a race with another process
                raise


class _FinalizeShardsFn(beam.DoFn):
    """Renames the temporary files to `<prefix>-SSSSS-of-NNNNN.parquet` per destination
    (an empty shard for a destination without rows, so readers find its schema), removes
    the temporary folder and yields the final names. A retried finalize skips files it
    already renamed."""

    def __init__(self, output_dir: str, temp_dir: str, schemas: Mapping[str, pa.Schema]):
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._schemas = dict(schemas)

    def process(self, _, written):
        temps: dict[str, list[str]] = {d: [] for d in self._schemas}
        for destination, path in written:
            temps[destination].append(path)
        finals: list[str] = []
        for destination in sorted(temps):
            paths = sorted(temps[destination])
            if not paths:
                empty = _ShardWriter(FileSystems.join(self._temp_dir,
                                                      _temp_name(destination, "empty")),
                                     self._schemas[destination])
                empty.close()
                paths = [empty.path]
            prefix = FileSystems.join(self._output_dir, destination)
            _make_parent_dirs(prefix)
            names = [f"{prefix}-{i:05d}-of-{len(paths):05d}.parquet" for i in range(len(paths))]
            for temp, final in zip(paths, names):
                if FileSystems.exists(temp):
                    FileSystems.rename([temp], [final])
                elif not FileSystems.exists(final):
                    raise RuntimeError(f"temporary shard {temp} of {final} is missing")
            finals += names
        leftovers = [m.path for r in FileSystems.match([FileSystems.join(self._temp_dir, "*")])
                     for m in r.metadata_list]
        if leftovers:  # files of bundles that failed and were retried
            FileSystems.delete(leftovers)
        if FileSystems.exists(self._temp_dir):
            FileSystems.delete([self._temp_dir])
        yield from finals


class WriteParquetShards(beam.PTransform):
    """(destination, row dict) -> Parquet shards `<output_dir>/<destination>-SSSSS-of-
    NNNNN.parquet`, one schema per destination; yields the final file names.

    One write for every output of a run (instead of one `WriteToParquet` each, 13 for
    three thresholds, whose 120 ParDos were half of the graph): rows go to temporary
    files under `<output_dir>/.temp-<uuid>/`, one per bundle and destination, and one
    finalize step, which waits for all of them (a side input), gives them their final
    names. Runner-determined sharding, as `WriteToParquet`'s default: one shard per
    bundle that wrote to the destination, at least one per destination.
    """

    def __init__(self, output_dir: str, schemas: Mapping[str, pa.Schema]):
        super().__init__()
        self._output_dir = output_dir
        self._schemas = dict(schemas)
        self._temp_dir = FileSystems.join(output_dir, f".temp-{uuid.uuid4().hex}")

    def expand(self, keyed_rows):
        written = keyed_rows | "WriteTempShards" >> beam.ParDo(
            _WriteTempShardsFn(self._temp_dir, self._schemas))
        return (keyed_rows.pipeline
                | "FinalizeImpulse" >> beam.Create([None])
                | "RenameShards" >> beam.ParDo(
                    _FinalizeShardsFn(self._output_dir, self._temp_dir, self._schemas),
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
