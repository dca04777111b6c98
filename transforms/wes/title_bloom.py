"""`TitleBloom`: a fixed-size Bloom filter of titles, and `BuildTitleBloom`, the combine
that builds one from a PCollection of titles.

`LinkCooccurrence` (cooccurrence.py) takes it as a side input to leave out, before its
shuffle, the pairs of titles that no corpus can hold. A title in the filter always tests
in (`in`); a title outside it tests in with a small probability (about 3% with 3 million
titles), so the filter only trims, and the exact join after the shuffle decides. Its size
is fixed, `BLOOM_BITS` bits whatever the number of titles, so the side input every worker
holds stays bounded; its two bit positions are the CRC-32s of the title's UTF-8 bytes
forwards and backwards, the same in every process (unlike `hash`), and cheap enough to
compute for every link instead of remembering answers.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

import apache_beam as beam

BLOOM_BITS = 1 << 25   # 4 MiB


def bloom_positions(title: str, bits: int = BLOOM_BITS) -> tuple[int, int]:
    """The two bit positions of a title: the CRC-32s of its UTF-8 bytes and of those bytes
    reversed (two different linear maps of the bytes, so two titles that share one
    position rarely share the other)."""
    data = title.encode("utf-8")
    return zlib.crc32(data) % bits, zlib.crc32(data[::-1]) % bits


def empty_bloom(bits: int = BLOOM_BITS) -> bytearray:
    return bytearray(bits // 8)


def bloom_add(array: bytearray, title: str) -> None:
    for position in bloom_positions(title, len(array) * 8):
        array[position >> 3] |= 1 << (position & 7)


class TitleBloom:
    """Membership tests against a filter's bytes (`BuildTitleBloom`'s output)."""

    def __init__(self, array: bytes):
        self._array = array
        self._bits = len(array) * 8

    def __contains__(self, title: str) -> bool:
        return self.flags((title,))[0]

    def flags(self, titles: Sequence[str]) -> list[bool]:
        """`title in self` for each title (one call per page of links, not per link)."""
        array, bits, crc32 = self._array, self._bits, zlib.crc32
        out = []
        for title in titles:
            # `bloom_positions`, inlined: the one loop that tests every link's title
            data = title.encode("utf-8")
            first, second = crc32(data) % bits, crc32(data[::-1]) % bits
            out.append(bool(
                array[first >> 3] >> (first & 7) & array[second >> 3] >> (second & 7) & 1))
        return out


class BuildTitleBloom(beam.CombineFn):
    """Titles -> the bytes of their `TitleBloom` (`bits` bits)."""

    def __init__(self, bits: int = BLOOM_BITS):
        super().__init__()
        if bits < 8 or bits % 8:
            raise ValueError(f"bits must be a positive multiple of 8, got {bits}")
        self._bits = bits

    def create_accumulator(self) -> bytearray:
        return empty_bloom(self._bits)

    def add_input(self, accumulator: bytearray, title: str) -> bytearray:
        bloom_add(accumulator, title)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[bytearray]) -> bytearray:
        merged = 0
        for accumulator in accumulators:
            merged |= int.from_bytes(accumulator, "little")
        return bytearray(merged.to_bytes(self._bits // 8, "little"))

    def extract_output(self, accumulator: bytearray) -> bytes:
        return bytes(accumulator)
