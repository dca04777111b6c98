"""transforms/wiki/read.py: reading byte ranges of a multistream dump, damaged ones included."""

from __future__ import annotations

import bz2
import dataclasses
import shutil
from pathlib import Path

import pytest

from transforms.wiki.dump import (
    DumpReadError,
    iter_dump_file,
    multistream_index_path,
    split_ranges,
    stream_offsets,
)
from transforms.wiki.read import read_range_pages

SPLIT_BYTES = 30_000  # --split_multistream_mb=0.03


@dataclasses.dataclass(frozen=True)
class DamagedDump:
    path: Path  # the copy, with its index next to it
    start: int  # the range that holds the damaged stream
    end: int
    stream: tuple[int, int]  # the damaged stream
    flipped: int  # the byte flipped


def _offsets(dump: Path) -> list[int]:
    index = multistream_index_path(str(dump))
    with open(index, "rb") as f:
        return stream_offsets(f, index)


def damage_one_stream(dump: Path, out_dir: Path, split_bytes: int = SPLIT_BYTES) -> DamagedDump:
    """Copies a multistream dump and its index into `out_dir` with one byte flipped in
    the middle of the compressed data of the second stream of a byte range (read in
    ranges of `split_bytes`): the damage `bz2.decompress` took for the end of the range."""
    offsets = _offsets(dump)
    data = bytearray(dump.read_bytes())
    ranges = split_ranges(offsets, len(data), split_bytes)
    start, end = next((s, e) for s, e in ranges if s > 0 and any(s < o < e for o in offsets))
    first = next(o for o in offsets if start < o < end)
    last = next((o for o in offsets if o > first), len(data))
    assert last - first > 1000, "a stream large enough to have a middle"
    flipped = (first + last) // 2
    data[flipped] ^= 0xFF
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = out_dir / dump.name
    copy.write_bytes(bytes(data))
    shutil.copyfile(multistream_index_path(str(dump)), multistream_index_path(str(copy)))
    return DamagedDump(copy, start, end, (first, last), flipped)


@pytest.fixture(scope="module")
def damaged(multistream_dump, tmp_path_factory) -> DamagedDump:
    return damage_one_stream(multistream_dump, tmp_path_factory.mktemp("damaged"))


def _ranges(path: Path, split_bytes: int = SPLIT_BYTES) -> list[tuple[int, int]]:
    return split_ranges(_offsets(path), path.stat().st_size, split_bytes)


def _range_pages(path: Path, start: int, end: int) -> list:
    with open(path, "rb") as f:
        return list(read_range_pages(f, str(path), start, end))


def test_byte_ranges_read_the_same_pages_as_the_whole_file(multistream_dump):
    ranges = _ranges(multistream_dump)
    assert len(ranges) > 3
    with open(multistream_dump, "rb") as f:
        by_range = [p for start, end in ranges
                    for p in read_range_pages(f, str(multistream_dump), start, end)]
    with open(multistream_dump, "rb") as f:
        whole = list(iter_dump_file(str(multistream_dump), f))
    assert len(whole) > 50 and by_range == whole


def test_the_damage_is_one_that_bz2_decompress_misses(damaged):
    # What the range reader used before: it decompresses the streams before the damaged
    # one and takes the rest for trailing junk, without a word.
    data = damaged.path.read_bytes()[damaged.start:damaged.end]
    assert bz2.decompress(data) == bz2.decompress(data[:damaged.stream[0] - damaged.start])
    # The whole-file reader does see it.
    with open(damaged.path, "rb") as f, pytest.raises(DumpReadError, match="Invalid data"):
        list(iter_dump_file(str(damaged.path), f))


def test_a_damaged_stream_in_a_range_fails_naming_the_file_and_range(damaged):
    with pytest.raises(DumpReadError, match="Invalid data stream") as e:
        _range_pages(damaged.path, damaged.start, damaged.end)
    assert f"{damaged.path} bytes {damaged.start}-{damaged.end}:" in str(e.value)
    # The other ranges read as before.
    for start, end in _ranges(damaged.path):
        if start != damaged.start:
            assert _range_pages(damaged.path, start, end)


def test_a_range_that_ends_early_fails(multistream_dump):
    start, end = _ranges(multistream_dump)[1]
    with pytest.raises(DumpReadError, match="ended before the end-of-stream marker") as e:
        _range_pages(multistream_dump, start, end - 10)
    assert f"bytes {start}-{end - 10}:" in str(e.value)
    size = multistream_dump.stat().st_size
    last = _ranges(multistream_dump)[-1][0]
    with pytest.raises(DumpReadError, match=f"the file ends at byte {size}, before the end "
                                            f"of the range at byte {size + 100}"):
        _range_pages(multistream_dump, last, size + 100)  # a file cut after it was planned


def test_a_range_that_does_not_start_a_stream_fails(multistream_dump):
    with pytest.raises(DumpReadError, match=r"bytes 1000-5000: .*Invalid data stream"):
        _range_pages(multistream_dump, 1000, 5000)


def test_footer_and_header_are_where_the_ranges_hold_them(multistream_dump):
    ranges = _ranges(multistream_dump)
    first, last = ranges[0], ranges[-1]
    whole = _range_pages(multistream_dump, first[0], last[1])  # one range: the whole file
    assert whole == _range_pages(multistream_dump, *first) + [
        p for r in ranges[1:] for p in _range_pages(multistream_dump, *r)]
