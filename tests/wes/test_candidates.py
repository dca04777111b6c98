"""The candidate stages as Beam transforms: the F1 index's cap on a token that every title
shares (the index's worst case), and spans that name another cluster."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.wes.candidates import F1Candidates, SubstringCandidates
from transforms.wes.negatives import CorpusTitle
from transforms.wes.sampling import assign_split
from transforms.wiki.dump import Page

pytestmark = pytest.mark.slow

CAP = 20


def _title(title: str, *texts: str, split: str = "train") -> CorpusTitle:
    return CorpusTitle(title, 0, split, 5, tuple(sorted({title, *texts})))


def _metrics(result, name):
    query = result.metrics().query(MetricsFilter().with_name(name))
    return query["counters"], query["distributions"]


def test_a_token_every_title_shares_is_skipped_and_never_held_whole():
    titles = [_title(f"Common Thing{i}") for i in range(3 * CAP)]
    titles.append(_title("Thing1 Other"))
    p = TestPipeline()
    out = (p | beam.Create(titles)
           | F1Candidates("wes-k5", max_token_entries=CAP, per_token=4, per_title=4))
    names = out["candidates"] | beam.MapTuple(
        lambda title, kind_list: (title, [name for _, name, _ in kind_list[1]]))
    # Only the rare token "thing1" pairs anything: "common" (61 names) is over the cap.
    assert_that(names, equal_to([("Common Thing1", ["Thing1 Other"]),
                                 ("Thing1 Other", ["Common Thing1"])]))
    result = p.run()
    result.wait_until_finish()
    (skipped,), _ = _metrics(result, "f1_index:skipped_common_tokens")
    assert skipped.committed == 1
    _, (read,) = _metrics(result, "f1_index:group_entries_read")
    assert read.committed.max == CAP + 1  # the common group: read up to the cap, then dropped


def test_spans_name_other_clusters_and_redirects_only():
    seed, fractions = 4, (1.0, 0.0, 0.0)
    titles = [_title("George Washington", "Washington"), _title("Washington, D.C.", "Washington"),
              _title("Martha Custis"), _title("Martha Custis Washington"),
              _title("Crude oil"), _title("Oil")]
    redirects = [Page("Custis", 0, 9, "Martha Custis", "")]
    assert {assign_split(seed, t.title, fractions) for t in titles} == {"train"}
    p = TestPipeline()
    out = {"titles": p | "Titles" >> beam.Create(titles),
           "redirects": p | "Redirects" >> beam.Create(redirects)} | SubstringCandidates(
        "wes-k5", seed, fractions)
    found = out["candidates"] | beam.FlatMapTuple(
        lambda title, kind_list: [(title, span, owner) for _, span, owner in kind_list[1]])
    assert_that(found, equal_to([
        # "Washington" names George Washington's own cluster too: synonym rules drop that
        # later (mixed_negatives.py); here it is a span that names another cluster.
        ("George Washington", "Washington", "Washington, D.C."),
        ("Washington, D.C.", "Washington", "George Washington"),
        ("Crude oil", "oil", "Oil"),  # a title's first letter is either case
        ("Martha Custis Washington", "Martha Custis", "Martha Custis"),
        ("Martha Custis Washington", "Custis", "Martha Custis"),
        ("Martha Custis Washington", "Washington", "George Washington"),
        ("Martha Custis Washington", "Washington", "Washington, D.C."),
    ]))
    result = p.run()
    result.wait_until_finish()
    (nothing,), _ = _metrics(result, "substring:spans_naming_nothing_else")
    # "George", "D.C.", "Martha" (of two titles), "Custis Washington", "Crude", and
    # "Martha Custis"'s "Custis", which names (through the redirect) itself only.
    assert nothing.committed == 7
