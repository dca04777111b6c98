"""The EVOUNA reader: validation, splits by question, improper questions, scoring rows."""

from __future__ import annotations

import collections
import json

import pytest

from tests.conftest import SHARED_DATA
from transforms.metrics import judge
from transforms.training import evouna

TQ = SHARED_DATA / "judgments" / "evouna" / "TQ.json"


def _record(question: str, improper: bool = False, **judged: bool | str) -> dict:
    rec = {"question": question, "golden_answer": "David Seville/ Ross Bagdasarian /",
           "improper": improper}
    for system in evouna.SYSTEMS:
        rec[f"answer_{system}"] = f"{system} says David Seville"
        rec[f"judge_{system}"] = judged.get(system, True)
    return rec


def test_parse_splits_golds_and_skips_missing_judgments() -> None:
    (q,) = evouna.parse_questions([_record("Who?", fid=False, gpt4="nan")], "x.json")
    assert q.golds == ("David Seville", "Ross Bagdasarian")
    assert [(s, j) for s, _, j in q.answers] == [
        ("fid", False), ("gpt35", True), ("chatgpt", True), ("newbing", True)]
    assert q.missing == ("gpt4",)


@pytest.mark.parametrize(("record", "message"), [
    ("not an object", "record 0: expected a JSON object"),
    ({"golden_answer": "x"}, "record 0: field 'question' must be a string"),
    ({"question": "q", "golden_answer": " / "}, "golden_answer holds no answer"),
    ({**_record("q"), "improper": "no"}, "'improper' must be true or false"),
    ({**_record("q"), "judge_fid": "yes"}, "judge_fid: a judgment must be true, false"),
])
def test_parse_names_the_bad_record(record, message) -> None:
    with pytest.raises(ValueError, match=message):
        evouna.parse_questions([record], "x.json")


def test_read_names_the_file(tmp_path) -> None:
    bad = tmp_path / "TQ.json"
    bad.write_text("[{")
    with pytest.raises(ValueError, match=f"EVOUNA file {bad}: not valid JSON"):
        evouna.read_questions(str(bad))
    with pytest.raises(ValueError, match="missing.json does not exist"):
        evouna.read_questions(str(tmp_path / "missing.json"))
    bad.write_text('{"question": "q"}')
    with pytest.raises(ValueError, match="expected a JSON list"):
        evouna.read_questions(str(bad))


def test_question_split_is_seeded_and_ignores_case_and_spacing() -> None:
    assert evouna.question_split("Who  was he?") == evouna.question_split("who was HE?")
    splits = [evouna.question_split(f"question {i}") for i in range(3000)]
    shares = collections.Counter(splits)
    assert abs(shares["train"] / 3000 - 0.7) < 0.03
    assert abs(shares["test"] / 3000 - 0.2) < 0.03
    reseeded = [evouna.question_split(f"question {i}", seed=14) for i in range(3000)]
    assert splits != reseeded
    assert {evouna.question_split(f"q{i}", proportions=(0, 0, 1)) for i in range(50)} == {"test"}
    with pytest.raises(ValueError, match="three non-negative"):
        evouna.question_split("q", proportions=(70, 30))


def test_judged_answers_skip_improper_questions_and_keep_ids_stable() -> None:
    questions = evouna.parse_questions(
        [_record("Who?"), _record("Bad?", improper=True), _record("Who?", fid=False)], "x")
    rows = evouna.judged_answers(questions)
    assert len(rows) == 10
    assert {r.id for r in rows} == {f"tq-{i}-{s}" for i in (0, 2) for s in evouna.SYSTEMS}
    # The same question twice lands in one split.
    assert len({r.split for r in rows}) == 1
    assert [r.human for r in rows if r.id.startswith("tq-2")] == [0, 1, 1, 1, 1]
    only = "dev" if rows[0].split != "dev" else "train"
    assert evouna.judged_answers(questions, splits=(only,)) == []


def test_real_file_counts_and_no_question_in_two_splits() -> None:
    questions = evouna.read_questions(str(TQ))
    rows = evouna.judged_answers(questions)
    counts = evouna.counts(questions)
    # The data README: 2,000 questions, 9,690 judged answers once improper ones are out.
    assert counts["questions"] == 2000 and counts["improper_questions"] == 62
    assert len(rows) == 9690 == sum(counts[s]["answers"] for s in evouna.SPLITS)
    split_of: dict[str, set[str]] = collections.defaultdict(set)
    for r in rows:
        split_of[" ".join(r.question.lower().split())].add(r.split)
    assert all(len(s) == 1 for s in split_of.values())
    assert 0.65 < counts["train"]["answers"] / len(rows) < 0.75
    assert 0.8 < counts["test"]["correct_share"] < 0.9


def test_conversion_writes_scoring_rows(tmp_path, capsys) -> None:
    src = tmp_path / "TQ.json"
    src.write_text(json.dumps([_record("Who?"), _record("Why?", gpt35=False)]))
    assert evouna.main(["--input", str(src), "--output", str(tmp_path / "rows"),
                        "--splits", "0,0,1"]) == 0
    lines = (tmp_path / "rows" / "test.jsonl").read_text().splitlines()
    assert len(lines) == 10
    row = json.loads(lines[6])
    assert row == {"id": "tq-1-gpt35", "system": "gpt35", "question": "Why?",
                   "prediction": "gpt35 says David Seville",
                   "references": ["David Seville", "Ross Bagdasarian"], "human": 0}
    assert json.loads(capsys.readouterr().out)["counts"]["test"]["answers"] == 10
    assert evouna.main(["--input", str(tmp_path / "nope.json"), "--output", "x"]) == 2


@pytest.mark.slow
def test_pair_rows_use_the_best_matching_gold_and_fixed_splits() -> None:
    from transforms.training import pair_data

    assert judge.best_gold("It was Ross Bagdasarian Sr.",
                               ("David Seville", "Ross Bagdasarian", "Ross")) == "Ross Bagdasarian"
    assert judge.best_gold("no idea", ("David Seville", "Ross")) == "David Seville"
    files = pair_data.split_files("evouna", str(TQ.parent), {})
    assert files == {s: [str(TQ)] for s in evouna.SPLITS}
    # The split does not move with the training seed: the test split stays held out.
    splits = pair_data.load_pairs("evouna", files, seed=1)
    assert {s: len(r) for s, r in splits.items()} == {
        s: evouna.counts(evouna.read_questions(str(TQ)))[s]["answers"] for s in evouna.SPLITS}
    assert splits == pair_data.load_pairs("evouna", files, seed=2)
    row = splits["dev"][0]
    assert len(row.segments) == 3 and row.label in (0.0, 1.0)
    with pytest.raises(ValueError, match="explicit split files do not apply"):
        pair_data.split_files("evouna", str(TQ), {"train": str(TQ)})


def test_judge_reference_lays_out_all_golds_best_match_first() -> None:
    from transforms.training import pair_data

    golds = ("Sunset Blvd", "West Sunset Boulevard", "Sunset Boulevard", "Sunset Bulevard",
             "Sunset Blvd.")
    answer = "The street is Sunset Boulevard."
    assert pair_data.judge_reference(answer, golds, "best") == "Sunset Boulevard"
    # Contained golds first (file order among ties of recall), normalised duplicates once.
    assert judge.ranked_golds(answer, golds) == [
        "Sunset Boulevard", "West Sunset Boulevard", "Sunset Blvd", "Sunset Bulevard"]
    assert pair_data.judge_reference(answer, golds, "all") == (
        "Sunset Boulevard / West Sunset Boulevard / Sunset Blvd / Sunset Bulevard")
    # The cap stops before the first gold that would pass it; the best gold always stays.
    assert pair_data.judge_reference(answer, golds, "all", max_gold_chars=40) == (
        "Sunset Boulevard / West Sunset Boulevard")
    assert pair_data.judge_reference(answer, golds, "all", max_gold_chars=3) == "Sunset Boulevard"
    # Label-free: a wrong answer gets the same kind of segment, led by its closest gold.
    assert pair_data.judge_reference("West Hollywood", golds, "all").startswith(
        "West Sunset Boulevard / ")
    with pytest.raises(ValueError, match="gold_layout"):
        pair_data.judge_reference(answer, golds, "every")
    with pytest.raises(ValueError, match="at least one gold"):
        pair_data.judge_reference(answer, (), "all")


def test_evouna_rows_with_all_golds(tmp_path) -> None:
    from transforms.training import pair_data

    src = tmp_path / "TQ.json"
    src.write_text(json.dumps([_record("Who?")]))
    rows = pair_data.read_evouna(str(src), evouna.question_split("Who?"), gold_layout="all")
    assert [r.segments for r in rows][0] == (
        "fid says David Seville", "David Seville / Ross Bagdasarian", "Who?")
    best = pair_data.read_evouna(str(src), evouna.question_split("Who?"))
    assert best[0].segments == ("fid says David Seville", "David Seville", "Who?")
