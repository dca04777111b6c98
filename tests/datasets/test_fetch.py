"""The fetcher against a real HTTP server on 127.0.0.1 and a mirror folder: files land
checked; every failure is one line naming the data set and the address and leaves
nothing that looks complete; a partial download is resumed."""

from __future__ import annotations

import gzip
import hashlib
import io
import socket
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.datasets.http_mirror import FIXTURES, MirrorServer, closed_port
from transforms.data.fetch import PART_SUFFIX, Fetcher, FetchError, fetch
from transforms.data.registry import entry_from_dict

STS = (FIXTURES / "sts-dev-head.csv").read_bytes()
SAS = (FIXTURES / "squad-sas-head.csv").read_bytes()


def make_entry(name: str, path: str, kept: bytes, url: str | None = None,
               transform: dict | None = None, **extra) -> object:
    raw = {"name": name, "path": path, "size": len(kept),
           "sha256": hashlib.sha256(kept).hexdigest(), "licence": "CC BY-SA 4.0",
           "upstream_checked": False, "url": url, "transform": transform, **extra}
    if url is None:
        raw.setdefault("note", "the source of this test file is not known")
    return entry_from_dict(raw)


def leftovers(folder: Path) -> list[str]:
    """Every file under `folder` (relative), partial ones included."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def mirror_dir(tmp_path) -> Path:
    root = tmp_path / "mirror"
    (root / "stsb").mkdir(parents=True)
    (root / "stsb" / "sts-dev.csv").write_bytes(STS)
    (root / "judgments" / "sas").mkdir(parents=True)
    (root / "judgments" / "sas" / "SQuAD_SAS.csv").write_bytes(SAS)
    return root


@pytest.fixture
def server(mirror_dir):
    srv = MirrorServer(mirror_dir)
    yield srv
    srv.close()


@pytest.fixture
def entries() -> list:
    return [make_entry("sts-head", "stsb/sts-dev.csv", STS),
            make_entry("sas-head", "judgments/sas/SQuAD_SAS.csv", SAS)]


@pytest.mark.parametrize("kind", ["url", "folder"])
def test_a_mirror_fills_the_cache_and_a_second_run_keeps_it(tmp_path, server, mirror_dir,
                                                            entries, kind):
    mirror = server.url if kind == "url" else str(mirror_dir)
    cache = tmp_path / "cache"
    outcomes = fetch(entries, cache, mirror)
    assert [o.status for o in outcomes] == ["fetched", "fetched"]
    assert outcomes[0].source == (f"{server.url}/stsb/sts-dev.csv" if kind == "url"
                                  else str(mirror_dir / "stsb" / "sts-dev.csv"))
    assert (cache / "stsb" / "sts-dev.csv").read_bytes() == STS
    assert leftovers(cache) == ["judgments/sas/SQuAD_SAS.csv", "stsb/sts-dev.csv"]
    requests = len(server.behaviour.requests)
    assert [o.status for o in fetch(entries, cache, mirror)] == ["present", "present"]
    assert len(server.behaviour.requests) == requests  # nothing downloaded again


def test_a_wrong_file_in_the_cache_is_replaced(tmp_path, server, entries):
    cache = tmp_path / "cache"
    (cache / "stsb").mkdir(parents=True)
    (cache / "stsb" / "sts-dev.csv").write_bytes(STS[:-1] + b"X")
    assert fetch(entries[:1], cache, server.url)[0].status == "fetched"
    assert (cache / "stsb" / "sts-dev.csv").read_bytes() == STS


def _one_line_error(entry, cache, mirror) -> str:
    with pytest.raises(FetchError) as caught:
        fetch([entry], cache, mirror)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_wrong_checksum(tmp_path, server, mirror_dir, entries):
    (mirror_dir / "stsb" / "sts-dev.csv").write_bytes(STS[:-1] + b"X")  # same size
    cache = tmp_path / "cache"
    url = f"{server.url}/stsb/sts-dev.csv"
    message = _one_line_error(entries[0], cache, server.url)
    assert message.startswith("sts-head: wrong checksum: SHA-256 ")
    assert message.endswith(f"expected {entries[0].sha256} ({url})")
    assert leftovers(cache) == []


def test_truncated_transfer_is_kept_partial_and_resumed(tmp_path, server, entries):
    cache = tmp_path / "cache"
    url = f"{server.url}/stsb/sts-dev.csv"
    server.behaviour.cut_after["/stsb/sts-dev.csv"] = 500
    message = _one_line_error(entries[0], cache, server.url)
    assert message == f"sts-head: truncated transfer: 500 of {len(STS):,} bytes arrived ({url})"
    assert leftovers(cache) == ["stsb/sts-dev.csv" + PART_SUFFIX]  # partial, named so
    assert (cache / "stsb" / ("sts-dev.csv" + PART_SUFFIX)).read_bytes() == STS[:500]
    server.behaviour.cut_after.clear()
    assert fetch(entries[:1], cache, server.url)[0].status == "fetched"
    assert server.behaviour.requests[-1] == ("/stsb/sts-dev.csv", "bytes=500-")
    assert (cache / "stsb" / "sts-dev.csv").read_bytes() == STS
    assert leftovers(cache) == ["stsb/sts-dev.csv"]


def test_short_content_is_a_truncated_transfer(tmp_path, server, entries):
    """The server announces and sends fewer bytes than the registry's size."""
    cache = tmp_path / "cache"
    server.behaviour.short["/stsb/sts-dev.csv"] = 100
    message = _one_line_error(entries[0], cache, server.url)
    assert message == (f"sts-head: truncated transfer: 100 of {len(STS):,} bytes arrived "
                       f"({server.url}/stsb/sts-dev.csv)")
    assert not (cache / "stsb" / "sts-dev.csv").exists()


def test_http_404(tmp_path, server, mirror_dir, entries):
    (mirror_dir / "stsb" / "sts-dev.csv").unlink()
    cache = tmp_path / "cache"
    assert _one_line_error(entries[0], cache, server.url) == (
        f"sts-head: HTTP 404 Not Found ({server.url}/stsb/sts-dev.csv)")
    assert leftovers(cache) == []


def test_unreachable_host(tmp_path, entries):
    cache = tmp_path / "cache"
    base = f"http://127.0.0.1:{closed_port()}"
    assert _one_line_error(entries[0], cache, base) == (
        f"sts-head: the host refused the connection ({base}/stsb/sts-dev.csv)")
    assert leftovers(cache) == []


def test_missing_from_a_mirror_folder(tmp_path, mirror_dir, entries):
    (mirror_dir / "stsb" / "sts-dev.csv").unlink()
    cache = tmp_path / "cache"
    assert _one_line_error(entries[0], cache, str(mirror_dir)) == (
        f"sts-head: not in the mirror folder ({mirror_dir / 'stsb' / 'sts-dev.csv'})")
    assert leftovers(cache) == []


def test_a_partial_file_left_by_an_earlier_run_is_resumed(tmp_path, server, entries):
    cache = tmp_path / "cache"
    (cache / "stsb").mkdir(parents=True)
    (cache / "stsb" / ("sts-dev.csv" + PART_SUFFIX)).write_bytes(STS[:700])
    assert fetch(entries[:1], cache, server.url)[0].status == "fetched"
    assert server.behaviour.requests == [("/stsb/sts-dev.csv", "bytes=700-")]
    assert (cache / "stsb" / "sts-dev.csv").read_bytes() == STS
    assert leftovers(cache) == ["stsb/sts-dev.csv"]


def test_a_server_that_ignores_the_range_sends_it_all_again(tmp_path, server, entries):
    cache = tmp_path / "cache"
    (cache / "stsb").mkdir(parents=True)
    (cache / "stsb" / ("sts-dev.csv" + PART_SUFFIX)).write_bytes(STS[:700])
    server.behaviour.ignore_range = True
    assert fetch(entries[:1], cache, server.url)[0].status == "fetched"
    assert (cache / "stsb" / "sts-dev.csv").read_bytes() == STS


def test_a_wrong_partial_file_is_fetched_again_from_the_start(tmp_path, server, entries):
    cache = tmp_path / "cache"
    (cache / "stsb").mkdir(parents=True)
    (cache / "stsb" / ("sts-dev.csv" + PART_SUFFIX)).write_bytes(b"x" * 700)
    assert fetch(entries[:1], cache, server.url)[0].status == "fetched"
    assert server.behaviour.requests == [("/stsb/sts-dev.csv", "bytes=700-"),
                                         ("/stsb/sts-dev.csv", None)]
    assert (cache / "stsb" / "sts-dev.csv").read_bytes() == STS


def test_an_entry_without_a_source_needs_a_mirror(tmp_path):
    entry = make_entry("orphan", "x/orphan.csv", STS)
    assert _one_line_error(entry, tmp_path / "cache", None) == (
        "orphan: no known public source: the source of this test file is not known; "
        "give --mirror (a folder or URL holding x/orphan.csv)")


# The original hosts: the served form differs from the kept one.

@pytest.fixture
def origin(tmp_path):
    root = tmp_path / "origin"
    root.mkdir()
    (root / "sas.csv").write_bytes(SAS)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("data/SQuAD_SAS.csv", SAS)
        zf.writestr("data/other.csv", b"a,b\n")
    (root / "data.zip").write_bytes(buffer.getvalue())
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, data in (("stsbenchmark/sts-dev.csv", STS), ("stsbenchmark/sas.csv", SAS)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    (root / "Stsbenchmark.tar.gz").write_bytes(buffer.getvalue())
    srv = MirrorServer(root)
    yield srv
    srv.close()


def test_gzip_transform_keeps_the_served_file_compressed(tmp_path, origin):
    kept = gzip.compress(SAS, mtime=0)
    entry = make_entry("sas-gz", "judgments/sas.csv.gz", kept, url=f"{origin.url}/sas.csv",
                       transform={"op": "gzip", "source_sha256": hashlib.sha256(SAS).hexdigest(),
                                  "source_size": len(SAS)},
                       content_sha256=hashlib.sha256(SAS).hexdigest(), content_size=len(SAS))
    cache = tmp_path / "cache"
    assert fetch([entry], cache)[0].status == "fetched"
    assert gzip.decompress((cache / "judgments" / "sas.csv.gz").read_bytes()) == SAS
    assert leftovers(cache) == ["judgments/sas.csv.gz"]
    assert fetch([entry], cache)[0].status == "present"


def test_gzip_transform_checks_the_served_file(tmp_path, origin):
    entry = make_entry("sas-gz", "judgments/sas.csv.gz", gzip.compress(SAS),
                       url=f"{origin.url}/sas.csv",
                       transform={"op": "gzip", "source_sha256": "0" * 64})
    cache = tmp_path / "cache"
    message = _one_line_error(entry, cache, None)
    assert message.startswith("sas-gz: wrong checksum of the served file: SHA-256 ")
    assert message.endswith(f"({origin.url}/sas.csv)")
    assert leftovers(cache) == []


def test_members_of_one_archive_download_it_once(tmp_path, origin):
    url = f"{origin.url}/Stsbenchmark.tar.gz"
    entries = [make_entry("sts", "stsb/sts-dev.csv", STS, url=url, transform={
                   "op": "extract", "archive": "tar.gz", "member": "stsbenchmark/sts-dev.csv"}),
               make_entry("sas", "stsb/sas.csv", SAS, url=url, transform={
                   "op": "extract", "archive": "tar.gz", "member": "stsbenchmark/sas.csv"})]
    cache = tmp_path / "cache"
    assert [o.status for o in fetch(entries, cache)] == ["fetched", "fetched"]
    assert origin.behaviour.requests == [("/Stsbenchmark.tar.gz", None)]
    assert (cache / "stsb" / "sts-dev.csv").read_bytes() == STS
    assert leftovers(cache) == ["stsb/sas.csv", "stsb/sts-dev.csv"]  # the archive removed


@pytest.mark.parametrize("member", ["data/SQuAD_SAS.csv", "SQuAD_SAS.csv"],
                         ids=["exact", "by-basename"])
def test_a_zip_member(tmp_path, origin, member):
    entry = make_entry("sas", "judgments/sas/SQuAD_SAS.csv", SAS, url=f"{origin.url}/data.zip",
                       transform={"op": "extract", "archive": "zip", "member": member})
    cache = tmp_path / "cache"
    assert fetch([entry], cache)[0].status == "fetched"
    assert (cache / "judgments" / "sas" / "SQuAD_SAS.csv").read_bytes() == SAS


def test_a_missing_or_wrong_member(tmp_path, origin):
    url = f"{origin.url}/data.zip"
    cache = tmp_path / "cache"
    missing = make_entry("sas", "sas.csv", SAS, url=url,
                         transform={"op": "extract", "archive": "zip", "member": "NQ.csv"})
    assert _one_line_error(missing, cache, None) == (
        f"sas: the archive has no member NQ.csv ({url})")
    wrong = make_entry("other", "other.csv", SAS, url=url,
                       transform={"op": "extract", "archive": "zip", "member": "data/other.csv"})
    message = _one_line_error(wrong, cache, None)
    assert message == f"other: after extract: wrong size: 4 bytes, expected {len(SAS)} ({url})"
    assert leftovers(cache) == []


def test_an_archive_that_is_not_one(tmp_path, origin):
    url = f"{origin.url}/sas.csv"
    entry = make_entry("sas", "sas.csv", SAS, url=url,
                       transform={"op": "extract", "archive": "zip", "member": "x.csv"})
    message = _one_line_error(entry, tmp_path / "cache", None)
    assert message.startswith("sas: cannot extract the served file (")
    assert message.endswith(f"({url})")
    assert leftovers(tmp_path / "cache") == []


def test_the_fetcher_names_where_each_entry_comes_from(tmp_path, entries, mirror_dir):
    with Fetcher(tmp_path / "cache", "https://example.org/mirror/") as fetcher:
        assert fetcher.source_of(entries[0]) == "https://example.org/mirror/stsb/sts-dev.csv"
    with Fetcher(tmp_path / "cache", str(mirror_dir)) as fetcher:
        assert fetcher.source_of(entries[1]) == str(mirror_dir / "judgments/sas/SQuAD_SAS.csv")


def test_a_complete_partial_file_is_checked_and_renamed(tmp_path, server, entries):
    """A run killed between the last byte and the rename: the server answers the Range
    with 416 and the checksum decides."""
    cache = tmp_path / "cache"
    (cache / "stsb").mkdir(parents=True)
    (cache / "stsb" / ("sts-dev.csv" + PART_SUFFIX)).write_bytes(STS)
    assert fetch(entries[:1], cache, server.url)[0].status == "fetched"
    assert server.behaviour.requests == [("/stsb/sts-dev.csv", f"bytes={len(STS)}-")]
    assert leftovers(cache) == ["stsb/sts-dev.csv"]


def test_a_host_that_never_answers(tmp_path, entries):
    with socket.socket() as listener:  # accepts connections (the kernel does), never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(FetchError) as caught:
            fetch(entries[:1], tmp_path / "cache", base, timeout=0.3)
    assert str(caught.value) == (
        f"sts-head: the host did not answer in time ({base}/stsb/sts-dev.csv)")
    assert leftovers(tmp_path / "cache") == []
