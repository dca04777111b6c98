"""transforms/wes/tally.py: incoming-link counting, per-bundle tallies merged per title."""

from __future__ import annotations

from transforms.wes.tally import (
    TALLY_SHARDS,
    TitleLinks,
    merge_tallies,
    merge_title_links,
    shard_tallies,
    tally_shard,
)


def test_merge_tallies_counts_occurrences_and_dedups_case_sensitively():
    parts = [{"United States": (2, ("US",)), "Paris": (1, ("Paris",))},
             {"United States": (1, ("us",))},
             {"United States": (3, ("US", "America"))},
             {"United States": (1, ("America",)), "Paris": (2, ("City of Light", "Paris"))}]
    assert dict(merge_tallies(7, iter(parts))) == {
        "United States": TitleLinks("United States", 7, ("America", "US", "us")),
        "Paris": TitleLinks("Paris", 3, ("City of Light", "Paris"))}


def test_tally_shards_are_stable_and_spread():
    assert tally_shard("Paris") == 230  # crc32, the same in every process
    shards = {tally_shard(f"Title {i}") for i in range(20_000)}
    assert len(shards) == TALLY_SHARDS and min(shards) == 0 and max(shards) == TALLY_SHARDS - 1


def test_shard_tallies_groups_pending_titles_by_their_shard():
    pending = {"Paris": [2, {"Paris", "City of Light"}], "London": [1, {"London"}]}
    parts = dict(shard_tallies(pending, shards=4))
    assert sorted(parts) == sorted({tally_shard("Paris", 4), tally_shard("London", 4)})
    merged = {t: v for part in parts.values() for t, v in part.items()}
    assert {t: (n, sorted(texts)) for t, (n, texts) in merged.items()} == {
        "Paris": (2, ["City of Light", "Paris"]), "London": (1, ["London"])}
    assert list(shard_tallies({}, shards=4)) == []


def test_merge_title_links_unions_redirect_clusters():
    merged = merge_title_links("T", [TitleLinks("T", 3, ("a", "b")), TitleLinks("R", 2, ("b", "c"))])
    assert merged == TitleLinks("T", 5, ("a", "b", "c"))
    assert TitleLinks("T", 1, ("a", "b"), frozenset({"a"})).kept_texts() == ("b",)
