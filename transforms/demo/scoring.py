"""The demo's scoring phase: the scoring runs (`scoring_jobs`), the SQuAD-SAS table
beside the SAS paper's Table 2 (`sas_table`), and EVOUNA-TQ (`evouna_rows`,
`evouna_job`, `dev_thresholds`, `judge_table`): every metric's accuracy threshold is
chosen on the dev split and the test split is scored with them, the judge included."""

from __future__ import annotations

import json
from pathlib import Path

LEXICAL_METRICS = ("em", "f1", "bleu1", "bleu4", "rougeL", "meteor", "cider")
EMBEDDING_METRICS = ("bertscore", "bi_encoder")
KPQA_METRICS = ("kpqa_bleu1", "kpqa_rougeL", "kpqa_bertscore")
# SAS paper, Table 2, SQuAD, Pearson r on the F1 = 0 and F1 > 0 subsets.
SAS_PAPER_TABLE2 = {"bleu4": (0.00, 0.18), "rougeL": (0.10, 0.56), "meteor": (0.38, 0.45),
                    "f1": (0.00, 0.60), "bi_encoder": (0.48, 0.69),
                    "bertscore": (0.27, 0.61), "sas": (0.56, 0.75)}


def scoring_jobs(data: Path, out: Path, models: dict[str, str | None],
                 max_rows: int | None = None) -> dict[str, list[str]]:
    """The scoring runs of the demo: name -> scoring pipeline arguments.

    AVSD has questions, so every metric runs on it; the SQuAD-SAS pairs have none, so the
    question-conditioned ones (kpqa_*, bem, square) do not.
    """
    with_model = [m for m in ("sas", "wes", "bem", "square") if models.get(m)]
    pair_only = [m for m in with_model if m in ("sas", "wes")]  # no question needed
    avsd_metrics = [*LEXICAL_METRICS, *EMBEDDING_METRICS, *with_model,
                    *(KPQA_METRICS if models.get("kpqa") else ())]
    sas_metrics = [*LEXICAL_METRICS, *EMBEDDING_METRICS, *pair_only]
    model_flags = [f"--{m}_model={models[m]}"
                   for m in (*with_model, *(("kpqa",) if models.get("kpqa") else ()))]
    sas_flags = [f"--{m}_model={models[m]}" for m in pair_only]
    avsd_input, sas_input = (data / "judgments/kpqa/avsd_all.csv",
                             data / "judgments/sas/SQuAD_SAS.csv")
    if max_rows is not None:
        avsd_input, sas_input = (_head(avsd_input, out / "inputs", max_rows),
                                 _head(sas_input, out / "inputs", max_rows))
    return {
        "avsd": [
            f"--input={avsd_input}", f"--output={out / 'avsd'}",
            f"--metrics={','.join(avsd_metrics)}", "--prediction_column=answer",
            "--reference_prefix=reference", "--max_references=5", "--human_column=scores",
            *model_flags,
        ],
        "squad_sas": [
            f"--input={sas_input}", f"--output={out / 'squad_sas'}",
            f"--metrics={','.join(sas_metrics)}", "--prediction_column=answer1",
            "--reference_columns=answer2", "--human_column=label",
            "--report_subsets=f1=0,f1>0", *sas_flags,
        ],
    }


# EVOUNA-TQ: the results table (lexical checks of the LLM era, embeddings, sas, the judge).
# The lexical metrics take the maximum over every gold answer (a median of 8 and up to 185
# per question), and so does the `judge` metric, which picks the best-matching gold itself
# (its trainer's layout); bertscore and sas score each answer against that best-matching
# gold only (`metrics.judge.best_gold`, label-free): one model input per answer instead of
# 14 on average.
EVOUNA_LEXICAL = ("em", "f1", "contains", "token_recall")
EVOUNA_MODEL = ("bertscore", "sas")


def evouna_rows(data: Path, out: Path, max_rows: int | None = None
                ) -> dict[str, dict[str, Path]]:
    """Writes EVOUNA-TQ's dev and test splits as qa-score rows (`evouna.write_scoring_rows`:
    one row per judged answer, system = the answering model, human = 1/0) twice: `all`
    with every gold answer as references, `best` with the best-matching gold alone;
    `max_rows` keeps the first rows of each split (quick runs).

    Returns:
        "all" / "best" -> split -> the JSONL file.
    """
    from transforms.metrics.judge import best_gold
    from transforms.training import evouna

    rows = evouna.judged_answers(evouna.read_questions(str(data / "judgments/evouna/TQ.json")),
                                 splits=("dev", "test"))
    if max_rows is not None:
        rows = ([r for r in rows if r.split == "dev"][:max_rows]
                + [r for r in rows if r.split == "test"][:max_rows])
    best = [r._replace(references=(best_gold(r.prediction, r.references),))
            for r in rows]
    return {name: {split: Path(path) for split, path in evouna.write_scoring_rows(
                select, str(out / "inputs" / f"evouna-{name}")).items()}
            for name, select in (("all", rows), ("best", best))}


# The short-answer test split (held-out SQuAD articles, their answers' overlapping
# variants and same-kind negatives): the lexical metrics and sas against every gold.
SHORT_METRICS = ("em", "f1", "contains", "token_recall", "sas")


def short_rows(scoring: dict[str, str], out: Path, max_rows: int | None = None
               ) -> dict[str, Path]:
    """The short-answer pairs' dev and test `qa-score` rows (`short_answer_data`'s
    scoring files); `max_rows` keeps the first rows of each (quick runs, in out/inputs).

    Returns:
        split -> the JSONL file.
    """
    paths = {split: Path(scoring[split]) for split in ("dev", "test")}
    if max_rows is None:
        return paths
    folder = out / "inputs" / "short"
    folder.mkdir(parents=True, exist_ok=True)
    for split, path in paths.items():
        with open(path, encoding="utf-8") as f:
            head = [line for _, line in zip(range(max_rows), f)]
        paths[split] = folder / path.name
        paths[split].write_text("".join(head), encoding="utf-8")
    return paths


def evouna_job(rows: Path, output: Path, metrics: list[str], models: dict[str, str | None],
               thresholds: dict[str, float] | None = None) -> list[str]:
    """qa-score arguments for one EVOUNA-TQ (or short-answer) file: `metrics` (sas only when its model is
    there) and, when a judge is given, the `judge` metric (at the threshold its checkpoint
    saved); `thresholds` (metric -> value, chosen on dev) become `--accuracy_threshold`."""
    metrics = [m for m in metrics if m != "sas" or models.get("sas")]
    flags = [f"--sas_model={models['sas']}"] if "sas" in metrics else []
    if models.get("judge"):
        metrics.append("judge")
        flags.append(f"--judge_model={models['judge']}")
    thresholds = {m: t for m, t in (thresholds or {}).items() if m in metrics}
    if thresholds:
        flags.append("--accuracy_threshold=" + ",".join(
            f"{m}={t:.6g}" for m, t in sorted(thresholds.items())))
    return [f"--input={rows}", f"--output={output}", f"--metrics={','.join(metrics)}",
            "--human_column=human", "--system_column=system", *flags]


def dev_thresholds(scores_parquet: Path, metrics: list[str]) -> dict[str, float]:
    """Each metric's accuracy-maximising threshold on a scored dev split
    (`training.evaluation.choose_threshold`, the judge's own rule), from the scores file's
    `human` column and metric columns; rows a metric left empty are not counted."""
    import numpy as np
    import pyarrow.parquet as pq

    from transforms.training.evaluation import choose_threshold

    table = pq.read_table(scores_parquet).to_pandas()
    out = {}
    for metric in metrics:
        if metric not in table.columns:
            continue
        both = table[["human", metric]].dropna()
        if both["human"].nunique() < 2:
            continue
        out[metric] = float(choose_threshold(np.asarray(both["human"]),
                                             np.asarray(both[metric])).threshold)
    return out


def judge_table(report_jsons: list[Path]) -> str:
    """Accuracy at each metric's threshold and AUROC, overall and per answering system,
    from qa-score reports of EVOUNA-TQ's test split (one line per metric, the metrics of
    every report together)."""
    by_system: dict[str | None, dict[str, dict]] = {}
    for path in report_jsons:
        for scope in json.loads(path.read_text())["scopes"]:
            if scope.get("subset") is None and scope.get("level", "rows") == "rows":
                by_system.setdefault(scope["system"], {}).update(
                    {r["metric"]: r for r in scope["rows"]})
    systems = sorted(s for s in by_system if s is not None)
    lines = ["| metric | threshold | accuracy | AUROC |" +
             "".join(f" acc. {s} |" for s in systems),
             "|---|---:|---:|---:|" + "---:|" * len(systems)]
    for row in sorted(by_system[None].values(), key=lambda r: -(r.get("accuracy") or 0.0)):
        name = row["metric"]
        source = f" ({row['threshold_source']})" if row.get("threshold_source") else ""
        cells = [_fmt((by_system[s].get(row["metric"]) or {}).get("accuracy")) for s in systems]
        lines.append(f"| {name} | {_fmt(row.get('threshold'), 4)}{source} | "
                     f"{_fmt(row.get('accuracy'))} | {_fmt(row.get('auroc'))} |"
                     + "".join(f" {c} |" for c in cells))
    return "\n".join(lines)


def _head(path: Path, folder: Path, rows: int) -> Path:
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / path.name
    pd.read_csv(path).head(rows).to_csv(target, index=False)
    return target


def sas_table(report_json: Path) -> str:
    """SQuAD-SAS Pearson r on F1 = 0 and F1 > 0, beside the SAS paper's Table 2."""
    report = json.loads(report_json.read_text())
    by_scope = {scope["subset"]: {m["metric"]: m for m in scope["rows"]}
                for scope in report["scopes"]
                if scope["system"] is None and scope.get("level", "rows") == "rows"}
    zero, some = by_scope.get("f1=0", {}), by_scope.get("f1>0", {})
    lines = ["| metric | r, F1 = 0 (here) | r, F1 > 0 (here) | SAS paper Table 2 (F1 = 0 / > 0) |",
             "|---|---:|---:|---|"]
    order = sorted(some, key=lambda m: -abs(_r(some.get(m)) or 0.0))
    for metric in order:
        paper = SAS_PAPER_TABLE2.get(metric)
        paper_text = f"{paper[0]:.2f} / {paper[1]:.2f}" if paper else "-"
        lines.append(f"| {metric} | {_fmt(_r(zero.get(metric)))} | "
                     f"{_fmt(_r(some.get(metric)))} | {paper_text} |")
    return "\n".join(lines)


def _r(entry: dict | None) -> float | None:
    return None if entry is None else entry.get("pearson")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
