"""Adversarial negative candidates from the corpus's own names: `F1Candidates` (lexical
neighbours, through an index sharded by token) and `SubstringCandidates` (spans of the
title that name another cluster). Both yield `(title, (kind, [Candidate, ...]))`, the
input of `SampleMixedNegatives` (mixed_negatives.py), which checks each against the
synonym rules (synonyms.py) and the split.

A corpus title's names are its title and its kept link texts. Neither stage compares all
pairs or gathers a whole corpus: the F1 index groups names by (split, token) and skips a
token shared by more than `max_token_entries` names (it would say little about
similarity, and its group is the index's worst case); the substring join groups by
(split, name) with the same kind of cap. Index entries reach each group as lists gathered
per bundle (`GroupInBundleFn`, at most `MAX_PENDING_ENTRIES` in a bundle's lists), so a
worker holds at most one capped group and the list being read; names meet in shards of
the name (`JoinByShard`), a worker holding one shard's names, each capped.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from transforms.io.counting import STATS_TAG, CountingDoFn, HoldingDoFn, StatKey
from transforms.wes.gather import (
    MAX_PENDING_ENTRIES,
    GroupInBundleFn,
    JoinByShard,
    per_key,
    text_shard,
)
from transforms.wes.negative_mix import Candidate
from transforms.wes.negatives import CorpusTitle
from transforms.wes.redirects import redirect_pair
from transforms.wes.sampling import assign_split, stable_hash, stable_hash_with
from transforms.wes.synonyms import f1_of, token_bag, tokens

MAX_TOKEN_ENTRIES = 1_000   # names sharing one token beyond which the token is skipped
PER_TOKEN = 8               # candidates kept per (title, token)
F1_PER_TITLE = 32           # candidates kept per title, over its tokens
MAX_PENDING_CANDIDATES = 200_000  # F1 candidates a bundle holds before it emits them
VECTOR_ROWS = 256           # distinct names of a group from which numpy scores it
MAX_NAME_ENTRIES = 1_000    # titles and owners sharing one substring key
MAX_SUBSTRING_WORDS = 3     # a "short" span: at most this many words
OWNERS_PER_SUBSTRING = 3    # other clusters a span may name, kept per span


def title_names(title: CorpusTitle) -> list[str]:
    """The names of a corpus title: the title and its kept link texts."""
    return sorted({title.title, *title.positives})


def index_entries(title: CorpusTitle) -> Iterator[tuple[tuple[str, str], tuple[str, str]]]:
    """((split, token), (name, owner title)) per distinct token of each of its names."""
    for name in title_names(title):
        for token in sorted(set(tokens(name))):
            yield (title.split, token), (name, title.title)


def rank_token_group(entries: Iterable[tuple[str, str]], max_entries: int, per_token: int,
                     vector_rows: int = VECTOR_ROWS
                     ) -> tuple[list[tuple[str, Candidate]] | None, int]:
    """The best `per_token` candidates of each title among the names sharing one token.

    Reads at most `max_entries + 1` entries (the group may be far larger: it is never
    held whole). Returns (None, entries read) when the token is too common, else
    ([(title, (-F1, name, owner))], entries read). A title's query is its own title
    entry (name == owner); its candidates are the names of other owners. A group of at
    least `vector_rows` distinct names is scored with numpy (`_Columns`), the same result.
    """
    head = list(itertools.islice(entries, max_entries + 1))
    if len(head) > max_entries:
        return None, len(head)
    out = []
    queries = sorted({(n, o) for n, o in head if n == o})
    if not queries:
        return out, len(head)
    owners: dict[str, list[str]] = {}
    for name, owner in set(head):
        owners.setdefault(name, []).append(owner)
    # each name's token bag as an int with one bit per distinct bag element of the group:
    # the overlap of two bags is the popcount of their masks' AND
    index: dict[str | tuple[str, int], int] = {}
    masks: dict[str, tuple[int, int]] = {}
    positions: dict[str, list[int]] = {}  # the bits of each mask, for `_Columns`
    for name in owners:
        bag, size = token_bag(name)
        where = positions[name] = [index.setdefault(element, len(index)) for element in bag]
        masks[name] = (sum(1 << i for i in where), size)
    # a name's only owner (None when it has several): a query skips its own names
    rows = [(*masks[name], name, sorted(names_of), names_of[0] if len(names_of) == 1 else None)
            for name, names_of in owners.items()]
    longest = max(size for _, size, _, _, _ in rows)
    dense = (_Columns(rows, [positions[row[2]] for row in rows], len(index))
             if len(rows) >= vector_rows else None)
    tables: dict[int, list[list[float]]] = {}
    arrays: dict[int, np.ndarray] = {}  # the same tables for numpy
    for query, owner in queries:
        mask, size = masks[query]
        # -F1 by (overlap, other name's size), from `f1_of` itself: the hot loop below
        # then indexes instead of calling
        table = tables.get(size)
        if table is None:
            table = tables[size] = [[-f1_of(c, size, b) if c <= b else 0.0
                                     for b in range(longest + 1)]
                                    for c in range(min(size, longest) + 1)]
        if dense is not None:
            scores = arrays.get(size)
            if scores is None:
                scores = arrays[size] = np.array(table, dtype=np.float64)
            best = dense.best(positions[query], scores, owner, per_token)
        else:
            # the hot loop of the F1 index: each distinct name scored once; its owners
            # follow it in order, so the best names that have an owner other than the
            # query's hold the best candidates
            best = heapq.nsmallest(per_token, [
                (table[(mask & other_mask).bit_count()][other_size], name, names_of)
                for other_mask, other_size, name, names_of, only in rows if only != owner])
        scored = [(score, name, other) for score, name, names_of in best
                  for other in names_of if other != owner][:per_token]
        out += [(owner, candidate) for candidate in scored]
    return out, len(head)


class _Columns:
    """A large token group's rows for numpy: per bag element, the rows that hold it.

    `best` gives what `heapq.nsmallest(k, [(table[overlap][size], name, names_of)])` over
    the rows a query keeps gives, with the same floats: the overlaps added up column by
    column, the scores looked up in the same table, ties ordered by name.
    """

    def __init__(self, rows: list[tuple], positions: list[list[int]], n_elements: int):
        self._rows = rows
        holders: list[list[int]] = [[] for _ in range(n_elements)]
        for i, where in enumerate(positions):
            for element in where:
                holders[element].append(i)
        self._holders = [np.array(h, dtype=np.intp) for h in holders]
        self._sizes = np.array([row[1] for row in rows], dtype=np.intp)
        self._name_rank = np.empty(len(rows), dtype=np.intp)
        self._name_rank[sorted(range(len(rows)), key=lambda i: rows[i][2])] = np.arange(len(rows))
        # each row's only owner as a number (-1: several), so that leaving out a query's
        # own names compares integers, not strings
        self._owner_ids: dict[str, int] = {}
        self._only = np.array([-1 if row[4] is None else
                               self._owner_ids.setdefault(row[4], len(self._owner_ids))
                               for row in rows], dtype=np.intp)

    def best(self, where: list[int], table: np.ndarray, owner: str, k: int) -> list[tuple]:
        overlap = np.zeros(len(self._rows), dtype=np.intp)
        for element in where:  # the query's bag elements: distinct, so no row twice
            overlap[self._holders[element]] += 1
        scores = table[overlap, self._sizes]
        kept = np.flatnonzero(self._only != self._owner_ids.get(owner, -2))
        if kept.size > k:  # the rows at or below the k-th score, ties included
            kth = np.partition(scores[kept], k - 1)[k - 1]
            kept = kept[scores[kept] <= kth]
        order = kept[np.lexsort((self._name_rank[kept], scores[kept]))][:k]
        return [(float(scores[i]), self._rows[i][2], self._rows[i][3]) for i in order]


class RankTokenGroupFn(HoldingDoFn):
    """((split, token), names) -> (title, [candidate]), counting skipped tokens.

    A bundle's candidates are gathered per title and emitted with the title's best
    `per_title` of them (what `best_f1` keeps of all of its tokens' candidates) once
    `max_pending` are held and at the end of the bundle: a title has candidates from each
    of its tokens, and one element per candidate would cost the shuffle more than the
    ranking.
    """

    def __init__(self, namespace: str, max_entries: int, per_token: int,
                 per_title: int = F1_PER_TITLE, max_pending: int = MAX_PENDING_CANDIDATES):
        super().__init__(namespace, ["f1_index:tokens", "f1_index:skipped_common_tokens"],
                         max_pending)
        self._max_entries = max_entries
        self._per_token = per_token
        self._per_title = per_title
        # entries of a group held in memory: its maximum shows the cap holds
        self._read = Metrics.distribution(namespace, "f1_index:group_entries_read")

    def _drain(self, pending: dict[str, list[Candidate]], held: int
               ) -> Iterator[tuple[str, list[Candidate]]]:
        for title, candidates in pending.items():
            yield title, sorted(set(candidates))[:self._per_title]

    def process(self, element):
        _, lists = element  # `GroupInBundleFn`'s lists of entries
        ranked, read = rank_token_group(itertools.chain.from_iterable(lists),
                                        self._max_entries, self._per_token)
        self._read.update(read)
        if ranked is None:
            self.count("f1_index:skipped_common_tokens")
            return
        self.count("f1_index:tokens")
        self._hold_grouped(ranked)
        yield from self._emit_when_full()


def best_f1(title: str, parts: Iterable[Iterable[Candidate]], keep: int = F1_PER_TITLE
            ) -> tuple[str, tuple]:
    """A title's candidates over its tokens (lists of them, `RankTokenGroupFn`): each
    (name, owner) once, the best `keep`."""
    return title, ("f1", sorted({c for part in parts for c in part})[:keep])


class F1Candidates(beam.PTransform):
    """CorpusTitles -> {"candidates": (title, ("f1", [Candidate])), "stats"}.

    Args:
        namespace: the corpus's stats namespace.
        max_token_entries: names sharing one token beyond which the token is skipped.
        per_token: candidates kept per (title, token).
        per_title: candidates kept per title.
    """

    def __init__(self, namespace: str, max_token_entries: int = MAX_TOKEN_ENTRIES,
                 per_token: int = PER_TOKEN, per_title: int = F1_PER_TITLE):
        super().__init__()
        if min(max_token_entries, per_token, per_title) < 1:
            raise ValueError("F1 index caps must be positive")
        self._rank = RankTokenGroupFn(namespace, max_token_entries, per_token, per_title)
        self._per_title = per_title

    def stat_keys(self) -> list[StatKey]:
        return self._rank.stat_keys()

    def expand(self, titles):
        keep = self._per_title
        ranked = (titles
                  | "IndexByToken" >> beam.ParDo(GroupInBundleFn(index_entries))
                  | "GroupByToken" >> beam.GroupByKey()
                  | "RankTokenGroups" >> beam.ParDo(self._rank).with_outputs(
                      STATS_TAG, main="ranked"))
        candidates = (ranked.ranked
                      | "GroupF1PerTitle" >> beam.GroupByKey()
                      | "BestF1" >> beam.MapTuple(best_f1, keep))
        return {"candidates": candidates, "stats": ranked[STATS_TAG]}


# Separators a span does not keep at its ends ("Washington, D.C." -> "Washington");
# a full stop stays ("D.C.").
_SPAN_EDGES = ",;:\"'()[]"


def title_spans(title: str, max_words: int = MAX_SUBSTRING_WORDS) -> list[str]:
    """The title's proper word spans of at most `max_words` words, each once, without
    separators at their ends."""
    words = title.split()
    longest = min(max_words, len(words) - 1)
    spans = {" ".join(words[i:i + n]).strip(_SPAN_EDGES) for n in range(1, longest + 1)
             for i in range(len(words) - n + 1)}
    return sorted(s for s in spans if s and s != title)


def title_forms(title: str) -> set[str]:
    """A title as a span may spell it: as it is, and with its first letter in lower case
    (MediaWiki's titles ignore the first letter's case: "oil" links to "Oil")."""
    return {title, title[:1].lower() + title[1:]}


def substring_entries(title: CorpusTitle):
    """((split, text), role) for each name of the title and each span of its title."""
    for name in sorted(set(title.positives) | title_forms(title.title)):
        yield (title.split, name), ("name", title.title)
    for span in title_spans(title.title):
        yield (title.split, span), ("span", title.title)


def redirect_entries(page, seed: int, fractions) -> Iterator:
    """A redirect page names its target: ((split of the target, redirect title), ("name",
    target)), for each of the title's forms; the join keeps it only when a span meets it."""
    pair = redirect_pair(page)
    if pair is not None:
        source, target = pair
        split = assign_split(seed, target, fractions)
        for form in sorted(title_forms(source)):
            yield (split, form), ("name", target)


class MatchSpansFn(CountingDoFn):
    """A shard of (split, text) keys, each with its roles -> (title, ("substring",
    [Candidate])) for each title whose span `text` names another cluster; a span that
    names nothing else is counted."""

    def __init__(self, namespace: str, seed: int, max_entries: int):
        super().__init__(namespace, ["substring:spans_naming_nothing_else",
                                     "substring:skipped_common_keys"])
        self._seed = seed
        self._max_entries = max_entries

    def process(self, element):
        """A shard of the name join (`JoinByShard`) -> its spans' candidates."""
        for (_, text), roles in per_key(element[1], self._max_entries):
            yield from self._match_span(text, itertools.chain(roles["names"], roles["redirects"]))

    def _match_span(self, text: str, roles: Iterable[tuple[str, str]]):
        head = list(itertools.islice(roles, self._max_entries + 1))
        if len(head) > self._max_entries:
            self.count("substring:skipped_common_keys")
            return
        spans = sorted({t for role, t in head if role == "span"})
        owners = sorted({t for role, t in head if role == "name"})
        for title in spans:
            others = [o for o in owners if o != title]
            if not others:
                self.count("substring:spans_naming_nothing_else")
                continue
            hash_of = stable_hash_with(self._seed, title, text)
            others.sort(key=lambda o: (hash_of(o), o))
            rank = stable_hash(self._seed, "span", title, text)
            yield title, ("substring", [(rank, text, o) for o in others[:OWNERS_PER_SUBSTRING]])


class SubstringCandidates(beam.PTransform):
    """{"titles": CorpusTitles, "redirects": redirect pages} ->
    {"candidates": (title, ("substring", [Candidate])), "stats"}."""

    def __init__(self, namespace: str, seed: int, fractions, max_entries: int = MAX_NAME_ENTRIES):
        super().__init__()
        self._seed = seed
        self._fractions = tuple(fractions)
        self._match = MatchSpansFn(namespace, seed, max_entries)

    def stat_keys(self) -> list[StatKey]:
        return self._match.stat_keys()

    def expand(self, inputs):
        # titles' names and spans and redirects' names meet by (split, text), in shards
        entries = {"names": substring_entries, "redirects": functools.partial(
            redirect_entries, seed=self._seed, fractions=self._fractions)}
        matched = ({"names": inputs["titles"], "redirects": inputs["redirects"]}
                   | "JoinByName" >> JoinByShard(text_shard, MAX_PENDING_ENTRIES, entries)
                   | "MatchSpans" >> beam.ParDo(self._match).with_outputs(
                       STATS_TAG, main="candidates"))
        return {"candidates": matched.candidates, "stats": matched[STATS_TAG]}
