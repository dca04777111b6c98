"""The input's columns, read on the launcher at graph build time (`sniff_columns`): the
header (CSV), the schema (Parquet) or the first rows (JSONL) of the matched files, so
that a missing column fails before anything runs. Files are opened by
`inputs.open_input`: an error of opening or reading one is an `InputFileError` naming it.
"""

import itertools
import logging

from apache_beam.io.filesystems import FileSystems

from transforms.scoring.reading.formats import csv_header, input_format_of, iter_jsonl
from transforms.scoring.reading.inputs import open_input

logger = logging.getLogger(__name__)


def sniff_columns(file_pattern: str, input_format: str | None = None, max_files: int = 20,
                  max_json_rows: int = 100) -> tuple[list[str], list[str]]:
    """Matches the input and reads the columns it offers (launcher side, graph build time).

    CSV: the header; Parquet: the schema; JSONL: the keys of the first `max_json_rows`
    objects. Only the first `max_files` matched files are opened.

    Args:
        file_pattern: a path or glob understood by Beam's FileSystems.
        input_format: one of FORMATS, or None to go by extension.
        max_files: how many matched files to look into.
        max_json_rows: how many JSON lines per file to look into.

    Returns:
        (matched file paths, columns present in every file looked into, in first-file order).

    Raises:
        ValueError: nothing matches, or a file's format is unknown.
        InputFileError: a file looked into cannot be read (a ValueError too).
    """
    metadata = FileSystems.match([file_pattern])[0].metadata_list
    files = sorted(m.path for m in metadata)
    if not files:
        raise ValueError(f"--input {file_pattern!r} matches no file")
    formats = {path: input_format_of(path, input_format) for path in files}
    common: list[str] | None = None
    for path in files[:max_files]:
        with open_input(path, seekable=formats[path] == "parquet") as fobj:
            if formats[path] == "csv":
                columns = csv_header(fobj)
            elif formats[path] == "parquet":
                import pyarrow.parquet as pq

                columns = list(pq.ParquetFile(fobj).schema_arrow.names)
            else:
                columns = []
                for _, _, record in itertools.islice(iter_jsonl(fobj), max_json_rows):
                    if isinstance(record, dict):
                        columns.extend(k for k in record if k not in columns)
        common = columns if common is None else [c for c in common if c in columns]
    logger.info("input %s: %d file(s), columns %s", file_pattern, len(files), common)
    return files, common or []
