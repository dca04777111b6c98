"""Short-answer equivalence pairs from a mined WES corpus (the judge's training data,
`short_answers`), per title:

- positives: each link text against the title (`positive`; `identical` when the link
  text normalises to the title, kept for the same seeded share);
- mined negatives (`mined_negative`): the shard's negative rows (a link text of another
  title), when that title is in the same split and the text does not normalise to the
  title, as many as the title kept positives (the mining's 1:1). With `negative_kinds`
  (`--negative_kinds`, a corpus mined with `wes-mine --negatives`), the train and dev
  splits keep only the mined negatives of those kinds (`pair_kind`); the test split
  keeps them all, as the cross-encoder trainer's filter does;
- near-miss negatives (`near_miss_negative`): for a title that kept a positive, a link
  text of another title of the same split that shares a word with this title
  ("convergent evolution" for "Evolution", "Ada Air" for "Ada Lovelace").

WES has no question: every WES pair has `WES_QUESTION`, a constant, so the question
segment carries no label information. A title keeps the mining's split.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from transforms.metrics.squad import normalize_answer
from transforms.training.answer_pair import (
    DEFAULT_IDENTICAL_SHARE,
    DEFAULT_SEED,
    AnswerPair,
    made,
    seeded_rng,
    seeded_share,
)
from transforms.training.data_files import reading
from transforms.training.evouna import SPLITS
from transforms.training.pair_kinds import KIND_COLUMN

WES_QUESTION = "Which entity is this?"
# Words too common to make two WES titles near misses of each other.
_TITLE_STOPWORDS = frozenset("of and in on at to for by with from or de la le list".split())


def read_wes_rows(path: str) -> list[dict[str, Any]]:
    """The rows of a WES corpus folder (or shard glob): title, link_text, label, split,
    source_title, every split, and pair_kind where the shards have it.

    Raises:
        TrainingDataError: the folder or a shard in it cannot be read (missing, cut
            short, not Parquet; the shard named in pyarrow's words).
        ValueError: no rows, or a column missing.
    """
    import pyarrow.dataset as ds
    columns = ("title", "link_text", "label", "split", "source_title")
    with reading("WES corpus", path):
        dataset = ds.dataset(path, format="parquet")
        missing = [c for c in columns if c not in dataset.schema.names]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing} (a WES corpus from "
                             "pipelines.mine_wes has them)")
        kinds = [KIND_COLUMN] if KIND_COLUMN in dataset.schema.names else []
        rows = dataset.to_table(columns=[*columns, *kinds]).to_pylist()
    if not rows:
        raise ValueError(f"{path}: no WES rows")
    return rows


def wes_pairs(rows: Iterable[Mapping[str, Any]], seed: int = DEFAULT_SEED,
              identical_share: float = DEFAULT_IDENTICAL_SHARE, near_misses: int = 1,
              negative_kinds: Sequence[str] | None = None,
              ) -> tuple[list[AnswerPair], collections.Counter]:
    """The WES pairs of a mined corpus (see the module docstring).

    Args:
        rows: WES rows (`read_wes_rows`), every split. The corpus's split is kept: the
            mining splits by a hash of the title already and draws each title's
            negatives from titles of its own split, which a new split would break
            (re-splitting 70/10/20 dropped 2,504 of the sample's 5,627 negatives).
        seed, identical_share: as `squad_pairs`.
        near_misses: near-miss negatives per title (at most).
        negative_kinds: the mined negatives' kinds kept in train and dev (None: all);
            the rows must then have a `pair_kind`.

    Returns:
        The pairs, ordered by title, and counts of what was skipped and why.

    Raises:
        ValueError: a title in two splits, a split that is not train, dev or test, or
            `negative_kinds` given for rows without a `pair_kind`.
    """
    positives: dict[str, list[str]] = collections.defaultdict(list)
    negatives: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    split_of: dict[str, str] = {}
    skipped: collections.Counter = collections.Counter()
    for r in rows:
        title, split = r["title"], r["split"]
        if split not in SPLITS:
            raise ValueError(f"WES title {title!r}: split {split!r} is not one of {SPLITS}")
        if split_of.setdefault(title, split) != split:
            raise ValueError(f"WES title {title!r} is in two splits ({split_of[title]}, "
                             f"{split}): not a corpus split by title")
        if r["label"] == 1:
            positives[title].append(r["link_text"])
        elif negative_kinds is None or split == "test" or _kind(r) in negative_kinds:
            negatives[title].append((r["link_text"], r.get("source_title") or ""))
        else:
            skipped["mined_negative:kind_not_kept"] += 1
    titles = sorted(split_of)
    by_word: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for t in sorted(positives):
        for w in _title_words(t):
            by_word[(split_of[t], w)].append(t)
    pairs: list[AnswerPair] = []
    for title in titles:
        split, title_norm = split_of[title], normalize_answer(title)
        own = {normalize_answer(x) for x in positives.get(title, ())}

        base = AnswerPair(f"wes-{title}", "wes", title, split, "", WES_QUESTION, "",
                          (title,), 0)
        kept = 0
        for n, text in enumerate(positives.get(title, ())):
            if normalize_answer(text) != title_norm:
                pairs.append(made(base, "positive", text, base.golds, 1, n))
            elif seeded_share(seed, f"{title}\x00{text}") < identical_share:
                pairs.append(made(base, "identical", text, base.golds, 1, n))
            else:
                skipped["identical:not_sampled"] += 1
                continue
            kept += 1
        # The mining gives a title as many negatives as positives; after the identical
        # positives' sampling the title keeps as many as it kept positives (1:1 again).
        for n, (text, source) in enumerate(negatives.get(title, ())):
            if source and split_of.get(source, split) != split:
                skipped["mined_negative:source_in_other_split"] += 1
            elif normalize_answer(text) in own | {title_norm}:
                skipped["mined_negative:same_as_title"] += 1
            elif n >= kept:
                skipped["mined_negative:balance"] += 1
            else:
                pairs.append(made(base, "mined_negative", text, base.golds, 0, n))
        if not near_misses or not kept:
            continue
        rng = seeded_rng(seed, "wes", title)
        near = sorted({t for w in _title_words(title) for t in by_word[(split, w)]
                       if t != title})
        rng.shuffle(near)
        taken = 0
        for other in near:
            texts = [x for x in positives[other]
                     if normalize_answer(x) and normalize_answer(x) not in own | {title_norm}]
            if not texts:
                continue
            pairs.append(made(base, "near_miss_negative", rng.choice(texts), base.golds, 0,
                              taken))
            taken += 1
            if taken == near_misses:
                break
        skipped["near_miss_negative:none_found"] += near_misses - taken
    return pairs, skipped


def _kind(row: Mapping[str, Any]) -> str:
    """A mined negative's `pair_kind`; ValueError when the corpus has none."""
    if row.get(KIND_COLUMN) is None:
        raise ValueError(f"--negative_kinds needs a WES corpus with a {KIND_COLUMN} column "
                         f"(mined with wes-mine --negatives other than random only); the "
                         f"negative {row['link_text']!r} of {row['title']!r} has none")
    return row[KIND_COLUMN]


def _title_words(title: str) -> set[str]:
    return {w for w in normalize_answer(title).split() if w not in _TITLE_STOPWORDS}
