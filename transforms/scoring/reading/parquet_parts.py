"""Reading a Parquet file that the user handed in besides the inputs (a previous run's
scores, a corpus statistics file) row group by row group, on workers, with every error
naming the file.

Beam's `ReadFromParquet` raises pyarrow's own errors ("Parquet magic bytes not found in
footer...") without the path, and fails the run with a traceback. Here the file's row
groups are planned on a worker from its footer, spread (`Reshuffle`) and read one by one;
anything that goes wrong is raised as the caller's error class (a user-file error:
`transforms.io.cli.FILE_ERROR_NAMES`) as `<what> <path>: cannot be read ...`. The file's
size and modification time, taken when the transform is built (on the launcher), are
checked by each part: a file replaced while the run reads it fails the run, naming it.
"""

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.io.ownership import file_metadata
from transforms.scoring.reading.inputs import READ_ERRORS


@dataclasses.dataclass(frozen=True)
class FileIdentity:
    """A file's size and modification time (seconds), as `FileSystems.match` gives them."""

    size: int
    modified: float

    def describe(self) -> str:
        return f"{self.size:,} bytes, modified at {self.modified:.6f}"


def file_identity(path: str) -> FileIdentity | None:
    """The size and modification time of `path` (None: it does not exist)."""
    found = file_metadata(path)
    if found is None:
        return None
    return FileIdentity(found.size_in_bytes,
                        float(getattr(found, "last_updated_in_seconds", 0.0) or 0.0))


@dataclasses.dataclass(frozen=True)
class ParquetSource:
    """A user's Parquet file: where it is, how errors name it, what it was at launch.

    Attributes:
        path: the file.
        what: how messages name it, e.g. "--corpus_statistics".
        error: the exception class raised for it (a user-file error).
        identity: its size and modification time at launch (None: not checked).
    """

    path: str
    what: str
    error: type
    identity: FileIdentity | None = None

    def fail(self, detail: str, cause: BaseException | None = None) -> Exception:
        reason = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return self.error(f"{self.what} {self.path}: {detail}{reason}")

    def check_unchanged(self) -> None:
        """Raises `error` when the file is no longer the one seen at launch."""
        if self.identity is None:
            return
        now = file_identity(self.path)
        if now != self.identity:
            raise self.fail(
                f"changed while the run read it (at launch {self.identity.describe()}, now "
                f"{now.describe() if now else 'gone'}): it must not be written while a run "
                "reads it; rerun once it is complete")

    def row_groups(self) -> list[int]:
        """The row groups, from the footer."""
        import pyarrow.parquet as pq

        self.check_unchanged()
        try:
            with FileSystems.open(self.path, compression_type="uncompressed") as f:
                return list(range(pq.ParquetFile(f).metadata.num_row_groups))
        except READ_ERRORS as e:
            raise self.fail("cannot be read as Parquet", e) from e

    def read_group(self, group: int, columns: Sequence[str] | None) -> Iterator[Any]:
        """Arrow record batches of one row group."""
        import pyarrow.parquet as pq

        self.check_unchanged()
        try:
            with FileSystems.open(self.path, compression_type="uncompressed") as f:
                parquet = pq.ParquetFile(f)
                yield from parquet.iter_batches(
                    row_groups=[group], columns=list(columns) if columns else None)
        except READ_ERRORS as e:
            raise self.fail(f"cannot be read (row group {group})", e) from e


def source_of(path: str, what: str, error: type) -> ParquetSource:
    """A `ParquetSource` with the file's identity now (build it on the launcher)."""
    return ParquetSource(path, what, error, file_identity(path))


class ReadParquetBatches(beam.PTransform):
    """PBegin -> the Arrow record batches of a `ParquetSource` (some `columns`, or all),
    read row group by row group on workers, errors naming the file."""

    def __init__(self, source: ParquetSource, columns: Sequence[str] | None = None) -> None:
        super().__init__()
        self._source = source
        self._columns = tuple(columns) if columns else None

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        source, columns = self._source, self._columns
        return (pbegin
                | "File" >> beam.Create([source])
                | "PlanRowGroups" >> beam.FlatMap(ParquetSource.row_groups)
                | "SpreadRowGroups" >> beam.Reshuffle()
                | "ReadRowGroup" >> beam.FlatMap(_read_group, source, columns))


def _read_group(group: int, source: ParquetSource, columns: Sequence[str] | None
                ) -> Iterator[Any]:
    return source.read_group(group, columns)
