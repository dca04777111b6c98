"""Where the benchmarks (and the tests' fixtures) read the public data.

The folder is `$QA_EVAL_SHARED_DATA` when set, else the data cache that `qa-data fetch`
fills (`transforms.data.registry.default_data_dir()`: `$QA_EVAL_DATA_DIR`, else
`~/.cache/qa-eval`). `make bench` fetches the registry's `bench` set into the cache first;
`BENCH_READS` lists the files the benchmarks open, and the `bench` set holds every one of
them (tests/datasets/test_registry.py). A benchmark whose file is missing exits with one
line naming the file and the command that fetches it (`require`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from transforms.data.registry import default_data_dir

SHARED_DATA_ENV = "QA_EVAL_SHARED_DATA"
FETCH_BENCH = "qa-data fetch bench (or: make data DATA_SETS=bench)"

WIKI_SAMPLE = "wiki/enwiki-20160501-p10p30302-sample.xml.bz2"
WIKI_TABLES = "wiki/enwiki-table-markup-sample.xml.bz2"
# make_dump's source dumps: every Wikipedia sample of the registry, in name order
WIKI_SOURCES = (WIKI_SAMPLE, WIKI_TABLES)
EVOUNA_TQ = "judgments/evouna/TQ.json"
KPQA_AVSD = "judgments/kpqa/avsd_all.csv"
KPQA_NRQA = "judgments/kpqa/nrqa_mhpgm.csv"
KPQA_SEMEVAL = "judgments/kpqa/semeval_mhpgm.csv"
KPQA = (KPQA_AVSD, KPQA_NRQA, KPQA_SEMEVAL)
SAS_SQUAD = "judgments/sas/SQuAD_SAS.csv"
# the judgment files of the lexical, model-metric and re-scoring benchmarks
JUDGMENTS = (*KPQA, SAS_SQUAD)
BENCH_READS = (*WIKI_SOURCES, EVOUNA_TQ, *JUDGMENTS)


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """$QA_EVAL_SHARED_DATA, else the data cache (`qa-data dir`)."""
    environ = os.environ if environ is None else environ
    if environ.get(SHARED_DATA_ENV):
        return Path(environ[SHARED_DATA_ENV]).expanduser()
    return default_data_dir(dict(environ))


def data_path(relative: str) -> Path:
    """A data file's path under `data_dir()`."""
    return data_dir() / relative


def require(*paths: str | os.PathLike) -> None:
    """Exits (status 1) with one line naming the first of `paths` that is not a file and
    the command that fetches it."""
    for path in paths:
        if not Path(path).is_file():
            raise SystemExit(f"benchmark data missing: {path}; fetch it with {FETCH_BENCH}")
