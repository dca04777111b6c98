"""`qa-data` on the command line: exit status and the one line of an error."""

from __future__ import annotations

import pytest

from pipelines import fetch_data
from tests.datasets.http_mirror import MirrorServer, closed_port
from tests.datasets.test_fetch import SAS, STS, leftovers, make_entry
from transforms.data import registry


@pytest.fixture
def fake_registry(monkeypatch):
    entries = {e.name: e for e in (
        make_entry("sts-head", "stsb/sts-dev.csv", STS, url="https://example.org/sts.csv",
                   sets=["demo"]),
        make_entry("sas-head", "judgments/sas/SQuAD_SAS.csv", SAS, sets=["tests"]))}
    monkeypatch.setattr(registry, "load_registry", lambda: entries)
    return entries


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "mirror"
    (root / "stsb").mkdir(parents=True)
    (root / "stsb" / "sts-dev.csv").write_bytes(STS)
    srv = MirrorServer(root)
    yield srv
    srv.close()


def test_fetch_from_a_mirror_url(tmp_path, fake_registry, server, capsys, monkeypatch):
    monkeypatch.setenv(registry.MIRROR_ENV, server.url)  # read when the parser is built
    cache = tmp_path / "cache"
    assert fetch_data.main(["fetch", "demo", "--data_dir", str(cache)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["fetched", "sts-head", "stsb/sts-dev.csv", "<-",
                              f"{server.url}/stsb/sts-dev.csv"]
    assert out[-1] == f"1 data set(s) in {cache} (1 fetched from the mirror {server.url})"
    assert fetch_data.main(["fetch", "sts-head", "--data_dir", str(cache)]) == 0
    assert capsys.readouterr().out.split()[:2] == ["present", "sts-head"]


def test_a_failure_is_one_line_and_status_2(tmp_path, fake_registry, capsys):
    base = f"http://127.0.0.1:{closed_port()}"
    cache = tmp_path / "cache"
    assert fetch_data.main(["fetch", "sts-head", "--data_dir", str(cache),
                            "--mirror", base]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"qa-data: error: sts-head: the host refused the connection "
        f"({base}/stsb/sts-dev.csv)"]
    assert leftovers(cache) == []


def test_an_entry_without_url_and_no_mirror(tmp_path, fake_registry, capsys, monkeypatch):
    monkeypatch.delenv(registry.MIRROR_ENV, raising=False)
    assert fetch_data.main(["fetch", "sas-head", "--data_dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "qa-data: error: sas-head: no known public source: the source of this test file is "
        "not known; give --mirror (a folder or URL holding judgments/sas/SQuAD_SAS.csv)"]


def test_unknown_name_and_bad_timeout(tmp_path, fake_registry, capsys):
    assert fetch_data.main(["fetch", "squad", "--data_dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("qa-data: error: unknown data set 'squad'; ")
    assert fetch_data.main(["fetch", "--timeout", "0"]) == 2
    assert capsys.readouterr().err == "qa-data: error: --timeout must be > 0, got 0.0\n"


def test_list_and_dir(tmp_path, fake_registry, capsys, monkeypatch):
    (tmp_path / "stsb").mkdir()
    (tmp_path / "stsb" / "sts-dev.csv").write_bytes(STS)
    assert fetch_data.main(["list", "--data_dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"cache: {tmp_path}"
    assert lines[1].split()[:2] == ["ok", "sts-head"]
    assert lines[4].split()[:2] == ["missing", "sas-head"]
    assert lines[5].strip() == "no known URL (a mirror is needed) [upstream unchecked]"
    monkeypatch.setenv(registry.DATA_DIR_ENV, str(tmp_path / "elsewhere"))
    assert fetch_data.main(["dir"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'elsewhere'}\n"
