"""Tests for transforms/scoring/reading/inputs.py: every compression read to its end, a file cut
short or damaged is an error, and every error names the file."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from apache_beam.io.filesystems import FileSystems

from transforms.scoring.reading.inputs import (
    InputFileError,
    StreamDecompressor,
    compression_of,
    open_input,
    read_input,
)

COMPRESS = {
    ".gz": gzip.compress,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
    ".lzma": lambda data: lzma.compress(data, format=lzma.FORMAT_ALONE),
    ".deflate": zlib.compress,
    ".zst": zstandard.ZstdCompressor().compress,
}
DATA = b"".join(b'{"prediction": "answer %d", "references": ["gold %d"]}\n' % (i, i)
                for i in range(3000))


def _lines(fobj):
    return enumerate(iter(fobj.readline, b""), start=1)


@pytest.mark.parametrize("path, expected", [
    ("a.jsonl.gz", "gz"), ("a.CSV.BZ2", "bz2"), ("a.jsonl.xz", "xz"), ("a.jsonl.lzma", "xz"),
    ("a.csv.deflate", "deflate"), ("a.jsonl.zst", "zst"), ("a.jsonl.zstd", "zst"),
    ("a.jsonl", None), ("gz/a.parquet", None),
])
def test_compression_of(path, expected):
    assert compression_of(path) == expected


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_every_compression_reads_to_the_end_concatenated_streams_too(tmp_path, suffix):
    path = tmp_path / ("in.jsonl" + suffix)
    half = len(DATA) // 2
    # Two streams one after the other (gzip members, bz2 streams, ...), as Beam reads them;
    # lzma's legacy format has no such thing.
    parts = [DATA] if suffix == ".lzma" else [DATA[:half], DATA[half:]]
    path.write_bytes(b"".join(COMPRESS[suffix](p) for p in parts))
    with open_input(str(path)) as fobj:
        assert fobj.read() == DATA
    assert [n for n, _ in read_input(str(path), _lines)][-1] == 3000


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_a_compressed_file_cut_short_names_the_file_and_the_last_row(tmp_path, suffix):
    path = tmp_path / ("cut.jsonl" + suffix)
    compressed = COMPRESS[suffix](DATA)
    path.write_bytes(compressed[: int(len(compressed) * 0.6)])
    rows = []
    with pytest.raises(InputFileError) as e:
        rows.extend(n for n, _ in read_input(str(path), _lines))
    message = str(e.value)
    assert message.startswith(f"input file {path}: cannot be read")
    assert "cut short" in message and isinstance(e.value.__cause__, EOFError)
    # A decompressor gives out only whole blocks (bz2: 900 kB), so some read none at all.
    assert f"after row {rows[-1]}" in message if rows else "after row" not in message
    assert len(rows) < 3000


# (A zstd frame carries no checksum unless its writer asked for one: damage can go unseen.)
@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".deflate"])
def test_corrupt_compressed_data_names_the_file(tmp_path, suffix):
    path = tmp_path / ("bad.jsonl" + suffix)
    compressed = bytearray(COMPRESS[suffix](DATA))
    for i in range(len(compressed) // 3, len(compressed) // 3 + 64):
        compressed[i] ^= 0x5A
    path.write_bytes(bytes(compressed))
    with pytest.raises(InputFileError, match=f"^input file {path}: cannot be read"):
        for _ in read_input(str(path), _lines):
            pass


def test_junk_after_a_gzip_member_is_an_error_not_the_end(tmp_path):
    path = tmp_path / "junk.jsonl.gz"
    path.write_bytes(gzip.compress(DATA) + b"this is not gzip")
    with pytest.raises(InputFileError, match="junk.jsonl.gz"):
        list(read_input(str(path), _lines))


def test_empty_gzip_and_zstd_files_are_empty(tmp_path):
    for name in ("empty.jsonl.gz", "empty.jsonl.zst", "empty.jsonl"):
        (tmp_path / name).write_bytes(b"")
        assert list(read_input(str(tmp_path / name), _lines)) == []


def test_stream_decompressor_reads_in_small_pieces():
    compressed = zlib.compress(DATA) + zlib.compress(b"tail\n")
    reader = io.BufferedReader(StreamDecompressor(io.BytesIO(compressed), zlib.decompressobj,
                                                  chunk_size=7), buffer_size=5)
    assert reader.read() == DATA + b"tail\n"


def _parquet_bytes() -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"prediction": ["a"] * 100, "references": [["b"]] * 100}), sink)
    return sink.getvalue()


@pytest.mark.parametrize("suffix", ["", ".gz", ".bz2"])
def test_parquet_is_read_seekable_compressed_too(tmp_path, suffix):
    path = tmp_path / ("p.parquet" + suffix)
    path.write_bytes(COMPRESS[suffix](_parquet_bytes()) if suffix else _parquet_bytes())
    with open_input(str(path), seekable=True) as fobj:
        assert pq.ParquetFile(fobj).metadata.num_rows == 100


def test_half_a_parquet_file_names_the_file(tmp_path):
    path = tmp_path / "half.parquet"
    data = _parquet_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputFileError, match=f"^input file {path}: .*ArrowInvalid.*magic"):
        with open_input(str(path), seekable=True) as fobj:
            pq.ParquetFile(fobj)


def test_missing_and_unreadable_files_are_named(tmp_path, monkeypatch):
    missing = tmp_path / "gone.jsonl"
    with pytest.raises(InputFileError, match=f"^input file {missing}: .*FileNotFoundError"):
        list(read_input(str(missing), _lines))
    unreadable = tmp_path / "locked.csv.gz"
    unreadable.write_bytes(gzip.compress(b"a,b\n"))

    def refuse(path, *args, **kwargs):  # as a store that names no path in its error does
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(FileSystems, "open", refuse)
    with pytest.raises(InputFileError, match=f"^input file {unreadable}: .*PermissionError"):
        with open_input(str(unreadable)):
            pass


def test_errors_of_the_caller_are_not_input_file_errors(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_bytes(DATA)
    with pytest.raises(KeyError):
        with open_input(str(path)):
            raise KeyError("not about the file")
