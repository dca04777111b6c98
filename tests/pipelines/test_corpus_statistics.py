"""Frozen corpus statistics end to end: --save_corpus_statistics, --corpus_statistics."""

from __future__ import annotations

import pandas as pd
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
    from transforms.scoring.write import read_signatures

    return read_signatures(f"{prefix}.scores.parquet")[column]


@pytest.mark.slow
def test_frozen_statistics_reproduce_the_run_and_name_their_source(tmp_path):
    saved = str(tmp_path / "avsd.stats.parquet")
    _run([*AVSD_FLAGS, "--metrics", "cider,bleu1", "--output", str(tmp_path / "run"),
          "--save_corpus_statistics", saved])
    table = pq.read_table(saved).to_pandas()
    sizes = table[table["ngram"].isna()]
    assert sorted(sizes["corpus"]) == [0, 1, 2, 3, 4]
    assert set(sizes["df"]) == {1000}  # every AVSD row has 5 references
    assert (table["df"] >= 2).all() and len(table) > 1000

    _run([*AVSD_FLAGS, "--metrics", "cider,bleu1", "--output", str(tmp_path / "frozen"),
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
    _run([*AVSD_FLAGS[2:], "--input", str(subset), "--metrics", "cider",
          "--output", str(tmp_path / "subset"), "--save_corpus_statistics", other])
    _run([*AVSD_FLAGS, "--metrics", "cider", "--output", str(tmp_path / "other"),
          "--corpus_statistics", other])
    differs = _scores(str(tmp_path / "other"))
    assert differs["cider"].tolist() != run["cider"].tolist()
    assert _signature(tmp_path / "other", "cider") != _signature(tmp_path / "frozen", "cider")


def test_statistics_flags_are_checked_at_launch(tmp_path):
    base = {"input": AVSD, "output": str(tmp_path / "x"), "prediction_column": "answer",
            "reference_prefix": "reference"}
    with pytest.raises(ValueError, match="need a metric with document frequencies"):
        build_config(metrics="f1", save_corpus_statistics=str(tmp_path / "s.parquet"),
                     **base)
    with pytest.raises(ValueError, match="cannot be read"):
        build_config(metrics="cider", corpus_statistics=str(tmp_path / "missing.parquet"),
                     **base)
    not_stats = tmp_path / "not.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(not_stats)
    with pytest.raises(ValueError, match="not a corpus statistics file"):
        build_config(metrics="cider", corpus_statistics=str(not_stats), **base)
