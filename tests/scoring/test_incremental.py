"""Incremental runs (`--previous_run`): carry-over by content key and signature, changed /
added / removed / duplicate rows, a second identical run computing nothing, a changed
metric version recomputing only that metric, corpus-level metrics recomputed."""

from __future__ import annotations

import json
import math

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.score_predictions import run
from tests.runners import RUNNER_ARGS
from tests.scoring import fakes
from transforms.metrics import registry
from transforms.metrics.base import format_signature
from transforms.scoring.incremental.previous_run import load_previous_run

CALLS: list[int] = []  # examples scored by the fake metric, in this process
STATE = {"version": 1, "offset": 0.0}
NAN = "NAN"  # a prediction whose fake_len is NaN (a metric's undefined value)


class VersionedFake(fakes.FakeMetric):
    """The fake family with a version and an offset the tests change; `fake_corpus` is
    its only corpus-level column."""

    def signature(self) -> dict[str, str]:
        return {c: format_signature(c, str(STATE['version']), {'impl': 'fake'})
                for c in self.columns}

    def corpus_statistics(self):
        return super().corpus_statistics() if "fake_corpus" in self.columns else ()

    def score_batch(self, examples, corpus_stats):
        CALLS.append(len(examples))
        out = super().score_batch(examples, corpus_stats)
        for example, values in zip(examples, out, strict=True):
            if "fake_len" in values:
                values["fake_len"] += STATE["offset"]
                if example.prediction == NAN:
                    values["fake_len"] = math.nan
        return out


@pytest.fixture(autouse=True)
def versioned_fake(monkeypatch):
    spec = registry.FamilySpec("fake", fakes.FAKE_COLUMNS,
                               "tests.scoring.test_incremental:VersionedFake")
    monkeypatch.setitem(registry._FAMILIES, "fake", spec)
    for column in fakes.FAKE_COLUMNS:
        monkeypatch.setitem(registry._COLUMN_TO_FAMILY, column, "fake")
    CALLS.clear()
    STATE.update(version=1, offset=0.0)


def _row(i: int, system: str = "a", prediction: str | None = None) -> dict:
    return {"id": f"q{i}", "system": system,
            "prediction": prediction or f"the answer {i}",
            "references": [f"answer {i}", f"gold {i % 3}"], "question": f"question {i}?"}


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _score(input_path: str, prefix: str, *extra: str, metrics: str = "em,f1,fake_len"
           ) -> tuple[pd.DataFrame, dict]:
    run(["--input", input_path, "--output", prefix, "--metrics", metrics, *extra,
         *RUNNER_ARGS["direct_in_process"]], save_main_session=False)
    scores = pq.read_table(prefix + ".scores.parquet").to_pandas()
    summary = json.loads(open(prefix + ".summary.json").read())
    return scores, summary


def _comparable(scores: pd.DataFrame, columns=("em", "f1", "fake_len")) -> list[tuple]:
    return sorted((r["id"], r["system"], r["content_key"], *(r[c] for c in columns))
                  for _, r in scores.iterrows())


BASE = [_row(i) for i in range(20)]


@pytest.mark.slow
def test_changed_added_removed_and_duplicate_rows(tmp_path):
    first = _write(tmp_path / "night1.jsonl", BASE)
    _score(first, str(tmp_path / "night1"))
    CALLS.clear()
    # Night 2: row 3 changed, row 5 removed, rows 20-21 added, a line inserted at the top
    # (every row shifts: row keys change, content keys do not), row 7 duplicated under
    # another system, and an added row twice.
    night2 = [_row(21), *BASE[:3], _row(3, prediction="a new answer"), BASE[4],
              *BASE[6:], _row(7, system="b"), _row(20), _row(20, system="c")]
    second = _write(tmp_path / "night2.jsonl", night2)
    incremental, summary = _score(second, str(tmp_path / "night2"),
                                  "--previous_run", str(tmp_path / "night1"))
    # Computed: the changed row and the added contents, 20 once for its two rows.
    assert sum(CALLS) == 3
    full, _ = _score(second, str(tmp_path / "full2"))
    assert _comparable(incremental) == _comparable(full)  # equal to a full run
    assert "q5" not in set(incremental["id"])  # removed rows leave the snapshot
    fake = summary["overall"]["metrics"]["fake_len"]
    assert (fake["carried"], fake["computed"], fake["changed"]) == (19, 4, 0)
    assert fake["previous_mean"] == pytest.approx(
        sum(len(f"the answer {i}") for i in range(20)) / 20)
    assert summary["incremental"]["carried_metrics"] == ["em", "f1", "fake_len"]
    assert summary["incremental"]["previous_run"] == str(tmp_path / "night1")


@pytest.mark.slow
def test_duplicates_are_scored_once_and_a_second_identical_run_computes_nothing(tmp_path):
    rows = [*BASE[:5], _row(1, system="b"), _row(1, system="c")]
    data = _write(tmp_path / "in.jsonl", rows)
    _score(data, str(tmp_path / "n1"))
    CALLS.clear()
    # A first incremental run from an empty previous run scores each content once.
    _write(tmp_path / "empty.jsonl", [_row(99)])
    _score(str(tmp_path / "empty.jsonl"), str(tmp_path / "n0"))
    CALLS.clear()
    scores, summary = _score(data, str(tmp_path / "from_empty"), "--previous_run",
                             str(tmp_path / "n0"))
    assert sum(CALLS) == 5  # 7 rows, 5 distinct contents
    assert len(scores) == 7
    CALLS.clear()
    again, summary = _score(data, str(tmp_path / "n2"), "--previous_run", str(tmp_path / "n1"))
    assert CALLS == []  # nothing computed
    assert all(m["computed"] == 0 and m["carried"] == 7
               for m in summary["overall"]["metrics"].values())
    first = pq.read_table(str(tmp_path / "n1") + ".scores.parquet").to_pandas()
    assert _comparable(again) == _comparable(first)


@pytest.mark.slow
def test_a_changed_metric_version_recomputes_only_that_metric(tmp_path):
    data = _write(tmp_path / "in.jsonl", BASE)
    _score(data, str(tmp_path / "n1"))
    STATE.update(version=2, offset=0.5)
    CALLS.clear()
    scores, summary = _score(data, str(tmp_path / "n2"), "--previous_run", str(tmp_path / "n1"))
    assert sum(CALLS) == 20
    metrics = summary["overall"]["metrics"]
    assert (metrics["fake_len"]["computed"], metrics["fake_len"]["changed"]) == (20, 20)
    assert metrics["fake_len"]["mean"] == pytest.approx(metrics["fake_len"]["previous_mean"]
                                                        + 0.5)
    assert (metrics["em"]["carried"], metrics["f1"]["carried"]) == (20, 20)
    assert summary["incremental"]["computed_metrics"] == {
        "fake_len": "signature changed (was fake_len|v:1|impl:fake)"}
    assert all(v == len(f"the answer {i}") + 0.5 for i, v in zip(
        scores.sort_values("id", key=lambda s: s.str[1:].astype(int))["id"].str[1:].astype(int),
        scores.sort_values("id", key=lambda s: s.str[1:].astype(int))["fake_len"]))


@pytest.mark.slow
def test_corpus_level_metrics_are_recomputed_and_the_summary_says_why(tmp_path):
    """`fake_corpus` is the size of the corpus scored: 20 rows the first night, 25 the
    second. Every row gets the second night's value (the previous run's 20 is not
    carried, nor put back by the merge), and the 20 rows scored both nights count as
    changed."""
    first = _write(tmp_path / "n1.jsonl", BASE)
    before, _ = _score(first, str(tmp_path / "n1"), metrics="em,fake_corpus")
    assert set(before["fake_corpus"]) == {20.0}
    second = _write(tmp_path / "n2.jsonl", [*BASE, *(_row(i) for i in range(20, 25))])
    scores, summary = _score(second, str(tmp_path / "n2"), "--previous_run",
                             str(tmp_path / "n1"), metrics="em,fake_corpus")
    assert summary["incremental"]["carried_metrics"] == ["em"]
    assert summary["incremental"]["computed_metrics"]["fake_corpus"].startswith("corpus-level")
    assert len(scores) == 25 and set(scores["fake_corpus"]) == {25.0}
    full, _ = _score(second, str(tmp_path / "full"), metrics="em,fake_corpus")
    assert _comparable(scores, ("em", "fake_corpus")) == _comparable(full, ("em", "fake_corpus"))
    fake = summary["overall"]["metrics"]["fake_corpus"]
    assert (fake["computed"], fake["carried"], fake["changed"]) == (25, 0, 20)
    assert (fake["mean"], fake["previous_mean"]) == (25.0, 20.0)
    assert summary["overall"]["metrics"]["em"]["carried"] == 20


@pytest.mark.slow
def test_previous_run_may_be_the_output_itself_with_overwrite(tmp_path, caplog):
    data = _write(tmp_path / "in.jsonl", BASE)
    prefix = str(tmp_path / "scores")
    before, _ = _score(data, prefix)
    with pytest.raises(ValueError, match="--overwrite"):
        _score(data, prefix, "--previous_run", prefix)
    CALLS.clear()
    after, summary = _score(data, prefix, "--previous_run", prefix, "--overwrite")
    assert CALLS == [] and _comparable(after) == _comparable(before)
    # Beam reads the incremental transforms' type hints: none it has to ignore.
    assert not [r for r in caplog.records if "type hint will be ignored" in r.getMessage()]
    assert summary["overall"]["metrics"]["em"]["carried"] == 20


def test_previous_run_must_be_a_complete_run(tmp_path):
    with pytest.raises(ValueError, match="is not a complete run: .*summary.json is missing"):
        load_previous_run(str(tmp_path / "nothing"))
    (tmp_path / "bad.summary.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="is not a scoring summary"):
        load_previous_run(str(tmp_path / "bad"))
    (tmp_path / "lonely.summary.json").write_text(json.dumps({"signatures": {}}))
    with pytest.raises(ValueError, match="expected one scores file"):
        load_previous_run(str(tmp_path / "lonely"))


@pytest.mark.slow
@pytest.mark.parametrize("output_format", ["parquet", "jsonl"])
def test_nan_values_are_carried_as_nan(tmp_path, output_format):
    """A NaN is written as null; the next run carries it back as NaN (not 0, not a
    missing score), counts it carried and not changed, and writes it as null again."""
    rows = [*BASE[:5], _row(5, prediction=NAN)]
    data = _write(tmp_path / "in.jsonl", rows)
    fmt = ("--output_format", output_format)

    def values(prefix):
        if output_format == "parquet":
            table = pq.read_table(prefix + ".scores.parquet").to_pylist()
        else:
            table = [json.loads(line) for line in open(prefix + ".scores.jsonl")]
        return {r["id"]: r["fake_len"] for r in table}

    run(["--input", data, "--output", str(tmp_path / "n1"), "--metrics", "em,fake_len",
         *fmt, *RUNNER_ARGS["direct_in_process"]], save_main_session=False)
    first = values(str(tmp_path / "n1"))
    assert first["q5"] is None and first["q0"] == len("the answer 0")
    CALLS.clear()
    run(["--input", data, "--output", str(tmp_path / "n2"), "--metrics", "em,fake_len",
         "--previous_run", str(tmp_path / "n1"), *fmt, *RUNNER_ARGS["direct_in_process"]],
        save_main_session=False)
    assert CALLS == []  # carried, not recomputed
    assert values(str(tmp_path / "n2")) == first
    summary = json.loads(open(str(tmp_path / "n2") + ".summary.json").read())
    fake = summary["overall"]["metrics"]["fake_len"]
    assert (fake["carried"], fake["computed"], fake["changed"]) == (6, 0, 0)


def _previous(tmp_path, content_key_version: str, signatures: dict) -> str:
    prefix = str(tmp_path / "old")
    (tmp_path / "old.summary.json").write_text(json.dumps(
        {"signatures": signatures, "content_key_version": content_key_version}))
    # a whole previous run: its scores file has the columns its summary names (a launch
    # check refuses one that does not)
    pq.write_table(pa.table({"row_key": ["f:1"], "content_key": ["k"],
                             **{column: [0.5] for column in signatures}}),
                   prefix + ".scores.parquet")
    return prefix


def test_a_previous_run_of_another_content_key_recipe_carries_nothing(tmp_path):
    """plan_carry's first branch: a previous run whose content keys are not of this
    recipe (or that has none: written before content keys) cannot be matched row by row,
    so every metric is computed, each saying why."""
    from transforms.scoring.incremental.plan import plan_carry
    from transforms.scoring.reading.rows import CONTENT_KEY_VERSION

    metrics = registry.build_metrics(["em", "fake_len"], {})
    signatures = {c: s for m in metrics for c, s in m.signature().items()}
    same = load_previous_run(_previous(tmp_path, CONTENT_KEY_VERSION, signatures))
    assert same.content_keys
    plan = plan_carry(metrics, signatures, same)
    assert plan.carried_columns == ("em", "fake_len") and plan.reasons == {}
    for version in ("ck0", None):
        old = load_previous_run(_previous(tmp_path, version, signatures))
        assert not old.content_keys
        plan = plan_carry(metrics, signatures, old)
        assert plan.carried == () and [m.family for m in plan.computed] == ["squad", "fake"]
        assert plan.reasons == dict.fromkeys(
            ("em", "fake_len"), f"the previous run has no content keys of recipe "
            f"{CONTENT_KEY_VERSION} (written by an older version)")
        assert plan.compared == ("em", "fake_len")  # their changes are still counted


@pytest.mark.slow
def test_a_previous_run_with_old_content_keys_is_recomputed_whole(tmp_path):
    data = _write(tmp_path / "in.jsonl", BASE)
    before, _ = _score(data, str(tmp_path / "n1"))
    summary_path = tmp_path / "n1.summary.json"
    old = json.loads(summary_path.read_text())
    old["content_key_version"] = "ck0"
    summary_path.write_text(json.dumps(old))
    CALLS.clear()
    after, summary = _score(data, str(tmp_path / "n2"), "--previous_run", str(tmp_path / "n1"))
    assert sum(CALLS) == 20  # nothing carried
    assert summary["incremental"]["carried_metrics"] == []
    assert set(summary["incremental"]["computed_metrics"]) == {"em", "f1", "fake_len"}
    assert all("no content keys of recipe" in why
               for why in summary["incremental"]["computed_metrics"].values())
    assert all(m["carried"] == 0 and m["computed"] == 20
               for m in summary["overall"]["metrics"].values())
    assert _comparable(after) == _comparable(before)


class CountingOverlapHandler:
    """Wraps the model-branch test handler, counting the inputs it scores."""

    inputs: list[int] = []

    def __new__(cls, use, **kwargs):
        from tests.scoring.test_score_model_metrics import OverlapHandler

        class Counting(OverlapHandler):
            def run_inference(self, batch, model, inference_args=None):
                CountingOverlapHandler.inputs.append(len(batch))
                return super().run_inference(batch, model, inference_args)
        return Counting(use, **kwargs)


@pytest.mark.slow
def test_a_replaced_checkpoint_recomputes_only_its_model_metric(tmp_path, cross_encoder_path):
    import shutil

    data = _write(tmp_path / "in.jsonl", BASE)
    retrained = str(tmp_path / "retrained")
    shutil.copytree(cross_encoder_path, retrained)

    def score(prefix, model, *extra):
        run(["--input", data, "--output", str(tmp_path / prefix), "--metrics", "f1,sas",
             "--sas_model", model, *extra, *RUNNER_ARGS["direct_in_process"]],
            save_main_session=False, handler_factory=CountingOverlapHandler)
        return json.loads(open(str(tmp_path / prefix) + ".summary.json").read())

    score("n1", cross_encoder_path)
    CountingOverlapHandler.inputs.clear()
    summary = score("n2", cross_encoder_path, "--previous_run", str(tmp_path / "n1"))
    assert CountingOverlapHandler.inputs == []  # nothing changed: no inference
    CountingOverlapHandler.inputs.clear()
    summary = score("n3", retrained, "--previous_run", str(tmp_path / "n2"))
    metrics = summary["overall"]["metrics"]
    assert (metrics["f1"]["carried"], metrics["sas"]["computed"]) == (20, 20)
    assert metrics["sas"]["changed"] == 0  # the same weights under another path
    assert sum(CountingOverlapHandler.inputs) == 40  # 20 rows x 2 references
    assert "signature changed" in summary["incremental"]["computed_metrics"]["sas"]


@pytest.mark.slow
def test_a_model_metric_new_to_the_run_is_computed_for_the_old_rows(tmp_path, cross_encoder_path):
    """The previous run had no `sas`: the old rows carry `f1` and get `sas` computed (no
    column compared), each row equal to a full run's."""
    data = _write(tmp_path / "in.jsonl", BASE)

    def score(prefix, metrics, *extra):
        model = ["--sas_model", cross_encoder_path] if "sas" in metrics else []
        run(["--input", data, "--output", str(tmp_path / prefix), "--metrics", metrics,
             *model, *extra, *RUNNER_ARGS["direct_in_process"]],
            save_main_session=False, handler_factory=CountingOverlapHandler)
        summary = json.loads(open(str(tmp_path / prefix) + ".summary.json").read())
        return pd.read_parquet(str(tmp_path / prefix) + ".scores.parquet"), summary

    score("n1", "f1")
    after, summary = score("n2", "f1,sas", "--previous_run", str(tmp_path / "n1"))
    metrics = summary["overall"]["metrics"]
    assert (metrics["f1"]["carried"], metrics["sas"]["computed"]) == (20, 20)
    full, _ = score("full", "f1,sas")
    assert _comparable(after, ("f1", "sas")) == _comparable(full, ("f1", "sas"))
    assert after["sas"].notna().all()


@pytest.mark.slow
def test_cider_with_the_runs_statistics_equals_a_full_run_and_frozen_ones_carry(tmp_path):
    rows = [*BASE, _row(3, system="b"), _row(3, system="c")]  # duplicates count in df
    first = _write(tmp_path / "n1.jsonl", rows)
    _score(first, str(tmp_path / "n1"), metrics="em,cider")
    changed = _write(tmp_path / "n2.jsonl", [*rows[1:], _row(30)])
    incremental, summary = _score(changed, str(tmp_path / "n2"), "--previous_run",
                                  str(tmp_path / "n1"), metrics="em,cider")
    full, _ = _score(changed, str(tmp_path / "full"), metrics="em,cider")
    assert _comparable(incremental, ("em", "cider")) == _comparable(full, ("em", "cider"))
    assert summary["overall"]["metrics"]["cider"]["computed"] == 22
    # Frozen statistics: the signature names the file, so cider carries between runs
    # scored against the same file.
    stats = str(tmp_path / "stats.parquet")
    _score(first, str(tmp_path / "s0"), "--save_corpus_statistics", stats, metrics="cider")
    _score(first, str(tmp_path / "s1"), "--corpus_statistics", stats, metrics="cider")
    _, summary = _score(changed, str(tmp_path / "s2"), "--corpus_statistics", stats,
                        "--previous_run", str(tmp_path / "s1"), metrics="cider")
    cider = summary["overall"]["metrics"]["cider"]
    assert (cider["carried"], cider["computed"]) == (21, 1)


def test_each_column_of_a_family_gets_its_true_reason():
    """em scored alone, then em,f1: f1 is new; em is unchanged but computed with it (one
    SQuAD pass), and its reason says so rather than "not in the previous run"."""
    from transforms.scoring.incremental.plan import plan_carry
    from transforms.scoring.incremental.previous_run import PreviousRun

    metrics = registry.build_metrics(["em", "f1"], {})
    signatures = {c: s for m in metrics for c, s in m.signature().items()}
    previous = PreviousRun("p", "p.scores.parquet", "parquet", {"em": signatures["em"]},
                           True, {})
    plan = plan_carry(metrics, signatures, previous)
    assert plan.carried == () and plan.compared == ("em",)
    assert plan.reasons == {
        "em": "unchanged, but computed with f1 (one squad pass computes all its columns; "
              "the values are compared with the previous run's)",
        "f1": "not in the previous run"}
    changed = dict(previous.signatures, f1="f1|old")
    plan = plan_carry(metrics, signatures, PreviousRun(
        "p", "p.scores.parquet", "parquet", changed, True, {}))
    assert plan.reasons["f1"] == "signature changed (was f1|old)"
    assert plan.reasons["em"].startswith("unchanged, but computed with f1")


@pytest.mark.slow
def test_the_summary_gives_the_true_reason_of_each_column(tmp_path):
    data = _write(tmp_path / "in.jsonl", BASE)
    _score(data, str(tmp_path / "em"), metrics="em")
    _, summary = _score(data, str(tmp_path / "both"), "--previous_run", str(tmp_path / "em"),
                        metrics="em,f1")
    assert summary["incremental"]["carried_metrics"] == []
    assert summary["incremental"]["computed_metrics"] == {
        "em": "unchanged, but computed with f1 (one squad pass computes all its columns; "
              "the values are compared with the previous run's)",
        "f1": "not in the previous run"}
    assert summary["overall"]["metrics"]["em"]["changed"] == 0


def _main(argv, capsys) -> tuple[int, list[str]]:
    from pipelines.score_predictions import main

    code = main([*argv, *RUNNER_ARGS["direct_in_process"]])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["cut", "other_run", "cut_jsonl"])
def test_a_damaged_previous_run_ends_in_one_line_naming_the_file(tmp_path, capsys, damage):
    """A previous run whose scores file was cut short ends in one line naming the file,
    not in a traceback (`pyarrow.lib.ArrowInvalid: Parquet magic bytes not found`), exit 1."""
    data = _write(tmp_path / "in.jsonl", BASE)
    previous = str(tmp_path / "prev")
    fmt = "jsonl" if damage == "cut_jsonl" else "parquet"
    _main(["--input", data, "--output", previous, "--metrics", "em",
           "--output_format", fmt], capsys)
    scores = tmp_path / f"prev.scores.{fmt}"
    if damage == "other_run":  # a whole Parquet file, but not the one the summary counts
        table = pq.read_table(scores)
        pq.write_table(table.slice(0, 7), scores)
    else:
        blob = scores.read_bytes()
        scores.write_bytes(blob[: len(blob) * 6 // 10])
    code, err = _main(["--input", data, "--output", str(tmp_path / "next"), "--metrics",
                       "em", "--previous_run", previous], capsys)
    assert code == 2
    assert err[-1].startswith(f"qa-score: error: --previous_run {previous}: scores file "
                              f"{scores}: ")
    assert {"cut": "cannot be read as Parquet: ArrowInvalid",
            "other_run": "holds 7 rows, but its summary.json says 20 were scored",
            "cut_jsonl": "does not end with a whole line"}[damage] in err[-1]
    assert not any("Traceback" in line for line in err)
    assert not list(tmp_path.glob("next*"))


@pytest.mark.slow
def test_a_previous_scores_file_damaged_inside_fails_on_the_worker_naming_it(
        tmp_path, capsys):
    """The footer is whole and matches the summary, but the data pages are not: the
    worker's error names the file, in one line, exit 2 (Beam's ReadFromParquet raised
    pyarrow's OSError without the path)."""
    data = _write(tmp_path / "in.jsonl", BASE)
    previous = str(tmp_path / "prev")
    _main(["--input", data, "--output", previous, "--metrics", "em"], capsys)
    scores = tmp_path / "prev.scores.parquet"
    blob = bytearray(scores.read_bytes())
    first_page = pq.ParquetFile(scores).metadata.row_group(0).column(0).data_page_offset
    for i in range(first_page, first_page + 64):  # the page headers and data
        blob[i] ^= 0xFF
    scores.write_bytes(bytes(blob))
    code, err = _main(["--input", data, "--output", str(tmp_path / "next"), "--metrics",
                       "em", "--previous_run", previous], capsys)
    assert code == 2
    assert err[-1].startswith(f"qa-score: error: --previous_run {previous}: scores file "
                              f"{scores}: cannot be read (row group 0): OSError: ")
    assert not any("Traceback" in line for line in err)
