"""Data files that cannot be read (cut short, corrupt, not UTF-8, not JSON, not Parquet):
every reader of the training and data commands names the file in one line, exit
status 2 (transforms/training/data_files.py)."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import train_cross_encoder, train_keyphrase
from transforms.training import data_files, evouna, short_answers

SQUAD_JSON = json.dumps({"data": [{"title": "T", "paragraphs": [{
    "context": "Alpha is beta. Gamma.",
    "qas": [{"id": "1", "question": "What?", "answers": [{"text": "beta",
                                                          "answer_start": 9}]}]}]}]})
CUT_SHORT = "(the compressed data ends early: the file is cut short)"
# An EVOUNA-shaped list, long enough that half of it compressed is cut inside the data.
EVOUNA_JSON = json.dumps([{"question": f"question {i}?", "golden_answer": f"answer {i}"}
                          for i in range(300)])


# `main` configures logging: put back after each test (conftest.py)
pytestmark = pytest.mark.usefixtures("restored_logging")


def _cut_gzip(path, text: str):
    data = gzip.compress(text.encode())
    path.write_bytes(data[: len(data) // 2])
    return path


def _corrupt_bz2(path, text: str):
    data = bz2.compress(text.encode())
    path.write_bytes(data[:20] + b"\x00" * 10 + data[30:])
    return path


def _cut_parquet(path):
    table = pa.table({"title": ["A"], "link_text": ["a"], "label": [1], "split": ["train"],
                      "source_title": [""]})
    pq.write_table(table, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _error_line(main, argv, capsys) -> str:
    """The command's whole stderr: one line, `<prog>: error: ...`, and exit status 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


SA = "python -m transforms.training.short_answers: error: "


def test_short_answers_names_a_squad_file_cut_short(tmp_path, capsys):
    squad = _cut_gzip(tmp_path / "dev.json.gz", SQUAD_JSON * 20)
    line = _error_line(short_answers.main, ["--squad", str(squad), "--output",
                                            str(tmp_path / "out")], capsys)
    assert line.startswith(f"{SA}SQuAD file {squad}: cannot be read: EOFError: ")
    assert line.endswith(CUT_SHORT)
    assert not (tmp_path / "out").exists()


def test_short_answers_names_a_corrupt_bz2_squad_file(tmp_path, capsys):
    squad = _corrupt_bz2(tmp_path / "dev.json.bz2", SQUAD_JSON * 20)
    line = _error_line(short_answers.main, ["--squad", str(squad), "--output",
                                            str(tmp_path / "out")], capsys)
    assert line.startswith(f"{SA}SQuAD file {squad}: cannot be read: OSError: ")


def test_short_answers_names_a_cut_parquet_shard_of_the_wes_corpus(tmp_path, capsys):
    corpus = tmp_path / "wes-k2"
    corpus.mkdir()
    shard = _cut_parquet(corpus / "train-00000-of-00001.parquet")
    line = _error_line(short_answers.main, ["--wes", str(corpus), "--output",
                                            str(tmp_path / "out")], capsys)
    assert line.startswith(f"{SA}WES corpus {corpus}: cannot be read: ArrowInvalid: ")
    assert str(shard) in line


def test_short_answers_names_an_evouna_file_not_utf8(tmp_path, capsys):
    tq = tmp_path / "TQ.json"
    tq.write_bytes(b'[{"question": "\xff\xfe"}]')
    line = _error_line(short_answers.main, ["--evouna", str(tq), "--output",
                                            str(tmp_path / "out")], capsys)
    assert line.startswith(f"{SA}EVOUNA file {tq}: cannot be read as UTF-8 text (")


@pytest.mark.parametrize("name, content, reason", [
    ("TQ.json", b"[{", "not valid JSON (Expecting"),
    ("TQ.json.gz", gzip.compress(EVOUNA_JSON.encode())[:200], "cannot be read: EOFError: "),
])
def test_evouna_names_its_input(name, content, reason, tmp_path, capsys):
    tq = tmp_path / name
    tq.write_bytes(content)
    line = _error_line(evouna.main, ["--input", str(tq), "--output", str(tmp_path / "out")],
                       capsys)
    assert line.startswith(f"python -m transforms.training.evouna: error: EVOUNA file {tq}: "
                           f"{reason}")
    assert not (tmp_path / "out").exists()


def test_train_keyphrase_names_a_squad_file_cut_short(tmp_path, capsys):
    squad = _cut_gzip(tmp_path / "dev.json.gz", SQUAD_JSON * 20)
    line = _error_line(train_keyphrase.main, ["--squad", str(squad), "--output",
                                              str(tmp_path / "out")], capsys)
    assert line.startswith(f"python -m pipelines.train_keyphrase: error: SQuAD file {squad}: "
                           "cannot be read: EOFError: ")
    assert not (tmp_path / "out").exists()


def _train_file(tmp_path, fmt):
    """A file of `fmt` that cannot be read, and the start of the reason."""
    if fmt == "wes":
        return _cut_parquet(tmp_path / "train-00000-of-00001.parquet"), "cannot be read: "
    if fmt == "stsb":
        return (_cut_gzip(tmp_path / "sts-train.csv.gz", "g\tf\t2012\t1\t4.0\ta\tb\n" * 50),
                "cannot be read: EOFError: ")
    path = tmp_path / "train.jsonl.bz2"
    return _corrupt_bz2(path, json.dumps({"question": "q"}) * 50), "cannot be read: OSError"


@pytest.mark.parametrize("fmt", ["wes", "stsb", "bem"])
def test_train_cross_encoder_names_a_training_file_that_cannot_be_read(fmt, tmp_path, capsys):
    path, reason = _train_file(tmp_path, fmt)
    line = _error_line(train_cross_encoder.main, ["--format", fmt, "--train_file", str(path),
                                                  "--output", str(tmp_path / "out")], capsys)
    assert line.startswith(f"python -m pipelines.train_cross_encoder: error: training data "
                           f"{path}: {reason}")
    assert not (tmp_path / "out").exists()


def test_train_cross_encoder_names_an_evouna_file_cut_short(tmp_path, capsys):
    tq = _cut_gzip(tmp_path / "TQ.json.gz", EVOUNA_JSON)
    line = _error_line(train_cross_encoder.main, ["--format", "evouna", "--input", str(tq),
                                                  "--output", str(tmp_path / "out")], capsys)
    assert line.startswith(f"python -m pipelines.train_cross_encoder: error: EVOUNA file {tq}: "
                           "cannot be read: EOFError: ")


@pytest.mark.parametrize("name, write, reason", [
    ("a.json.gz", lambda p: _cut_gzip(p, EVOUNA_JSON), "cannot be read: EOFError: "),
    ("a.json.bz2", lambda p: _corrupt_bz2(p, EVOUNA_JSON), "cannot be read: OSError: "),
    ("a.json.xz", lambda p: p.write_bytes(lzma.compress(EVOUNA_JSON.encode())[:200]),
     "cannot be read: EOFError: "),
    ("a.json", lambda p: p.write_bytes(b'["\xff"]'), "cannot be read as UTF-8 text ("),
    ("a.json", lambda p: p.write_text("[1, "), "not valid JSON (Expecting value"),
])
def test_read_json_names_the_file(name, write, reason, tmp_path):
    path = tmp_path / name
    write(path)
    with pytest.raises(data_files.TrainingDataError) as refused:
        data_files.read_json("test file", str(path))
    assert str(refused.value).startswith(f"test file {path}: {reason}")
    assert data_files.TrainingDataError.user_file_error and issubclass(
        data_files.TrainingDataError, ValueError)


def test_compressed_text_is_read_whole_and_a_missing_file_named(tmp_path):
    for name, compress in (("a.json.gz", gzip.compress), ("a.json.bz2", bz2.compress),
                           ("a.json.xz", lzma.compress), ("a.json", bytes)):
        (tmp_path / name).write_bytes(compress(b'{"k": ["v\xc3\xa9"]}'))
        assert data_files.read_json("test file", str(tmp_path / name)) == {"k": ["v\u00e9"]}
    with pytest.raises(data_files.TrainingDataError, match="test file .*none.json does not "
                                                           "exist$"):
        data_files.read_json("test file", str(tmp_path / "none.json"))


def test_a_readers_own_value_error_passes_through(tmp_path):
    """A problem in what a readable file says is the reader's ValueError, unchanged."""
    with pytest.raises(ValueError, match="^line 3: label out of range$") as raised:
        with data_files.reading("test file", str(tmp_path / "a.jsonl")):
            raise ValueError("line 3: label out of range")
    assert not isinstance(raised.value, data_files.TrainingDataError)
