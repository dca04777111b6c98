"""WES pair kinds in the cross-encoder trainer: keeping only some negative kinds
(`--negative_kinds`), accuracy per kind, and the WES-hard test split.

A corpus mined with a negative mix (`wes-mine --negatives`) gives every row a `pair_kind`:
`title_link` and `link_link` for positives, and for negatives the kind that chose it.
The names below are the mining's (transforms/wes/negative_mix.py; training does not
import the mining, tests/training/test_pair_kinds.py checks they agree).

- `--negative_kinds random,f1` keeps every positive and only the negatives of those
  kinds, in the train and dev splits; the test split and the WES-hard split are scored
  whole, so that their accuracy per kind shows how the model does on the kinds it was
  not trained on.
- Accuracy per kind: the share of a kind's rows on the right side of the decision
  threshold (0.5, and the threshold chosen on dev): for a negative kind the share
  scored below it.
- The WES-hard test split (`<corpus>-hard/test-*.parquet`, beside the corpus folder):
  the test titles with an adversarial negative, their positives and those negatives.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from transforms.training.data_files import reading

RANDOM = "random"
NEGATIVE_KINDS = (RANDOM, "f1", "substring", "word_cooccurrence", "article_cooccurrence")
POSITIVE_KINDS = ("title_link", "link_link")
KIND_COLUMN = "pair_kind"
HARD_FOLDER_SUFFIX = "-hard"


def parse_negative_kinds(spec: str | None) -> tuple[str, ...] | None:
    """`--negative_kinds` ("random,f1") -> the kinds in `NEGATIVE_KINDS` order; None
    for no filter.

    Raises:
        ValueError: an unknown kind, or none.
    """
    if spec is None:
        return None
    kinds = [k.strip() for k in spec.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in NEGATIVE_KINDS]
    if unknown or not kinds:
        what = f"unknown kind {unknown[0]!r}" if unknown else "no kind given"
        raise ValueError(f"--negative_kinds: {what}; known: {', '.join(NEGATIVE_KINDS)}")
    return tuple(k for k in NEGATIVE_KINDS if k in kinds)


def check_kind_column(files: Sequence[str]) -> None:
    """Raises ValueError naming the first shard without a `pair_kind` column (a corpus
    mined with the default, random-only negatives)."""
    import pyarrow.parquet as pq
    for path in files:
        with reading("training data", path):
            names = pq.read_schema(path).names
        if KIND_COLUMN not in names:
            raise ValueError(f"--negative_kinds needs shards with a {KIND_COLUMN} column (mined "
                             f"with wes-mine --negatives other than random only); {path} "
                             "has none")


def keep_negative_kinds(rows: list, kinds: Sequence[str], split: str) -> list:
    """Every positive and the negatives of `kinds` (rows with `.label` and `.kind`).

    Raises:
        ValueError: no negative of those kinds is left in the split.
    """
    kept = [r for r in rows if r.label >= 0.5 or r.kind in kinds]
    if not any(r.label < 0.5 for r in kept):
        found = sorted({r.kind for r in rows if r.label < 0.5})
        raise ValueError(f"--negative_kinds {','.join(kinds)}: the {split} split has no "
                         f"negatives of these kinds (its negatives are {', '.join(found)})")
    return kept


def kind_accuracy(kinds: Sequence[str | None], labels: Sequence[float], scores: Sequence[float],
                  threshold: float | None = None) -> dict[str, dict[str, Any]] | None:
    """{kind: {"rows", "accuracy" (at 0.5), "accuracy_at_threshold"}} in `POSITIVE_KINDS`
    then `NEGATIVE_KINDS` order; None when the rows carry no kind."""
    if not kinds or any(k is None for k in kinds):
        return None
    kinds_arr = np.asarray(kinds, dtype=object)
    truth = np.asarray(labels, dtype=float) >= 0.5
    scores = np.asarray(scores, dtype=float)
    out = {}
    order = [*POSITIVE_KINDS, *NEGATIVE_KINDS]
    for kind in sorted(set(kinds), key=lambda k: (order.index(k) if k in order else len(order), k)):
        mask = kinds_arr == kind
        entry = {"rows": int(mask.sum()),
                 "accuracy": float(np.mean((scores[mask] >= 0.5) == truth[mask]))}
        if threshold is not None:
            entry["accuracy_at_threshold"] = float(
                np.mean((scores[mask] >= threshold) == truth[mask]))
        out[kind] = entry
    return out


def hard_test_files(given: str | None, input_dir: str | None) -> list[str]:
    """The WES-hard split's shards: `given` (a path or glob), else those of the folder
    beside the corpus, `<input>-hard/test-*.parquet`, when it exists (else none).

    Raises:
        ValueError: `given` matches nothing.
    """
    if given:
        matched = sorted(glob.glob(os.path.expanduser(given)))
        if not matched:
            raise ValueError(f"hard test file {given} does not exist")
        return matched
    if input_dir is None:
        return []
    folder = os.path.normpath(input_dir) + HARD_FOLDER_SUFFIX
    return sorted(glob.glob(os.path.join(folder, "test-*.parquet")))
