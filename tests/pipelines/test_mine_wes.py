"""The mining pipeline end to end on the real Wikipedia sample."""

from __future__ import annotations

import bz2
import collections
import json
import re
import shutil
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter

from pipelines import mine_wes
from tests.runners import RUNNER_ARGS, local_job_service

K = 5
SEED = 3


def _mine(inputs, out, *extra, k=K):
    paths = ",".join(str(p) for p in inputs)
    return mine_wes.run([f"--input={paths}", f"--output={out}", f"--min_incoming_links={k}",
                         f"--seed={SEED}", *extra], save_main_session=False)


def _rows(out, k=K):
    table = ds.dataset(str(out / f"wes-k{k}"), format="parquet").to_table()
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.fixture(scope="module")
def mined(tmp_path_factory, wiki_sample):
    out = tmp_path_factory.mktemp("mined")
    result = _mine([wiki_sample], out, *RUNNER_ARGS["direct_in_process"], k="2,5")
    table = ds.dataset(str(out / f"wes-k{K}"), format="parquet").to_table().to_pylist()
    clusters = ds.dataset(str(out / f"wes-k{K}-clusters"), format="parquet").to_table().to_pylist()
    stats = json.loads((out / "stats.json").read_text())
    return {"out": out, "result": result, "rows": table, "clusters": clusters, "stats": stats}


@pytest.mark.slow
def test_invariants_on_real_sample(mined):
    rows, clusters = mined["rows"], mined["clusters"]
    assert len(rows) > 1000
    positives = collections.defaultdict(list)
    negatives = collections.defaultdict(list)
    split_of = collections.defaultdict(set)
    for r in rows:
        assert not set("#:(") & set(r["title"]), r
        (positives if r["label"] == 1 else negatives)[r["title"]].append(r)
        split_of[r["title"]].add(r["split"])
    pos_texts = {t: [r["link_text"] for r in rs] for t, rs in positives.items()}
    for title, texts in pos_texts.items():
        assert len(texts) == len(set(texts)), f"duplicate positive for {title}"
        negs = negatives[title]
        assert len(negs) == len(texts), f"{title}: {len(negs)} negatives, {len(texts)} positives"
        assert not {r["link_text"] for r in negs} & set(texts)
        assert len({r["link_text"] for r in negs}) == len(negs)
        assert len({r["source_title"] for r in negs}) == len(negs)
        for r in negs:
            assert r["source_title"] != title
            assert r["link_text"] in pos_texts[r["source_title"]]
            assert split_of[r["source_title"]] == split_of[title]
    assert set(negatives) == set(positives)
    assert all(len(s) == 1 for s in split_of.values())
    incoming = {c["title"]: c["incoming_links"] for c in clusters}
    assert set(incoming) == set(positives)
    assert min(incoming.values()) >= K
    assert {c["title"]: sorted(c["link_texts"]) for c in clusters} == {
        t: sorted(v) for t, v in pos_texts.items()}


@pytest.mark.slow
def test_positive_pairs_agree_with_independent_reference(mined, wiki_sample):
    from tests.wes.reference_wes import mine_reference

    reference = mine_reference([wiki_sample], K, dictionary_filter=True)
    pairs = {(r["title"], r["link_text"]) for r in mined["rows"] if r["label"] == 1}
    assert len(pairs) == 773
    assert pairs == reference.pairs
    stages = mined["stats"]["stages"]
    assert stages["links after the character filter (incoming links)"] == reference.counts["links_passed"]


def test_stats_come_from_the_run_and_add_up(mined):
    stats, rows = mined["stats"], mined["rows"]
    corpus = stats["corpora"][f"wes-k{K}"]
    assert corpus["positives"] == corpus["negatives"] == sum(r["label"] for r in rows)
    for split, c in corpus["splits"].items():
        assert c["positives"] == sum(1 for r in rows if r["split"] == split and r["label"] == 1)
    stages = stats["stages"]
    assert stages["pages read"] == 206 and stages["article pages"] == 106
    assert stages["links extracted"] == (
        stages["links after the character filter (incoming links)"]
        + stages["links dropped: empty link text"] + stages["links dropped: invalid title"] + stages["links dropped: '#' in title"]
        + stages["links dropped: ':' in title"] + stages["links dropped: '(' in title"])
    # On the real sample no title is dropped for want of donors, so every pair left after
    # the dictionary filter is written.
    assert corpus["filtered:too_few_donors"] == corpus["filtered:negatives_unavailable"] == 0
    assert corpus["threshold_pairs"] - corpus["filtered:dictionary_word"] == corpus["positives"]
    assert stats["complete"] is True
    # The Beam counters say the same as the data.
    counters = mined["result"].metrics().query(
        MetricsFilter().with_namespace(f"wes-k{K}").with_name("positives"))["counters"]
    assert sum(c.committed for c in counters) == corpus["positives"]
    card = (mined["out"] / "dataset_card.md").read_text()
    assert f"| positive pairs | {corpus['positives']:,} |" in card


def test_dataset_card_front_matter_and_load_dataset(mined, tmp_path):
    """README.md (= dataset_card.md) opens with Hugging Face YAML front matter, and
    `datasets.load_dataset` reads the mined folder with the files' split names."""
    import datasets
    import yaml

    out, stats = mined["out"], mined["stats"]
    card = (out / "README.md").read_text()
    assert card == (out / "dataset_card.md").read_text()
    assert card.startswith("---\n")
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["license"] == "cc-by-sa-3.0"  # enwiki-20160501: before CC BY-SA 4.0
    assert meta["language"] == ["en"]
    assert {"sentence-similarity", "text-classification"} <= set(meta["task_categories"])
    assert [c["config_name"] for c in meta["configs"]] == ["k2", "k5"]
    assert meta["configs"][0]["default"] is True
    assert meta["configs"][1]["data_files"] == [
        {"split": s, "path": f"wes-k5/{s}-*.parquet"} for s in ("train", "dev", "test")]
    info = {c["config_name"]: c for c in meta["dataset_info"]}
    assert [f["name"] for f in info["k5"]["features"]] == [
        "title", "link_text", "label", "split", "cluster_id", "source_title",
        "source_cluster_id"]
    corpus = stats["corpora"]["wes-k5"]
    assert {s["name"]: s["num_examples"] for s in info["k5"]["splits"]} == {
        s: c["positives"] + c["negatives"] for s, c in corpus["splits"].items()}
    assert "## Funnel" in card and f"| pages read | {stats['stages']['pages read']:,} |" in card
    cache = str(tmp_path / "hf_cache")
    k5 = datasets.load_dataset(str(out), name="k5", cache_dir=cache)
    assert sorted(k5) == ["dev", "test", "train"]
    for split, c in corpus["splits"].items():
        assert k5[split].num_rows == c["positives"] + c["negatives"]
        assert set(k5[split]["split"]) <= {split}
    assert k5["train"].features["label"].dtype == "int8"
    default = datasets.load_dataset(str(out), cache_dir=cache)  # the default config: k2
    assert default["dev"].num_rows == sum(
        stats["corpora"]["wes-k2"]["splits"]["dev"][w] for w in ("positives", "negatives"))


def test_a_finished_run_leaves_only_final_files(mined):
    out = mined["out"]
    assert not list(out.glob(".temp-*")), "temporary shards left behind"
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert set(mined["stats"]["files"]) == {str(out / f) for f in files if f.endswith(".parquet")}
    assert "wes-k5/train-00000-of-00001.parquet" in files
    assert "wes-k2-clusters/clusters-00000-of-00001.parquet" in files


def test_several_thresholds_in_one_run(mined):
    low = _rows(mined["out"], k=2)
    high = {(r[0], r[1]) for r in _rows(mined["out"], k=5) if r[2] == 1}
    assert high < {(r[0], r[1]) for r in low if r[2] == 1}


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["direct_in_process", "direct_multi_processing", "portable"])
def test_same_output_from_every_runner(mined, tmp_path, wiki_sample, runner):
    expected = _rows(mined["out"])
    out = tmp_path / runner
    if runner == "portable":
        with local_job_service() as args:
            _mine([wiki_sample], out, *args)
    else:
        _mine([wiki_sample], out, *RUNNER_ARGS[runner])
    assert _rows(out) == expected
    assert json.loads((out / "stats.json").read_text())["corpora"] == {
        f"wes-k{K}": mined["stats"]["corpora"][f"wes-k{K}"]}


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["truncated", "notxml", "empty"])
def test_broken_dump_fails_naming_the_file_and_leaves_no_complete_output(
        dump_variants, tmp_path, variant):
    with pytest.raises(Exception, match=str(dump_variants[variant].name)):
        _mine([dump_variants[variant]], tmp_path / "out")
    assert not (tmp_path / "out" / "stats.json").exists()
    assert not (tmp_path / "out" / "dataset_card.md").exists()


@pytest.mark.slow
def test_skip_bad_files_reports_an_incomplete_run(dump_variants, tmp_path):
    out = tmp_path / "out"
    _mine([dump_variants["bz2"], dump_variants["truncated"]], out, "--skip_bad_files")
    stats = json.loads((out / "stats.json").read_text())
    assert stats["complete"] is False
    assert stats["counts"]["read_dump/filtered:bad_file"] == 1
    assert str(dump_variants["truncated"].name) in stats["bad_files"][0]
    assert "INCOMPLETE" in (out / "dataset_card.md").read_text()


@pytest.mark.slow
def test_page_that_hangs_the_parser_is_counted_and_skipped(tmp_path, wiki_sample_xml):
    # Unbalanced brackets force the whole-page parse; a tiny limit makes it time out.
    bad = ("<page><title>Broken</title><ns>0</ns><id>1</id><revision><text>"
           + "[[Unclosed " * 2000 + "</text></revision></page>\n</mediawiki>")
    xml = wiki_sample_xml.decode("utf-8").replace("</mediawiki>", bad)
    path = tmp_path / "with-bad-page.xml.bz2"
    path.write_bytes(bz2.compress(xml.encode("utf-8")))
    out = tmp_path / "out"
    _mine([path], out, "--full_parse_timeout_s=0.05")
    stats = json.loads((out / "stats.json").read_text())
    assert stats["counts"]["extract_links/filtered:parser_timeout"] == 1
    assert stats["stages"]["article pages"] == 107
    assert stats["corpora"][f"wes-k{K}"]["positives"] > 700


@pytest.mark.parametrize("flags, message", [
    (["--min_incoming_links=0"], "min_incoming_links"),
    (["--min_incoming_links=a"], "min_incoming_links"),
    (["--splits=1,2"], "--splits"),
])
def test_bad_flags_fail_before_running(wiki_sample, tmp_path, flags, message):
    with pytest.raises(ValueError, match=message):
        mine_wes.run([f"--input={wiki_sample}", f"--output={tmp_path}", *flags],
                     save_main_session=False)


def test_inputs_matching_nothing_and_reused_output_fail_before_running(mined, tmp_path, wiki_sample):
    with pytest.raises(ValueError, match="matches no file"):
        mine_wes.run([f"--input={tmp_path}/nothing-*.xml.bz2", f"--output={tmp_path}/o"],
                     save_main_session=False)
    with pytest.raises(ValueError, match="--overwrite"):
        mine_wes.run([f"--input={wiki_sample}", f"--output={mined['out']}"],
                     save_main_session=False)


def _read_counters(result):
    return {c.key.metric.name: c.committed for c in result.metrics().query(
        MetricsFilter().with_namespace("read_dump"))["counters"]}


@pytest.mark.slow
def test_multistream_dump_read_in_byte_ranges_gives_the_same_corpus(multistream_dump, tmp_path):
    import shutil

    from transforms.wiki.dump import multistream_index_path

    whole = _mine([multistream_dump], tmp_path / "whole", "--split_multistream_mb=0", k=2)
    split = _mine([multistream_dump], tmp_path / "split", "--split_multistream_mb=0.03", k=2)
    assert _read_counters(split).get("files_split") == 1
    assert not _read_counters(whole).get("files_split")
    assert _rows(tmp_path / "split", 2) == _rows(tmp_path / "whole", 2)
    stats = [json.loads((tmp_path / d / "stats.json").read_text()) for d in ("whole", "split")]
    assert stats[0]["stages"] == stats[1]["stages"] and stats[0]["stages"]["dump files read"] == 1
    assert stats[1]["stages"]["pages read"] > 50

    # An index that does not fit the file: logged, counted, and the file is read whole.
    copy = tmp_path / "copy-multistream.xml.bz2"
    shutil.copyfile(multistream_dump, copy)
    with open(multistream_index_path(str(copy)), "wb") as f:
        f.write(bz2.compress(b"7:1:Not a stream start\n99999:2:Another\n"))
    fallback = _mine([copy], tmp_path / "fallback", "--split_multistream_mb=0.03", k=2)
    assert _read_counters(fallback).get("index_unusable") == 1
    fallback_stats = json.loads((tmp_path / "fallback" / "stats.json").read_text())
    assert fallback_stats["counts"]["read_dump/index_unusable"] == 1
    assert stats[1]["counts"]["read_dump/files_split"] == 1
    assert _rows(tmp_path / "fallback", 2) == _rows(tmp_path / "whole", 2)


@pytest.mark.slow
def test_a_damaged_stream_in_a_byte_range_fails_the_run_naming_the_range(multistream_dump,
                                                                         tmp_path):
    from tests.wiki.test_read import damage_one_stream

    damaged = damage_one_stream(multistream_dump, tmp_path / "dumps")
    where = f"{damaged.path} bytes {damaged.start}-{damaged.end}:"
    with pytest.raises(Exception, match=re.escape(where)):
        _mine([damaged.path], tmp_path / "failed", "--split_multistream_mb=0.03", k=2)
    assert not (tmp_path / "failed" / "stats.json").exists()

    out = tmp_path / "skipped"
    _mine([damaged.path], out, "--split_multistream_mb=0.03", "--skip_bad_files", k=2)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["counts"]["read_dump/files_split"] == 1
    assert stats["complete"] is False and len(stats["bad_files"]) == 1
    assert stats["bad_files"][0].startswith(where) and "Invalid data stream" in stats["bad_files"][0]
    assert stats["counts"]["read_dump/filtered:bad_file"] == 1
    assert "INCOMPLETE" in (out / "dataset_card.md").read_text()


def _run_files(out) -> dict[str, bytes]:
    """The files of the run in `out`, the temporary folders of runs left aside."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.relative_to(out).parts[0].startswith(".temp-")}


@pytest.mark.slow
def test_overwrite_keeps_the_earlier_run_until_the_new_one_is_written(
        mined, tmp_path, dump_variants, wiki_sample, monkeypatch):
    out = tmp_path / "out"
    shutil.copytree(mined["out"], out)  # a complete run with k = 2 and 5
    before = _run_files(out)
    assert "wes-k2-clusters/clusters-00000-of-00001.parquet" in before

    # A run that fails before its last step: a dump it cannot read.
    with pytest.raises(Exception, match=dump_variants["truncated"].name):
        _mine([dump_variants["truncated"]], out, "--overwrite")
    assert _run_files(out) == before

    # A run that fails in its last step, when all but its stats.json are moved in.
    rename = FileSystems.rename

    def failing_rename(sources, destinations):
        if destinations == [str(out / "stats.json")] and "previous" not in sources[0]:
            raise OSError("disk on fire")  # the new one, not the earlier one moved back
        return rename(sources, destinations)

    monkeypatch.setattr(FileSystems, "rename", staticmethod(failing_rename))
    with pytest.raises(Exception, match="the earlier outputs were put back as they were"):
        _mine([wiki_sample], out, "--overwrite", *RUNNER_ARGS["direct_in_process"])
    monkeypatch.undo()
    assert _run_files(out) == before
    assert list(out.glob(".temp-*")), "the failed run's files are left (until a run succeeds)"

    # A run that succeeds, with k = 5 only: nothing of the earlier run is left, nor of the
    # runs that failed.
    _mine([wiki_sample], out, "--overwrite")
    stats = json.loads((out / "stats.json").read_text())
    files = {str(p.relative_to(out)) for p in out.rglob("*")}
    assert files == {str(Path(f).relative_to(out)) for f in stats["files"]} | {
        "stats.json", "dataset_card.md", "README.md", "wes-k5", "wes-k5-clusters"}
    assert list(stats["corpora"]) == [f"wes-k{K}"]
    assert _rows(out) == _rows(mined["out"])


@pytest.mark.slow
def test_a_run_removes_the_temporary_folders_of_killed_runs(tmp_path, wiki_sample):
    out = tmp_path / "out"
    (out / ".temp-0123").mkdir(parents=True)  # as a killed run leaves them
    (out / ".temp-0123" / "wes-k5__train-0a1b.parquet").write_bytes(b"partial")
    (out / ".temp-4567").mkdir()
    _mine([wiki_sample], out)  # temporary folders are no earlier run: no --overwrite needed
    assert not list(out.glob(".temp-*"))
    stats = json.loads((out / "stats.json").read_text())
    assert {str(p) for p in out.rglob("*.parquet")} == set(stats["files"])
