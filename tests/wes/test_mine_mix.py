"""`wes-mine --negatives ... --link_pairs N` on the real sample: every kind is mined and
counted, no negative is a synonym (checked by brute force against the independent
reference), splits stay disjoint, runners agree."""

from __future__ import annotations

import collections
import json
import re
import string

import pyarrow.dataset as ds
import pytest
from apache_beam.metrics.metric import MetricsFilter

from pipelines import mine_wes
from tests.runners import RUNNER_ARGS

MIX = "random=1,f1=1,substring=1,article_cooccurrence=1,word_cooccurrence=1"
KINDS = ("random", "f1", "substring", "word_cooccurrence", "article_cooccurrence")
SEED = 11
LINK_PAIRS = 2

def _mine(sample, out, *extra):
    return mine_wes.run([f"--input={sample}", f"--output={out}", *extra],
                        save_main_session=False)


def _rows(out, k):
    return ds.dataset(str(out / f"wes-k{k}"), format="parquet").to_table().to_pylist()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, wiki_sample):
    out = tmp_path_factory.mktemp("mixed")
    result = _mine(wiki_sample, out, *RUNNER_ARGS["direct_in_process"],
                   "--min_incoming_links=2,5", f"--seed={SEED}", f"--negatives={MIX}",
                   f"--link_pairs={LINK_PAIRS}")
    stats = json.loads((out / "stats.json").read_text())
    return {"out": out, "result": result, "stats": stats,
            "rows": {k: _rows(out, k) for k in (2, 5)}}


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 5])
def test_every_kind_is_mined_and_counted(mixed, k):
    rows, corpus = mixed["rows"][k], mixed["stats"]["corpora"][f"wes-k{k}"]
    kinds = collections.Counter(r["pair_kind"] for r in rows)
    for kind in ("title_link", "link_link", *KINDS):
        assert kinds[kind] > 0, kind
    assert corpus["pair_kinds"] == {kind: kinds[kind] for kind in corpus["pair_kinds"]}
    for split, block in corpus["splits"].items():
        assert block["pair_kinds"] == {kind: sum(
            1 for r in rows if r["split"] == split and r["pair_kind"] == kind)
            for kind in block["pair_kinds"]}
    labels = {r["pair_kind"]: r["label"] for r in rows}
    assert {kind for kind, label in labels.items() if label == 1} == {"title_link", "link_link"}
    assert corpus["positives"] == corpus["negatives"] == len(rows) // 2
    assert sum(corpus["negatives_rejected"].values()) > 0
    counters = mixed["result"].metrics().query(
        MetricsFilter().with_namespace(f"wes-k{k}").with_name("negatives:f1"))["counters"]
    assert sum(c.committed for c in counters) == kinds["f1"]
    card = (mixed["out"] / "README.md").read_text()
    assert f"| f1 | 0 | {corpus['splits']['train']['pair_kinds']['f1']:,} |" in card
    assert "  - name: pair_kind" in card


def _normalise(text: str) -> str:
    """SQuAD's answer normalisation, written again here."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


@pytest.fixture(scope="module")
def reference(wiki_sample):
    from tests.wes.reference_wes import extract_dump, normalise_title

    extraction = extract_dump([wiki_sample])
    texts = collections.defaultdict(set)
    for title, text in extraction.occurrences:
        texts[title].add(text)
    redirects = collections.defaultdict(set)  # both directions
    for source, target in extraction.redirects.items():
        source, target = normalise_title(source), normalise_title(target)
        redirects[target].add(source)
        redirects[source].add(target)
    return texts, redirects, normalise_title


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 5])
def test_no_negative_is_a_synonym_by_brute_force(mixed, reference, k):
    texts, redirects, as_title = reference
    negatives = [r for r in mixed["rows"][k] if r["label"] == 0]
    assert len(negatives) > 500
    for r in negatives:
        title, text, source = r["title"], r["link_text"], r["source_title"]
        synonyms = {title, *texts[title], *redirects[title]}
        assert text not in texts[title], r
        assert source != title and source not in redirects[title], r
        assert as_title(text) not in redirects[title], r
        assert _normalise(text) and _normalise(text) not in {_normalise(s) for s in synonyms}, r


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 5])
def test_balance_sources_and_disjoint_splits(mixed, k):
    rows = mixed["rows"][k]
    clusters = {c["title"]: c for c in ds.dataset(
        str(mixed["out"] / f"wes-k{k}-clusters"), format="parquet").to_table().to_pylist()}
    split_of = {t: c["split"] for t, c in clusters.items()}
    per_title = collections.defaultdict(lambda: collections.Counter())
    negative_texts = collections.defaultdict(list)
    for r in rows:
        article = r["source_title"] if r["pair_kind"] == "link_link" else r["title"]
        assert split_of[article] == r["split"], r
        per_title[article][r["label"]] += 1
        if r["label"] == 0:
            # the other title of a negative is a title of the same split: no leak
            assert split_of[r["source_title"]] == r["split"], r
            negative_texts[article].append(r["link_text"])
        if r["pair_kind"] == "link_link":
            own = set(clusters[article]["link_texts"])
            assert r["title"] in own and r["link_text"] in own and r["title"] < r["link_text"]
    assert all(c[0] == c[1] for c in per_title.values())
    assert all(len(t) == len(set(t)) for t in negative_texts.values())
    links = collections.Counter(r["source_title"] for r in rows if r["pair_kind"] == "link_link")
    assert max(links.values()) == LINK_PAIRS
    assert all(n == min(LINK_PAIRS, len(clusters[t]["link_texts"]) * (
        len(clusters[t]["link_texts"]) - 1) // 2) for t, n in links.items())


def _hard_rows(out, k):
    return ds.dataset(str(out / f"wes-k{k}-hard"), format="parquet").to_table().to_pylist()


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 5])
def test_the_hard_test_split_is_the_test_titles_near_misses(mixed, k):
    rows, hard = mixed["rows"][k], _hard_rows(mixed["out"], k)
    test = [r for r in rows if r["split"] == "test"]

    def article(r):
        return r["source_title"] if r["pair_kind"] == "link_link" else r["title"]

    adversarial = {article(r) for r in test if r["label"] == 0 and r["pair_kind"] != "random"}
    expected = [r for r in test if article(r) in adversarial
                and (r["label"] == 1 or r["pair_kind"] != "random")]
    assert hard and {json.dumps(r, sort_keys=True) for r in hard} == {
        json.dumps(r, sort_keys=True) for r in expected}
    assert len(hard) == len(expected)
    kinds = collections.Counter(r["pair_kind"] for r in hard)
    assert "random" not in kinds and kinds["title_link"] > 0
    block = mixed["stats"]["corpora"][f"wes-k{k}"]["hard_test"]
    assert block == {"path": f"wes-k{k}-hard/test-*.parquet", "titles": len(adversarial),
                     "positives": kinds["title_link"] + kinds["link_link"],
                     "negatives": sum(kinds.values()) - kinds["title_link"] - kinds["link_link"],
                     "pair_kinds": {kind: kinds[kind] for kind in block["pair_kinds"]}}
    assert any(f.endswith(f"wes-k{k}-hard/test-00000-of-00001.parquet")
               for f in mixed["stats"]["files"])
    card = (mixed["out"] / "README.md").read_text()
    assert f"WES-hard test split (`wes-k{k}-hard/test-*.parquet`): {len(adversarial):,}" in card
    assert f'- config_name: k{k}-hard\n  data_files:\n  - split: test\n' in card


@pytest.mark.slow
def test_the_hard_test_split_loads_as_its_own_config(mixed, tmp_path):
    import datasets
    import yaml

    meta = yaml.safe_load((mixed["out"] / "README.md").read_text().split("---\n")[1])
    assert [c["config_name"] for c in meta["configs"]] == ["k2", "k2-hard", "k5", "k5-hard"]
    info = {c["config_name"]: c for c in meta["dataset_info"]}
    block = mixed["stats"]["corpora"]["wes-k5"]["hard_test"]
    assert info["k5-hard"]["splits"] == [
        {"name": "test", "num_examples": block["positives"] + block["negatives"]}]
    assert info["k5-hard"]["features"][-1] == {"name": "pair_kind", "dtype": "string"}
    hard = datasets.load_dataset(str(mixed["out"]), name="k5-hard",
                                 cache_dir=str(tmp_path / "hf_cache"))
    assert list(hard) == ["test"]
    assert hard["test"].num_rows == block["positives"] + block["negatives"]


@pytest.mark.slow
def test_the_same_shards_from_another_runner_and_worker_count(mixed, tmp_path, wiki_sample):
    out = tmp_path / "multi"
    _mine(wiki_sample, out, *RUNNER_ARGS["direct_multi_processing"], "--min_incoming_links=5",
          f"--seed={SEED}", f"--negatives={MIX}", f"--link_pairs={LINK_PAIRS}")

    def ordered(rows):
        return sorted(json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows)

    assert ordered(_rows(out, 5)) == ordered(mixed["rows"][5])
    assert ordered(_hard_rows(out, 5)) == ordered(_hard_rows(mixed["out"], 5))
    stats = json.loads((out / "stats.json").read_text())
    assert stats["corpora"]["wes-k5"] == mixed["stats"]["corpora"]["wes-k5"]


@pytest.mark.parametrize("flags, message", [
    (["--negatives=random=1,bogus=1"], "unknown kind"),
    (["--negatives=random=0"], "positive weight"),
    (["--link_pairs=-1"], "--link_pairs"),
])
def test_bad_mix_flags_fail_before_running(wiki_sample, tmp_path, flags, message):
    with pytest.raises(ValueError, match=message):
        _mine(wiki_sample, tmp_path / "out", *flags)
    assert not (tmp_path / "out" / "stats.json").exists()


@pytest.mark.slow
def test_link_pairs_alone_keep_random_negatives_and_balance(tmp_path, wiki_sample):
    out = tmp_path / "pairs"
    _mine(wiki_sample, out, *RUNNER_ARGS["direct_in_process"], "--link_pairs=3")
    rows = _rows(out, 5)
    kinds = collections.Counter((r["pair_kind"], r["label"]) for r in rows)
    assert set(kinds) == {("title_link", 1), ("link_link", 1), ("random", 0)}
    assert kinds[("random", 0)] == kinds[("title_link", 1)] + kinds[("link_link", 1)]
    corpus = json.loads((out / "stats.json").read_text())["corpora"]["wes-k5"]
    assert corpus["pair_kinds"]["link_link"] == kinds[("link_link", 1)] > 0
    assert "hard_test" not in corpus and not (out / "wes-k5-hard").exists()  # no near misses
    assert corpus["negatives_shortfall"] == dict.fromkeys(corpus["negatives_shortfall"], 0)
