"""Opening the data files that the training and data commands read (SQuAD, EVOUNA,
STS-B, JSONL rows, WES Parquet shards, an init checkpoint's metrics).

Text is decompressed by its suffix (`.gz`, `.bz2` multi-stream too, `.xz`: the checked
decompressor of `transforms/io/decompress.py`) and read as UTF-8. Whatever
keeps a file from being read (missing, unreadable, cut short, corrupt, not UTF-8, not
JSON, not Parquet) is raised as a `TrainingDataError` whose message names the file: one
line and exit status 2 on every command line (`transforms.io.cli.FILE_ERROR_NAMES`). A
problem in what a readable file says (a missing field, a label out of range) stays the
`ValueError` its reader raises, naming the line or record.
"""

from __future__ import annotations

import contextlib
import io
import json
import lzma
import zlib
from collections.abc import Iterator
from typing import IO, Any

from transforms.io.decompress import open_dump

_CUT_SHORT = " (the compressed data ends early: the file is cut short)"


class TrainingDataError(ValueError):
    """A data file of the training or data commands that cannot be read; the message
    starts with what the file is and its path. One line, exit status 2
    (`transforms.io.cli.FILE_ERROR_NAMES`)."""

    user_file_error = True


def _read_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged or inaccessible file raises: OS errors (missing,
    unreadable; a bad gzip header, a bad bz2 stream), EOFError (compressed data cut
    short), zlib's and lzma's own errors, a text that is not UTF-8 or not JSON, and
    pyarrow's errors (imported here: only when a file failed)."""
    import pyarrow as pa
    return (OSError, EOFError, zlib.error, lzma.LZMAError, UnicodeDecodeError,
            json.JSONDecodeError, pa.ArrowException)


def data_error(what: str, path: str, error: BaseException) -> TrainingDataError:
    """The `TrainingDataError` for `error`, raised while reading `path`.

    Args:
        what: what the file is, the message's first words ("SQuAD file").
        path: the file (or folder of shards).
        error: what reading it raised.
    """
    if isinstance(error, FileNotFoundError):
        return TrainingDataError(f"{what} {path} does not exist")
    if isinstance(error, UnicodeDecodeError):
        reason = f"cannot be read as UTF-8 text ({error})"
    elif isinstance(error, json.JSONDecodeError):
        reason = f"not valid JSON ({error})"
    else:
        reason = f"cannot be read: {type(error).__name__}: {error}"
        if isinstance(error, EOFError):
            reason += _CUT_SHORT
    return TrainingDataError(f"{what} {path}: {reason}")


@contextlib.contextmanager
def reading(what: str, path: str) -> Iterator[None]:
    """Raises what reading `path` inside the block raised as a `TrainingDataError` naming
    it (`data_error`) when it is a read error; anything else (a reader's own
    `ValueError` about the content) as it is.

    Raises:
        TrainingDataError: the file is missing, unreadable, cut short or corrupt.
    """
    try:
        yield
    except TrainingDataError:
        raise
    except Exception as e:
        if isinstance(e, _read_errors()):
            raise data_error(what, path, e) from e
        raise


@contextlib.contextmanager
def open_text(what: str, path: str) -> Iterator[IO[str]]:
    """Opens a text file as UTF-8, decompressed when its suffix names a compression
    (`decompress.open_dump`); a read error inside the block names it (`reading`).

    Args:
        what: what the file is, for errors ("STS-B file").
        path: a local path.

    Yields:
        The text file object.

    Raises:
        TrainingDataError: the file is missing, unreadable, cut short, corrupt or not
            UTF-8.
    """
    with reading(what, path), open(path, "rb") as raw, io.TextIOWrapper(
            open_dump(raw, path.lower()), encoding="utf-8") as f:
        yield f


def read_json(what: str, path: str) -> Any:
    """The JSON value of a whole file (`open_text`).

    Raises:
        TrainingDataError: the file cannot be read or is not JSON (named).
    """
    with open_text(what, path) as f:
        return json.load(f)
