"""RowBatch: rows travelling as one element, packed once when pickled and read lazily."""

from __future__ import annotations

from transforms.metrics.base import QAExample
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.reading.rows import RowSource, ScoringRow

EXAMPLES = [QAExample(f"answer {i}", (f"gold {i}", "another gold"), question=f"q{i}?")
            for i in range(5)]


def test_row_batches_pickle_their_rows_once_and_lazily():
    import pickle

    rows = [(f"f:{i}", ScoringRow(RowSource("f", i), ex))
            for i, ex in enumerate(EXAMPLES, start=1)]
    batch = RowBatch("f:1", rows)
    back = pickle.loads(pickle.dumps(batch))
    assert back._rows is None  # still packed: what a runner holding it keeps
    assert back.rows == rows and back == batch and len(back) == 5
    assert pickle.dumps(back) == pickle.dumps(batch)  # the packed bytes, not re-pickled


def test_packed_rows_come_back_equal_with_every_field():
    from transforms.scoring.reading.row_batch import pack_rows, unpack_rows

    odd = ScoringRow(RowSource("dir/f\udcff.csv", 7, 9),
                     QAExample("é ünï", ("a", "b"), question="q?", negative_references=("n",)),
                     id="17", system="s", human=0.25,
                     kept=(("references", ["a", "b"]), ("meta", '{"x": 1}'), ("none", None)))
    plain = ScoringRow(RowSource("f.parquet", 3), QAExample("p", ("r",)))
    rows = [("content-key-1", odd), (plain.source.key, plain)]
    assert unpack_rows(pack_rows(rows)) == rows
