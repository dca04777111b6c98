"""Cross-encoder training rows from the four input kinds, validated before training.

| format | files per split | model input (layouts.py) | target |
|---|---|---|---|
| `wes` | `<input>/<split>-*.parquet` (mining output `wes-k<k>`; columns title, link_text, label, split, and pair_kind where mined with a negative mix) | `pair_input(link_text, title)` | label 0/1 |
| `stsb` | `<input>/sts-<split>.csv` (TAB-separated; first 7 fields: genre, filename, year, sid, score, sentence1, sentence2) | `pair_input(sentence1, sentence2)` | score / 5 |
| `square` | `<input>/<split>.jsonl`: question, target, positive_references (list), negative_references (list, optional), label | `square_input(question, target, positives, negatives)` | label in [0, 1] |
| `bem` | `<input>/<split>.jsonl`: question, reference, candidate, label | `bem_input(candidate, reference, question)` | label in [0, 1] |
| `evouna` | `<input>` = EVOUNA's `TQ.json` (or a folder holding it); splits by question (transforms/training/evouna.py) | `bem_input(answer, best-matching gold, question)`, or with `gold_layout="all"` every distinct gold in one reference segment (`judge_reference`) | human judgment 0/1 |
| `judge` | `<input>/<split>.jsonl`: question, candidate, golds (list), label (`python -m transforms.training.short_answers`: SQuAD and WES pairs, EVOUNA mixed in by option) | `bem_input(candidate, judge_reference(candidate, golds, gold_layout), question)`, as `evouna` | label 0/1 |

WES pairs are laid out (prediction = link text, reference = title): the scorer pairs
(prediction, reference), and a system's answer is more often an alias (a link text) of
the gold answer than the other way round. EVOUNA answers are paired with the gold answer
they match best (containment first, then token recall, then the first gold): the `bem`
metric scores the maximum over the references, so a correct answer must score high
against at least its best gold, and a wrong one low against even its closest gold.
Every problem (a missing file or column, an
empty split, a label out of range, an unparsable line) raises `ValueError` naming the
file, and the line or column, before a model is loaded; a file that cannot be read at
all (cut short, corrupt, not UTF-8, not Parquet) a `data_files.TrainingDataError`.
"""

from __future__ import annotations

import glob
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

# EVOUNA's golds fill the judge's reference segment by the `judge` metric's own function,
# so training and scoring cannot lay them out differently.
from transforms.metrics.judge import DEFAULT_MAX_GOLD_CHARS, judge_reference
from transforms.models import layouts
from transforms.training import evouna
from transforms.training.data_files import open_text, reading
from transforms.training.pair_kinds import KIND_COLUMN, check_kind_column, keep_negative_kinds

FORMATS = ("wes", "stsb", "square", "bem", "evouna", "judge")
# The formats whose reference segment the judge's own function lays out from the golds.
JUDGE_FORMATS = ("evouna", "judge")
SPLITS = ("train", "dev", "test")
WES_COLUMNS = ("title", "link_text", "label", "split")
STSB_FIELDS = ("genre", "filename", "year", "sid", "score", "sentence1", "sentence2")
JSONL_FIELDS = {
    "square": ("question", "target", "positive_references", "label"),
    "bem": ("question", "reference", "candidate", "label"),
    "judge": ("question", "candidate", "golds", "label"),
}
SEGMENTS = {"wes": 2, "stsb": 2, "square": 1, "bem": 3, "evouna": 3, "judge": 3}
LAYOUT = {
    "wes": "pair_input(prediction=link_text, reference=title): [CLS] link_text [SEP] title [SEP]",
    "stsb": "pair_input(sentence1, sentence2): [CLS] sentence1 [SEP] sentence2 [SEP]",
    "square": "square_input(question, target, positives, negatives): [CLS] Question: q "
              "Target: a Pos_Ref: r+ ... Neg_Ref: r- ... [SEP]",
    "bem": "bem_input(candidate, reference, question): [CLS] c [SEP] r [SEP] q [SEP], "
           "segment ids 0/1/2",
    "evouna": "bem_input(answer, best-matching gold, question): [CLS] a [SEP] g [SEP] q "
              "[SEP], segment ids 0/1/2",
    "judge": "bem_input(candidate, best-matching gold, question): [CLS] c [SEP] g [SEP] q "
             "[SEP], segment ids 0/1/2",
}
# The `evouna` layout with `gold_layout="marked"`.
LAYOUT_MARKED = ("bem_input(answer, '[found]' or '[not found]' (a normalised gold occurs in "
                 "the normalised answer) + best-matching gold, question): [CLS] a [SEP] "
                 "[found] g [SEP] q [SEP], segment ids 0/1/2")
# The `evouna` layout with `gold_layout="all"`.
LAYOUT_ALL_GOLDS = ("bem_input(answer, distinct golds best match first joined by ' / ' up "
                    "to {max_gold_chars} characters, question): [CLS] a [SEP] g1 / g2 ... "
                    "[SEP] q [SEP], segment ids 0/1/2")


class PairRow(NamedTuple):
    """One cross-encoder example: the layout's segments, a target in [0, 1] and, for WES
    shards that have the column, its `pair_kind` (pair_kinds.py)."""

    segments: layouts.Segments
    label: float
    kind: str | None = None


def split_files(fmt: str, input_dir: str | None,
                overrides: Mapping[str, str | None] | None = None) -> dict[str, list[str]]:
    """The files of each split: `overrides[split]` (a path or glob) or the format's
    naming convention inside `input_dir`. Splits without files map to [].

    Raises:
        ValueError: unknown format, a missing input folder, an override matching nothing.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    overrides = overrides or {}
    if fmt != "evouna" and input_dir is not None and not os.path.isdir(input_dir):
        raise ValueError(f"input folder {input_dir} does not exist (or is not a folder)")
    if input_dir is None and not overrides.get("train"):
        raise ValueError("give an input folder or a train file")
    if fmt == "evouna":
        return _evouna_files(input_dir, overrides)
    pattern = {"wes": "{}-*.parquet", "stsb": "sts-{}.csv", "square": "{}.jsonl",
               "bem": "{}.jsonl", "judge": "{}.jsonl"}[fmt]
    files = {}
    for split in SPLITS:
        given = overrides.get(split)
        if given:
            matched = sorted(glob.glob(os.path.expanduser(given)))
            if not matched:
                raise ValueError(f"{split} file {given} does not exist")
            files[split] = matched
        elif input_dir is not None:
            files[split] = sorted(glob.glob(os.path.join(input_dir, pattern.format(split))))
        else:
            files[split] = []
    return files


def _evouna_files(input_path: str | None,
                  overrides: Mapping[str, str | None]) -> dict[str, list[str]]:
    """Every split of EVOUNA comes from one file, split by question when it is read."""
    if any(overrides.get(s) for s in SPLITS):
        raise ValueError("format evouna reads every split from one file (--input TQ.json); "
                         "explicit split files do not apply")
    if input_path is None:
        raise ValueError("format evouna needs --input: EVOUNA's TQ.json or its folder")
    path = os.path.join(input_path, "TQ.json") if os.path.isdir(input_path) else input_path
    if not os.path.isfile(path):
        raise ValueError(f"EVOUNA file {path} does not exist")
    return {split: [path] for split in SPLITS}


def read_evouna(path: str, split: str, seed: int = evouna.DEFAULT_SEED,
                gold_layout: str = "best",
                max_gold_chars: int = DEFAULT_MAX_GOLD_CHARS) -> list[PairRow]:
    """The judged answers of one split of an EVOUNA file, as BEM-layout pairs whose
    reference segment is `judge_reference(answer, golds, gold_layout, max_gold_chars)`."""
    rows = evouna.judged_answers(evouna.read_questions(path), seed=seed, splits=(split,))
    return [PairRow(layouts.bem_input(
        r.prediction, judge_reference(r.prediction, r.references, gold_layout, max_gold_chars),
        r.question), float(r.human)) for r in rows]


def _check_label(value: Any, where: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
        raise ValueError(f"{where}: label must be a number in [0, 1], got {value!r}")
    return float(value)


def read_wes(path: str) -> list[PairRow]:
    """Rows of one WES Parquet shard (schema checked first, then every value).

    Raises:
        TrainingDataError: the shard cannot be read (missing, cut short, not Parquet).
        ValueError: a missing column or a bad value (named).
    """
    import pyarrow.dataset as ds
    with reading("training data", path):
        dataset = ds.dataset(path, format="parquet")
        missing = [c for c in WES_COLUMNS if c not in dataset.schema.names]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; a WES shard has "
                             f"{list(WES_COLUMNS)} (found {dataset.schema.names})")
        kinded = KIND_COLUMN in dataset.schema.names
        table = dataset.to_table(columns=[*WES_COLUMNS, *([KIND_COLUMN] if kinded else [])])
    cols = {c: table.column(c).to_pylist() for c in WES_COLUMNS}
    kinds = table.column(KIND_COLUMN).to_pylist() if kinded else [None] * table.num_rows
    # A shard named `<split>-SSSSS-of-NNNNN.parquet` holds that split only (any file may
    # serve as any role through the explicit file flags).
    named = os.path.basename(path).split("-")[0]
    named = named if named in SPLITS else None
    rows = []
    for i, (title, text, label, row_split, kind) in enumerate(zip(*cols.values(), kinds)):
        where = f"{path} row {i}"
        if not isinstance(title, str) or not isinstance(text, str) or not title or not text:
            raise ValueError(f"{where}: title and link_text must be non-empty strings")
        if label not in (0, 1):
            raise ValueError(f"{where}: column label must be 0 or 1, got {label!r}")
        if named is not None and row_split != named:
            raise ValueError(f"{where}: column split says {row_split!r} in a {named} shard")
        rows.append(PairRow(layouts.pair_input(text, title), float(label), kind))
    return rows


def read_stsb(path: str) -> list[PairRow]:
    """Rows of an STS-B file (plain or compressed, `data_files.open_text`): TAB-split,
    first 7 fields, target = score / 5."""
    rows = []
    with open_text("training data", path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < len(STSB_FIELDS):
                raise ValueError(f"{path} line {n}: {len(fields)} TAB-separated fields, need "
                                 f"at least {len(STSB_FIELDS)} ({', '.join(STSB_FIELDS)})")
            try:
                score = float(fields[4])
            except ValueError as e:
                raise ValueError(f"{path} line {n}: column score is not a number: {fields[4]!r}") from e
            if not 0 <= score <= 5:
                raise ValueError(f"{path} line {n}: column score must be in [0, 5], got {score}")
            rows.append(PairRow(layouts.pair_input(fields[5], fields[6]), score / 5))
    return rows


def _strings(value: Any, where: str, name: str, allow_empty: bool) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{where}: {name} must be a list of strings, got {value!r}")
    if not value and not allow_empty:
        raise ValueError(f"{where}: {name} must not be empty")
    return value


def read_jsonl(path: str, fmt: str, gold_layout: str = "marked",
               max_gold_chars: int = DEFAULT_MAX_GOLD_CHARS) -> list[PairRow]:
    """Rows of a SQuArE, BEM or judge JSONL file (one JSON object per line); a judge
    row's reference segment is `judge_reference(candidate, golds, gold_layout,
    max_gold_chars)`. Plain or compressed (`data_files.open_text`)."""
    required = JSONL_FIELDS[fmt]
    rows = []
    with open_text("training data", path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path} line {n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg})") from e
            if not isinstance(obj, dict):
                raise ValueError(f"{where}: expected a JSON object")
            missing = [k for k in required if k not in obj]
            if missing:
                raise ValueError(f"{where}: missing field(s) {missing}; {fmt} rows have "
                                 f"{list(required)}")
            label = _check_label(obj["label"], where)
            texts = [k for k in required if k not in ("label", "positive_references", "golds")]
            for k in texts:
                if not isinstance(obj[k], str):
                    raise ValueError(f"{where}: {k} must be a string, got {obj[k]!r}")
            if fmt == "square":
                pos = _strings(obj["positive_references"], where, "positive_references", False)
                neg = _strings(obj.get("negative_references", []), where,
                               "negative_references", True)
                segments = layouts.square_input(obj["question"], obj["target"], pos, neg)
            elif fmt == "judge":
                golds = _strings(obj["golds"], where, "golds", False)
                segments = layouts.bem_input(
                    obj["candidate"],
                    judge_reference(obj["candidate"], golds, gold_layout, max_gold_chars),
                    obj["question"])
            else:
                segments = layouts.bem_input(obj["candidate"], obj["reference"], obj["question"])
            rows.append(PairRow(segments, label))
    return rows


def read_split(fmt: str, files: list[str], split: str | None = None,
               gold_layout: str = "best",
               max_gold_chars: int = DEFAULT_MAX_GOLD_CHARS) -> list[PairRow]:
    """Every row of one split's files, in file order (`split` picks EVOUNA's questions;
    `gold_layout` and `max_gold_chars` lay out EVOUNA's and judge rows' golds, see
    `judge_reference`).

    Raises:
        TrainingDataError: a file cannot be read (named; `data_files`).
        ValueError: a file's content is not valid (named, with the line or row).
    """
    if fmt == "evouna" and split is None:
        raise ValueError("format evouna needs the split to read")
    rows: list[PairRow] = []
    for path in files:
        if fmt == "evouna":
            rows += read_evouna(path, split, gold_layout=gold_layout,
                                max_gold_chars=max_gold_chars)
        elif fmt == "wes":
            rows += read_wes(path)
        elif fmt == "stsb":
            rows += read_stsb(path)
        else:
            rows += read_jsonl(path, fmt, gold_layout, max_gold_chars)
    return rows


def subsample(rows: list[PairRow], limit: int | None, seed: int) -> list[PairRow]:
    """At most `limit` rows, drawn at random (seeded), in their original order."""
    if limit is None or len(rows) <= limit:
        return rows
    keep = np.sort(np.random.default_rng(seed).choice(len(rows), limit, replace=False))
    return [rows[i] for i in keep]


def _expected(fmt: str, split: str) -> str:
    return {"wes": f"<input>/{split}-*.parquet", "stsb": f"<input>/sts-{split}.csv",
            "evouna": "<input>/TQ.json"}.get(fmt, f"<input>/{split}.jsonl")


def load_pairs(fmt: str, files: Mapping[str, list[str]], seed: int,
               limits: Mapping[str, int | None] | None = None, gold_layout: str = "best",
               max_gold_chars: int = DEFAULT_MAX_GOLD_CHARS,
               negative_kinds: Sequence[str] | None = None) -> dict[str, list[PairRow]]:
    """Reads and validates every split; `limits[split]` caps its rows (seeded sample);
    `gold_layout` and `max_gold_chars` apply to EVOUNA and judge rows (`judge_reference`);
    `negative_kinds` (WES): train and dev keep their positives and the negatives of
    these kinds only, before the caps (`pair_kinds.keep_negative_kinds`).

    Raises:
        ValueError: no train or dev files, an empty train or dev split, a dev split with
            a single target value, shards without `pair_kind` or no negative of
            `negative_kinds` left, or any bad row (see the module docstring).
    """
    limits = limits or {}
    out = {}
    for split in SPLITS:
        if not files.get(split):
            if split == "test":
                out[split] = []
                continue
            raise ValueError(f"no {split} files for format {fmt} (expected {_expected(fmt, split)}"
                             " or an explicit file)")
        if negative_kinds is not None and split != "test":
            check_kind_column(files[split])
        rows = read_split(fmt, files[split], split, gold_layout, max_gold_chars)
        if negative_kinds is not None and split != "test" and rows:
            rows = keep_negative_kinds(rows, negative_kinds, split)
        if not rows and split != "test":
            raise ValueError(f"the {split} split is empty ({', '.join(files[split])})")
        out[split] = subsample(rows, limits.get(split), seed)
    if len({r.label for r in out["dev"]}) < 2:
        raise ValueError(f"the dev split ({', '.join(files['dev'])}) has a single target value "
                         f"{out['dev'][0].label}: AUROC and correlations need two or more")
    return out
