"""Golden files of `qa-score`: the inputs, the cases, how a case's outputs are normalised,
and (run as `python -m tests.scoring.golden.make_golden`) the generator that writes the
inputs and the expected outputs from the CURRENT code.

Regenerating replaces every expected file: do it only deliberately, when an output is
meant to change, and review the diff (README.md here). tests/scoring/test_golden.py runs
the same cases and compares with the files written here.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
INPUTS = HERE / "inputs"
EXPECTED = HERE / "expected"
TMP = "<TMP>"  # what the run's folder becomes in the expected files

METRICS = "em,f1,rougeL,bleu1,cider"
# Every case: one length limit (one row of each input is over it).
COMMON = ("--max_text_chars", "256")
KEEP = ("--keep_input_columns", "prediction,references,question,judgment,lang,meta")


# ---------------------------------------------------------------------------- inputs

def _j(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _row(i: str, system: Any, prediction: Any, references: Any, **more: Any) -> dict:
    row = {"id": i, "system": system, "prediction": prediction, "references": references}
    row.update(more)
    return row


LONG = "word " * 80  # 400 characters: over --max_text_chars 256

# preds.jsonl: (line bytes, line end). Every hard case of the JSONL reader and of the row
# validation; `judgment` is the human column of the report case only (elsewhere an input
# column kept with --keep_input_columns); `lang` and `meta` hold mixed types.
JSONL_LINES: list[tuple[bytes, bytes]] = [
    (b"\xef\xbb\xbf" + _j(_row("j01", "alpha", "Paris", ["Paris", "paris, France"],
                               question="Capital of France?", judgment=1, lang="en")), b"\n"),
    (_j(_row("j02", "alpha", "the Eiffel Tower", ["Eiffel Tower", "the tower"],
             question="Which tower?", judgment=1, lang="en", meta={"k": 1})), b"\r\n"),
    (_j(_row("j03", "beta", "NA", ["NA"], judgment="NA", lang=5)), b"\r\n"),
    (_j(_row("j04", "beta", "null", ["none"], judgment=None, lang=None)), b"\n"),
    (_j(_row("j05", "gamma", "N/A", ["not applicable"], judgment="N/A", lang=["x", 1])), b"\n"),
    (_j(_row("j06", "alpha", "", ["x"], judgment=0)), b"\n"),
    (_j(_row("j07", "beta", "01", ["1"], judgment=0, question="How many?")), b"\n"),
    (_j(_row("j08", "gamma", "1e5", ["100000", "1e5"], judgment=1)), b"\n"),
    (_j(_row("j09", "alpha", "True", ["true"], judgment=True)), b"\n"),
    (b'{"id": "j10", "system": "alpha", "prediction": "half a line', b"\n"),
    (b'{"id": "j11", "system": "beta", "prediction": "caf\xe9", "references": ["cafe"]}', b"\n"),
    (_j(_row("j12", "beta", 100000, ["100000"], judgment=1)), b"\n"),
    (_j(_row("j13", "gamma", ["a list"], ["a list"], judgment=0)), b"\n"),
    (_j(_row("j14", "alpha", "1889", [None, "in 1889"], judgment=0.5)), b"\n"),
    (_j(_row("j15", "alpha", "a single reference", "a single string reference",
             judgment="1")), b"\n"),
    (_j(_row("j16", "beta", "x", [42, "x"], judgment=1)), b"\n"),
    (_j({"id": "j17", "system": "beta", "references": ["no prediction"]}), b"\n"),
    (_j({"id": "j18", "system": "gamma", "prediction": "no references"}), b"\n"),
    (_j(_row("j19", "gamma", "empty list", [], judgment=0)), b"\n"),
    (_j(_row("j20", "alpha", "blank references", ["", "  "], judgment=0)), b"\n"),
    (_j(_row("j21", "beta", None, ["null prediction"], judgment=0)), b"\n"),
    (_j(_row("j22", "gamma", "seven", ["seven"], question=7, judgment=1)), b"\n"),
    (_j(_row(23, 3, "blue whale", ["the blue whale", "whale"], judgment=1, lang="en")), b"\n"),
    (_j(_row(24.0, "beta", "a cat", ["the dog"], judgment=0, question=None)), b"\n"),
    (_j(_row("j25", "alpha", LONG, ["words"], judgment=0)), b"\n"),
    (_j(_row("j26", "gamma", "short", ["short", LONG], judgment=1)), b"\n"),
    (_j(_row("j02", "alpha", "the Eiffel Tower", ["Eiffel Tower", "the tower"],
             question="Which tower?", judgment=1, lang="en", meta={"k": 1})), b"\r\n"),
    (_j(_row("j28", "gamma", "Paris", ["Paris", "paris, France"],
             question="Capital of France?", judgment="")), b"\n"),
    (b'{"id": "j29", "system": "beta", "prediction": "\\ud83d smile", "references": ["smile"]}',
     b"\n"),
    (_j({"id": "j30", "prediction": "no system", "references": ["no system at all"],
         "judgment": 0.0}), b"\n"),
    (_j(_row("j31", None, "caf\u00e9 cr\u00e8me \u4e2d\u6587", ["cafe creme",
                                                             "caf\u00e9 cr\u00e8me"],
             judgment="0.0")), b"\n"),
    (b'["not", "an", "object"]', b"\n"),
    (b"", b"\n"),
    (b"   ", b"\r\n"),
    (_j(_row("j35", "alpha", "good answer", ["a good answer"], judgment="good")), b"\n"),
    (_j(_row("j36", "beta", "two\nlines", ["two lines"], judgment=1, lang="fr")), b"\n"),
    (_j(_row("j37", "gamma", "the answer is 42", ["42", "forty-two"],
             question="What is the answer?", judgment=1)), b"\n"),
    (_j(_row("j38", "alpha", "Rome", ["Paris"], question="Capital of France?",
             judgment=0)), b"\n"),
    (_j(_row("j39", "beta", "  Paris  ", ["paris"], judgment=1)), b""),  # no final newline
]

# preds.csv: a BOM, CRLF line ends, quoted fields with newlines and commas, numbered
# reference columns (--reference_prefix reference --max_references 2), text cells.
CSV_TEXT = (
    "\ufeffid,system,prediction,reference1,reference2,reference3,question,judgment\r\n"
    'c01,alpha,Paris,Paris,"Paris, France",,Capital?,1\r\n'
    'c02,alpha,"the Eiffel\nTower",Eiffel Tower,tower,,"Where, exactly?",1\r\n'
    "c03,beta,NA,NA,,,,NA\r\n"
    "c04,beta,null,null,,,,\r\n"
    "c05,gamma,N/A,N/A,,,,N/A\r\n"
    "c06,gamma,,x,,,,0\r\n"
    "c07,alpha,01,1,,,,0\r\n"
    "c08,beta,1e5,100000,1e5,,,1\r\n"
    "c09,gamma,True,true,,,,True\r\n"
    "\r\n"
    'c10,alpha,"a ""quoted"" answer",a quoted answer,,,,1\r\n'
    'c11,beta,"[""list"", ""cell""]","[""list"", ""cell""]",,,,1\r\n'
    "c12,alpha,too,many,fields,here,x,y,z\r\n"
    "@BAD@\r\n"
    ",,orphan,orphan,,,,\r\n"
    'c01,alpha,Paris,Paris,"Paris, France",,Capital?,1\r\n'
    f"c16,gamma,{LONG},long,,,,0\r\n"
    "c17,alpha,third only,,,third,,1\r\n"
    'c18,beta,"line one\r\nline two",line one line two,,,,1\r\n'
    "c19,gamma,1889,in 1889,1889,,When?,1\r\n"
    "c20,beta,   ,x,,,,0\r\n"
    "c21,alpha,tower,Eiffel Tower,,,,0"  # no final line end
)
CSV_BAD_LINE = b"c13,beta,caf\xe9,cafe,,,,1"


def parquet_table():
    """preds.parquet: typed columns (an int64 id, list references with nulls, a float
    human-like column with NaN), nulls and empty strings, in row groups of 4 rows."""
    import pyarrow as pa

    rows = [
        (1, "alpha", "Paris", ["Paris", "paris, France"], "Capital?", 1.0),
        (2, "alpha", "the Eiffel Tower", ["Eiffel Tower", None], None, 0.5),
        (3, "beta", "NA", ["NA"], "", float("nan")),
        (4, "beta", None, ["null prediction"], None, None),
        (5, None, "N/A", ["not applicable"], None, 0.0),
        (6, "gamma", "", ["x"], None, 1.0),
        (7, "gamma", "01", ["1"], None, 0.0),
        (8, "beta", "1e5", ["100000", "1e5"], None, 1.0),
        (9, "alpha", "True", [], None, 1.0),
        (10, "alpha", "True", None, None, 1.0),
        (11, "gamma", LONG, ["long"], None, 0.0),
        (1, "alpha", "Paris", ["Paris", "paris, France"], "Capital?", 1.0),
        (13, "beta", "blue whale", ["", "whale"], "Which whale?", 1.0),
        (None, "gamma", "caf\u00e9", ["cafe", "caf\u00e9"], None, 1.0),
    ]
    columns = list(zip(*rows, strict=True))
    return pa.table({
        "id": pa.array(columns[0], pa.int64()),
        "system": pa.array(columns[1], pa.string()),
        "prediction": pa.array(columns[2], pa.string()),
        "references": pa.array(columns[3], pa.list_(pa.string())),
        "question": pa.array(columns[4], pa.string()),
        "score": pa.array(columns[5], pa.float64()),
    })


# preds.jsonl.gz: a gzip'd JSONL (gzip header without a time, so the bytes are stable).
GZ_LINES = [
    _j(_row("g01", "alpha", "Paris", ["Paris"])) + b"\r\n",
    _j(_row("g02", "beta", "NA", ["N/A", "NA"])) + b"\n",
    b'{"id": "g03", "prediction": \n',
    _j(_row("g04", "beta", "1e5", ["1e5"])) + b"\n",
    _j(_row("g01", "alpha", "Paris", ["Paris"])) + b"\n",
    _j(_row("g06", "gamma", "", ["empty"])) + b"\n",
    _j(_row("g07", None, "True", ["true", "yes"])) + b"\n",
    _j(_row("g08", "gamma", "the blue whale", ["blue whale"])) + b"\n",
]


def night2_lines() -> list[bytes]:
    """night2.jsonl: preds.jsonl the next night, for the incremental cases: an added row
    at the top (every row key shifts), j02 changed, j07 and j09 removed, j06 (dead-lettered
    before) fixed, j08 duplicated under a new system, an added row twice, j10 still
    broken."""
    lines = [line for line, _ in JSONL_LINES]
    lines[0] = lines[0].removeprefix(b"\xef\xbb\xbf")  # the BOM line, readable tonight
    by_id = {}
    for line in lines:
        try:
            by_id.setdefault(json.loads(line).get("id"), line)
        except (ValueError, AttributeError):
            pass
    out = [_j(_row("n01", "alpha", "Rome", ["Rome", "rome, Italy"], question="Capital of Italy?"))]
    for line in lines:
        try:
            row_id = json.loads(line).get("id")
        except (ValueError, AttributeError):
            out.append(line)
            continue
        if row_id in ("j07", "j09"):
            continue
        if row_id == "j02":
            record = json.loads(line)
            record["prediction"] = "Eiffel Tower"
            line = _j(record)
        elif row_id == "j06":
            record = json.loads(line)
            record["prediction"] = "x"
            line = _j(record)
        out.append(line)
    j08 = json.loads(by_id["j08"])
    out.append(_j({**j08, "system": "delta"}))
    added = _row("n02", "delta", "forty-two", ["42", "forty-two"])
    out += [_j(added), _j(added)]
    return [line for line in out if line.strip()]


def write_inputs(folder: Path = INPUTS) -> None:
    """Writes every input file (bytes exactly as they are committed)."""
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "preds.jsonl").write_bytes(b"".join(line + end for line, end in JSONL_LINES))
    csv_bytes = CSV_TEXT.encode("utf-8").replace(b"@BAD@", CSV_BAD_LINE)
    (folder / "preds.csv").write_bytes(csv_bytes)
    pq.write_table(parquet_table(), folder / "preds.parquet", row_group_size=4)
    (folder / "preds.jsonl.gz").write_bytes(gzip.compress(b"".join(GZ_LINES), mtime=0))
    (folder / "night2.jsonl").write_bytes(b"".join(line + b"\n" for line in night2_lines()))


# ----------------------------------------------------------------------------- cases

@dataclasses.dataclass(frozen=True)
class Case:
    """One `qa-score` run: its input file(s) (in inputs/), output format, flags, and the
    case whose output is its --previous_run (None: a full run)."""

    name: str
    inputs: tuple[str, ...]
    output_format: str
    args: tuple[str, ...] = ()
    metrics: str = METRICS
    previous: str | None = None


CASES: tuple[Case, ...] = (
    # A full run per input format; both output formats, each twice or more.
    Case("full_jsonl_to_parquet", ("preds.jsonl",), "parquet", KEEP),
    Case("full_jsonl_to_jsonl", ("preds.jsonl",), "jsonl", KEEP),
    Case("full_csv_to_jsonl", ("preds.csv",), "jsonl",
         ("--reference_prefix", "reference", "--max_references", "2",
          "--keep_input_columns", "prediction,references,judgment")),
    Case("full_parquet_to_parquet", ("preds.parquet",), "parquet",
         ("--keep_input_columns", "references,score")),
    Case("full_gz_to_parquet", ("preds.jsonl.gz",), "parquet"),
    # The meta-evaluation report: a human column (made by any input that has one).
    Case("report_jsonl", ("preds.jsonl",), "jsonl",
         ("--human_column", "judgment", "--report_min_n", "5", "--report_resamples", "100",
          "--report_subsets", "f1>0,f1=0", "--accuracy_threshold", "0.5,cider=1.0")),
    # Incremental runs on the next night's input (night2_lines), from a full run above.
    Case("incremental_to_parquet", ("night2.jsonl",), "parquet", KEEP,
         previous="full_jsonl_to_parquet"),
    Case("incremental_to_jsonl", ("night2.jsonl",), "jsonl", KEEP,
         previous="full_jsonl_to_jsonl"),
    # em, f1 unchanged; rougeL's signature changed (beta); bleu1 and cider dropped; bleu4
    # (bleu1's family) and token_recall added.
    Case("incremental_changed_metrics", ("night2.jsonl",), "parquet",
         ("--metric_options", '{"rouge": {"beta": 2.0}}'),
         metrics="em,f1,rougeL,bleu4,token_recall", previous="full_jsonl_to_parquet"),
)
BY_NAME = {case.name: case for case in CASES}


def prefix_of(root: Path, name: str) -> Path:
    return root / "out" / name / "run"


def run_case(case: Case, root: Path) -> Path:
    """Runs `case` in process on the FnApiRunner, its inputs copied to root/inputs, its
    output at root/out/<case>/run; a --previous_run case needs its previous case's
    output there already. Returns the output prefix."""
    from pipelines.score_predictions import run
    from tests.runners import RUNNER_ARGS

    folder = root / "inputs"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in case.inputs:
        if not (folder / name).exists():
            shutil.copyfile(INPUTS / name, folder / name)
        paths.append(str(folder / name))
    prefix = prefix_of(root, case.name)
    argv = ["--input", ",".join(paths), "--output", str(prefix), "--metrics", case.metrics,
            "--output_format", case.output_format, *COMMON, *case.args]
    if case.previous:
        argv += ["--previous_run", str(prefix_of(root, case.previous))]
    run([*argv, *RUNNER_ARGS["direct_in_process"]], save_main_session=False)
    return prefix


def run_all(root: Path, cases: tuple[Case, ...] = CASES,
            done: dict[str, Path] | None = None) -> dict[str, Path]:
    """Runs `cases` (and the previous runs they need) in order, each once: a case already
    in `done` (name -> output prefix, updated) is not run again."""
    done = {} if done is None else done

    def ensure(case: Case) -> None:
        if case.name in done:
            return
        if case.previous:
            ensure(BY_NAME[case.previous])
        done[case.name] = run_case(case, root)

    for case in cases:
        ensure(case)
    return done


# ------------------------------------------------------------------------ normalising

# summary.json: fields that differ from run to run (found by running twice and diffing).
# code: the package version and git commit, which change with every commit.
_VOLATILE_SUMMARY = ("run_id", "started_at", "finished_at", "code")
_VOLATILE_INPUT = ("modified",)


def _dump(value: Any) -> str:
    """One JSON line; floats as repr (json's own), NaN as NaN."""
    return json.dumps(value, ensure_ascii=False)


def _replace_paths(value: Any, root: str) -> Any:
    if isinstance(value, str):
        return value.replace(root, TMP)
    if isinstance(value, list):
        return [_replace_paths(v, root) for v in value]
    if isinstance(value, dict):
        return {_replace_paths(k, root): _replace_paths(v, root) for k, v in value.items()}
    return value


def _pylist(value: Any) -> Any:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def _scores(prefix: Path, fix: Callable[[Any], Any]) -> tuple[list[str], dict | None]:
    """The scores as JSON lines sorted by row_key, and (Parquet) the file's schema."""
    jsonl = Path(f"{prefix}.scores.jsonl")
    if jsonl.exists():
        records = [json.loads(line) for line in jsonl.read_text("utf-8").splitlines()]
        schema = None
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(f"{prefix}.scores.parquet")
        records = table.to_pylist()
        schema = {
            "fields": [{"name": f.name, "type": str(f.type),
                        "metadata": {_pylist(k): _pylist(v)
                                     for k, v in (f.metadata or {}).items()}}
                       for f in table.schema],
            "metadata": {_pylist(k): _pylist(v)
                         for k, v in (table.schema.metadata or {}).items()},
        }
    records = [fix(r) for r in records]
    records.sort(key=lambda r: (str(r.get("row_key")), _dump(r)))
    return [_dump(r) for r in records], schema


def _dead_letters(prefix: Path, fix: Callable[[Any], Any]) -> list[str]:
    path = Path(f"{prefix}.dead_letter.jsonl")
    records = [fix(json.loads(line))
               for line in path.read_text("utf-8").splitlines() if line.strip()]
    records.sort(key=lambda r: (str(r.get("file")), r.get("row") or 0, _dump(r)))
    return [_dump(r) for r in records]


def _summary(prefix: Path, fix: Callable[[Any], Any]) -> dict:
    summary = json.loads(Path(f"{prefix}.summary.json").read_text("utf-8"))
    for key in _VOLATILE_SUMMARY:
        summary.pop(key, None)
    for entry in summary.get("inputs", []):
        for key in _VOLATILE_INPUT:
            entry.pop(key, None)
    incremental = summary.get("incremental")
    if isinstance(incremental, dict):
        for key in ("previous_run_id", "previous_started_at", "previous_finished_at"):
            incremental.pop(key, None)
    return fix(summary)


def normalised_outputs(prefix: Path, root: Path) -> dict[str, str]:
    """A case's outputs as the texts of its expected files: file name -> text."""
    roots = sorted({str(root), str(root.resolve())}, key=len, reverse=True)

    def fix(value: Any) -> Any:
        for r in roots:
            value = _replace_paths(value, r)
        return value

    out: dict[str, str] = {}
    names = sorted(p.name for p in prefix.parent.iterdir())
    out["files.json"] = json.dumps(names, indent=1) + "\n"
    scores, schema = _scores(prefix, fix)
    out["scores.jsonl"] = "".join(line + "\n" for line in scores)
    if schema is not None:
        out["scores_schema.json"] = json.dumps(schema, indent=1, ensure_ascii=False) + "\n"
    out["dead_letter.jsonl"] = "".join(line + "\n" for line in _dead_letters(prefix, fix))
    out["summary.json"] = json.dumps(_summary(prefix, fix), indent=1,
                                     ensure_ascii=False) + "\n"
    report = Path(f"{prefix}.report.json")
    if report.exists():
        out["report.json"] = json.dumps(fix(json.loads(report.read_text("utf-8"))), indent=1,
                                        ensure_ascii=False) + "\n"
        out["report.md"] = fix(Path(f"{prefix}.report.md").read_text("utf-8"))
    return out


def first_difference(case: str, name: str, expected: str, actual: str) -> str | None:
    """None when equal; else a message naming the case, the file and the first record
    that differs."""
    if expected == actual:
        return None
    want, got = expected.splitlines(), actual.splitlines()  # records: lines
    for i, (a, b) in enumerate(zip(want, got, strict=False)):
        if a != b:
            # an indented document (.json, .md): the lines above, to place the record
            above = "" if name.endswith(".jsonl") else "".join(
                f"  (above)   {line}\n" for line in want[max(0, i - 4):i])
            return (f"golden case {case!r}, file {name}: first difference at record "
                    f"{i + 1} of {len(want)} expected / {len(got)} actual\n{above}"
                    f"  expected: {a}\n  actual:   {b}")
    i = min(len(want), len(got))
    extra = (f"  expected: {want[i]}" if len(want) > len(got) else f"  actual:   {got[i]}")
    return (f"golden case {case!r}, file {name}: {len(want)} records expected, {len(got)} "
            f"actual; first one only on one side, record {i + 1}:\n{extra}")


# ------------------------------------------------------------------------ generator

def regenerate(root: Path, write: Callable[[str], None] = print) -> None:
    """Writes the inputs, runs every case in `root` and writes the expected files."""
    write_inputs()
    run_all(root)
    if EXPECTED.exists():
        shutil.rmtree(EXPECTED)
    for case in CASES:
        folder = EXPECTED / case.name
        folder.mkdir(parents=True)
        for name, text in normalised_outputs(prefix_of(root, case.name), root).items():
            (folder / name).write_text(text, encoding="utf-8", newline="\n")
        write(f"{case.name}: {len(list(folder.iterdir()))} files")


def main() -> int:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        regenerate(Path(tmp))
    total = sum(p.stat().st_size for p in EXPECTED.rglob("*") if p.is_file())
    print(f"expected files: {total:,} bytes under {EXPECTED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
