import random
import zlib

import pytest

from transforms.wes.title_bloom import BuildTitleBloom, TitleBloom, bloom_positions


def _bloom(titles, bits, parts=3):
    fn = BuildTitleBloom(bits)
    accumulators = [fn.create_accumulator() for _ in range(parts)]
    for i, title in enumerate(titles):
        fn.add_input(accumulators[i % parts], title)
    return TitleBloom(fn.extract_output(fn.merge_accumulators(accumulators)))


def test_every_title_added_tests_in_and_few_others_do():
    rng = random.Random(0)
    titles = [f"Title {rng.random()}" for _ in range(2_000)]
    bloom = _bloom(titles, 1 << 16)
    assert all(title in bloom for title in titles)
    others = [f"Other {i}" for i in range(2_000)]
    assert sum(title in bloom for title in others) < 100  # about 0.3% expected


def test_an_empty_filter_holds_nothing_and_positions_are_stable():
    assert "Paris" not in _bloom([], 1 << 10)
    # the same in every process (CRC-32, not Python's salted `hash`): pinned values
    assert bloom_positions("Paris", 1 << 25) == (zlib.crc32(b"Paris") % (1 << 25),
                                                 zlib.crc32(b"siraP") % (1 << 25))
    assert bloom_positions("Paris", 1 << 25) == (32367846, 8807079)
    assert bloom_positions("Paris", 64) == (38, 39)


@pytest.mark.parametrize("bits", [0, 12])
def test_bits_must_be_whole_bytes(bits):
    with pytest.raises(ValueError):
        BuildTitleBloom(bits)


def test_flags_test_each_title_s_two_positions():
    """`flags` tests the bits `bloom_positions` names (it computes them itself), the same
    answer for a title however often it is asked."""
    rng = random.Random(1)
    titles = [f"T{rng.randrange(10**6)} é" for _ in range(400)]
    bloom = _bloom(titles[:100], 1 << 9)  # small: many titles left out test in too
    array = bloom._array

    def bit(position):
        return array[position >> 3] >> (position & 7) & 1

    expected = [all(bit(p) for p in bloom_positions(t, 1 << 9)) for t in titles]
    assert any(expected[100:]) and not all(expected[100:])
    for start in range(0, 400, 100):
        assert bloom.flags(titles[start:start + 100]) == expected[start:start + 100]
    assert bloom.flags(titles) == expected
    assert [t in bloom for t in titles] == expected
