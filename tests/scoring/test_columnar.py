"""Rows read as columns (reading/columnar.py): the same rows and dead letters as the
per-row path on every kind of line, the columnar path taken for clean blocks, and a
broken line sending only its neighbourhood the per-row way."""

from __future__ import annotations

import json
import random

import apache_beam as beam
import pytest

from transforms.scoring.reading import columnar as columnar_module
from transforms.scoring.reading.columnar import SMALLEST_PART, ColumnarRows, columnar_mapping
from transforms.scoring.reading.read import ReadRowsFn, ReadSplit
from transforms.scoring.reading.rows import ColumnMapping

GOOD = {"id": "r", "system": "s", "question": "q?", "prediction": "an answer",
        "references": ["gold", "other gold"], "human": 0.5}
ODD_LINES = [
    b'{"prediction": "NA", "references": ["null"], "human": 1}',
    b'{"prediction": "01", "references": ["1e5", "N/A"], "id": "007"}',
    b'{"prediction": "a", "references": ["b"], "human": NaN}',
    b'{"prediction": "a", "references": ["b"], "human": "NA"}',
    b'{"prediction": "a", "references": ["b"], "human": true}',
    b'{"prediction": "a", "references": ["b"], "id": 17, "system": 2.0}',
    b'{"prediction": "a", "references": "just one"}',
    b'{"prediction": "a", "references": ["b", null, " ", ""]}',
    b'{"prediction": "a", "references": []}',
    b'{"prediction": "a", "references": [3]}',
    b'{"prediction": "   ", "references": ["b"]}',
    b'{"prediction": "\\u001c", "references": ["b"]}',
    b'{"prediction": "\\u3000x\\u3000", "references": ["\\u3000"]}',
    b'{"prediction": null, "references": ["b"]}',
    b'{"references": ["b"]}',
    b'{"prediction": "a"}',
    b'{"prediction": "a\\ud83d", "references": ["b"]}',
    b'{"prediction": "\\ud83d\\ude00", "references": ["b"]}',
    b'{"prediction": "a", "prediction": "b", "references": ["c"]}',
    b'{"prediction": "a", "references": ["b"]}{"prediction": "c", "references": ["d"]}',
    b'["a", "b"]',
    b'{broken',
    b'\xef\xbb\xbf{"prediction": "bom", "references": ["b"]}',
    b'{"prediction": "caf\xc3\xa9", "references": ["\xff\xfe"]}',
    b'{"prediction": "x", "references": ["y"], "question": 5}',
    b'{"prediction": "x", "references": ["y"], "question": ""}',
    b'{"prediction": "' + b"w" * 50 + b'", "references": ["y"]}',
    b'{"prediction": "x", "references": ["' + b"w" * 50 + b'"]}',
    b'{"prediction": "x", "references": ["y", "z", "v", "u"]}',
    b'{"prediction": "x\\r\\ny", "references": ["y"], "extra": {"nested": [1, 2]}}',
    b'{"prediction": "x", "references": ["y"]}\r',
]
MAPPING = ColumnMapping(id="id", system="system", question="question", human="human",
                        max_references=3, keep=("prediction", "references"))


def _lines(n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if rng.random() < 0.3:
            out.append(rng.choice(ODD_LINES))
        elif rng.random() < 0.05:
            out.append(b"   ")
        else:
            row = {**GOOD, "id": f"r{i}", "prediction": f"answer {i} \u00e9",
                   "human": rng.choice([0, 1, 0.25, None])}
            out.append(json.dumps(row, ensure_ascii=rng.random() < 0.5).encode())
    return b"\n".join(out) + (b"\n" if seed % 2 else b"")


def _read(path: str, columnar: bool, monkeypatch, split: ReadSplit | None = None,
          fmt: str = "jsonl") -> tuple:
    monkeypatch.setattr(columnar_module, "columnar_mapping",
                        columnar_mapping if columnar else (lambda mapping: False))
    fn = ReadRowsFn(MAPPING, max_text_chars=40, batch_rows=7)
    fn.start_bundle()
    rows, dead = [], []
    for out in fn.process(split or ReadSplit(path, fmt)):
        if isinstance(out, beam.pvalue.TaggedOutput):
            dead.append(out.value)
        else:
            rows += out.rows
    return rows, dead


@pytest.mark.parametrize("seed", range(4))
def test_the_columnar_path_gives_the_per_row_paths_rows_and_dead_letters(
        tmp_path, monkeypatch, seed):
    path = tmp_path / "in.jsonl"
    path.write_bytes(_lines(600, seed))
    columnar = _read(str(path), True, monkeypatch)
    per_row = _read(str(path), False, monkeypatch)
    assert columnar == per_row
    assert len(per_row[0]) > 300 and len(per_row[1]) > 50  # both kinds were met
    # byte ranges too: the same rows whichever way the file is cut
    size = path.stat().st_size
    ranged = ReadSplit(str(path), "jsonl", 0, size // 2, 1, size=size)
    assert _read(str(path), True, monkeypatch, ranged) == _read(
        str(path), False, monkeypatch, ranged)


@pytest.mark.parametrize("human", ["float", "int", "text"])
def test_parquet_batches_give_the_per_row_paths_rows(tmp_path, monkeypatch, human):
    """Typed columns (a human value as float, int or text; nulls in lists; null texts;
    blank and long texts): the same rows and dead letters both ways."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(3)
    humans = {"float": lambda i: rng.choice([0.5, None, float("nan")]),
              "int": lambda i: rng.choice([0, 1, None]),
              "text": lambda i: rng.choice(["1", "NA", None, "x"])}[human]
    rows = [{"id": rng.choice([f"r{i}", None]), "system": "s", "question": rng.choice(
                ["q?", None, "w" * 60]),
             "prediction": rng.choice([f"answer {i}", " ", None, "\u3000", "w" * 60]),
             "references": rng.choice([["gold"], ["gold", None], [], None, [" "], ["a"] * 4]),
             "human": humans(i)} for i in range(400)]
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=150)
    columnar = _read(str(path), True, monkeypatch, fmt="parquet")
    assert columnar == _read(str(path), False, monkeypatch, fmt="parquet")
    assert len(columnar[0]) > 20 and len(columnar[1]) > 100


def test_clean_blocks_are_read_as_columns_and_a_broken_line_sends_only_its_part(
        monkeypatch):
    columns = ColumnarRows(MAPPING, 40)
    lines = [(i + 1, json.dumps({**GOOD, "id": f"r{i}"}).encode() + b"\n")
             for i in range(64)]
    assert all(row is not None for _, _, row in columns.jsonl_block(lines, "f"))
    lines[40] = (41, b"{broken\n")
    left = [n for n, _, row in columns.jsonl_block(lines, "f") if row is None]
    assert 41 in left and len(left) <= SMALLEST_PART
    rows = [row for _, _, row in columns.jsonl_block(lines, "f") if row is not None]
    assert rows[0].source.key == "f:1" and rows[0].example.references == ("gold",
                                                                          "other gold")
    assert rows[0].kept == (("prediction", "an answer"), ("references", ["gold",
                                                                         "other gold"]))


def test_only_mappings_it_can_read_as_columns_go_that_way():
    assert columnar_mapping(ColumnMapping())
    assert columnar_mapping(ColumnMapping(keep=("question",)))
    assert not columnar_mapping(ColumnMapping(references=("ref1", "ref2")))
    assert not columnar_mapping(ColumnMapping(keep=("extra_column",)))
