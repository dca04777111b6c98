"""`SampleMixedNegatives`: corpus titles -> positive rows (with `--link_pairs`, link-to-link
pairs too) and as many negatives of the `--negatives` mix, each row labelled with its
`pair_kind`. Used instead of `SampleNegatives` (negatives.py) whenever the mix is not
random-only or link pairs are asked for; the default run never builds it.

Flow, per corpus:

1. Donor pools per split (as `SampleNegatives`, sized by each title's positives
   including its link pairs) and random donor offers, as the random kind alone makes
   them: they fill the random quota and whatever an adversarial kind falls short of.
2. Candidates of the adversarial kinds: `F1Candidates` and `SubstringCandidates`
   (candidates.py) from this corpus's titles, the co-occurrence ones (cooccurrence.py)
   computed once per run.
3. One join per title, in shards of titles (gather.JoinByShard): its cluster, its
   offers, its candidates, the redirects into it and its own redirect target.
   `EmitMixedRowsFn` takes each kind's quota (negative_mix.kind_quotas) from its best
   candidates that are not synonyms (synonyms.synonym_reason) and whose source is a
   title of the same split in this corpus (the donor pools, a side input), counting
   every rejection by reason.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Callable, Mapping, Sequence

import apache_beam as beam

from transforms.io.counting import STATS_TAG, CountingDoFn, StatKey
from transforms.wes.candidates import F1Candidates, SubstringCandidates
from transforms.wes.cooccurrence import unpack_candidates
from transforms.wes.gather import JoinByShard, per_key, title_shard
from transforms.wes.hard_test import HARD_PREFIX, HARD_TAG, hard_rows, hard_stat_keys, has_hard_test
from transforms.wes.negative_mix import (
    ADVERSARIAL_KINDS,
    LINK_LINK,
    NEGATIVE_KINDS,
    TITLE_LINK,
    kind_quotas,
    link_pairs,
    pick_mixed,
)
from transforms.wes.negatives import (
    CLUSTERS_TAG,
    CorpusTitle,
    RequestDonorsFn,
    donor_offers,
    row,
)
from transforms.wes.redirects import redirect_pair
from transforms.wes.sampling import SPLIT_NAMES, cluster_id
from transforms.wes.synonyms import SYNONYM_REASONS, TitleSynonyms, synonym_reason

SOURCE_REASONS = ("other_split", "not_in_corpus")
# the join's inputs of candidates, each `(title, (kind, [Candidate]))`, when the mix has them
# (the co-occurrence ones in `cooccurrence.pack_candidates`' form)
CANDIDATE_SOURCES = ("f1", "substring", "cooccurrence")


def link_pair_count(title: CorpusTitle, cap: int) -> int:
    m = len(title.positives)
    return min(cap, m * (m - 1) // 2) if cap > 0 else 0


class NegativesWanted:
    """A title's number of negatives: its positives, link pairs included (picklable)."""

    def __init__(self, link_pairs_cap: int):
        self._cap = link_pairs_cap

    def __call__(self, title: CorpusTitle) -> int:
        return len(title.positives) + link_pair_count(title, self._cap)


def size_by_split(title: CorpusTitle, wanted: NegativesWanted) -> tuple[str, tuple[str, int]]:
    """A title's entry in its split's donor pool: (split, (title, negatives wanted))."""
    return title.split, (title.title, wanted(title))


def pool_of(pools, source: str) -> str | None:
    """The split whose donor pool holds `source`, None when none does."""
    for name, pool in pools.items():
        i = bisect.bisect_left(pool.titles, source)
        if i < len(pool.titles) and pool.titles[i] == source:
            return name
    return None


class PoolMemo:
    """Whether a candidate's source may donate to a title of a split: None when `source`
    is a donor of that split's pool, else why not ("other_split", "not_in_corpus").

    Pools of at most `PREFILL_TITLES` titles in all are turned into one {title: split}
    dict when they arrive (once per pools object, which a runner may hand over anew each
    bundle: a bounded cost); larger ones are searched (bisect) and each source's answer is
    kept, up to `MAX_SOURCES` of them (a corpus's candidates name the same titles again
    and again). Starts again when the pools object changes."""

    PREFILL_TITLES = 200_000
    MAX_SOURCES = 1_000_000

    def __init__(self) -> None:
        self._pools = None
        self._found: dict[str, str | None] = {}
        self._complete = False  # `_found` holds every pool title

    def checker(self, pools, split: str) -> Callable[[str], str | None]:
        """The eligibility of sources for a title of `split` (one function per title)."""
        if pools is not self._pools or (
                not self._complete and len(self._found) >= self.MAX_SOURCES):
            self._pools = pools
            self._complete = (sum(len(pool.titles) for pool in pools.values())
                              <= self.PREFILL_TITLES)
            # reversed: a title in two pools (none is) answers with the first, as pool_of
            self._found = ({t: name for name, pool in reversed(list(pools.items()))
                            for t in pool.titles} if self._complete else {})
        found, complete = self._found, self._complete
        get = found.get

        def eligibility(source: str) -> str | None:
            where = get(source, "")
            if where == "":  # no split is named ""
                where = None if complete else found.setdefault(source, pool_of(pools, source))
            return "not_in_corpus" if where is None else None if where == split else "other_split"
        return eligibility


def kinded(base: dict, kind: str) -> dict:
    return {**base, "pair_kind": kind}


class EmitMixedRowsFn(CountingDoFn):
    """Joins a title with its offers, candidates and redirects; emits its rows."""

    def __init__(self, namespace: str, seed: int, mix: Mapping[str, float], link_pairs_cap: int):
        kinds = ("titles", "positives", "negatives")
        super().__init__(namespace, [
            "titles_written", "positives", "negatives", "filtered:negatives_unavailable",
            *(f"{split}:{what}" for split in SPLIT_NAMES for what in kinds),
            *(f"positives:{k}" for k in (TITLE_LINK, LINK_LINK)),
            *(f"negatives:{k}" for k in NEGATIVE_KINDS),
            *(f"{split}:{what}:{k}" for split in SPLIT_NAMES
              for what, ks in (("positives", (TITLE_LINK, LINK_LINK)),
                               ("negatives", NEGATIVE_KINDS)) for k in ks),
            *(f"negatives:rejected:{r}" for r in (*SYNONYM_REASONS, *SOURCE_REASONS)),
            *(f"negatives:shortfall:{k}" for k in ADVERSARIAL_KINDS),
            *(hard_stat_keys() if has_hard_test(mix) else ())])
        self._hard = has_hard_test(mix)
        self._seed = seed
        self._mix = dict(mix)
        self._cap = link_pairs_cap
        self._pools = PoolMemo()

    def process(self, element, pools):
        """A shard of the title join (`JoinByShard`) -> its titles' rows."""
        for _, grouped in per_key(element[1]):
            yield from self._emit_title(grouped, pools)

    def _emit_title(self, grouped: Mapping[str, Sequence], pools):
        titles = grouped["title"]
        if not titles:
            return
        title = titles[0]
        pairs = link_pairs(self._seed, title.title, title.positives, self._cap)
        n = len(title.positives) + len(pairs)
        synonyms = TitleSynonyms.build(title.title, (*title.positives, *title.dropped),
                                       grouped["redirects_in"], grouped["redirect_out"])
        normalised = synonyms.normalised()
        candidates: dict[str, list] = {}
        for source in CANDIDATE_SOURCES:
            for kind, listed in grouped.get(source, ()):
                candidates.setdefault(kind, []).extend(
                    unpack_candidates(listed) if source == "cooccurrence" else listed)
        offers = sorted(grouped["offers"])
        chosen, counts = pick_mixed(
            kind_quotas(self._seed, title.title, n, self._mix), candidates,
            [(donor, text) for _, donor, _, texts in offers for text in texts],
            lambda text, source: synonym_reason(synonyms, text, source, normalised),
            self._pools.checker(pools, title.split))
        # the title's counts, added up here and counted once each
        tally = collections.Counter({f"negatives:{name}": c for name, c in counts.items()})
        if chosen is None:
            if offers:
                tally["filtered:negatives_unavailable"] = 1
            self.count_all(tally)
            return
        split = title.split
        rows = [kinded(row(title, text, 1, None), TITLE_LINK) for text in title.positives]
        rows += [kinded({**row(title, b, 1, (title.title, title.cluster_id)), "title": a},
                        LINK_LINK) for a, b in pairs]
        rows += [kinded(row(title, text, 0, (source, cluster_id(source))), kind)
                 for kind, source, text in chosen]
        yield from rows
        for kind, _, _ in chosen:
            for name in (f"negatives:{kind}", f"{split}:negatives:{kind}"):
                tally[name] += 1
        hard = hard_rows(split, rows) if self._hard else []
        for r in hard:
            yield beam.pvalue.TaggedOutput(HARD_TAG, r)
            name = f"{HARD_PREFIX}{r['pair_kind']}"
            tally[name] += 1
        if hard:
            tally[f"{HARD_PREFIX}titles"] = 1
        yield beam.pvalue.TaggedOutput(CLUSTERS_TAG, {
            "title": title.title, "cluster_id": title.cluster_id, "split": split,
            "incoming_links": title.incoming, "link_texts": list(title.positives)})
        for kind, c in ((TITLE_LINK, len(title.positives)), (LINK_LINK, len(pairs))):
            tally[f"positives:{kind}"] = c
            tally[f"{split}:positives:{kind}"] = c
        tally.update({"titles_written": 1, "positives": n, "negatives": n,
                      f"{split}:titles": 1, f"{split}:positives": n, f"{split}:negatives": n})
        self.count_all(tally)


def redirect_edges(page):
    """A redirect page -> ("in", (target, source)) and ("out", (source, target))."""
    pair = redirect_pair(page)
    if pair is not None:
        source, target = pair
        yield beam.pvalue.TaggedOutput("redirects_in", (target, source))
        yield beam.pvalue.TaggedOutput("redirect_out", (source, target))


class SampleMixedNegatives(beam.PTransform):
    """{"titles": CorpusTitles, "redirects": redirect pages, "cooccurrence": the corpus's
    co-occurrence candidates (cooccurrence.py; needed when the mix has a co-occurrence
    kind)} ->
    {"rows", "clusters", "stats", "hard"}, like `SampleNegatives` with a `pair_kind` per
    row; "hard": the rows of the WES-hard test split (hard_test.py; none unless the mix
    has an adversarial kind).

    Args:
        namespace: the corpus's stats namespace.
        seed: seed of every choice.
        fractions: the split fractions (a redirect's target's split).
        mix: `negative_mix.parse_negative_mix`.
        link_pairs_cap: link-to-link positive pairs per cluster at most (0: none).
    """

    def __init__(self, namespace: str, seed: int, fractions: Sequence[float],
                 mix: Mapping[str, float], link_pairs_cap: int = 0):
        super().__init__()
        self._seed = seed
        self._mix = dict(mix)
        self._request = RequestDonorsFn(namespace, seed, NegativesWanted(link_pairs_cap))
        self._emit = EmitMixedRowsFn(namespace, seed, mix, link_pairs_cap)
        self._f1 = F1Candidates(namespace) if "f1" in mix else None
        self._substring = (SubstringCandidates(namespace, seed, fractions)
                           if "substring" in mix else None)
        self._wanted = NegativesWanted(link_pairs_cap)

    def stat_keys(self) -> list[StatKey]:
        stages = [self._request, self._emit, self._f1, self._substring]
        return [key for stage in stages if stage is not None for key in stage.stat_keys()]

    def expand(self, inputs):
        titles, seed, wanted = inputs["titles"], self._seed, self._wanted
        pools, requests, keyed, offers = donor_offers(
            titles, lambda t: size_by_split(t, wanted), self._request, seed)
        stats = [requests[STATS_TAG]]
        candidates = {}
        if self._f1 is not None:
            f1 = titles | "F1Candidates" >> self._f1
            candidates["f1"] = f1["candidates"]
            stats.append(f1["stats"])
        if self._substring is not None:
            spans = {"titles": titles, "redirects": inputs["redirects"]} | (
                "SubstringCandidates" >> self._substring)
            candidates["substring"] = spans["candidates"]
            stats.append(spans["stats"])
        if any(k.endswith("_cooccurrence") for k in self._mix):
            candidates["cooccurrence"] = inputs["cooccurrence"]
        edges = inputs["redirects"] | "RedirectEdges" >> beam.FlatMap(
            redirect_edges).with_outputs("redirects_in", "redirect_out")
        # each source of candidates is an input of its own (a Flatten of them before the
        # join is a stage of its own on the local runner), met by title in shards
        joined = {
            "title": keyed, "offers": offers, **candidates,
            "redirects_in": edges.redirects_in, "redirect_out": edges.redirect_out,
        } | "JoinTitleInputs" >> JoinByShard(title_shard)
        rows = joined | "EmitRows" >> beam.ParDo(
            self._emit, pools=beam.pvalue.AsDict(pools)).with_outputs(
                STATS_TAG, CLUSTERS_TAG, HARD_TAG, main="rows")
        stats.append(rows[STATS_TAG])
        return {"rows": rows.rows, "clusters": rows[CLUSTERS_TAG], "hard": rows[HARD_TAG],
                "stats": stats | "FlattenNegativeStats" >> beam.Flatten()}
