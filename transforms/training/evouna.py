"""EVOUNA (Wang et al., 2023) answer-correctness judgments: reading, splits, rows.

`TQ.json` (the TriviaQA half, in `shared/data/judgments/evouna`) is a JSON list of
questions, each with `question`, `golden_answer` (several answers separated by `/`), the
answers of five systems (`answer_<system>`) and a human judgment of each
(`judge_<system>`: true/false, or the string "nan" where missing) and `improper` (questions the authors
marked unfit; skipped here).

Splits are by question, never by answer, so no question's answers are in two splits:
a question goes to train/dev/test by a hash of (seed, normalised question), 70/10/20 by
default. Identical questions (TriviaQA repeats a few) therefore share a split. The test
split is for reporting only: nothing trains or tunes on it.

Two uses:
- `judged_answers(...)` gives one `JudgedAnswer` per judged answer; training reads them
  as BEM-layout pairs (`pair_data.read_evouna`).
- `python -m transforms.training.evouna --input TQ.json --output DIR` writes
  `DIR/{train,dev,test}.jsonl` in the scoring pipeline's default columns (`id`,
  `system`, `question`, `prediction`, `references` = the gold answers, `human` = 1/0), so
  `qa-score --input DIR/test.jsonl --human_column human ...` scores a split.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from transforms.io import cli
from transforms.training.data_files import read_json

logger = logging.getLogger(__name__)

SYSTEMS = ("fid", "gpt35", "chatgpt", "gpt4", "newbing")
SPLITS = ("train", "dev", "test")
DEFAULT_PROPORTIONS = (70, 10, 20)
DEFAULT_SEED = 13


class EvounaQuestion(NamedTuple):
    """One question of the file.

    Attributes:
        index: its position in the file (0-based), the stable part of row ids.
        question: the question text.
        golds: the gold answers (`golden_answer` split on `/`, stripped, empty ones out).
        answers: (system, answer, judgment) for each system whose judgment is present.
        improper: the authors' flag for questions to skip.
        missing: systems whose answer or judgment is absent.
    """

    index: int
    question: str
    golds: tuple[str, ...]
    answers: tuple[tuple[str, str, bool], ...]
    improper: bool
    missing: tuple[str, ...]


class JudgedAnswer(NamedTuple):
    """One judged answer of one split: a row for scoring or training."""

    id: str
    split: str
    system: str
    question: str
    prediction: str
    references: tuple[str, ...]
    human: int


def split_golds(golden_answer: str) -> tuple[str, ...]:
    """`"David Seville/Ross Bagdasarian"` -> ("David Seville", "Ross Bagdasarian")."""
    return tuple(g.strip() for g in golden_answer.split("/") if g.strip())


def _judgment(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    # The file writes a missing judgment as the string "nan" (only on improper questions).
    if value is None or value == "nan" or (isinstance(value, float) and math.isnan(value)):
        return None
    raise TypeError(f"a judgment must be true, false or missing, got {value!r}")


def parse_questions(records: Any, source: str) -> list[EvounaQuestion]:
    """Validates the file's records.

    Args:
        records: the decoded JSON (a list of objects).
        source: the file name, for errors.

    Returns:
        One EvounaQuestion per record, in file order.

    Raises:
        ValueError: not a list of objects, a missing or mistyped field (naming the record).
    """
    if not isinstance(records, list):
        raise ValueError(f"{source}: expected a JSON list of questions, got {type(records).__name__}")
    out = []
    for i, rec in enumerate(records):
        where = f"{source} record {i}"
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: expected a JSON object")
        for key in ("question", "golden_answer"):
            if not isinstance(rec.get(key), str):
                raise ValueError(f"{where}: field {key!r} must be a string, got "
                                 f"{rec.get(key)!r}")
        golds = split_golds(rec["golden_answer"])
        if not golds:
            raise ValueError(f"{where}: golden_answer holds no answer: {rec['golden_answer']!r}")
        improper = rec.get("improper", False)
        if not isinstance(improper, bool):
            raise ValueError(f"{where}: field 'improper' must be true or false, got {improper!r}")
        answers, missing = [], []
        for system in SYSTEMS:
            answer = rec.get(f"answer_{system}")
            try:
                judged = _judgment(rec.get(f"judge_{system}"))
            except TypeError as e:
                raise ValueError(f"{where}: judge_{system}: {e}") from e
            if judged is None or not isinstance(answer, str):
                missing.append(system)
                continue
            answers.append((system, answer, judged))
        out.append(EvounaQuestion(i, rec["question"], golds, tuple(answers), improper,
                                  tuple(missing)))
    return out


def read_questions(path: str) -> list[EvounaQuestion]:
    """Reads and validates `TQ.json` (or another EVOUNA file of the same shape).

    Raises:
        TrainingDataError: the file is missing, unreadable, cut short, corrupt or not
            JSON (`data_files.read_json`; `.gz`, `.bz2`, `.xz` are decompressed).
        ValueError: a malformed record (named).
    """
    return parse_questions(read_json("EVOUNA file", path), path)


def _normalised(question: str) -> str:
    return " ".join(question.lower().split())


def question_split(question: str, seed: int = DEFAULT_SEED,
                   proportions: Sequence[int] = DEFAULT_PROPORTIONS) -> str:
    """The split of a question: a hash of (seed, normalised question) against the
    cumulative proportions (train, dev, test)."""
    if len(proportions) != len(SPLITS) or any(p < 0 for p in proportions) or not sum(proportions):
        raise ValueError(f"proportions must be three non-negative numbers, got {proportions!r}")
    digest = hashlib.sha256(f"{seed}\x00{_normalised(question)}".encode()).digest()
    point = int.from_bytes(digest[:8], "big") / 2**64 * sum(proportions)
    upper = 0
    for split, share in zip(SPLITS, proportions):
        upper += share
        if point < upper:
            return split
    return SPLITS[-1]


def judged_answers(questions: Iterable[EvounaQuestion], seed: int = DEFAULT_SEED,
                   proportions: Sequence[int] = DEFAULT_PROPORTIONS,
                   splits: Sequence[str] = SPLITS) -> list[JudgedAnswer]:
    """One row per judged answer of the proper questions in `splits`, in file order."""
    rows = []
    for q in questions:
        if q.improper:
            continue
        split = question_split(q.question, seed, proportions)
        if split not in splits:
            continue
        for system, answer, judged in q.answers:
            rows.append(JudgedAnswer(f"tq-{q.index}-{system}", split, system, q.question,
                                     answer, q.golds, int(judged)))
    return rows


def counts(questions: Sequence[EvounaQuestion], seed: int = DEFAULT_SEED,
           proportions: Sequence[int] = DEFAULT_PROPORTIONS) -> dict[str, Any]:
    """Questions and answers per split, what was skipped, and the share judged correct."""
    out: dict[str, Any] = {"questions": len(questions),
                           "improper_questions": sum(q.improper for q in questions),
                           "missing_judgments": sum(len(q.missing) for q in questions
                                                    if not q.improper)}
    rows = judged_answers(questions, seed, proportions)
    for split in SPLITS:
        in_split = [r for r in rows if r.split == split]
        out[split] = {"questions": len({r.id.rsplit("-", 1)[0] for r in in_split}),
                      "answers": len(in_split),
                      "correct_share": round(sum(r.human for r in in_split)
                                             / max(1, len(in_split)), 4)}
    return out


def write_scoring_rows(rows: Iterable[JudgedAnswer], output_dir: str) -> dict[str, str]:
    """Writes `{split}.jsonl` in the scoring pipeline's default columns.

    Returns:
        split -> path written.
    """
    os.makedirs(output_dir, exist_ok=True)
    by_split: dict[str, list[JudgedAnswer]] = {}
    for row in rows:
        by_split.setdefault(row.split, []).append(row)
    paths = {}
    for split, split_rows in by_split.items():
        path = os.path.join(output_dir, f"{split}.jsonl")
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for r in split_rows:
                f.write(json.dumps({"id": r.id, "system": r.system, "question": r.question,
                                    "prediction": r.prediction,
                                    "references": list(r.references), "human": r.human},
                                   ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        paths[split] = path
    return paths


PROG = "python -m transforms.training.evouna"


def build_parser() -> cli.ArgumentParser:
    """The command line of `python -m transforms.training.evouna`."""
    parser = cli.ArgumentParser(prog=PROG, description="EVOUNA judgments -> qa-score JSONL "
                                                       "rows, split by question")
    g = parser.add_argument_group("input")
    g.add_argument("--input", required=True, help="EVOUNA file, e.g. TQ.json (required)")
    g = parser.add_argument_group("output")
    g.add_argument("--output", required=True, type=cli.output_path,
                   help="folder for {train,dev,test}.jsonl (required)")
    g = parser.add_argument_group("splits")
    g.add_argument("--seed", type=int, default=DEFAULT_SEED, help="split seed")
    g.add_argument("--splits", default="70,10,20", help="train,dev,test proportions")
    cli.add_runtime_arguments(parser.add_argument_group("runtime"), progress=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m transforms.training.evouna --input TQ.json --output DIR`: scoring rows.
    Exit status 0, or 2 for a user mistake (one line on stderr; `--verbose` for the
    traceback)."""

    def body(args_list: list[str]) -> None:
        args = cli.parse_flags(build_parser(), args_list, beam=False)
        try:
            proportions = tuple(int(p) for p in args.splits.split(","))
        except ValueError as e:
            raise cli.UsageError(f"--splits must be integers like 70,10,20, got "
                                 f"{args.splits!r}") from e
        questions = read_questions(args.input)
        paths = write_scoring_rows(judged_answers(questions, args.seed, proportions),
                                   args.output)
        print(json.dumps({"files": paths, "counts": counts(questions, args.seed,
                                                           proportions)}, indent=1))

    return cli.run_main(PROG, body, argv, user_errors=(ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())
