"""The demo's step 0: its data set fetched into the data folder from a mirror URL, with no
shared data folder in reach, and found where the demo reads it."""

from __future__ import annotations

import pytest

from pipelines import demo
from tests.datasets.http_mirror import MirrorServer, closed_port
from tests.datasets.test_fetch import leftovers
from tests.datasets.test_registry import DEMO_READS, SHARED_DATA
from transforms.data import registry


@pytest.fixture
def shared_mirror():
    """The shared data folder served over HTTP (the real files: their checksums)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"no shared data folder at {SHARED_DATA}")
    srv = MirrorServer(SHARED_DATA)
    yield srv
    srv.close()


def test_the_demo_fetches_its_data_from_a_mirror_url(tmp_path, shared_mirror, capsys,
                                                     monkeypatch):
    monkeypatch.setattr(demo, "SHARED_DATA", tmp_path / "no-shared-data")
    monkeypatch.delenv(registry.MIRROR_ENV, raising=False)
    assert demo.default_mirror() is None  # nothing but the original hosts
    data = tmp_path / "cache"
    demo.fetch_data(data, shared_mirror.url)
    printed = capsys.readouterr().out.splitlines()
    count = len(registry.select(["demo"]))
    assert printed == [f"[0/3] data: {count} files in {data} ...",
                       f"      0 already there, {count} fetched from {shared_mirror.url}; "
                       "every SHA-256 checked"]
    assert DEMO_READS <= set(leftovers(data))
    assert set(leftovers(data)) == {e.path for e in registry.select(["demo"])}
    demo.fetch_data(data, shared_mirror.url)
    assert capsys.readouterr().out.splitlines()[1] == (
        f"      {count} already there, 0 fetched; every SHA-256 checked")


def test_a_demo_without_its_data_stops_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(registry.MIRROR_ENV, raising=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.txt").write_text("an earlier run's output")
    base = f"http://127.0.0.1:{closed_port()}"
    assert demo.main(["--data", str(tmp_path / "cache"), "--mirror", base,
                      "--output", str(out)]) == 2
    first = registry.select(["demo"])[0]
    assert capsys.readouterr().err.splitlines() == [
        f"python -m pipelines.demo: error: {first.name}: the host refused the connection "
        f"({base}/{first.path})"]
    assert (out / "kept.txt").is_file()  # nothing is wiped before the data is there
    assert leftovers(tmp_path / "cache") == []


def test_the_shared_folder_is_the_default_mirror_where_it_exists(tmp_path, monkeypatch):
    monkeypatch.delenv(registry.MIRROR_ENV, raising=False)
    monkeypatch.setattr(demo, "SHARED_DATA", tmp_path)
    assert demo.default_mirror() == str(tmp_path)
    monkeypatch.setenv(registry.MIRROR_ENV, "https://example.org/qa-data")
    assert demo.default_mirror() == "https://example.org/qa-data"
