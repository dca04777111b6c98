"""Writing the scoring outputs as single files that appear only when the run succeeded.

Every output is first written under a temporary name `<final>.tmp-<run_id>`; the last
step, `FinalizeOutputs` (finalize.py), waits for all writes (it combines their file
names) and puts the new files in place of every output of an earlier run at the same
prefix with `transforms.io.publish.replace_outputs`, the one publisher of both pipelines: the earlier
run's files (scores in either format, dead letters, report, summary) are moved aside,
summary.json first, the new ones moved in, summary.json (the completeness marker) last,
and the earlier ones deleted; a failure while moving puts the earlier run back. A run that
fails anywhere before leaves only `*.tmp-<run_id>` files behind, never a final name, and
the earlier run as it was; one without a human column leaves no report of an earlier run.
A prefix that holds a complete run is refused before anything runs unless --overwrite
(`outputs.check_prefix`); temporary files of killed runs are removed once a run succeeds.
The saved corpus statistics (--save_corpus_statistics) move in with the outputs, in the
same `replace_outputs` call, so a failure puts back the earlier statistics file too. The
launcher owns the prefix and the statistics file for the whole run
(transforms/io/ownership.py); `finalize.finalize` checks that it still does before any
move.

Final names (PREFIX = --output):
    PREFIX.scores.parquet | PREFIX.scores.jsonl, PREFIX.dead_letter.jsonl,
    PREFIX.summary.json, and with a human column PREFIX.report.md + PREFIX.report.png
    (+ PREFIX.report.json: the same numbers for machines).

`PREFIX.scores.*` holds one row per scored input row: row_key, content_key (a hash of what
its scores depend on: `rows.content_key`), file, row, id, system,
(human), the kept input columns (--keep_input_columns: question, prediction, references
as scored, or input columns as strings), and one float column per metric. Each metric's
signature is stored once, not per row: in the Parquet schema's key-value metadata
(`SIGNATURES_KEY`, a JSON object metric -> signature; each metric field also carries its
own as field metadata `signature`) and in PREFIX.summary.json (`signatures`), the one
place for JSONL scores; `read_signatures` reads either. Writing single files funnels
each output through one writer; that is the price of the fixed names (the scoring itself
stays parallel).
"""

import io
import json
import logging
import math
import posixpath
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.io.counting import in_global_window
from transforms.scoring.outputs.manifest import utc_now
from transforms.scoring.outputs.paths import OutputPaths
from transforms.scoring.report import report_render
from transforms.scoring.report import scopes as report_lib
from transforms.scoring.report.report_spec import ReportSpec

logger = logging.getLogger(__name__)

SIGNATURES_KEY = b"qa_eval.signatures"
_KEPT_TEXT_TYPES = {"question": "string", "prediction": "string", "references": "list"}


def scores_schema(metric_columns: Sequence[str], with_human: bool,
                  signatures: Mapping[str, str] | None = None,
                  kept: Sequence[str] = ()) -> Any:
    """The explicit pyarrow schema of PREFIX.scores.parquet, the signatures in its
    metadata (see the module docstring)."""
    import pyarrow as pa

    signatures = dict(signatures or {})
    fields = [pa.field("row_key", pa.string()), pa.field("content_key", pa.string()),
              pa.field("file", pa.string()),
              pa.field("row", pa.int64()), pa.field("id", pa.string()),
              pa.field("system", pa.string())]
    if with_human:
        fields.append(pa.field("human", pa.float64()))
    for name in kept:
        kind = _KEPT_TEXT_TYPES.get(name, "string")
        fields.append(pa.field(name, pa.list_(pa.string()) if kind == "list" else pa.string()))
    fields += [pa.field(c, pa.float64(),
                        metadata={"signature": signatures[c]} if c in signatures else None)
               for c in metric_columns]
    metadata = {SIGNATURES_KEY: json.dumps(signatures, sort_keys=True)} if signatures else None
    return pa.schema(fields, metadata=metadata)


def read_signatures(scores_path: str) -> dict[str, str]:
    """The metric signatures of a scores file: from a Parquet file's metadata, else
    (JSONL) from the summary.json next to it.

    Raises:
        ValueError: a Parquet file without them, or no summary.json for a JSONL file.
    """
    if scores_path.endswith(".parquet"):
        import pyarrow.parquet as pq

        with FileSystems.open(scores_path) as f:
            metadata = pq.read_schema(f).metadata or {}
        if SIGNATURES_KEY not in metadata:
            raise ValueError(f"{scores_path} has no {SIGNATURES_KEY.decode()} metadata")
        return json.loads(metadata[SIGNATURES_KEY])
    summary = scores_path.rsplit(".scores.", 1)[0] + ".summary.json"
    if not FileSystems.exists(summary):
        raise ValueError(f"no {summary} next to {scores_path}: the signatures are there")
    with FileSystems.open(summary) as f:
        return json.loads(f.read())["signatures"]


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def output_row(record: Mapping[str, Any], metric_columns: Sequence[str], with_human: bool,
               kept: Sequence[str] = ()) -> dict[str, Any]:
    """A scored record as written: schema order, NaN as null."""
    row = {k: record.get(k) for k in ("row_key", "content_key", "file", "row", "id",
                                       "system")}
    if with_human:
        row["human"] = record.get("human")
    row.update({c: record.get(c) for c in kept})
    row.update({c: _clean(record.get(c)) for c in metric_columns})
    return row


def columns_table(records: Sequence[Mapping[str, Any]], schema: Any,
                  metric_columns: Sequence[str]) -> Any:
    """Scored records -> a pyarrow table of the scores schema, column by column: the
    table of their `output_row`s (a missing field null, a metric's NaN null)."""
    import pyarrow as pa

    metrics = set(metric_columns)
    return pa.Table.from_arrays(
        [pa.array([r.get(f.name) for r in records], type=f.type, from_pandas=f.name in metrics)
         for f in schema], schema=schema)


def _json_safe(value: Any) -> Any:
    """NaN -> None, recursively (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return _clean(value)


def to_json_line(record: Mapping[str, Any]) -> str:
    """One JSON line (NaN written as null, non-ASCII kept)."""
    return json.dumps({k: _clean(v) for k, v in record.items()}, ensure_ascii=False)


def records_of(scored: beam.PCollection, label: str) -> beam.PCollection:
    """Scored records one by one, from the lists of them a batch of rows scored together
    gives (`score.batches.ScoreRowsFn`), fused with the scoring."""
    return scored | label >> beam.FlatMap(lambda records: records)


# Rows per Parquet row group of the scores file (parts and the merged file).
ROW_GROUP_ROWS = 65_536


class WriteScorePartsFn(beam.DoFn):
    """Lists of scored records (one per batch) -> one part file per bundle, written
    as the records come (Parquet in row groups of `ROW_GROUP_ROWS`, or JSON lines);
    yields the part's path when the bundle ends. A part is named
    `<temporary scores path>.part-<random>`: a bundle that is retried leaves a part that no
    one reports, removed with the run's other temporary files."""

    def __init__(self, temp: str, output_format: str, schema: Any,
                 metric_columns: Sequence[str], with_human: bool, kept: Sequence[str]) -> None:
        self._temp = temp
        self._format = output_format
        self._schema = schema
        self._args = (tuple(metric_columns), with_human, tuple(kept))

    def start_bundle(self) -> None:
        self._path: str | None = None
        self._file: Any = None
        self._writer: Any = None
        self._pending: list[dict[str, Any]] = []

    def _open(self) -> None:
        self._path = f"{self._temp}.part-{uuid.uuid4().hex}"
        self._file = FileSystems.create(self._path, mime_type="application/octet-stream")
        if self._format == "parquet":
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(self._file, self._schema)

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(columns_table(self._pending, self._schema, self._args[0]))
            self._pending = []

    def process(self, records: Sequence[dict[str, Any]]) -> None:
        if self._file is None:
            self._open()
        if self._format == "parquet":
            self._pending.extend(records)
            if len(self._pending) >= ROW_GROUP_ROWS:
                self._flush()
        else:
            rows = [output_row(r, *self._args) for r in records]
            self._file.write("".join(to_json_line(r) + "\n" for r in rows).encode("utf-8"))

    def finish_bundle(self) -> Iterator[Any]:
        if self._file is None:
            return
        if self._writer is not None:
            self._flush()
            self._writer.close()
        self._file.close()
        yield in_global_window(self._path)
        self._file = self._writer = None


def merge_parts(parts: Sequence[str], path: str, output_format: str, schema: Any) -> str:
    """Writes the part files into one file at `path` (row group by row group, or byte
    for byte: memory stays one row group), then deletes the parts; returns `path`. One
    part: renamed to `path` (it is that file). No part: an empty file (a Parquet file with
    the schema and no row)."""
    parts = sorted(parts)
    if len(parts) == 1:
        FileSystems.rename(parts, [path])
        return path
    with FileSystems.create(path, mime_type="application/octet-stream") as out:
        if output_format == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetWriter(out, schema) as writer:
                for part in parts:
                    with FileSystems.open(part, compression_type="uncompressed") as f:
                        source = pq.ParquetFile(f)
                        for group in range(source.num_row_groups):
                            writer.write_table(source.read_row_group(group))
        else:
            for part in parts:
                with FileSystems.open(part, compression_type="uncompressed") as f:
                    for block in iter(lambda: f.read(1 << 22), b""):
                        out.write(block)
    if parts:
        FileSystems.delete(list(parts))
    return path


class WriteScores(beam.PTransform):
    """Lists of scored records (one per batch) -> the temporary scores file; yields
    its path. Each bundle writes its records to a part file as they come
    (`WriteScorePartsFn`) and the parts are then merged into the one file
    (`merge_parts`): no step gathers the rows themselves, so the runner holds none of them
    (an in-process runner holds every element of a group in memory)."""

    def __init__(self, paths: OutputPaths, metric_columns: Sequence[str], with_human: bool,
                 signatures: Mapping[str, str], kept: Sequence[str] = ()) -> None:
        super().__init__()
        self._paths = paths
        self._columns = tuple(metric_columns)
        self._with_human = with_human
        self._signatures = dict(signatures)
        self._kept = tuple(kept)

    def expand(self, scored: beam.PCollection) -> beam.PCollection:
        temp = self._paths.temp(self._paths.scores)
        output_format = self._paths.output_format
        schema = scores_schema(self._columns, self._with_human, self._signatures, self._kept)
        return (scored
                | "WriteParts" >> beam.ParDo(WriteScorePartsFn(
                    temp, output_format, schema, self._columns, self._with_human,
                    self._kept))
                | "GatherPartNames" >> beam.combiners.ToList()
                | "MergeParts" >> beam.Map(merge_parts, temp, output_format, schema))


class WriteDeadLetters(beam.PTransform):
    """Dead-letter records -> the temporary dead-letter JSONL file; yields its path."""

    def __init__(self, paths: OutputPaths) -> None:
        super().__init__()
        self._paths = paths

    def expand(self, dead: beam.PCollection) -> beam.PCollection:
        return (dead
                | "ToJsonLines" >> beam.Map(to_json_line)
                | "WriteJsonLines" >> beam.io.WriteToText(
                    self._paths.temp(self._paths.dead_letter), num_shards=1,
                    shard_name_template=""))


def _write_bytes(path: str, data: bytes) -> None:
    with FileSystems.create(path, mime_type="application/octet-stream") as f:
        f.write(data)


class WriteSummaryFn(beam.DoFn):
    """The summary dict + run metadata -> the temporary summary.json; yields its path."""

    def __init__(self, path: str, metadata: Mapping[str, Any]) -> None:
        self._path = path
        self._metadata = dict(metadata)

    def process(self, summary: Mapping[str, Any], rows_read: int | None = None
                ) -> Iterator[str]:
        document = {**self._metadata, "finished_at": utc_now(), **summary}
        overall = summary["overall"]
        if overall["in"] != overall["scored"] + overall["dead_lettered"]:
            raise RuntimeError(f"summary counts do not add up: {overall}")
        if rows_read is not None and overall["in"] != rows_read:
            raise RuntimeError(
                f"{rows_read:,} rows were read but {overall['in']:,} reached the outputs "
                f"({overall['scored']:,} scored, {overall['dead_lettered']:,} "
                "dead-lettered): rows were lost between the pipeline's stages, a runner "
                "fault; nothing is published")
        _write_bytes(self._path, json.dumps(document, indent=2, allow_nan=False).encode())
        logger.info("summary: %d in, %d scored, %d dead-lettered", overall["in"],
                    overall["scored"], overall["dead_lettered"])
        yield self._path


class WriteSummary(beam.PTransform):
    """The summary dict -> the temporary summary.json, with the run's metadata on top.

    `read_counts`: the reader's `((namespace, name), n)` counts (every row it saw is
    counted once, passed or dead-lettered): the summary must account for every one of
    them, or the run fails before anything is published."""

    def __init__(self, paths: OutputPaths, metadata: Mapping[str, Any],
                 read_counts: beam.PCollection | None = None) -> None:
        super().__init__()
        self._fn = WriteSummaryFn(paths.temp(paths.summary), metadata)
        self._read_counts = read_counts

    def expand(self, summary: beam.PCollection) -> beam.PCollection:
        if self._read_counts is None:
            return summary | "WriteSummaryJson" >> beam.ParDo(self._fn)
        rows_read = (self._read_counts
                     | "CountOfRowsRead" >> beam.Map(lambda kv: kv[1])
                     | "RowsRead" >> beam.CombineGlobally(sum))
        return summary | "WriteSummaryJson" >> beam.ParDo(
            self._fn, beam.pvalue.AsSingleton(rows_read))


class WriteReportFn(beam.DoFn):
    """All (system, human, values) points -> temporary report .json, .md and .png paths."""

    def __init__(self, paths: OutputPaths, metric_columns: Sequence[str],
                 spec: ReportSpec, human_column: str) -> None:
        self._paths = paths
        self._columns = tuple(metric_columns)
        self._spec = spec
        self._human_column = human_column

    def process(self, points: Sequence[tuple]) -> Iterator[str]:
        scopes = report_lib.meta_evaluate(points, self._columns, self._spec)
        image_name = posixpath.basename(self._paths.report_png.replace("\\", "/"))
        markdown = report_render.render_markdown(scopes, self._human_column, image_name,
                                                 self._spec.resamples)
        json_path = self._paths.temp(self._paths.report_json)
        document = {"human_column": self._human_column,
                    "scopes": report_lib.scope_table(scopes)}
        _write_bytes(json_path, json.dumps(_json_safe(document), indent=2).encode())
        md_path = self._paths.temp(self._paths.report_md)
        png_path = self._paths.temp(self._paths.report_png)
        _write_bytes(md_path, markdown.encode("utf-8"))
        buffer = io.BytesIO()
        report_render.render_png(scopes, buffer, self._human_column)
        _write_bytes(png_path, buffer.getvalue())
        yield from (json_path, md_path, png_path)


def _report_point(record: Mapping[str, Any], columns: Sequence[str]) -> tuple:
    """`report.point` (whose module's hints are strings, which Beam cannot read)."""
    return report_lib.point(record, columns)


class WriteReport(beam.PTransform):
    """Lists of scored records (one per batch) -> the meta-evaluation report
    (gathers one float tuple per row)."""

    def __init__(self, paths: OutputPaths, metric_columns: Sequence[str],
                 spec: ReportSpec, human_column: str) -> None:
        super().__init__()
        self._fn = WriteReportFn(paths, metric_columns, spec, human_column)
        self._columns = tuple(metric_columns)

    def expand(self, scored: beam.PCollection) -> beam.PCollection:
        return (records_of(scored, "RecordsOfBatches")
                | "ToReportPoints" >> beam.Map(_report_point, self._columns)
                | "GatherPoints" >> beam.combiners.ToList()
                | "ComputeAndWriteReport" >> beam.ParDo(self._fn))
