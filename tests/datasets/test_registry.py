"""The packaged registry: well-formed, honest about its sources, and (where the shared
data folder exists) matching every file there byte for byte."""

from __future__ import annotations

import copy
import gzip
import hashlib
import os
from pathlib import Path

import pytest

from tests.bench.bench_data import BENCH_READS
from transforms.data import registry
from transforms.data.registry import RegistryError, default_data_dir, parse_registry, select

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("QA_EVAL_SHARED_DATA", REPO.parent / "shared" / "data"))
ENTRIES = registry.load_registry()

# The files the demo opens (pipelines/demo.py, transforms/demo/): its set must hold them.
DEMO_READS = {"wiki/enwiki-20160501-p10p30302-sample.xml.bz2", "squad/dev-v1.1.json.gz",
              "stsb/sts-train.csv", "stsb/sts-dev.csv", "stsb/sts-test.csv",
              "judgments/evouna/TQ.json", "judgments/kpqa/avsd_all.csv",
              "judgments/sas/SQuAD_SAS.csv"}


@pytest.mark.parametrize("entry", list(ENTRIES.values()), ids=list(ENTRIES))
def test_every_entry_matches_the_shared_data(entry):
    if not SHARED_DATA.is_dir():
        pytest.skip(f"no shared data folder at {SHARED_DATA}")
    path = SHARED_DATA / entry.path
    assert path.is_file(), f"{entry.name}: {path} is missing"
    data = path.read_bytes()
    assert len(data) == entry.size
    assert hashlib.sha256(data).hexdigest() == entry.sha256
    if entry.content_sha256:
        content = gzip.decompress(data)
        assert hashlib.sha256(content).hexdigest() == entry.content_sha256
        assert len(content) == entry.content_size


def test_the_registry_covers_the_shared_data_folder():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"no shared data folder at {SHARED_DATA}")
    files = {str(p.relative_to(SHARED_DATA)) for p in SHARED_DATA.rglob("*") if p.is_file()}
    assert files - {"README.md"} == {e.path for e in ENTRIES.values()}


@pytest.mark.parametrize("entry", list(ENTRIES.values()), ids=list(ENTRIES))
def test_every_entry_says_where_it_comes_from(entry):
    assert entry.licence and entry.description
    if entry.url is None:
        assert entry.note, "an entry without a URL says why"
    else:
        assert entry.url.startswith(("https://", "http://"))
        assert entry.url_source, "a URL names where it comes from"
    if entry.transform is not None and entry.transform.op == "gzip":
        assert entry.content_sha256 and entry.path.endswith(".gz")
    # Nothing could be checked against the live hosts here (no internet): the first run
    # with internet confirms them (docs/decisions.md).
    assert entry.upstream_checked is False


def test_the_demo_set_holds_what_the_demo_reads():
    assert DEMO_READS <= {e.path for e in select(["demo"])}


def test_the_bench_set_holds_what_the_benchmarks_read():
    assert set(BENCH_READS) <= {e.path for e in select(["bench"])}


def test_select_by_name_set_and_all():
    assert [e.name for e in select(["squad-dev"])] == ["squad-dev"]
    assert [e.name for e in select(["evouna-tq", "squad-dev"])] == ["squad-dev", "evouna-tq"]
    assert select([]) == select(["all"]) == list(ENTRIES.values())
    assert {e.name for e in select(["bench"])} >= {"wiki-sample", "evouna-tq"}
    with pytest.raises(RegistryError, match=r"^unknown data set 'squad'; known: wiki-sample, "):
        select(["squad"])


@pytest.mark.parametrize("environ, expected", [
    ({"QA_EVAL_DATA_DIR": "/data/qa", "XDG_CACHE_HOME": "/xdg"}, "/data/qa"),
    ({"XDG_CACHE_HOME": "/xdg"}, "/xdg/qa-eval"),
    ({}, str(Path.home() / ".cache" / "qa-eval")),
    ({"QA_EVAL_DATA_DIR": "", "XDG_CACHE_HOME": ""}, str(Path.home() / ".cache" / "qa-eval")),
])
def test_default_data_dir(environ, expected):
    assert str(default_data_dir(environ)) == expected


GOOD = {"name": "x", "path": "a/x.csv", "size": 3, "sha256": "0" * 64, "licence": "CC0",
        "upstream_checked": False, "url": "https://example.org/x.csv"}


@pytest.mark.parametrize("change, message", [
    ({"sha256": "ABC"}, "registry entry x: not a lower-case hex SHA-256: 'ABC'"),
    ({"path": "/etc/x"}, "registry entry x: path must be relative: '/etc/x'"),
    ({"path": "../x"}, "registry entry x: path must be relative: '../x'"),
    ({"url": None}, "registry entry x: no url and no note saying why"),
    ({"transform": {"op": "unrar"}}, "registry entry x: unknown transform 'unrar'; known: "
                                     "gzip, gunzip, extract"),
    ({"transform": {"op": "extract", "archive": "zip"}},
     "registry entry x: transform extract needs ['member']"),
    ({"transform": {"op": "extract", "archive": "7z", "member": "x"}},
     "registry entry x: archive '7z' is not one of zip, tar, tar.gz, tar.bz2"),
    ({"sets": ["examples"]}, "registry entry x: unknown sets ['examples']"),
    ({"licence": None}, None),
])
def test_malformed_entries_are_refused(change, message):
    raw = {**copy.deepcopy(GOOD), **change}
    if change == {"licence": None}:
        del raw["licence"]
        message = "registry entry x: no 'licence'"
    with pytest.raises(RegistryError) as caught:
        parse_registry({"entries": [raw]})
    assert str(caught.value) == message


def test_names_and_paths_are_unique():
    with pytest.raises(RegistryError, match="listed twice"):
        parse_registry({"entries": [GOOD, {**GOOD, "name": "y"}]})
    assert len(parse_registry({"entries": [GOOD]})) == 1
