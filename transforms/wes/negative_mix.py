"""The negative mix (`--negatives`) and link-to-link pairs (`--link_pairs`): parsing, each
title's share of each kind, and the choice of its negatives. Pure functions, Beam-free.

Kinds (Huang 2022, section 3.2 and its future work):

- `random`: a link text of a random other title of the split (the paper's negatives);
- `f1`: the names (titles and link texts) of other clusters with the highest token F1
  with the title;
- `substring`: a short span of the title's words that names another cluster;
- `word_cooccurrence`: link texts that often appear next to links to the title;
- `article_cooccurrence`: titles of articles often linked next to the title.

Every pair carries its kind (`pair_kind`): `title_link` and `link_link` positives, one of
the kinds above for negatives.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence

from transforms.wes.sampling import stable_hash

RANDOM = "random"
ADVERSARIAL_KINDS = ("f1", "substring", "word_cooccurrence", "article_cooccurrence")
NEGATIVE_KINDS = (RANDOM, *ADVERSARIAL_KINDS)
TITLE_LINK = "title_link"
LINK_LINK = "link_link"
PAIR_KINDS = (TITLE_LINK, LINK_LINK, *NEGATIVE_KINDS)
DEFAULT_NEGATIVES = "random=1"

# A candidate of an adversarial kind: (rank, text, source title), the best first in tuple
# order: rank is a number (an F1 or a page count, negated; a hash), ties broken by the text,
# then the source. Flat, as it crosses each corpus's join.
Candidate = tuple[float, str, str]


def parse_negative_mix(spec: str) -> dict[str, float]:
    """`--negatives` ("random=1,f1=1,substring=2") -> {kind: share}, shares summing to 1,
    kinds in `NEGATIVE_KINDS` order; a kind without `=w` has weight 1.

    Raises:
        ValueError: an unknown kind, a kind twice, a weight that is not a non-negative
            number, or no positive weight.
    """
    weights: dict[str, float] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        kind, _, value = part.partition("=")
        kind = kind.strip()
        if kind not in NEGATIVE_KINDS:
            raise ValueError(f"--negatives: unknown kind {kind!r}; known: "
                             f"{', '.join(NEGATIVE_KINDS)}")
        if kind in weights:
            raise ValueError(f"--negatives: {kind!r} given twice in {spec!r}")
        try:
            weight = float(value) if value.strip() else 1.0
        except ValueError as e:
            raise ValueError(f"--negatives: weight of {kind!r} must be a number, "
                             f"got {value!r}") from e
        if weight < 0 or not math.isfinite(weight):
            raise ValueError(f"--negatives: weight of {kind!r} must be >= 0, got {value!r}")
        weights[kind] = weight
    total = sum(weights.values())
    if total <= 0:
        raise ValueError(f"--negatives needs a positive weight, like {DEFAULT_NEGATIVES!r}; "
                         f"got {spec!r}")
    return {k: weights[k] / total for k in NEGATIVE_KINDS if weights.get(k, 0) > 0}


def is_random_only(mix: Mapping[str, float]) -> bool:
    """Whether the mix is the paper's (and the default's): random negatives only."""
    return set(mix) == {RANDOM}


def kind_quotas(seed: int, title: str, n: int, mix: Mapping[str, float]) -> dict[str, int]:
    """How many of a title's `n` negatives each kind supplies: the floor of its share, and
    the slots left over drawn (seeded by (seed, title)) with probability proportional to
    the fractions left, so that each kind's expected count is its share of n exactly."""
    kinds = [k for k in NEGATIVE_KINDS if mix.get(k, 0) > 0]
    exact = {k: mix[k] * n for k in kinds}
    quotas = {k: math.floor(exact[k]) for k in kinds}
    left = n - sum(quotas.values())
    if left > 0:
        rng = random.Random(stable_hash(seed, "kinds", title))
        fractions = {k: exact[k] - quotas[k] for k in kinds}
        for _ in range(left):
            pool = [k for k in kinds if fractions[k] > 1e-12] or kinds
            kind = rng.choices(pool, weights=[fractions.get(k, 0) or 1 for k in pool])[0]
            quotas[kind] += 1
            fractions[kind] = 0.0
    return quotas


def link_pairs(seed: int, title: str, texts: Sequence[str], cap: int) -> list[tuple[str, str]]:
    """Up to `cap` pairs of two distinct link texts of one cluster, drawn (seeded by
    (seed, title)) from all m(m-1)/2 pairs without listing them: O(cap) work however large
    the cluster. Each pair in sorted order, the pairs in draw order."""
    texts = sorted(texts)
    m = len(texts)
    total = m * (m - 1) // 2
    if cap <= 0 or total == 0:
        return []
    rng = random.Random(stable_hash(seed, "link_pairs", title))
    pairs = []
    for index in rng.sample(range(total), min(cap, total)):
        # index -> (i, j), i < j, in the row-major order of the upper triangle
        i = int((2 * m - 1 - math.sqrt((2 * m - 1) ** 2 - 8 * index)) // 2)
        while i > 0 and i * (2 * m - i - 1) // 2 > index:
            i -= 1
        while (i + 1) * (2 * m - i - 2) // 2 <= index:
            i += 1
        j = index - i * (2 * m - i - 1) // 2 + i + 1
        pairs.append((texts[i], texts[j]))
    return pairs


def pick_mixed(
    quotas: Mapping[str, int],
    candidates: Mapping[str, Iterable[Candidate]],
    random_offers: Iterable[tuple[str, str]],
    reject: Callable[[str, str], str | None],
    eligible: Callable[[str], str | None],
) -> tuple[list[tuple[str, str, str]] | None, dict[str, int]]:
    """A title's negatives: each adversarial kind's quota from its candidates (best rank
    first), then random offers for the rest (the random quota and every shortfall).

    Args:
        quotas: `kind_quotas`.
        candidates: per adversarial kind, its candidates in any order.
        random_offers: (donor title, text) in rank order (`pick_negatives`' offers, one
            per donor, flattened).
        reject: (text, source) -> the synonym reason (`synonyms.synonym_reason`) or None.
        eligible: source -> None when it may donate (same split, in the corpus), else the
            reason it may not.
    Returns:
        ([(kind, source, text)] with distinct texts, or None when even the random offers
        cannot fill the quota; {count name: n}: `rejected:<reason>`, `shortfall:<kind>`).
    """
    counts: dict[str, int] = {}

    def bump(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1

    chosen: list[tuple[str, str, str]] = []
    taken: set[str] = set()
    used_sources: set[str] = set()

    def acceptable(text: str, source: str) -> bool:
        if text in taken:
            return False
        reason = eligible(source) or reject(text, source)
        if reason is not None:
            bump(f"rejected:{reason}")
            return False
        return True

    for kind in ADVERSARIAL_KINDS:
        want = quotas.get(kind, 0)
        if not want:
            continue
        got = 0
        for _, text, source in sorted(candidates.get(kind, ())):
            if got == want:
                break
            if acceptable(text, source):
                chosen.append((kind, source, text))
                taken.add(text)
                used_sources.add(source)
                got += 1
        if got < want:
            counts[f"shortfall:{kind}"] = counts.get(f"shortfall:{kind}", 0) + want - got
    wanted = sum(quotas.values())
    for donor, text in random_offers:
        if len(chosen) == wanted:
            break
        # one random text per donor, as the random kind alone does
        if donor not in used_sources and acceptable(text, donor):
            chosen.append((RANDOM, donor, text))
            taken.add(text)
            used_sources.add(donor)
    return (chosen if len(chosen) == wanted else None), counts
