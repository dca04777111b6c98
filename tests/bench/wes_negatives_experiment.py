"""Experiment: does training WES on adversarial negatives make the judge better?

    python -m tests.bench.wes_negatives_experiment --out /tmp/wes_neg [--data DIR]
        [--seeds 13,14,15] [--judge_steps 100] [--wes_epochs 1] [--sas_epochs 1]
        [--arms R,B] [--bootstrap 1000]
        [--only mine,wes,random_test,sas,short,judge,score,report]

Arms (R and B by default), the demo's curriculum (transforms/demo/training.py) in each,
one process at a time, one torch thread:
  R  WES mined with the default (random) negatives;
  A  WES mined with the adversarial mix (`MIX`), the same positives and split titles;
  B  WES mined with the recipe's negatives (`transforms.demo.training.WES_NEGATIVES`): as
     many random negatives as adversarial ones, the same positives and split titles.
Per arm: `wes-mine` on the real sample (k = 2, seed 13, as the demo), the WES
cross-encoder (1 epoch; R's is also scored on A's WES-hard split), SAS on STS-B from it,
the short-answer pairs from that arm's WES corpus, and one judge per seed (the demo's
`JUDGE_ARGS`, `--judge_steps` steps from SAS). Each judge scores EVOUNA-TQ's test split
and the short-answer test split with `qa-score` (the `judge` metric at the threshold
its checkpoint saved). The report (`<out>/results.json`, `<out>/results.md`): per
seed and mean accuracy and AUROC, and a paired bootstrap 95% interval of A - R and B - R
(the mean over seeds of the accuracy; test rows resampled jointly for every judge).
Every arm's WES model is also scored on R's test split, whose negatives are all random
(`random_test`: `qa-score --metrics wes` with the link text as the prediction and the
title as the reference; accuracy at 0.5 and AUROC).

Every step is skipped when its output is there, so an interrupted run continues;
`--only` runs some steps (the later ones read the earlier ones' outputs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from transforms.demo.training import JUDGE_ARGS, SHORT_TRAIN_MIX, WES_NEGATIVES  # noqa: E402

MIX = "random=1,f1=1,substring=1,article_cooccurrence=1,word_cooccurrence=1"
ARMS = {"R": [], "A": ["--negatives", MIX], "B": ["--negatives", WES_NEGATIVES]}
RUNNER = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]
STEPS = ("mine", "wes", "random_test", "sas", "short", "judge", "score", "report")
COMMON = ["--num_threads=1", "--no_progress", "--overwrite"]
TESTS = ("evouna", "short")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.bench.wes_negatives_experiment",
                                description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--out", required=True, help="folder for every output (kept: resumable)")
    p.add_argument("--data", default=os.environ.get("QA_EVAL_SHARED_DATA",
                                                    str(Path.home() / ".cache/qa-eval")),
                   help="the data folder (wiki/, stsb/, squad/, judgments/evouna/)")
    p.add_argument("--arms", default="R,B",
                   help="arms to run (R: random, B: the recipe's mix, A: the even mix)")
    p.add_argument("--seeds", default="13,14,15", help="judge seeds")
    p.add_argument("--judge_steps", type=int, default=100, help="judge optimizer steps")
    p.add_argument("--wes_epochs", type=int, default=1)
    p.add_argument("--sas_epochs", type=int, default=1)
    p.add_argument("--max_steps", type=int, default=None,
                   help="cap the WES and SAS runs too (quick runs)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--only", default=",".join(STEPS), help=f"steps to run, of {STEPS}")
    return p


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}] {msg}", flush=True)


def run(args: list[str], log_file: Path, walls: dict, name: str) -> None:
    """`python -m ARGS` from the repository, output to `log_file`; wall time kept."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log(f"{name}: python -m {' '.join(args)}")
    started = time.monotonic()
    with open(log_file, "w", encoding="utf-8") as f:
        code = subprocess.call([sys.executable, "-m", *args], stdout=f,
                               stderr=subprocess.STDOUT, cwd=REPO)
    walls[name] = round(time.monotonic() - started, 1)
    log(f"{name}: exit {code} in {walls[name]:.0f} s")
    if code != 0:
        tail = log_file.read_text(encoding="utf-8").splitlines()[-20:]
        raise SystemExit(f"{name} failed (exit {code}); {log_file}:\n" + "\n".join(tail))


def paths(out: Path, arm: str) -> dict[str, Path]:
    return {"mine": out / f"mine-{arm}", "corpus": out / f"mine-{arm}" / "wes-k2",
            "wes": out / arm / "wes", "sas": out / arm / "sas", "short": out / arm / "short",
            "logs": out / arm / "logs", "scores": out / arm / "scores"}


def judge_dir(out: Path, arm: str, seed: int) -> Path:
    return out / arm / f"judge-s{seed}"


def step_mine(a, out, arm, walls):
    p = paths(out, arm)
    if (p["mine"] / "stats.json").is_file():
        return
    run(["pipelines.mine_wes",
         f"--input={Path(a.data) / 'wiki/enwiki-20160501-p10p30302-sample.xml.bz2'}",
         f"--output={p['mine']}", "--min_incoming_links=2", "--seed=13", *ARMS[arm],
         *RUNNER], out / f"mine-{arm}.log", walls, f"mine {arm}")


def step_wes(a, out, arm, walls):
    p = paths(out, arm)
    if (p["wes"] / "metrics.json").is_file():
        return
    hard = paths(out, "A")["mine"] / "wes-k2-hard"
    extra = ([f"--hard_test_file={hard}/test-*.parquet"]
             if arm != "A" and hard.is_dir() else [])  # every WES model on A's hard split
    cap = [f"--max_steps={a.max_steps}"] if a.max_steps else []
    run(["pipelines.train_cross_encoder", "--format=wes", f"--input={p['corpus']}",
         f"--output={p['wes']}", f"--epochs={a.wes_epochs}", "--seed=13", *extra, *cap,
         *COMMON], p["logs"] / "wes.log", walls, f"wes {arm}")


def step_random_test(a, out, arm, walls):
    """The arm's WES model on R's test split (every negative random): `random_test.json`
    in the arm's folder, accuracy at 0.5 and AUROC over its rows."""
    import pyarrow.parquet as pq
    from sklearn.metrics import roc_auc_score
    p = paths(out, arm)
    result = p["wes"].parent / "random_test.json"
    if result.is_file():
        return
    rows = out / "inputs" / "random-test.jsonl"
    if not rows.is_file():
        rows.parent.mkdir(parents=True, exist_ok=True)
        import pyarrow as pa
        test = pa.concat_tables(pq.read_table(f) for f in
                                sorted(paths(out, "R")["corpus"].glob("test-*.parquet")))
        with open(rows, "w", encoding="utf-8") as f:
            for i, r in enumerate(test.to_pylist()):
                f.write(json.dumps({"id": f"t{i}", "prediction": r["link_text"],
                                    "references": [r["title"]], "human": r["label"]}) + "\n")
    target = p["scores"] / "random-test"
    run(["pipelines.score_predictions", f"--input={rows}", f"--output={target}",
         "--metrics=wes", f"--wes_model={p['wes']}", "--human_column=human", *RUNNER],
        p["logs"] / "random-test.log", walls, f"random test {arm}")
    frame = pq.read_table(f"{target}.scores.parquet", columns=["human", "wes"]).to_pandas()
    hit = (frame["wes"] >= 0.5).astype(int) == frame["human"].astype(int)
    result.write_text(json.dumps({"rows": len(frame), "accuracy": float(hit.mean()),
                                  "auroc": float(roc_auc_score(frame["human"], frame["wes"]))}))


def step_sas(a, out, arm, walls):
    p = paths(out, arm)
    if (p["sas"] / "metrics.json").is_file():
        return
    cap = [f"--max_steps={a.max_steps}"] if a.max_steps else []
    run(["pipelines.train_cross_encoder", "--format=stsb",
         f"--input={Path(a.data) / 'stsb'}", f"--output={p['sas']}",
         f"--epochs={a.sas_epochs}", f"--init_checkpoint={p['wes']}", "--seed=13", *cap,
         *COMMON], p["logs"] / "sas.log", walls, f"sas {arm}")


def step_short(a, out, arm, walls):
    p = paths(out, arm)
    if (p["short"] / "counts.json").is_file():
        return
    from transforms.demo.training import short_answer_data
    started = time.monotonic()
    short_answer_data(Path(a.data), p["corpus"], p["short"])
    walls[f"short {arm}"] = round(time.monotonic() - started, 1)
    log(f"short {arm}: {walls[f'short {arm}']:.0f} s")


def step_judge(a, out, arm, seed, walls):
    p, target = paths(out, arm), judge_dir(out, arm, seed)
    if (target / "metrics.json").is_file():
        return
    run(["pipelines.train_cross_encoder", *JUDGE_ARGS, "--format=judge",
         f"--input={p['short']}", f"--init_checkpoint={p['sas']}", f"--output={target}",
         f"--max_steps={a.judge_steps}", "--skip_test", f"--seed={seed}", *COMMON],
         p["logs"] / f"judge-s{seed}.log", walls, f"judge {arm} s{seed}")


def test_rows(a, out) -> dict[str, Path]:
    """The two test files (qa-score rows): EVOUNA-TQ test (every gold) and the
    short-answer test split (arm R's; checked identical to A's)."""
    from transforms.demo.scoring import evouna_rows
    evouna = out / "inputs" / "evouna-all" / "test.jsonl"
    if not evouna.is_file():
        evouna = evouna_rows(Path(a.data), out)["all"]["test"]
    shorts = [paths(out, arm)["short"] / "scoring" / "test.jsonl" for arm in ARMS]
    digests = {hashlib.sha256(s.read_bytes()).hexdigest() for s in shorts if s.is_file()}
    if len(digests) > 1:
        raise SystemExit(f"the arms' short-answer test splits differ: {shorts}")
    return {"evouna": evouna, "short": next(s for s in shorts if s.is_file())}


def step_score(a, out, arm, seed, walls):
    from transforms.demo.scoring import evouna_job
    rows = test_rows(a, out)
    for test in TESTS:
        target = paths(out, arm)["scores"] / f"{test}-s{seed}"
        if Path(f"{target}.report.json").is_file():
            continue
        job = evouna_job(rows[test], target, [], {"judge": str(judge_dir(out, arm, seed))})
        run(["pipelines.score_predictions", *job, *RUNNER],
            paths(out, arm)["logs"] / f"score-{test}-s{seed}.log", walls,
            f"score {test} {arm} s{seed}")


def judge_row(report_json: Path) -> dict:
    for scope in json.loads(report_json.read_text())["scopes"]:
        if (scope.get("subset") is None and scope.get("system") is None
                and scope.get("level", "rows") == "rows"):
            return next(r for r in scope["rows"] if r["metric"] == "judge")
    raise ValueError(f"no judge row in {report_json}")


def correct(out, arm, seed, test):
    """Row id -> 1/0 (the judge's decision at its threshold = the human label)."""
    import pyarrow.parquet as pq
    target = paths(out, arm)["scores"] / f"{test}-s{seed}"
    row = judge_row(Path(f"{target}.report.json"))
    table = pq.read_table(f"{target}.scores.parquet", columns=["id", "human", "judge"])
    frame = table.to_pandas().dropna(subset=["judge"]).set_index("id")
    hit = ((frame["judge"] >= row["threshold"]).astype(int) == frame["human"].astype(int))
    return hit.astype(float), row


def held_out(metrics: dict) -> dict:
    """A WES model's test / WES-hard accuracy, overall and per pair kind."""
    keep = ("accuracy", "accuracy_at_threshold", "auroc")
    out = {split: {k: metrics.get(split, {}).get(k) for k in keep}
           for split in ("test", "hard_test") if metrics.get(split)}
    for split in ("test", "hard_test"):
        kinds = metrics.get(f"{split}_by_pair_kind")
        if kinds:
            out.setdefault(split, {})["by_pair_kind"] = kinds
    return out


def step_report(a, out, arms, seeds, walls):
    import numpy as np
    report = {"arms": {}, "bootstrap": {}, "walls": walls,
              "settings": {"seeds": seeds, "judge_steps": a.judge_steps,
                           "wes_epochs": a.wes_epochs, "sas_epochs": a.sas_epochs,
                           "max_steps": a.max_steps, "judge_args": list(JUDGE_ARGS),
                           "short_train_mix": SHORT_TRAIN_MIX}}
    hits: dict = {}
    for arm in arms:
        p = paths(out, arm)
        wes = json.loads((p["wes"] / "metrics.json").read_text())
        sas = json.loads((p["sas"] / "metrics.json").read_text())
        random_test = p["wes"].parent / "random_test.json"
        entry = {"wes": held_out(wes), "wes_steps": wes["training"]["global_step"],
                 "wes_random_test": (json.loads(random_test.read_text())
                                     if random_test.is_file() else None),
                 "sas_test": {k: (sas.get("test") or {}).get(k)
                              for k in ("pearson", "spearman")},
                 "sas_steps": sas["training"]["global_step"], "judges": {}}
        for seed in seeds:
            jm = json.loads((judge_dir(out, arm, seed) / "metrics.json").read_text())
            row = {"threshold": (jm.get("calibration") or {}).get("threshold"),
                   "steps": jm["training"]["global_step"], "train_s": jm["training"]["wall_s"]}
            for test in TESTS:
                hit, rep = correct(out, arm, seed, test)
                hits[(arm, seed, test)] = hit
                row[test] = {"accuracy": float(hit.mean()), "report_accuracy":
                             rep.get("accuracy"), "auroc": rep.get("auroc"), "rows": len(hit)}
            entry["judges"][seed] = row
        entry["mean"] = {test: {k: float(np.mean([entry["judges"][s][test][k] for s in seeds]))
                                for k in ("accuracy", "auroc")} for test in TESTS}
        report["arms"][arm] = entry
    for other in [x for x in ("A", "B") if {x, "R"} <= set(arms)]:
        rng = np.random.default_rng(0)
        for test in TESTS:
            ids = sorted(set.intersection(*(set(hits[(arm, s, test)].index)
                                            for arm in (other, "R") for s in seeds)))
            mat = {arm: np.stack([hits[(arm, s, test)].loc[ids].to_numpy() for s in seeds])
                   for arm in (other, "R")}
            diff_rows = mat[other].mean(axis=0) - mat["R"].mean(axis=0)  # per row
            draws = rng.integers(0, len(ids), size=(a.bootstrap, len(ids)))
            boots = diff_rows[draws].mean(axis=1)
            report["bootstrap"][f"{test} {other} - R"] = {
                "rows": len(ids), "difference": float(diff_rows.mean()),
                "ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))],
                "resamples": a.bootstrap}
    (out / "results.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "results.md").write_text(markdown(report, seeds))
    print(markdown(report, seeds))


def markdown(report: dict, seeds: list[int]) -> str:
    def f(v):
        return "n/a" if v is None else f"{v:.3f}"

    lines = ["| arm | seed | EVOUNA-TQ acc. | EVOUNA-TQ AUROC | short acc. | short AUROC |",
             "|---|---|---:|---:|---:|---:|"]
    for arm, e in report["arms"].items():
        for seed in [*seeds, "mean"]:
            r = e["mean"] if seed == "mean" else e["judges"][seed]
            lines.append(f"| {arm} | {seed} | {f(r['evouna']['accuracy'])} | "
                         f"{f(r['evouna']['auroc'])} | {f(r['short']['accuracy'])} | "
                         f"{f(r['short']['auroc'])} |")
    lines += ["", "| test, arms | difference (mean of seeds) | 95% bootstrap interval | rows |",
              "|---|---:|---:|---:|"]
    for test, b in report["bootstrap"].items():
        lines.append(f"| {test} | {b['difference']:+.4f} | [{b['ci95'][0]:+.4f}, "
                     f"{b['ci95'][1]:+.4f}] | {b['rows']} |")
    lines += ["", "| WES model | split | acc. at 0.5 / at its threshold | AUROC | "
              "per pair kind (rows): acc. at 0.5 / at threshold |", "|---|---|---:|---:|---|"]
    for arm, e in report["arms"].items():
        for split, m in e["wes"].items():
            kinds = ", ".join(f"{k} ({v.get('rows')}) {f(v.get('accuracy'))} / "
                              f"{f(v.get('accuracy_at_threshold'))}"
                              for k, v in (m.get("by_pair_kind") or {}).items())
            lines.append(f"| {arm} | {split} | {f(m.get('accuracy'))} / "
                         f"{f(m.get('accuracy_at_threshold'))} | {f(m.get('auroc'))} "
                         f"| {kinds} |")
    lines += ["", "| WES model | R's test split (random negatives): acc. at 0.5 | AUROC | rows |",
              "|---|---:|---:|---:|"]
    for arm, e in report["arms"].items():
        r = e.get("wes_random_test") or {}
        lines.append(f"| {arm} | {f(r.get('accuracy'))} | {f(r.get('auroc'))} | "
                     f"{r.get('rows', 'n/a')} |")
    lines += ["", "| SAS model | STS-B test Pearson | Spearman |", "|---|---:|---:|"]
    for arm, e in report["arms"].items():
        lines.append(f"| {arm} | {f(e['sas_test']['pearson'])} | "
                     f"{f(e['sas_test']['spearman'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    arms = [x for x in a.arms.split(",") if x]
    seeds = [int(s) for s in a.seeds.split(",") if s]
    only = set(a.only.split(","))
    if unknown := (only - set(STEPS)) | (set(arms) - set(ARMS)):
        raise SystemExit(f"unknown steps or arms: {sorted(unknown)}")
    walls_file = out / "walls.json"
    walls = json.loads(walls_file.read_text()) if walls_file.is_file() else {}
    try:
        # Mining first (R's WES is scored on A's hard split), then arm by arm.
        for arm in ("A", *[x for x in arms if x != "A"]) if "mine" in only else ():
            if arm in arms or arm == "A":
                step_mine(a, out, arm, walls)
        for arm in arms:
            for name, step in (("wes", step_wes), ("random_test", step_random_test),
                               ("sas", step_sas), ("short", step_short)):
                if name in only:
                    step(a, out, arm, walls)
        for seed in seeds:  # seed by seed: both arms of a seed before the next seed
            for arm in arms:
                if "judge" in only:
                    step_judge(a, out, arm, seed, walls)
                if "score" in only:
                    step_score(a, out, arm, seed, walls)
    finally:
        walls_file.write_text(json.dumps(walls, indent=2))
    if "report" in only:
        step_report(a, out, arms, seeds, walls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
