"""The run an incremental run builds on (`--previous_run PREFIX`): `load_previous_run`
reads its summary.json on the launcher, finds its scores file and checks that the two
belong together (Parquet: the footer's columns and row count; JSONL: a last whole line);
`PreviousRun` is what the run needs of it (its signatures, content-key recipe, means, and
the scores file as a `ParquetSource`), and `PreviousRunError` names a file of it that
cannot be read or does not match.
"""

import dataclasses
import json
from typing import Any

from apache_beam.io.filesystems import FileSystems

from transforms.scoring.outputs.paths import OUTPUT_FORMATS, OutputPaths
from transforms.scoring.reading.inputs import READ_ERRORS
from transforms.scoring.reading.parquet_parts import FileIdentity, ParquetSource, file_identity
from transforms.scoring.reading.rows import CONTENT_KEY_VERSION


class PreviousRunError(ValueError):
    """A previous run (`--previous_run`) whose files cannot be read, or do not belong
    together (a scores file cut short, damaged, replaced); the message names the file.
    One line, exit status 2, also when a worker raises it
    (`transforms.io.cli.FILE_ERROR_NAMES`)."""

    user_file_error = True


WHAT = "--previous_run"


@dataclasses.dataclass(frozen=True)
class PreviousRun:
    """What an incremental run needs of the run it builds on (read on the launcher).

    Attributes:
        prefix: the previous run's --output.
        scores_path: its scores file.
        output_format: parquet | jsonl.
        signatures: its metric column -> signature.
        content_keys: whether its scores carry content keys of this recipe.
        summary: its summary.json (means per system and metric, ids and times).
        identity: the scores file's size and modification time at launch (checked
            again where it is read).
    """

    prefix: str
    scores_path: str
    output_format: str
    signatures: dict[str, str]
    content_keys: bool
    summary: dict[str, Any]
    identity: FileIdentity | None = None

    def source(self) -> ParquetSource:
        """The scores file as a `ParquetSource` (errors: `PreviousRunError`)."""
        return ParquetSource(self.scores_path, f"{WHAT} {self.prefix}: scores file",
                             PreviousRunError, self.identity)

    def means(self) -> dict[str, dict[str, float | None]]:
        """Block ("overall", "system:<name>", "without_system") -> column -> mean."""
        blocks = {name: self.summary.get(name) for name in ("overall", "without_system")}
        blocks.update({f"system:{name}": block
                       for name, block in self.summary.get("systems", {}).items()})
        return {name: {c: m.get("mean") for c, m in block.get("metrics", {}).items()}
                for name, block in blocks.items() if block}


def load_previous_run(prefix: str) -> PreviousRun:
    """Reads the summary of the complete run at `prefix`, finds its scores file and checks
    that it can be read and is the one the summary describes (Parquet: its footer, the
    columns and row count; JSONL: it ends with a whole line).

    Raises:
        ValueError: no complete run there (no summary.json, or no scores file).
        PreviousRunError: a file of the run cannot be read, is not one of this
            pipeline's, or does not match the summary (e.g. cut short).
    """
    summary_path = OutputPaths.of_done_run(prefix).summary
    if not FileSystems.exists(summary_path):
        raise ValueError(f"--previous_run {prefix} is not a complete run: {summary_path} is "
                         "missing (a run writes it last, once everything else is in place)")
    try:
        with FileSystems.open(summary_path) as f:
            summary = json.loads(f.read())  # UTF-8 (or a UTF-16/32 JSON) bytes
        signatures = dict(summary["signatures"])
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise PreviousRunError(f"{WHAT} {prefix}: {summary_path} is not a scoring "
                               f"summary, or cannot be read ({type(e).__name__}: {e})") from None
    found = [(fmt, OutputPaths.of_done_run(prefix, fmt).scores) for fmt in OUTPUT_FORMATS]
    found = [(fmt, path) for fmt, path in found if FileSystems.exists(path)]
    if len(found) != 1:
        raise ValueError(f"--previous_run {prefix}: expected one scores file beside "
                         f"{summary_path}, found {[p for _, p in found] or 'none'}")
    fmt, path = found[0]
    previous = PreviousRun(prefix, path, fmt, signatures,
                           summary.get("content_key_version") == CONTENT_KEY_VERSION, summary,
                           file_identity(path))
    scored = (summary.get("overall") or {}).get("scored")
    if fmt == "parquet":
        _check_parquet_scores(previous, scored)
    else:
        _check_jsonl_scores(previous, scored)
    return previous


def _check_parquet_scores(previous: PreviousRun, scored: Any) -> None:
    import pyarrow.parquet as pq

    source = previous.source()
    try:
        with FileSystems.open(previous.scores_path) as f:  # .parquet, .jsonl: as they are
            metadata = pq.ParquetFile(f).metadata
            names = metadata.schema.to_arrow_schema().names
    except READ_ERRORS as e:
        raise source.fail("cannot be read as Parquet", e) from e
    needed = ["row_key", *(["content_key"] if previous.content_keys else []),
              *previous.signatures]
    absent = [c for c in needed if c not in names]
    if absent:
        raise source.fail(f"has no column(s) {absent} that its summary.json names")
    if isinstance(scored, int) and metadata.num_rows != scored:
        raise source.fail(f"holds {metadata.num_rows:,} rows, but its summary.json says "
                          f"{scored:,} were scored: the two files are not of one run")


def _check_jsonl_scores(previous: PreviousRun, scored: Any) -> None:
    source = previous.source()
    size = previous.identity.size if previous.identity else 0
    if size == 0:
        if isinstance(scored, int) and scored > 0:
            raise source.fail(f"is empty, but its summary.json says {scored:,} rows were "
                              "scored")
        return
    try:
        with FileSystems.open(previous.scores_path) as f:  # .parquet, .jsonl: as they are
            f.seek(size - 1)
            last = f.read(1)
    except READ_ERRORS as e:
        raise source.fail("cannot be read", e) from e
    if last != b"\n":
        raise source.fail("does not end with a whole line: it was cut short")
