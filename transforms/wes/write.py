"""`WriteCorpus`: WES rows and clusters -> Parquet shards with explicit schemas.

Layout per corpus: `<dir>/wes-k<k>/{train,dev,test}-SSSSS-of-NNNNN.parquet` and, beside
it, `<dir>/wes-k<k>-clusters/clusters-SSSSS-of-NNNNN.parquet` (a sibling folder, so that
`pyarrow.dataset("<dir>/wes-k<k>")` sees one schema). Every split gets at least one
(possibly empty) shard, so a reader always finds the schema.
"""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

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

SHARD_TEMPLATE = "-SSSSS-of-NNNNN"
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


def write_parquet(pcoll, label: str, prefix: str, schema: pa.Schema):
    """Writes dicts to `prefix-SSSSS-of-NNNNN.parquet`; returns the finalized file names."""
    return pcoll | label >> beam.io.WriteToParquet(
        prefix, schema, shard_name_template=SHARD_TEMPLATE, file_name_suffix=".parquet")


class WriteCorpus(beam.PTransform):
    """{"rows", "clusters"} of one corpus -> the list of files written (one PCollection)."""

    def __init__(self, corpus_dir: str, clusters_dir: str):
        super().__init__()
        self._dir = corpus_dir
        self._clusters_dir = clusters_dir

    def expand(self, corpus):
        parts = corpus["rows"] | "PartitionBySplit" >> beam.Partition(
            lambda r, n: SPLIT_NAMES.index(r["split"]), len(SPLIT_NAMES))
        written = [
            write_parquet(part, f"Write{name.capitalize()}",
                          FileSystems.join(self._dir, name), PAIR_SCHEMA)
            for name, part in zip(SPLIT_NAMES, parts)
        ]
        written.append(write_parquet(corpus["clusters"], "WriteClusters",
                                     FileSystems.join(self._clusters_dir, "clusters"), CLUSTER_SCHEMA))
        return written | "FlattenWrittenFiles" >> beam.Flatten()
