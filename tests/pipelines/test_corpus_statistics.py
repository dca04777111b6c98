"""Frozen corpus statistics end to end: --save_corpus_statistics, --corpus_statistics."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.pipelines.test_score_predictions import AVSD, _run
from transforms.scoring.config import build_config

AVSD_FLAGS = ["--input", AVSD, "--prediction_column", "answer", "--reference_prefix",
              "reference", "--max_references", "5", "--human_column", "scores"]


def _scores(prefix: str) -> pd.DataFrame:
    return pd.read_parquet(prefix + ".scores.parquet").sort_values("row").reset_index(
        drop=True)


def _signature(prefix, column: str) -> str:
    from transforms.scoring.outputs.write import read_signatures

    return read_signatures(f"{prefix}.scores.parquet")[column]


@pytest.mark.slow
def test_frozen_statistics_reproduce_the_run_and_name_their_source(tmp_path):
    # No human column: four runs of 1,000 rows, and the report (resampled intervals, a
    # plot) is not what this test is about.
    flags = AVSD_FLAGS[:-2]
    saved = str(tmp_path / "avsd.stats.parquet")
    _run([*flags, "--metrics", "cider,bleu1", "--output", str(tmp_path / "run"),
          "--save_corpus_statistics", saved])
    table = pq.read_table(saved).to_pandas()
    sizes = table[table["ngram"].isna()]
    assert sorted(sizes["corpus"]) == [0, 1, 2, 3, 4]
    assert set(sizes["df"]) == {1000}  # every AVSD row has 5 references
    assert (table["df"] >= 2).all() and len(table) > 1000

    _run([*flags, "--metrics", "cider,bleu1", "--output", str(tmp_path / "frozen"),
          "--corpus_statistics", saved])
    run, frozen = _scores(str(tmp_path / "run")), _scores(str(tmp_path / "frozen"))
    assert frozen["cider"].tolist() == run["cider"].tolist()  # exactly
    assert _signature(tmp_path / "run", "cider").endswith("|stats:run")
    assert "|stats:file:" in _signature(tmp_path / "frozen", "cider")
    assert _signature(tmp_path / "frozen", "bleu1") == _signature(tmp_path / "run", "bleu1")

    # statistics of another corpus (the first 200 rows): other values, other signature
    subset = tmp_path / "avsd200.csv"
    pd.read_csv(AVSD).head(200).to_csv(subset, index=False)
    other = str(tmp_path / "avsd200.stats.parquet")
    _run([*flags[2:], "--input", str(subset), "--metrics", "cider",
          "--output", str(tmp_path / "subset"), "--save_corpus_statistics", other])
    _run([*flags, "--metrics", "cider", "--output", str(tmp_path / "other"),
          "--corpus_statistics", other])
    differs = _scores(str(tmp_path / "other"))
    assert differs["cider"].tolist() != run["cider"].tolist()
    assert _signature(tmp_path / "other", "cider") != _signature(tmp_path / "frozen", "cider")


def test_statistics_flags_are_checked_at_launch(tmp_path):
    base = {"input": AVSD, "output": str(tmp_path / "x"), "prediction_column": "answer",
            "reference_prefix": "reference"}
    with pytest.raises(ValueError, match=r"need a metric with corpus statistics \(cider, or bertscore with --bertscore_idf\)"):
        build_config(metrics="f1", save_corpus_statistics=str(tmp_path / "s.parquet"),
                     **base)
    with pytest.raises(ValueError, match="cannot be read"):
        build_config(metrics="cider", corpus_statistics=str(tmp_path / "missing.parquet"),
                     **base)
    not_stats = tmp_path / "not.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(not_stats)
    with pytest.raises(ValueError, match="not a corpus statistics file"):
        build_config(metrics="cider", corpus_statistics=str(not_stats), **base)


def test_saving_statistics_refuses_a_frozen_run_and_an_existing_file(tmp_path):
    """A run scored against a file computes no statistics of its own to save, and an
    existing statistics file is replaced only with --overwrite (runs scored against it
    name its hash)."""
    from transforms.scoring.statistics.statistics_file import schema

    base = {"input": AVSD, "output": str(tmp_path / "x"), "prediction_column": "answer",
            "reference_prefix": "reference", "metrics": "cider"}
    saved = tmp_path / "saved.stats.parquet"
    pq.write_table(pa.Table.from_pylist(
        [{"statistic": "cider_df:per_position", "tokenizer": "python", "corpus": 0,
          "ngram": None, "df": 3}], schema=schema()), saved)
    with pytest.raises(ValueError, match=r"--save_corpus_statistics writes the statistics "
                       r"of the scored input.*give one of the two"):
        build_config(corpus_statistics=str(saved),
                     save_corpus_statistics=str(tmp_path / "new.parquet"), **base)
    with pytest.raises(ValueError, match=r"--save_corpus_statistics .*saved\.stats\.parquet"
                       r"' exists; pass --overwrite to replace it"):
        build_config(save_corpus_statistics=str(saved), **base)
    config = build_config(save_corpus_statistics=str(saved), overwrite=True, **base)
    assert config.summary_metadata()["saved_corpus_statistics"] == str(saved)
    config = build_config(corpus_statistics=str(saved), **base)
    assert config.summary_metadata()["corpus_statistics"] == str(saved)
    assert "saved_corpus_statistics" not in config.summary_metadata()


@pytest.mark.slow
def test_frozen_bertscore_idf_reproduces_the_run(tmp_path):
    """BERTScore idf saved beside CIDEr-D, then alone; scoring against either file gives
    the run's values exactly and names the file; another corpus's idf changes both."""
    rows = tmp_path / "avsd60.csv"
    pd.read_csv(AVSD).head(60).to_csv(rows, index=False)
    # No human column: six runs, and the report (resampled intervals, a plot) is not what
    # this test is about.
    flags = [*AVSD_FLAGS[2:-2], "--input", str(rows), "--bertscore_idf"]
    both = str(tmp_path / "both.stats.parquet")
    _run([*flags, "--metrics", "bertscore,cider", "--output", str(tmp_path / "run"),
          "--save_corpus_statistics", both])
    table = pq.read_table(both).to_pandas()
    idf = table[table["statistic"].str.startswith("bertscore_idf|")]
    assert set(idf["tokenizer"]) == {"checkpoint"} and set(idf["corpus"]) == {-1}
    assert idf[idf["ngram"].isna()]["df"].tolist() == [60 * 5]  # every reference a document
    assert (idf["df"] >= 1).all() and (idf["df"] == 1).any()  # df 1 matters to idf
    assert (table[~table.index.isin(idf.index)]["df"] >= 2).all()  # CIDEr-D rows as before

    only_idf = str(tmp_path / "idf.stats.parquet")
    _run([*flags, "--metrics", "bertscore", "--output", str(tmp_path / "idf_run"),
          "--save_corpus_statistics", only_idf])
    assert set(pq.read_table(only_idf).column("statistic").to_pylist()) == set(idf["statistic"])

    run = _scores(str(tmp_path / "run"))
    for saved, name in ((both, "frozen_both"), (only_idf, "frozen_idf")):
        _run([*flags, "--metrics", "bertscore", "--output", str(tmp_path / name),
              "--corpus_statistics", saved])
        assert _scores(str(tmp_path / name))["bertscore"].tolist() == run["bertscore"].tolist()
        assert "|stats:file:" in _signature(tmp_path / name, "bertscore")
    assert _signature(tmp_path / "run", "bertscore").endswith("|stats:run")

    # idf from a smaller corpus (the first 20 rows): other values, other signature
    few = tmp_path / "avsd20.csv"
    pd.read_csv(AVSD).head(20).to_csv(few, index=False)
    other = str(tmp_path / "few.stats.parquet")
    _run([*flags, "--input", str(few), "--metrics", "bertscore",
          "--output", str(tmp_path / "few"), "--save_corpus_statistics", other])
    _run([*flags, "--metrics", "bertscore", "--output", str(tmp_path / "other"),
          "--corpus_statistics", other])
    assert _scores(str(tmp_path / "other"))["bertscore"].tolist() != run["bertscore"].tolist()
    assert (_signature(tmp_path / "other", "bertscore")
            != _signature(tmp_path / "frozen_idf", "bertscore"))


def test_a_file_without_the_idf_is_refused_at_launch(tmp_path):
    """CIDEr-D statistics alone cannot freeze bertscore's idf: the flag names what is missing."""
    from transforms.scoring.statistics.statistics_file import schema

    cider_only = tmp_path / "cider.stats.parquet"
    pq.write_table(pa.Table.from_pylist(
        [{"statistic": "cider_df:per_position", "tokenizer": "python", "corpus": 0,
          "ngram": None, "df": 3}], schema=schema()), cider_only)
    with pytest.raises(ValueError, match=r"holds no bertscore_idf\|.*save them with"):
        build_config(input=AVSD, output=str(tmp_path / "x"), prediction_column="answer",
                     reference_prefix="reference", metrics="bertscore",
                     model_flags={"bertscore_idf": True}, corpus_statistics=str(cider_only))


def _statistics_file(path, rows: int = 2000) -> None:
    from transforms.scoring.statistics.statistics_file import schema

    pq.write_table(pa.Table.from_pylist(
        [{"statistic": "cider_df:per_position", "tokenizer": "python", "corpus": 0,
          "ngram": f"word{i}", "df": 2 + i % 7} for i in range(rows)], schema=schema()),
        path, row_group_size=500)


def test_a_damaged_statistics_file_ends_in_one_line_naming_it(tmp_path, capsys):
    """A cut statistics file ends the run in one line naming it (pyarrow's own error says
    only "Parquet file size is 4008 bytes, smaller than the size reported by footer's ...",
    not which file)."""
    from pipelines.score_predictions import main

    damaged = tmp_path / "stats.parquet"
    _statistics_file(damaged)
    blob = damaged.read_bytes()
    damaged.write_bytes(blob[: len(blob) // 2])
    code = main([*AVSD_FLAGS, "--metrics", "cider", "--output", str(tmp_path / "run"),
                 "--corpus_statistics", str(damaged), "--runner=FnApiRunner"])
    assert code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines()
               if line.startswith("qa-score")]
    assert line.startswith(f"qa-score: error: --corpus_statistics {damaged}: cannot be "
                           "read as Parquet: ArrowInvalid: ")


def test_statistics_read_on_workers_name_the_file_and_notice_a_rewrite(tmp_path):
    """A row group that cannot be read, and a file rewritten after launch (same size),
    fail where the statistics are read, naming the file."""
    import os

    import apache_beam as beam

    from transforms.metrics.cider import CiderDocumentFrequency
    from transforms.scoring.statistics.statistics_file import ReadCorpusStatistics

    path = tmp_path / "stats.parquet"
    _statistics_file(path)
    statistic = CiderDocumentFrequency("per_position", "python")
    read = ReadCorpusStatistics(str(path), [statistic], 4)  # built on the launcher
    blob = bytearray(path.read_bytes())
    offset = pq.ParquetFile(path).metadata.row_group(2).column(3).data_page_offset
    for i in range(offset, offset + 32):
        blob[i] ^= 0xFF
    path.write_bytes(bytes(blob))
    stamp = os.stat(path).st_mtime + 5
    os.utime(path, (stamp, stamp))
    with pytest.raises(ValueError, match=rf"--corpus_statistics {path}: changed "
                       "while the run read it"):
        with beam.Pipeline("FnApiRunner") as p:
            _ = p | read
    read = ReadCorpusStatistics(str(path), [statistic], 4)  # same file, launched anew
    with pytest.raises(ValueError, match=rf"--corpus_statistics {path}: cannot be "
                       r"read \(row group 2\): OSError"):
        with beam.Pipeline("FnApiRunner") as p:
            _ = p | read
