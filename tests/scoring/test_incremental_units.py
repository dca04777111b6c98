"""The pieces of an incremental run, without a pipeline: reading the previous run,
deciding what carries, and the two DoFns that split rows by content key and merge the
branches' results back (tests/scoring/test_incremental.py runs whole pipelines)."""

from __future__ import annotations

import json
import math

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.dofns import run_dofn, step_labels
from tests.runners import RUNNER_ARGS
from tests.scoring import fakes
from transforms.metrics.base import QAExample
from transforms.scoring.incremental import (
    CARRIED_FIELD,
    CHANGED_FIELD,
    GROUPS,
    NEW,
    OLD,
    CarryPlan,
    JoinIncremental,
    MergeIncrementalFn,
    ReadPreviousScores,
    SplitByPrevious,
    SplitByPreviousFn,
    carried_result,
    depends_on_run_corpus,
    plan_carry,
)
from transforms.scoring.join import DEAD_LETTER
from transforms.scoring.previous_run import PreviousRun, load_previous_run
from transforms.scoring.rows import CONTENT_KEY_VERSION, RowSource, ScoringRow, content_key
from transforms.scoring.score import ScoreResult

SUMMARY = {"signatures": {"em": "em|v:1"}, "content_key_version": CONTENT_KEY_VERSION,
           "run_id": "r1", "finished_at": "2026-01-02T00:00:00Z",
           "overall": {"metrics": {"em": {"mean": 0.5}, "f1": {"mean": None}}},
           "without_system": {"metrics": {"em": {"mean": 0.25}}},
           "systems": {"a": {"metrics": {"em": {"mean": 1.0}}}, "b": {}, "c": {"rows": 0}}}


def _write_run(tmp_path, name="old", summary=SUMMARY, formats=("parquet",)) -> str:
    prefix = str(tmp_path / name)
    (tmp_path / f"{name}.summary.json").write_text(json.dumps(summary))
    for fmt in formats:
        if fmt == "parquet":
            pq.write_table(pa.table({"row_key": ["f:1"], "content_key": ["k"],
                                     "em": [1.0]}), prefix + ".scores.parquet")
        else:
            (tmp_path / f"{name}.scores.jsonl").write_text(json.dumps(
                {"row_key": "f:1", "content_key": "k", "em": 1.0}) + "\n")
    return prefix


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_load_previous_run_reads_what_the_run_needs(tmp_path, fmt):
    from transforms.scoring.parquet_parts import file_identity

    prefix = _write_run(tmp_path, formats=(fmt,))
    scores = f"{prefix}.scores.{fmt}"
    assert load_previous_run(prefix) == PreviousRun(
        prefix, scores, fmt, {"em": "em|v:1"}, True, SUMMARY, file_identity(scores))


def test_load_previous_run_names_what_is_wrong(tmp_path):
    prefix = _write_run(tmp_path, formats=())
    with pytest.raises(ValueError, match=rf"^--previous_run {prefix}: expected one scores "
                                         rf"file beside {prefix}.summary.json, found none$"):
        load_previous_run(prefix)
    prefix = _write_run(tmp_path, formats=("parquet", "jsonl"))
    with pytest.raises(ValueError, match=r"found \['.*old.scores.parquet', "
                                         r"'.*old.scores.jsonl'\]$"):
        load_previous_run(prefix)
    (tmp_path / "bad.summary.json").write_text('{"no": "signatures"}')
    with pytest.raises(ValueError, match=rf"^--previous_run {tmp_path}/bad: .*bad.summary.json "
                                         r"is not a scoring summary, or cannot be read "
                                         r"\(KeyError: 'signatures'\)$"):
        load_previous_run(str(tmp_path / "bad"))
    (tmp_path / "bytes.summary.json").write_bytes(b'{"signatures": "\xff"}')
    with pytest.raises(ValueError, match="is not a scoring summary"):
        load_previous_run(str(tmp_path / "bytes"))
    missing = str(tmp_path / "none")
    with pytest.raises(ValueError, match=rf"^--previous_run {missing} is not a complete run: "
                                         rf"{missing}.summary.json is missing \(a run writes it "
                                         r"last, once everything else is in place\)$"):
        load_previous_run(missing)


def test_previous_means_per_block(tmp_path):
    previous = load_previous_run(_write_run(tmp_path))
    assert previous.means() == {"overall": {"em": 0.5, "f1": None},
                                "without_system": {"em": 0.25},
                                "system:a": {"em": 1.0}, "system:c": {}}
    assert PreviousRun("p", "s", "parquet", {}, True, {}).means() == {}


def _metric(columns=("fake_len",), corpus=False):
    class Fake(fakes.FakeMetric):
        def corpus_statistics(self):
            return super().corpus_statistics() if corpus else ()
    return Fake(columns)


def test_depends_on_run_corpus():
    frozen = "x|v:1|stats:file:abcd"
    assert not depends_on_run_corpus(_metric(), {"fake_len": "fake_len|v:1"})
    both = _metric(("fake_len", "fake_corpus"), corpus=True)
    assert depends_on_run_corpus(both, {"fake_len": "a|stats:run", "fake_corpus": "b"})
    assert depends_on_run_corpus(both, {"fake_len": frozen, "fake_corpus": "b|stats:run"})
    assert not depends_on_run_corpus(both, {"fake_len": frozen, "fake_corpus": frozen})


def test_plan_carry_decides_per_metric_and_says_why():
    same, changed = _metric(("fake_len",)), _metric(("fake_overlap", "fake_corpus"))
    new, corpus = _metric(("em",)), _metric(("f1",), corpus=True)
    signatures = {"fake_len": "fl|v:1", "fake_overlap": "fo|v:2", "fake_corpus": "fc|v:1",
                  "em": "em|v:1", "f1": "f1|v:1|stats:run"}
    previous = PreviousRun("p", "p.scores.parquet", "parquet",
                           {"fake_len": "fl|v:1", "fake_overlap": "fo|v:1",
                            "f1": "f1|v:1|stats:run"}, True, {})
    plan = plan_carry([same, changed, new, corpus], signatures, previous)
    assert plan.carried == (same,) and plan.computed == (changed, new, corpus)
    assert plan.reasons == {
        "fake_overlap": "signature changed (was fo|v:1)",
        "fake_corpus": "not in the previous run",  # each column its own reason (issue 27)
        "em": "not in the previous run",
        "f1": "corpus-level: its values depend on this run's corpus statistics, "
              "recomputed on every run (--corpus_statistics freezes them)"}
    assert plan.compared == ("fake_overlap", "f1")
    assert plan.carried_columns == ("fake_len",)
    run = PreviousRun("p", "s", "parquet", {}, True, SUMMARY)
    assert plan.describe(run) == {
        "previous_run": "p", "previous_run_id": "r1",
        "previous_finished_at": "2026-01-02T00:00:00Z", "carried_metrics": ["fake_len"],
        "computed_metrics": plan.reasons}
    assert CarryPlan((), (), {}, ()).describe(PreviousRun("q", "s", "jsonl", {}, True, {})) == {
        "previous_run": "q", "previous_run_id": None, "previous_finished_at": None,
        "carried_metrics": [], "computed_metrics": {}}


def test_previous_scores_need_content_keys():
    from transforms.scoring.incremental import _first, _keyed_previous
    from transforms.scoring.parquet_parts import ParquetSource
    from transforms.scoring.previous_run import PreviousRunError

    source = ParquetSource("p.parquet", "--previous_run p: scores file", PreviousRunError)
    assert _keyed_previous({"content_key": "k", "em": None, "f1": 0.5}, ["em", "f1"],
                           source)[0] == "k"
    with pytest.raises(PreviousRunError, match=r"^--previous_run p: scores file p.parquet: "
                                               r".*a row without a content key "
                                               r"\(row_key 'f:3'\)"):
        _keyed_previous({"row_key": "f:3", "em": 1.0}, ["em"], source)
    assert _first(iter([3, 4])) == 3
    assert carried_result(("k", {"em": 1.0, "f1": 0.5, "x": 2.0}), ["em", "f1"]) == (
        "k", ScoreResult({"em": 1.0, "f1": 0.5}))


def test_carried_result_takes_a_branchs_columns_by_name():
    """The carried values hold every carried column, in the metrics' order; each branch
    (lexical, model-backed) takes its own by name, wherever they lie among them."""
    carried = ("k", {"em": 1.0, "f1": 0.5, "sas": 0.25})
    assert carried_result(carried, ["sas"]) == ("k", ScoreResult({"sas": 0.25}))
    assert carried_result(carried, ["f1", "em"]) == ("k", ScoreResult({"f1": 0.5, "em": 1.0}))


def _row(file: str, row: int, prediction: str = "p", **kw) -> ScoringRow:
    return ScoringRow(RowSource(file, row, row), QAExample(prediction, ("r",)), **kw)


def test_split_by_previous_keeps_one_row_per_content_in_file_order():
    fn = SplitByPreviousFn(["em"])
    assert fn.stat_keys() == [("incremental", "new_contents"),
                              ("incremental", "old_contents"),
                              ("incremental", "duplicate_rows")]
    a2, a10, b1 = _row("a", 2), _row("a", 10), _row("b", 1)
    main, tagged, counts = run_dofn(fn, [
        ("k1", {"rows": [b1, a10, a2, b1], "previous": [{"em": 1.0, "f1": 0.0}]}),
        ("k2", {"rows": [a10], "previous": []}),
        ("k3", {"rows": [], "previous": [{"em": 0.0}]}),  # gone: absent from the snapshot
    ])
    assert main == [("k1", ([a2, a10, b1, b1], {"em": 1.0, "f1": 0.0})),
                    ("k2", ([a10], None))]
    assert tagged == {OLD: [("k1", a2)], "carried": [("k1", {"em": 1.0})], NEW: [("k2", a10)]}
    assert counts == {("incremental", "old_contents"): 1, ("incremental", "new_contents"): 1,
                      ("incremental", "duplicate_rows"): 3}


def test_merge_incremental_fans_out_and_says_what_carried_and_changed():
    fn = MergeIncrementalFn(["carry", "lex"], ["em"], ["f1", "g"])
    assert fn.stat_keys() == [("incremental", "passed"), ("incremental", "orphan_score")]
    r1, r2 = _row("a", 1, id="x", system="s"), _row("a", 2, id="y", system="t")
    r3, new = _row("a", 4, prediction="n"), _row("a", 3)
    main, tagged, counts = run_dofn(fn, [
        ("old", {GROUPS: [([r1, r2], {"em": 1.0, "f1": 0.5, "g": math.nan})],
                 "carry": [ScoreResult({"em": 1.0})],
                 # a branch fed every row gives one equal result per row: one is kept
                 "lex": [ScoreResult({"f1": 0.75, "g": math.nan}),
                         ScoreResult({"f1": 0.75, "g": math.nan})]}),
        # NaN against a number, either way, is a change; NaN against NaN is not
        ("nan", {GROUPS: [([r3], {"em": 0.0, "f1": math.nan, "g": 1.0})],
                 "carry": [ScoreResult({"em": 0.0})],
                 "lex": [ScoreResult({"f1": 0.5, "g": math.nan})]}),
        ("new", {GROUPS: [([new], None)], "carry": [ScoreResult({"em": 0.0})],
                 "lex": [ScoreResult({"f1": 0.0, "g": 1.0})]}),
    ])
    assert [(r["row_key"], r["em"], r["f1"], r.get(CARRIED_FIELD), r.get(CHANGED_FIELD))
            for r in main] == [("a:1", 1.0, 0.75, ("em",), ("f1",)),
                               ("a:2", 1.0, 0.75, ("em",), ("f1",)),
                               ("a:4", 0.0, 0.5, ("em",), ("f1", "g")),
                               ("a:3", 0.0, 0.0, None, None)]
    assert [(r["id"], r["system"], r["content_key"]) for r in main[:2]] == [
        ("x", "s", content_key(r1.example)), ("y", "t", content_key(r2.example))]
    assert tagged == {} and counts == {("incremental", "passed"): 4}


def test_merge_incremental_dead_letters_failed_and_orphaned_groups(caplog):
    fn = MergeIncrementalFn(["lex"], [], [])
    r1, r2 = _row("a", 1, id="x", system="s"), _row("a", 2)
    main, tagged, counts = run_dofn(fn, [
        ("bad", {GROUPS: [([r1, r2], None)], "lex": [ScoreResult(None, "squad: no")]}),
        ("twice", {GROUPS: [([r1], None), ([r2], None)], "lex": []}),
    ])
    assert main == []
    assert [(d["row_key"], d["id"], d["system"], d["reason"], d["detail"])
            for d in tagged[DEAD_LETTER]] == [
        ("a:1", "x", "s", "metric_input_error", "squad: no"),
        ("a:2", None, None, "metric_input_error", "squad: no"),
        ("a:1", "x", "s", "missing_score", "content key twice grouped 2 times"),
        ("a:2", None, None, "missing_score", "content key twice grouped 2 times")]
    assert counts == {("incremental", "orphan_score"): 1}
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "content key twice has 2 row groups"]


def _incremental_graph(pipeline, previous: PreviousRun):
    rows = pipeline | "Rows" >> beam.Create([("a:1", _row("a", 1)), ("a:2", _row("a", 2)),
                                             ("a:3", _row("a", 3, prediction="new"))])
    old_scores = pipeline | "Previous" >> ReadPreviousScores(previous, ["em"])
    split = (rows, old_scores) | "Split" >> SplitByPrevious(["em"])
    carried = split["carried"] | "Carried" >> beam.Map(carried_result, ["em"])
    computed = split[NEW] | "Compute" >> beam.Map(lambda kv: (kv[0], ScoreResult({"em": 0.0})))
    carry = (carried, computed) | "CarryBranch" >> beam.Flatten()
    return {GROUPS: split[GROUPS], "carry": carry} | "Join" >> JoinIncremental(["em"], [])


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_the_incremental_transforms_have_stable_step_names(tmp_path, fmt):
    """Step names are an interface: the runner's UI, counters by step, and the transform
    mapping of Dataflow's --update all go by them."""
    previous = load_previous_run(_write_run(tmp_path, formats=(fmt,)))
    pipeline = test_pipeline.TestPipeline()
    _incremental_graph(pipeline, previous)
    read = (["Previous/ReadPreviousParquet", "Previous/PreviousRecords"] if fmt == "parquet"
            else ["Previous/ReadPreviousJsonLines", "Previous/ParsePreviousJson"])
    expected = {"Previous", *read, "Previous/KeyByContent", "Previous/OnePerContentKey",
                "Split", "Split/KeyRowsByContent", "Split/GroupByContentKey",
                "Split/SplitNewAndOld", "Join", "Join/GroupByContentKey",
                "Join/MergeAndFanOut"}
    got = step_labels(pipeline)
    assert expected <= got, sorted(expected - got)
    assert not {label for label in got if label.split("/")[0] in ("Previous", "Split", "Join")
                and label.count("/") == 1} - expected


@pytest.mark.slow
@pytest.mark.mutation
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_incremental_transforms_carry_old_contents_and_compute_new_ones(tmp_path, fmt):
    # The previous run scored content of rows a:1 and a:2 (equal) with em 1.0 and the
    # content of a vanished row; a:3 is new.
    key = content_key(_row("a", 1).example)
    prefix = str(tmp_path / "old")
    (tmp_path / "old.summary.json").write_text(json.dumps(SUMMARY))
    records = [{"row_key": "f:1", "content_key": key, "em": 1.0},
               {"row_key": "f:2", "content_key": key, "em": 1.0},
               {"row_key": "f:9", "content_key": "gone", "em": None}]
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(records), prefix + ".scores.parquet")
    else:
        (tmp_path / "old.scores.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records))
    with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
        joined = _incremental_graph(pipeline, load_previous_run(prefix))
        assert_that(joined["scored"] | beam.Map(lambda r: (
            r["row_key"], r["em"], r.get(CARRIED_FIELD), r.get(CHANGED_FIELD))),
            equal_to([("a:1", 1.0, ("em",), ()), ("a:2", 1.0, ("em",), ()),
                      ("a:3", 0.0, None, None)]), label="scored")
        assert_that(joined["dead_letter"], equal_to([]), label="dead")


@pytest.mark.slow
@pytest.mark.mutation
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_previous_scores_without_a_content_key_fail_naming_the_row(tmp_path, fmt):
    prefix = str(tmp_path / "old")
    (tmp_path / "old.summary.json").write_text(json.dumps(SUMMARY))
    records = [{"row_key": "f:3", "content_key": None, "em": 1.0}]
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(records), prefix + ".scores.parquet")
    else:
        (tmp_path / "old.scores.jsonl").write_text(json.dumps(records[0]) + "\n")
    with pytest.raises(Exception, match=r"a row without a content key \(row_key 'f:3'\)"):
        with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
            _ = pipeline | ReadPreviousScores(load_previous_run(prefix), ["em"])
