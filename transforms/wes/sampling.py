"""Deterministic choices of the WES corpus: splits, cluster ids and negative donors.

Pure functions. Every random choice is seeded from `--seed` and the title it concerns
(hashed with BLAKE2b, never Python's salted `hash`), so the output depends on neither the
runner, the number of workers nor the order in which elements arrive.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence

SPLIT_NAMES = ("train", "dev", "test")
_BUCKETS = 1_000_000


def _hash63(joined: str) -> int:
    digest = hashlib.blake2b(joined.encode("utf-8"), digest_size=8)
    return int.from_bytes(digest.digest(), "big") >> 1


def stable_hash(*parts: object) -> int:
    """A 63-bit hash of the parts' string forms, stable across processes and machines."""
    return _hash63("\x1f".join(map(str, parts)))


def stable_hash_with(first: object, *rest: object) -> Callable[[object], int]:
    """x -> `stable_hash(first, *rest, x)`, the parts' joined string made once (for
    ranking many x under one prefix)."""
    head = "\x1f".join(map(str, (first, *rest))) + "\x1f"
    return lambda last: _hash63(head + str(last))


def cluster_id(title: str) -> int:
    """The id of a title's synonym cluster (the same in every corpus and run)."""
    return stable_hash("cluster", title)


def parse_splits(spec: str) -> tuple[float, float, float]:
    """Parses `--splits` ("75,15,10") into fractions of train, dev and test.

    Raises:
        ValueError: not three non-negative numbers with a positive sum.
    """
    try:
        parts = [float(p) for p in spec.split(",")]
    except ValueError as e:
        raise ValueError(f"--splits must be three numbers like 75,15,10, got {spec!r}") from e
    if len(parts) != 3 or any(p < 0 for p in parts) or sum(parts) <= 0:
        raise ValueError(
            f"--splits must be three non-negative numbers (train,dev,test), got {spec!r}")
    total = sum(parts)
    return tuple(p / total for p in parts)


def assign_split(seed: int, title: str, fractions: Sequence[float]) -> str:
    """The split of a title: a hash bucket of (seed, title), so one split per title."""
    bucket = stable_hash(seed, "split", title) % _BUCKETS
    bound = 0.0
    for name, fraction in zip(SPLIT_NAMES, fractions):
        bound += fraction * _BUCKETS
        if bucket < bound:
            return name
    return next(n for n, f in zip(reversed(SPLIT_NAMES), reversed(fractions)) if f > 0)


def eligible_titles(sizes: Sequence[tuple[str, int]]) -> tuple[list[str], list[str]]:
    """Splits a split's titles into donor-eligible and dropped ones.

    A title with n positives needs n distinct other titles of its split. Where a tiny
    split cannot offer that, its largest clusters are dropped until every remaining
    title can be served.

    Returns:
        (eligible titles sorted, dropped titles sorted).
    """
    ordered = sorted(sizes, key=lambda ts: (-ts[1], ts[0]))
    start = 0
    while start < len(ordered) and ordered[start][1] > len(ordered) - start - 1:
        start += 1
    return sorted(t for t, _ in ordered[start:]), sorted(t for t, _ in ordered[:start])


def donor_ranks(seed: int, title: str, own_index: int, pool_size: int, want: int) -> list[int]:
    """Indices of `want` distinct donors in a pool of `pool_size` titles, never `own_index`.

    Raises:
        ValueError: the pool cannot supply `want` other titles.
    """
    if want > pool_size - 1:
        raise ValueError(f"{title!r}: {want} donors wanted from a pool of {pool_size}")
    rng = random.Random(stable_hash(seed, "negatives", title))
    drawn = rng.sample(range(pool_size), min(pool_size, want + 1))
    return [i for i in drawn if i != own_index][:want]


def donor_offer(seed: int, title: str, donor: str, texts: Sequence[str], size: int) -> list[str]:
    """Up to `size` of a donor's texts, in an order seeded by (seed, title, donor)."""
    keyed = sorted(texts, key=lambda t: (stable_hash(seed, title, donor, t), t))
    return keyed[:size]


def pick_negatives(
    positives: frozenset[str], wanted: int, offers: Sequence[tuple[int, str, Sequence[str]]]
) -> list[tuple[str, str]] | None:
    """Chooses one text from each of `wanted` donors, none among the title's positives.

    Args:
        positives: the title's own link texts.
        wanted: the number of negatives (= positives).
        offers: (rank, donor title, candidate texts), in any order.
    Returns:
        [(donor title, text)] in rank order with distinct texts, or None when the offers
        cannot supply enough.
    """
    chosen: list[tuple[str, str]] = []
    taken: set[str] = set()
    for _, donor, candidates in sorted(offers):
        # Two donors may share a text; a title never gets the same negative twice.
        text = next((t for t in candidates if t not in positives and t not in taken), None)
        if text is not None:
            chosen.append((donor, text))
            taken.add(text)
            if len(chosen) == wanted:
                return chosen
    return None
