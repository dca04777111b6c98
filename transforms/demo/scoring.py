"""The demo's scoring phase: the scoring runs (`scoring_jobs`) and the SQuAD-SAS table
beside the SAS paper's Table 2 (`sas_table`)."""

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


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
