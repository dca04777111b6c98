"""Scheduled re-scoring: an incremental run against a full run of the same corpus.

    python -m tests.bench.bench_rescoring [--rows 200000] [--metrics em,f1,rougeL]
        [--judge_rows 100000] [--judge_forward zero|real] [--baseline REF] [--out bench_out]

Two cases, each qa-score run in its own process on the in-process FnApiRunner
(start-up included, as a nightly job pays it):
  lexical   `--rows` rows of the bundled judgment files' real rows (SQuAD-SAS answer
            pairs, AVSD/NarrativeQA/SemEval answers with their references), repeated
            until `--rows`, each repetition made distinct by a marker on the prediction,
            shuffled with a fixed seed; `--metrics`. 0 skips it.
  judge     `--judge_rows` EVOUNA-TQ answers (without their human labels, whose report
            would cost both runs alike), `--metrics judge` with a judge-shaped
            checkpoint and a zero-cost stand-in model (tests/bench/zero_model.py): the
            host side of the model branch alone; `--judge_forward real` runs the
            checkpoint's own forward passes on the CPU instead (a trained judge's cost
            per token, at about 100 rows/s: size `--judge_rows` to match). 0 skips it.
For each: `full` scores night 1; `incremental` scores night 2 (5% of rows changed, 5%
added) with `--previous_run` = night 1; `full_2` scores night 2 whole. The scores of
`incremental` must equal `full_2`'s row for row (lexical metrics exactly; the zero-cost
judge gives every row the same value; the real forward passes within 1e-5, since a row's
padding differs between the two runs' batches). Targets: incremental at most 0.5x
`full_2` (lexical), 0.15x (judge). Each side also runs night 2's first row alone
(`start_up`) and prints the ratio past start-up and the floor start-up sets: the ratio
if every old row cost nothing.

`--baseline REF` runs the same commands on a checkout of REF (a git worktree in a
temporary folder, the same interpreter) in the same run, side by side. Results on stdout
and in `<out>/rescoring.json`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from tests.bench.bench_data import JUDGMENTS, SAS_SQUAD, data_dir, require

REPO = Path(__file__).resolve().parents[2]
TARGETS = {"lexical": 0.5, "judge": 0.15}


def real_rows() -> list[dict]:
    """Every judged row of the bundled files in the scoring pipeline's default columns:
    SQuAD-SAS, AVSD, NarrativeQA, SemEval (2,742 rows of short answers)."""
    data = data_dir()
    require(*(data / p for p in JUDGMENTS))
    with open(data / SAS_SQUAD, encoding="utf-8") as f:
        rows = [{"system": "sas", "prediction": r["answer1"], "references": [r["answer2"]]}
                for r in csv.DictReader(f) if r["answer1"].strip() and r["answer2"].strip()]
    for name in ("avsd_all", "nrqa_mhpgm", "semeval_mhpgm"):
        with open(data / "judgments" / "kpqa" / f"{name}.csv", encoding="utf-8") as f:
            for r in csv.DictReader(f):
                refs = [v for k, v in sorted(r.items()) if k.startswith("reference") and
                        v and v.strip()]
                if r.get("answer", "").strip() and refs:
                    rows.append({"system": name, "question": r.get("question") or None,
                                 "prediction": r["answer"], "references": refs})
    return rows


def make_corpus(n: int, pool: list[dict], seed: int = 0) -> list[dict]:
    rows = []
    for i in range(n):
        base, copy = pool[i % len(pool)], i // len(pool)
        prediction = base["prediction"] if copy == 0 else f"{base['prediction']} ({copy})"
        rows.append({**base, "id": f"r{i}", "prediction": prediction})
    random.Random(seed).shuffle(rows)
    return rows


def change(rows: list[dict], changed: float, added: float, seed: int = 1) -> list[dict]:
    """`changed` of the rows get another prediction; `added` more rows are appended
    (copies of others under new ids and predictions)."""
    rng = random.Random(seed)
    out = [dict(r) for r in rows]
    for i in rng.sample(range(len(out)), int(changed * len(out))):
        out[i]["prediction"] += " (changed)"
    extra = int(added * len(rows))
    for j, r in enumerate(rng.sample(rows, extra)):
        out.append({**r, "id": f"added{j}", "prediction": r["prediction"] + " (added)"})
    return out


def write_jsonl(rows: list[dict], path: Path) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return str(path)


def qa_score(code: Path, flags: list[str], zero_cost: bool) -> float:
    """qa-score (the code at `code`) in its own process; its wall time."""
    module = "tests.bench.zero_model" if zero_cost else "pipelines.score_predictions"
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", module, *flags, "--runner=FnApiRunner",
                           "--direct_running_mode=in_memory", "--progress_interval=0"],
                          cwd=code, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"qa-score failed in {code}:\n{done.stderr[-3000:]}")
    return round(wall, 1)


def scores_of(prefix: Path, columns: list[str]) -> pd.DataFrame:
    frame = pd.read_parquet(f"{prefix}.scores.parquet", columns=["row_key", *columns])
    return frame.sort_values("row_key").reset_index(drop=True)


def past_start_up(run: dict, new_share: float) -> dict:
    """What start-up bounds: the ratio of the runs' times past start-up (`start_up`: a
    one-row run of the same command), and `floor`, the ratio if every old row cost
    nothing (start-up plus the new rows' share of `full_2` past start-up)."""
    start, full = run["start_up"], run["full_2"]
    if full <= start:
        return {"past_start_up": None, "floor": None}
    return {"past_start_up": round((run["incremental"] - start) / (full - start), 3),
            "floor": round((start + new_share * (full - start)) / full, 3)}


def nights(code: Path, night1: str, night2: str, metrics: list[str], out: Path,
           extra: list[str], zero_cost: bool, atol: float = 0.0) -> dict:
    """start_up (night 2's first row), full (night 1), incremental (night 2 from it),
    full_2 (night 2) with the code at `code`; their times, the ratio, what start-up
    bounds (`past_start_up`) and whether the two night-2 runs agree."""
    with open(night2, encoding="utf-8") as f:
        lines = f.readlines()
    one = out / "one_row.jsonl"
    one.write_text(lines[0], encoding="utf-8")
    with open(night1, encoding="utf-8") as f:
        new_share = 1 - len(set(lines) & set(f)) / len(lines)
    run = {}
    for name, data, more in (("start_up", str(one), []), ("full", night1, []),
                             ("incremental", night2, [f"--previous_run={out / 'full'}"]),
                             ("full_2", night2, [])):
        run[name] = qa_score(code, [f"--input={data}", f"--output={out / name}",
                                    f"--metrics={','.join(metrics)}", *extra, *more],
                             zero_cost)
        print(f"    {name:12} {run[name]:7.1f} s", flush=True)
    inc, full = scores_of(out / "incremental", metrics), scores_of(out / "full_2", metrics)
    summary = json.loads((out / "incremental.summary.json").read_text())
    carried = {c: m.get("carried") for c, m in summary["overall"]["metrics"].items()}
    equal = inc.equals(full) if not atol else bool(
        inc["row_key"].equals(full["row_key"])
        and np.allclose(inc[metrics].to_numpy(float), full[metrics].to_numpy(float),
                        atol=atol, equal_nan=True))
    return {"wall_s": run, "ratio": round(run["incremental"] / run["full_2"], 3),
            **past_start_up(run, new_share), "new_share": round(new_share, 4),
            "equal_to_full": bool(equal), "carried": carried}


def checkout(ref: str, where: Path) -> Path:
    subprocess.run(["git", "worktree", "add", "--detach", str(where), ref], cwd=REPO,
                   check=True, capture_output=True)
    return where


def remove_checkout(where: Path) -> None:
    """Removes a `checkout`, if it was made."""
    if where.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=REPO,
                       capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--metrics", default="em,f1,rougeL")
    parser.add_argument("--judge_rows", type=int, default=100_000)
    parser.add_argument("--judge_forward", choices=("zero", "real"), default="zero",
                        help="the judge's forward passes: the zero-cost stand-in (the host "
                             "side alone) or the checkpoint's own, on the CPU")
    parser.add_argument("--baseline", default=None, help="a git ref to measure beside")
    parser.add_argument("--out", default="bench_out")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench_rescoring_"))
    sides = {"this": REPO}
    results: dict = {"machine": f"{platform.node()} ({os.cpu_count()} cores)",
                     "rows": args.rows, "metrics": args.metrics,
                     "judge_rows": args.judge_rows, "judge_forward": args.judge_forward,
                     "cases": {}}
    try:
        if args.baseline:
            sides[args.baseline] = checkout(args.baseline, tmp / "baseline")
        cases, inputs = {}, {}
        if args.rows:
            cases["lexical"] = (args.rows, args.metrics.split(","), [], False)
            corpus = make_corpus(args.rows, real_rows())
            inputs["lexical"] = (write_jsonl(corpus, tmp / "lexical1.jsonl"),
                                 write_jsonl(change(corpus, 0.05, 0.05), tmp / "lexical2.jsonl"))
        if args.judge_rows:
            from tests.bench.judge_rows import evouna_rows, judge_checkpoint
            from transforms.models import loading

            judge = judge_checkpoint(loading.packaged_model_path(), tmp / "judge")
            # without their human labels: a report would cost both runs alike
            rows = [{k: v for k, v in r.items() if k != "human"}
                    for r in evouna_rows(args.judge_rows, unique=True)]
            real = args.judge_forward == "real"
            cases["judge"] = (args.judge_rows, ["judge"], [f"--judge_model={judge}"], not real)
            inputs["judge"] = (write_jsonl(rows, tmp / "judge1.jsonl"),
                               write_jsonl(change(rows, 0.05, 0.05), tmp / "judge2.jsonl"))
        for case, (n, metrics, extra, zero) in cases.items():
            atol = 1e-5 if case == "judge" and not zero else 0.0
            results["cases"][case] = {}
            for side, code in sides.items():
                print(f"  {case} ({n:,} rows), {side}", flush=True)
                out = tmp / f"{case}_{len(results['cases'][case])}"
                out.mkdir()
                got = nights(code, *inputs[case], metrics, out, extra, zero, atol)
                results["cases"][case][side] = got
                print(f"    incremental / full_2 = {got['ratio']:.3f} (target at most "
                      f"{TARGETS[case]}), equal to full: {got['equal_to_full']}; past "
                      f"start-up {got['past_start_up']}, with old rows free "
                      f"{got['floor']} ({got['new_share']:.1%} of night 2's rows new)",
                      flush=True)
    finally:
        remove_checkout(tmp / "baseline")
        shutil.rmtree(tmp, ignore_errors=True)
    Path(args.out, "rescoring.json").write_text(json.dumps(results, indent=2))
    this = {case: sides["this"] for case, sides in results["cases"].items()}
    ok = all(r["ratio"] <= TARGETS[case] and r["equal_to_full"] for case, r in this.items())
    print("targets met" if ok else "TARGETS NOT MET", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
