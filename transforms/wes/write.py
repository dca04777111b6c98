"""`WriteParquetShards`: WES rows, clusters and redirects -> Parquet shards with explicit
schemas, all outputs of a run in one write; `run_files`: what a mining run's files are
(what `transforms.io.publish.PublishRun` replaces).

Layout per corpus: `<dir>/wes-k<k>/{train,dev,test}-SSSSS-of-NNNNN.parquet` and, beside
it, `<dir>/wes-k<k>-clusters/clusters-SSSSS-of-NNNNN.parquet` (a sibling folder, so that
`pyarrow.dataset("<dir>/wes-k<k>")` sees one schema) and, with an adversarial negative
mix, `<dir>/wes-k<k>-hard/test-SSSSS-of-NNNNN.parquet` (hard_test.py). Every split gets at least one
(possibly empty) shard, so a reader always finds the schema.

Everything a run writes goes first to its own temporary folder, `<dir>/.temp-<uuid>/`;
nothing else in `<dir>` is touched until the last step, `PublishRun`
(transforms/io/publish.py), which moves the files of an earlier run aside, the new ones
in (`stats.json`, the completeness marker, last: see `replace_outputs`) and removes every
`.temp-*` folder. A run that fails or is
killed before it leaves the earlier run as it was (and its temporary folder, which the
next run that succeeds removes). A run owns its folder from launch to its end
(transforms/io/ownership.py): a second run into it meanwhile is refused at launch, and
`PublishRun` checks that the run still owns the folder before it moves anything.
"""

import logging
import uuid
from collections.abc import Mapping

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from transforms.io.counting import in_global_window
from transforms.io.publish import new_temp_dir
from transforms.wes.hard_test import hard_destination
from transforms.wes.sampling import SPLIT_NAMES

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

# With a negative mix or link pairs (`--negatives`, `--link_pairs`): each row's kind,
# negative_mix.PAIR_KINDS. Runs with the default flags write PAIR_SCHEMA, as before.
PAIR_KIND_SCHEMA = PAIR_SCHEMA.append(pa.field("pair_kind", pa.string(), nullable=False))

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
RUN_FILES = ("stats.json", "dataset_card.md", "README.md", "redirects-*.parquet",
             "wes-k*/*.parquet")


def run_files(output_dir: str) -> list[str]:
    """The files of a run in `output_dir` (complete or not), each once, sorted."""
    patterns = [FileSystems.join(output_dir, f) for f in RUN_FILES]
    return sorted({m.path for r in FileSystems.match(patterns) for m in r.metadata_list})


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


def corpus_outputs(name: str, corpus, with_kind: bool = False, with_hard: bool = False
                   ) -> tuple[list, dict[str, pa.Schema]]:
    """The keyed rows and destination schemas of one corpus: its splits in `<name>/`,
    its clusters in `<name>-clusters/`; `with_kind`: rows carry `pair_kind`; `with_hard`:
    its WES-hard test split in `<name>-hard/` (hard_test.py)."""
    keyed = [
        corpus["rows"] | f"KeyRows[{name}]" >> beam.Map(
            lambda r, name=name: (f"{name}/{r['split']}", r)),
        corpus["clusters"] | f"KeyClusters[{name}]" >> beam.Map(
            lambda r, name=name: (f"{name}-clusters/clusters", r)),
    ]
    schemas = {f"{name}/{split}": PAIR_KIND_SCHEMA if with_kind else PAIR_SCHEMA
               for split in SPLIT_NAMES}
    schemas[f"{name}-clusters/clusters"] = CLUSTER_SCHEMA
    if with_hard:
        destination = hard_destination(name)
        keyed.append(corpus["hard"] | f"KeyHardTest[{name}]" >> beam.Map(
            lambda r, destination=destination: (destination, r)))
        schemas[destination] = PAIR_KIND_SCHEMA
    return keyed, schemas
