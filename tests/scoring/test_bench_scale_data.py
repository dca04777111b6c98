"""tests/bench/scale_data.py: the long shape's rows have the lengths it names, and both
shapes are the same rows on every call."""

from __future__ import annotations

from tests.bench.scale_data import generate_rows


def test_long_rows_have_their_shape_and_repeat():
    rows = list(generate_rows(2_000, shape="long"))
    assert len(rows) == 2_000 and rows == list(generate_rows(2_000, shape="long"))
    assert {len(r["references"]) for r in rows} == {1, 2, 3, 4}
    lengths = [len(ref.split()) for r in rows for ref in r["references"]]
    assert min(lengths) == 2 and max(lengths) == 59
    assert all(r["prediction"].split() for r in rows)
    assert max(len(r["prediction"].split()) for r in rows) > 59  # extended past a reference


def test_the_short_shape_is_the_default():
    rows = list(generate_rows(500))
    assert rows == list(generate_rows(500, shape="short"))
    assert {len(r["references"]) for r in rows} == {2}
    assert {len(ref.split()) for r in rows for ref in r["references"]} == set(range(6, 15))
