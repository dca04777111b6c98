"""`SampleNegatives`: corpus titles -> positive and balanced negative rows.

For a title with n positives, n distinct other titles of the same corpus and split donate
one link text each, never a text among the title's own positives (docs/design.md). Nothing but
the title list reaches a single worker:

1. The titles of each split, with their cluster sizes, form a side input (the donor pool).
2. Each title draws its donors' ranks from that pool, seeded by (seed, title): n plus a
   few spares, in case a donor has nothing but texts the title already owns.
3. Requests are joined with the donors' clusters; each donor offers a few of its texts in
   an order seeded by (seed, title, donor).
4. Offers are joined back with the title's cluster, which picks its n negatives.
"""

import bisect
import dataclasses
import logging

import apache_beam as beam

from transforms.io.counting import STATS_TAG, CountingDoFn, StatKey
from transforms.wes.sampling import (
    SPLIT_NAMES,
    donor_offer,
    donor_ranks,
    eligible_titles,
    pick_negatives,
)

logger = logging.getLogger(__name__)

OFFER_SIZE = 4
CLUSTERS_TAG = "clusters"


@dataclasses.dataclass(frozen=True)
class CorpusTitle:
    """A title of one WES corpus (one threshold k) with its positives."""

    title: str
    cluster_id: int
    split: str
    incoming: int
    positives: tuple[str, ...]
    # the link texts the dictionary-word filter dropped (kept for the synonym rules of
    # the negative mix only; empty otherwise)
    dropped: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class DonorPool:
    """The donor-eligible titles of one split (sorted) and the titles dropped from it."""

    titles: tuple[str, ...]
    dropped: frozenset[str]


def build_pool(split: str, sizes) -> tuple[str, DonorPool]:
    eligible, dropped = eligible_titles(list(sizes))
    return split, DonorPool(tuple(eligible), frozenset(dropped))


def spare_donors(wanted: int, available: int) -> int:
    """How many donors beyond `wanted` to ask for (bounded by what the pool has)."""
    return max(0, min(available - wanted, wanted // 4 + 2))


def row(title: CorpusTitle, text: str, label: int, source: tuple[str, int] | None) -> dict:
    return {
        "title": title.title, "link_text": text, "label": label, "split": title.split,
        "cluster_id": title.cluster_id,
        "source_title": source[0] if source else None,
        "source_cluster_id": source[1] if source else None,
    }


class RequestDonorsFn(CountingDoFn):
    """Title -> (donor title, (title, rank)) requests.

    Args:
        namespace: the corpus's stats namespace.
        seed: the run's seed.
        wanted: a title's number of negatives (default: its number of positives).
    """

    def __init__(self, namespace: str, seed: int, wanted=None):
        super().__init__(namespace, ["filtered:too_few_donors"])
        self._seed = seed
        self._wanted = wanted

    def process(self, title: CorpusTitle, pools):
        pool = pools[title.split]
        if title.title in pool.dropped:
            logger.warning("%r: %d positives but only %d other titles in split %s; dropped",
                           title.title, len(title.positives), len(pool.titles), title.split)
            self.count("filtered:too_few_donors")
            return
        wanted = len(title.positives) if self._wanted is None else self._wanted(title)
        own = bisect.bisect_left(pool.titles, title.title)
        want = wanted + spare_donors(wanted, len(pool.titles) - 1)
        for rank, index in enumerate(donor_ranks(self._seed, title.title, own, len(pool.titles), want)):
            yield pool.titles[index], (title.title, rank)


def offer_texts(seed: int, element):
    donor, grouped = element
    clusters = list(grouped["cluster"])
    for requester, rank in grouped["request"]:
        # A donor in the pool always has a cluster; the join only finds its texts.
        texts = clusters[0].positives
        yield requester, (rank, donor, clusters[0].cluster_id,
                          donor_offer(seed, requester, donor, texts, OFFER_SIZE))


class EmitRowsFn(CountingDoFn):
    """Joins a title with its donors' offers and emits its positive and negative rows."""

    def __init__(self, namespace: str):
        super().__init__(namespace, [
            "titles_written", "positives", "negatives", "filtered:negatives_unavailable",
            *(f"{split}:{what}" for split in SPLIT_NAMES
              for what in ("titles", "positives", "negatives"))])

    def process(self, element):
        _, grouped = element
        titles = list(grouped["title"])
        if not titles:
            return
        title = titles[0]
        offers = list(grouped["offers"])
        ids = {donor: cid for _, donor, cid, _ in offers}
        chosen = pick_negatives(frozenset(title.positives), len(title.positives),
                                [(rank, donor, texts) for rank, donor, _, texts in offers])
        if chosen is None:
            if offers:
                logger.warning("%r: not enough donor texts outside its own positives; dropped",
                               title.title)
                self.count("filtered:negatives_unavailable")
            return
        n = len(title.positives)
        for text in title.positives:
            yield row(title, text, 1, None)
        for donor, text in chosen:
            yield row(title, text, 0, (donor, ids[donor]))
        yield beam.pvalue.TaggedOutput(CLUSTERS_TAG, {
            "title": title.title, "cluster_id": title.cluster_id, "split": title.split,
            "incoming_links": title.incoming, "link_texts": list(title.positives)})
        self.count("titles_written")
        self.count("positives", n)
        self.count("negatives", n)
        self.count(f"{title.split}:titles")
        self.count(f"{title.split}:positives", n)
        self.count(f"{title.split}:negatives", n)


def donor_offers(titles, size_of, request: RequestDonorsFn, seed: int):
    """The random donors' steps, applied inside the caller's transform: titles -> (the
    donor pools by split, requests with their stats output, titles keyed by title, the
    donors' offered texts).
    `size_of`: a title -> (split, (title, negatives it wants))."""
    pools = (titles
             | "SizesBySplit" >> beam.Map(size_of)
             | "GroupSplitTitles" >> beam.GroupByKey()
             | "BuildDonorPools" >> beam.MapTuple(build_pool))
    requests = titles | "RequestDonors" >> beam.ParDo(
        request, pools=beam.pvalue.AsDict(pools)).with_outputs(STATS_TAG, main="requests")
    keyed = titles | "KeyByTitle" >> beam.Map(lambda t: (t.title, t))
    offers = (
        {"request": requests.requests, "cluster": keyed}
        | "JoinDonors" >> beam.CoGroupByKey()
        | "OfferTexts" >> beam.FlatMap(lambda e: offer_texts(seed, e)))
    return pools, requests, keyed, offers


class SampleNegatives(beam.PTransform):
    """CorpusTitles -> {"rows": positive and negative row dicts, "clusters": one dict per
    written title, "stats"}."""

    def __init__(self, namespace: str, seed: int):
        super().__init__()
        self._seed = seed
        self._request = RequestDonorsFn(namespace, seed)
        self._emit = EmitRowsFn(namespace)

    def stat_keys(self) -> list[StatKey]:
        return self._request.stat_keys() + self._emit.stat_keys()

    def expand(self, titles):
        pools, requests, keyed, offers = donor_offers(
            titles, lambda t: (t.split, (t.title, len(t.positives))), self._request,
            self._seed)
        rows = (
            {"title": keyed, "offers": offers}
            | "JoinOffers" >> beam.CoGroupByKey()
            | "EmitRows" >> beam.ParDo(self._emit).with_outputs(
                STATS_TAG, CLUSTERS_TAG, main="rows"))
        stats = (requests[STATS_TAG], rows[STATS_TAG]) | "FlattenNegativeStats" >> beam.Flatten()
        return {"rows": rows.rows, "clusters": rows[CLUSTERS_TAG], "stats": stats}
