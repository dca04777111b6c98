"""Short-answer equivalence pairs for the judge, from SQuAD and WES.

Every pair is (candidate answer, gold answers, question, label 1/0) and is laid out as
the `judge` metric lays out a row at scoring time: `bem_input(candidate,
judge_reference(candidate, golds, "marked"), question)` (`to_record`).

SQuAD (the v1.1 dev file): `squad_pairs.squad_pairs`, whose docstring says how the
positives, identical answers, span negatives and question negatives of a question are
made. The pair record (`AnswerPair`) and its seeded draws are in `answer_pair`.

WES (the mining output `wes-k<k>/*.parquet`): `wes_pairs.wes_pairs`, whose module
docstring says how a title's positives, mined negatives and near misses are made.

Splits are by group, deterministic: a SQuAD article goes to train, dev or test by a
hash of (seed, normalised title) (`evouna.question_split`, 70/10/20 by default); a WES
title keeps the mining's split, which is a hash of the title too (75/15/10 by default,
`pipelines.mine_wes --splits`) and inside which the mining drew the negatives; so no
article or title is in two splits (a mined negative whose text comes from a title of
another split would be dropped). EVOUNA-TQ pairs (`evouna_pairs`, optional) keep
EVOUNA's own split by question.

`python -m transforms.training.short_answers --squad dev-v1.1.json.gz --wes out/wes-k2
--output DIR` writes `DIR/{train,dev,test}.jsonl` (the fields `--format bem` reads,
`reference` already in the marked layout, plus `golds`, which `--format judge` lays out
itself), `DIR/scoring/{dev,test}.jsonl` (the SQuAD pairs as `qa-score` rows: id, system,
question, prediction, references, human) and `DIR/counts.json`. `--evouna TQ.json` adds
EVOUNA's judged answers; `--train_mix squad=2,wes=1,evouna=1` subsamples the train split
so the sources come in that proportion (dev and test keep every pair);
`--negative_kinds random,f1` keeps only those kinds of the WES corpus's mined negatives
in train and dev (for ablations, as the cross-encoder trainer's flag of that name).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from transforms.io import cli
from transforms.metrics.judge import judge_reference
from transforms.training import evouna
from transforms.training.answer_pair import (
    DEFAULT_IDENTICAL_SHARE,
    DEFAULT_SEED,
    SOURCES,
    AnswerPair,
)
from transforms.training.pair_kinds import NEGATIVE_KINDS, parse_negative_kinds
from transforms.training.squad_pairs import DEFAULT_PROPORTIONS, squad_pairs
from transforms.training.wes_pairs import read_wes_rows, wes_pairs

logger = logging.getLogger(__name__)

SPLITS = evouna.SPLITS
GOLD_LAYOUT = "marked"
JSONL_FIELDS = ("id", "source", "group", "kind", "question", "candidate", "golds",
                "reference", "label")


def evouna_pairs(path: str) -> list[AnswerPair]:
    """EVOUNA's judged answers as pairs, in EVOUNA's own split by question (its default
    seed and proportions: the EVOUNA test split stays the one every judge reports)."""
    rows = evouna.judged_answers(evouna.read_questions(path))
    return [AnswerPair(r.id, "evouna", " ".join(r.question.lower().split()), r.split,
                       "judged", r.question, r.prediction, r.references, r.human)
            for r in rows]


def parse_mix(text: str) -> dict[str, float]:
    """`"squad=2,wes=1"` -> {"squad": 2.0, "wes": 1.0}.

    Raises:
        ValueError: an unknown source, a weight that is not a positive number.
    """
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in SOURCES:
            raise ValueError(f"train mix: unknown source {name!r} (known: {SOURCES})")
        try:
            weight = float(value)
        except ValueError as e:
            raise ValueError(f"train mix: {name}'s weight must be a number, got {value!r}") from e
        if not weight > 0:
            raise ValueError(f"train mix: {name}'s weight must be > 0, got {weight}")
        out[name] = weight
    return out


def mix_train(pairs: Sequence[AnswerPair], weights: Mapping[str, float],
              seed: int = DEFAULT_SEED) -> list[AnswerPair]:
    """The pairs with the train split subsampled (seeded, order kept) so that its
    sources' counts are in the proportion of `weights`, keeping as many train pairs as
    that allows; dev and test pairs are all kept.

    Raises:
        ValueError: a train source without a weight, or a weighted source with no pairs.
    """
    train = collections.Counter(p.source for p in pairs if p.split == "train")
    unweighted = sorted(set(train) - set(weights))
    if unweighted:
        raise ValueError(f"train mix: give a weight to every source present: {unweighted}")
    empty = sorted(s for s in weights if not train[s])
    if empty:
        raise ValueError(f"train mix: no train pairs from {empty}")
    scale = min(train[s] / w for s, w in weights.items())
    quota = {s: min(train[s], round(scale * w)) for s, w in weights.items()}
    keep = set()
    for source, n in quota.items():
        ids = [p.id for p in pairs if p.split == "train" and p.source == source]
        keep |= set(random.Random(f"{seed}\x00mix\x00{source}").sample(ids, n))
    return [p for p in pairs if p.split != "train" or p.id in keep]


def to_record(pair: AnswerPair, gold_layout: str = GOLD_LAYOUT) -> dict[str, Any]:
    """A pair as a JSONL record: the fields `--format bem` reads (question, reference,
    candidate, label; reference = `judge_reference(candidate, golds, gold_layout)`),
    and id, source, group, kind, golds."""
    return {"id": pair.id, "source": pair.source, "group": pair.group, "kind": pair.kind,
            "question": pair.question, "candidate": pair.candidate, "golds": list(pair.golds),
            "reference": judge_reference(pair.candidate, pair.golds, gold_layout),
            "label": pair.label}


def _write_jsonl(path: str, records: Iterable[Mapping[str, Any]]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def write_pairs(pairs: Sequence[AnswerPair], output_dir: str) -> dict[str, str]:
    """Writes `{split}.jsonl` (`to_record`), every split (an empty one as an empty file).

    Returns:
        split -> path written.
    """
    os.makedirs(output_dir, exist_ok=True)
    paths = {}
    for split in SPLITS:
        paths[split] = os.path.join(output_dir, f"{split}.jsonl")
        _write_jsonl(paths[split], (to_record(p) for p in pairs if p.split == split))
    return paths


def scoring_rows(pairs: Iterable[AnswerPair], source: str = "squad",
                 splits: Sequence[str] = ("dev", "test")) -> list[evouna.JudgedAnswer]:
    """The pairs of one source as `qa-score` rows: prediction = candidate, references =
    golds, human = label, system = the source."""
    return [evouna.JudgedAnswer(p.id, p.split, p.source, p.question, p.candidate, p.golds,
                                p.label)
            for p in pairs if p.source == source and p.split in splits]


def counts(pairs: Iterable[AnswerPair]) -> dict[str, Any]:
    """Per split and source: pairs, positives, negatives, groups, and pairs per kind."""
    out: dict[str, Any] = {}
    for p in pairs:
        c = out.setdefault(p.split, {}).setdefault(p.source, {
            "pairs": 0, "positives": 0, "negatives": 0, "groups": set(), "kinds": {}})
        c["pairs"] += 1
        c["positives" if p.label else "negatives"] += 1
        c["groups"].add(p.group)
        c["kinds"][p.kind] = c["kinds"].get(p.kind, 0) + 1
    for by_source in out.values():
        for c in by_source.values():
            c["groups"] = len(c["groups"])
    return {s: out[s] for s in SPLITS if s in out}


PROG = "python -m transforms.training.short_answers"


def build_parser() -> cli.ArgumentParser:
    """The command line of `python -m transforms.training.short_answers`."""
    parser = cli.ArgumentParser(prog=PROG, description="SQuAD and WES short-answer "
                                "equivalence pairs for the judge, split by article/title")
    g = parser.add_argument_group("input")
    g.add_argument("--squad", default=None, help="SQuAD JSON file (dev-v1.1.json.gz)")
    g.add_argument("--wes", default=None,
                   help="a mined WES corpus folder (pipelines.mine_wes: out/wes-k<k>)")
    g.add_argument("--evouna", default=None,
                   help="EVOUNA's TQ.json: add its judged answers (its own split)")
    g = parser.add_argument_group("output")
    g.add_argument("--output", required=True, type=cli.output_path,
                   help="folder for {train,dev,test}.jsonl, scoring/{dev,test}.jsonl, "
                        "counts.json (required)")
    g = parser.add_argument_group("pairs")
    g.add_argument("--seed", type=int, default=DEFAULT_SEED, help="split and sampling seed")
    g.add_argument("--splits", default="70,10,20",
                   help="train,dev,test proportions of the SQuAD articles (WES titles keep "
                        "the mining's split)")
    g.add_argument("--identical_share", type=float, default=DEFAULT_IDENTICAL_SHARE,
                   help="share of answers identical to the gold (after normalisation) kept")
    g.add_argument("--span_negatives", type=int, default=1,
                   help="SQuAD: same-kind passage spans per question")
    g.add_argument("--question_negatives", type=int, default=1,
                   help="SQuAD: other questions' answers per question")
    g.add_argument("--near_misses", type=int, default=1,
                   help="WES: near-miss negatives per title")
    g.add_argument("--negative_kinds", default=None,
                   help="WES: keep only these kinds of mined negatives in train and dev, "
                        f"e.g. random,f1 (known: {', '.join(NEGATIVE_KINDS)}; the corpus "
                        "must be mined with wes-mine --negatives; default: every kind)")
    g.add_argument("--train_mix", default=None,
                   help="source weights of the train split, e.g. squad=2,wes=1,evouna=1 "
                        "(default: every pair)")
    cli.add_runtime_arguments(parser.add_argument_group("runtime"), progress=False)
    return parser


def build_pairs(squad: str | None = None, wes: str | None = None, evouna_path: str | None = None,
                seed: int = DEFAULT_SEED, proportions: Sequence[int] = DEFAULT_PROPORTIONS,
                identical_share: float = DEFAULT_IDENTICAL_SHARE, span_negatives: int = 1,
                question_negatives: int = 1, near_misses: int = 1,
                train_mix: Mapping[str, float] | None = None,
                negative_kinds: Sequence[str] | None = None,
                ) -> tuple[list[AnswerPair], dict[str, dict[str, int]]]:
    """Every source given, then the train mix; what each source skipped.
    `negative_kinds`: the WES corpus's mined negatives kept in train and dev
    (`wes_pairs`; None: all).

    Raises:
        ValueError: no source, bad numbers, unreadable input (named).
    """
    from transforms.training.squad_data import read_squad
    if not (squad or wes or evouna_path):
        raise ValueError("give at least one of --squad, --wes, --evouna")
    if not 0 <= identical_share <= 1:
        raise ValueError(f"identical_share must be in [0, 1], got {identical_share}")
    for name, n in (("span_negatives", span_negatives),
                    ("question_negatives", question_negatives), ("near_misses", near_misses)):
        if n < 0:
            raise ValueError(f"{name} must be >= 0, got {n}")
    pairs: list[AnswerPair] = []
    skipped: dict[str, dict[str, int]] = {}
    if squad:
        got, why = squad_pairs(read_squad(squad), seed, proportions, identical_share,
                               span_negatives, question_negatives)
        pairs += got
        skipped["squad"] = dict(sorted(why.items()))
    if wes:
        got, why = wes_pairs(read_wes_rows(wes), seed, identical_share, near_misses,
                             negative_kinds)
        pairs += got
        skipped["wes"] = dict(sorted(why.items()))
    if evouna_path:
        pairs += evouna_pairs(evouna_path)
    if train_mix:
        pairs = mix_train(pairs, train_mix, seed)
    return pairs, skipped


def write_dataset(pairs: Sequence[AnswerPair], skipped: Mapping[str, Mapping[str, int]],
                  output_dir: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Writes `{train,dev,test}.jsonl` (`write_pairs`), the SQuAD pairs of dev and test as
    `qa-score` rows (`scoring/{dev,test}.jsonl`) and `counts.json` (files, counts per
    split and source, what was skipped, `options`).

    Returns:
        What counts.json holds.
    """
    paths = write_pairs(pairs, output_dir)
    scoring = evouna.write_scoring_rows(scoring_rows(pairs), os.path.join(output_dir, "scoring"))
    report = {"files": paths, "scoring_files": scoring, "counts": counts(pairs),
              "skipped": skipped, "options": dict(options)}
    _write_jsonl_report(os.path.join(output_dir, "counts.json"), report)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m transforms.training.short_answers --squad ... --wes ... --output DIR`.
    Exit status 0, or 2 for a user mistake (one line on stderr)."""

    def body(args_list: list[str]) -> None:
        args = cli.parse_flags(build_parser(), args_list, beam=False)
        try:
            proportions = tuple(int(p) for p in args.splits.split(","))
        except ValueError as e:
            raise cli.UsageError(f"--splits must be integers like 70,10,20, got "
                                 f"{args.splits!r}") from e
        pairs, skipped = build_pairs(
            args.squad, args.wes, args.evouna, args.seed, proportions, args.identical_share,
            args.span_negatives, args.question_negatives, args.near_misses,
            parse_mix(args.train_mix) if args.train_mix else None,
            parse_negative_kinds(args.negative_kinds))
        report = write_dataset(pairs, skipped, args.output, {
            k: getattr(args, k) for k in ("squad", "wes", "evouna", "seed", "splits",
                                          "identical_share", "span_negatives",
                                          "question_negatives", "near_misses", "train_mix",
                                          "negative_kinds")})
        print(json.dumps(report, indent=1))

    return cli.run_main(PROG, body, argv, user_errors=(ValueError, OSError))


def _write_jsonl_report(path: str, report: Mapping[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
