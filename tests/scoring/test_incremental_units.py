"""The launcher's side of an incremental run: reading the previous run and deciding what
carries (tests/scoring/test_carry.py tests the batches' side; tests/scoring/
test_incremental.py runs whole pipelines)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.scoring import fakes
from transforms.scoring.incremental.carry import CarrySpec
from transforms.scoring.incremental.plan import CarryPlan, depends_on_run_corpus, plan_carry
from transforms.scoring.incremental.previous_run import (
    PreviousRun,
    PreviousRunError,
    load_previous_run,
)
from transforms.scoring.reading.rows import CONTENT_KEY_VERSION

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
    from transforms.scoring.reading.parquet_parts import file_identity

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
        "fake_corpus": "not in the previous run",  # each column its own reason
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


def test_the_plan_gives_the_scoring_steps_its_carried_and_compared_columns():
    fake, squad = fakes.FakeMetric(["fake_len"]), fakes.FakeMetric(["em", "f1"])
    spec = CarryPlan((squad,), (fake,), {}, ("fake_len",)).spec()
    assert spec == CarrySpec(("em", "f1"), ("fake_len",))
    assert spec.columns == ("em", "f1", "fake_len")
    metrics = [fake, squad]
    assert spec.carries(metrics[1]) and not spec.carries(metrics[0])


def _scored(summary=SUMMARY, scored=1):
    return {**summary, "overall": {**summary["overall"], "scored": scored}}


def _fails(prefix, detail, fmt="parquet"):
    """load_previous_run raises PreviousRunError, whole message `<flag> <prefix>: scores
    file <path>: <detail>`."""
    with pytest.raises(PreviousRunError) as raised:
        load_previous_run(prefix)
    assert str(raised.value) == (f"--previous_run {prefix}: scores file "
                                 f"{prefix}.scores.{fmt}: {detail}")


def test_a_parquet_scores_file_is_checked_against_its_summary(tmp_path):
    prefix = _write_run(tmp_path, summary=_scored(scored=1))
    assert load_previous_run(prefix).output_format == "parquet"  # 1 row, as counted
    prefix = _write_run(tmp_path, "more", summary=_scored(scored=3))
    _fails(prefix, "holds 1 rows, but its summary.json says 3 were scored: the two files "
                   "are not of one run")
    for scored in (None, "1", 2.0):  # not a count: nothing to compare
        prefix = _write_run(tmp_path, "n", summary=_scored(scored=scored))
        assert load_previous_run(prefix).summary["overall"]["scored"] == scored
    prefix = _write_run(tmp_path, "cols", summary={**SUMMARY, "signatures": {
        "em": "em|v:1", "f1": "f1|v:1", "bleu4": "b"}})
    _fails(prefix, "has no column(s) ['f1', 'bleu4'] that its summary.json names")
    pq.write_table(pa.table({"row_key": ["f:1"], "em": [1.0]}), f"{prefix}.scores.parquet")
    (tmp_path / "cols.summary.json").write_text(json.dumps(SUMMARY))
    _fails(prefix, "has no column(s) ['content_key'] that its summary.json names")
    (tmp_path / "cols.summary.json").write_text(json.dumps(
        {**SUMMARY, "content_key_version": "another recipe"}))
    assert load_previous_run(prefix).content_keys is False  # then no content_key is needed
    blob = (tmp_path / "more.scores.parquet").read_bytes()
    (tmp_path / "more.scores.parquet").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(PreviousRunError, match=r"^--previous_run .*/more: scores file "
                       r".*/more.scores.parquet: cannot be read as Parquet: ArrowInvalid: "):
        load_previous_run(str(tmp_path / "more"))


def test_a_jsonl_scores_file_must_end_with_a_whole_line(tmp_path):
    prefix = _write_run(tmp_path, summary=_scored(scored=5), formats=("jsonl",))
    assert load_previous_run(prefix).output_format == "jsonl"  # the count is not checked
    path = tmp_path / "old.scores.jsonl"
    path.write_text(path.read_text().rstrip("\n"))
    _fails(prefix, "does not end with a whole line: it was cut short", "jsonl")
    path.write_text("")
    _fails(prefix, "is empty, but its summary.json says 5 rows were scored", "jsonl")
    (tmp_path / "old.summary.json").write_text(json.dumps(_scored(scored=1)))
    _fails(prefix, "is empty, but its summary.json says 1 rows were scored", "jsonl")
    for scored in (0, None):
        (tmp_path / "old.summary.json").write_text(json.dumps(_scored(scored=scored)))
        assert load_previous_run(prefix).identity.size == 0


def test_the_scores_file_is_read_as_it_was_at_launch(tmp_path):
    previous = load_previous_run(_write_run(tmp_path))
    previous.source().check_unchanged()
    pq.write_table(pa.table({"row_key": ["f:1", "f:2"], "content_key": ["k", "l"],
                             "em": [1.0, 0.0]}), previous.scores_path)
    with pytest.raises(PreviousRunError, match=r"^--previous_run .*/old: scores file "
                       r".*/old.scores.parquet: changed while the run read it \(at launch "):
        previous.source().check_unchanged()


def test_a_jsonl_scores_file_that_cannot_be_read_is_named(tmp_path, monkeypatch):
    from transforms.scoring.incremental import previous_run

    prefix = _write_run(tmp_path, formats=("jsonl",))

    opened = previous_run.FileSystems.open

    def refuse(path, **kwargs):  # the summary opens; the scores file does not
        if path.endswith(".scores.jsonl"):
            raise OSError(f"no access to {path}")
        return opened(path, **kwargs)

    monkeypatch.setattr(previous_run.FileSystems, "open", refuse)
    _fails(prefix, f"cannot be read: OSError: no access to {prefix}.scores.jsonl", "jsonl")
