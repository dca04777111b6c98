"""The WES-hard test split: near misses for a model that never saw the test titles.

A run whose `--negatives` mix has an adversarial kind (`f1`, `substring`,
`word_cooccurrence`, `article_cooccurrence`) also writes, per corpus,
`<output>/wes-k<k>-hard/test-SSSSS-of-NNNNN.parquet`: the test split's titles that got at
least one adversarial negative, with all of their positives (`title_link`, and
`link_link` where link pairs are mined) and their adversarial negatives; their random
negatives are left out. Every row is a row of `wes-k<k>/test-*` (same columns, `pair_kind`
included), so the splits stay disjoint by title and a model trained on `train` and picked
on `dev` is scored on near misses of titles it never saw. The folder is a sibling of the
corpus's (as the clusters' is): `pyarrow.dataset("<output>/wes-k<k>")` and the trainers'
`test-*.parquet` pattern never read it twice.

`EmitMixedRowsFn` (mixed_negatives.py) picks the rows with `hard_rows` as it emits a
title's rows (no extra shuffle); stats.json lists the split under each corpus's
`hard_test` (`hard_summary`) and the dataset card as a config of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.wes.negative_mix import ADVERSARIAL_KINDS, LINK_LINK, TITLE_LINK

HARD_SPLIT = "test"
HARD_TAG = "hard_test"
HARD_KINDS = (TITLE_LINK, LINK_LINK, *ADVERSARIAL_KINDS)
# stats keys of the corpus namespace: f"{HARD_PREFIX}titles", f"{HARD_PREFIX}<kind>"
HARD_PREFIX = "test_hard:"


def has_hard_test(mix: Mapping[str, float] | None) -> bool:
    """Whether a run with this negative mix writes the WES-hard test split."""
    return any(kind in (mix or {}) for kind in ADVERSARIAL_KINDS)


def hard_folder(corpus: str) -> str:
    """`wes-k5` -> `wes-k5-hard`, the folder of its WES-hard test split."""
    return f"{corpus}-hard"


def hard_destination(corpus: str) -> str:
    """The split's destination for `write.WriteParquetShards`."""
    return f"{hard_folder(corpus)}/{HARD_SPLIT}"


def hard_stat_keys() -> list[str]:
    """The counts `EmitMixedRowsFn` makes for the split (in the corpus's namespace)."""
    return [f"{HARD_PREFIX}titles", *(f"{HARD_PREFIX}{kind}" for kind in HARD_KINDS)]


def hard_rows(split: str, rows: Sequence[dict]) -> list[dict]:
    """Of one title's rows (all of one split), those of the WES-hard test split: none
    outside the test split or without an adversarial negative; else its positives and
    its adversarial negatives, in their order."""
    if split != HARD_SPLIT or not any(r["pair_kind"] in ADVERSARIAL_KINDS for r in rows):
        return []
    return [r for r in rows if r["label"] == 1 or r["pair_kind"] in ADVERSARIAL_KINDS]


def hard_summary(counts: Mapping[str, int], corpus: str) -> dict[str, Any]:
    """The corpus's `hard_test` block of stats.json: where the split is, its titles,
    positives, negatives and rows per pair kind."""
    kinds = {kind: counts.get(f"{corpus}/{HARD_PREFIX}{kind}", 0) for kind in HARD_KINDS}
    positives = kinds[TITLE_LINK] + kinds[LINK_LINK]
    return {"path": f"{hard_destination(corpus)}-*.parquet",
            "titles": counts.get(f"{corpus}/{HARD_PREFIX}titles", 0),
            "positives": positives, "negatives": sum(kinds.values()) - positives,
            "pair_kinds": kinds}


def hard_config_lines(corpus: str, config: str) -> list[str]:
    """The front matter's `configs` entry of the split: `<config>-hard`, a test split."""
    return [f"- config_name: {config}-hard", "  data_files:",
            f"  - split: {HARD_SPLIT}", f"    path: {json.dumps(f'{hard_destination(corpus)}-*.parquet')}"]


def hard_info_lines(config: str, features: Sequence[tuple[str, str]],
                    block: Mapping[str, Any]) -> list[str]:
    """The front matter's `dataset_info` entry of the split (`features`: the corpus's,
    `pair_kind` included)."""
    lines = [f"- config_name: {config}-hard", "  features:"]
    for feature, dtype in features:
        lines += [f"  - name: {feature}", f"    dtype: {dtype}"]
    return [*lines, "  splits:", f"  - name: {HARD_SPLIT}",
            f"    num_examples: {block['positives'] + block['negatives']}"]


def hard_card_lines(block: Mapping[str, Any]) -> list[str]:
    """The card's paragraph and table of a corpus's WES-hard test split."""
    lines = ["", f"WES-hard test split (`{block['path']}`): {block['titles']:,} test titles "
                 f"with an adversarial negative, their {block['positives']:,} positives and "
                 f"{block['negatives']:,} adversarial negatives (no random ones).", "",
             "| pair kind | label | rows |", "|---|---:|---:|"]
    lines += [f"| {kind} | {1 if kind in (TITLE_LINK, LINK_LINK) else 0} | {n:,} |"
              for kind, n in block["pair_kinds"].items()]
    return lines
