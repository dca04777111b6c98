"""Throughput of the lexical suite against the reference toolkits, on the same rows.

    python -m tests.bench.bench_lexical [--rows 100000] [--reference-rows N] [--batch-size 1000]

The corpus is every row of the real judgment files (KPQA AVSD with its first 5 references,
NarrativeQA 2, SemEval 1, and the SAS SQuAD pairs as prediction/reference), concatenated in
fresh seeded permutations until `--rows` rows. Both sides score em, f1, bleu1-4, rougeL,
cider and meteor with several references as the KPQA release did (one single-reference
corpus per reference position, maximum over positions):

- ours: `build_metrics(...)`, the CIDEr document frequencies as a corpus statistic, then
  `score_batch` per batch of `--batch-size` rows for each family (as the pipeline calls
  them); the PTB token cache is cleared before every batch, so only the families of one
  batch share tokenisations, never rows of different batches.
- reference: pycocoevalcap 1.2 (PTBTokenizer, Bleu(4), Rouge, Cider, Meteor, one coco
  corpus per reference position) and the SQuAD v1.1 script's functions, on the first
  `--reference-rows` rows.

Rows holding a text whose coco tokenisation depends on the caption written after it in
coco's file (`ptb.context_dependent`: "no." and one other of the real texts) are left out
of the corpus, since coco's own value for them (and, through CIDEr's document frequencies,
for every row sharing their n-grams) depends on the order of its file.

Every value of the rows both sides scored must be identical (==). CPU time counts this
process and its finished children (the JVMs); "rows/s/core" is rows per CPU-second. The
JSON also breaks the CPU time down by metric family on both sides.
Prints a table and writes `<out>/lexical.json`.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import random
import re
import resource
import string
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.bench.bench_data import JUDGMENTS, data_dir, require
from transforms.metrics import lexical
from transforms.metrics.base import QAExample
from transforms.metrics.registry import build_metrics
from transforms.text import ptb

NAMES = ("em", "f1", "bleu1", "bleu2", "bleu3", "bleu4", "rougeL", "cider", "meteor")
KPQA_FILES = {"avsd_all": 5, "nrqa_mhpgm": 2, "semeval_mhpgm": 1}


def load_rows(data: Path | None = None) -> list[QAExample]:
    """Every judged row of the real files (under `data`, default the benchmarks' data
    folder), with the references the KPQA release used."""
    data = data_dir() if data is None else data
    require(*(data / p for p in JUDGMENTS))
    rows = []
    for name, n_refs in KPQA_FILES.items():
        with open(data / "judgments" / "kpqa" / f"{name}.csv", newline="",
                  encoding="utf-8") as f:
            for r in csv.DictReader(f):
                refs = tuple(r[f"reference{j}"] for j in range(1, n_refs + 1))
                rows.append(QAExample(r["answer"], refs, r["question"]))
    with open(data / "judgments" / "sas" / "SQuAD_SAS.csv", newline="",
              encoding="utf-8") as f:
        rows += [QAExample(r["answer1"], (r["answer2"],)) for r in csv.DictReader(f)]
    return rows


def unambiguous(rows: Sequence[QAExample]) -> list[QAExample]:
    """The rows none of whose texts has a context-dependent coco tokenisation."""
    return [r for r in rows
            if not any(ptb.context_dependent(t) for t in (r.prediction, *r.references))]


def build_corpus(rows: Sequence[QAExample], n: int, seed: int = 0) -> list[QAExample]:
    """n rows: seeded permutations of `rows`, concatenated."""
    rng = random.Random(seed)
    out: list[QAExample] = []
    while len(out) < n:
        perm = list(rows)
        rng.shuffle(perm)
        out += perm[: n - len(out)]
    return out


class Clock:
    """Wall time and CPU time of this process plus its reaped children."""

    def __enter__(self) -> Clock:
        self._wall = time.perf_counter()
        self._self = resource.getrusage(resource.RUSAGE_SELF)
        self._kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return self

    def __exit__(self, *exc: object) -> None:
        s = resource.getrusage(resource.RUSAGE_SELF)
        k = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.wall_s = time.perf_counter() - self._wall
        self.cpu_self_s = s.ru_utime + s.ru_stime - self._self.ru_utime - self._self.ru_stime
        self.cpu_children_s = (k.ru_utime + k.ru_stime - self._kids.ru_utime
                               - self._kids.ru_stime)
        self.cpu_s = self.cpu_self_s + self.cpu_children_s


def _cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _add(breakdown: dict[str, float], key: str, before: tuple[float, float]) -> None:
    after = _cpu()
    breakdown[key] = breakdown.get(key, 0.0) + (after[0] - before[0]) + (after[1] - before[1])


def run_ours(corpus: Sequence[QAExample], batch_size: int,
             breakdown: dict[str, float] | None = None) -> list[dict[str, float]]:
    """Scores the corpus as the pipeline does: corpus statistics, then batches.

    `breakdown` receives CPU seconds per family (Python and its JVM together).
    """
    breakdown = {} if breakdown is None else breakdown
    metrics = build_metrics(NAMES)
    stats = {}
    for metric in metrics:
        for stat in metric.corpus_statistics():
            before = _cpu()
            acc = stat.create()
            for ex in corpus:
                acc = stat.add(acc, ex)
            stats[stat.key] = stat.extract(stat.merge([acc]))
            _add(breakdown, metric.family, before)
    results: list[dict[str, float]] = [{} for _ in corpus]
    try:
        for metric in metrics:
            before = _cpu()
            metric.setup()
            _add(breakdown, metric.family, before)
        for start in range(0, len(corpus), batch_size):
            lexical.clear_caches()
            batch = corpus[start: start + batch_size]
            for metric in metrics:
                before = _cpu()
                for i, values in enumerate(metric.score_batch(batch, stats), start):
                    results[i].update(values)
                _add(breakdown, metric.family, before)
    finally:
        for metric in metrics:
            before = _cpu()
            metric.teardown()  # reaps the METEOR JVM: its CPU time lands here
            _add(breakdown, metric.family, before)
    lexical.clear_caches()
    return results


# --- The reference: SQuAD v1.1 script logic and pycocoevalcap, used as their authors do. ---

def _squad_normalize(s: str) -> str:
    def remove_articles(text: str) -> str:
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text: str) -> str:
        return " ".join(text.split())

    def remove_punc(text: str) -> str:
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def _squad_f1(prediction: str, ground_truth: str) -> float:
    prediction_tokens = _squad_normalize(prediction).split()
    ground_truth_tokens = _squad_normalize(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def _squad_em(prediction: str, ground_truth: str) -> float:
    return _squad_normalize(prediction) == _squad_normalize(ground_truth)


def _max_over(fn: Callable[[str, str], float], prediction: str, truths: Sequence[str]) -> float:
    return max(fn(prediction, t) for t in truths)


def run_reference(corpus: Sequence[QAExample],
                  breakdown: dict[str, float] | None = None) -> list[dict[str, float]]:
    """coco-caption per reference position (KPQA's protocol) + the SQuAD script.

    `breakdown` receives CPU seconds per part (tokenizer JVMs included under "ptb").
    """
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.meteor.meteor import Meteor
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    breakdown = {} if breakdown is None else breakdown
    before = _cpu()
    results = [{"em": float(_max_over(_squad_em, ex.prediction, ex.references)),
                "f1": float(_max_over(_squad_f1, ex.prediction, ex.references))}
               for ex in corpus]
    _add(breakdown, "squad", before)
    before = _cpu()
    meteor = Meteor()
    _add(breakdown, "meteor", before)
    try:
        for j in range(max(len(ex.references) for ex in corpus)):
            ids = [i for i, ex in enumerate(corpus) if len(ex.references) > j]
            gts = {i: [{"caption": corpus[i].references[j]}] for i in ids}
            res = {i: [{"caption": corpus[i].prediction}] for i in ids}
            before = _cpu()
            tokenizer = PTBTokenizer()
            gts, res = tokenizer.tokenize(gts), tokenizer.tokenize(res)
            _add(breakdown, "ptb", before)
            columns = {}
            before = _cpu()
            _, bleu = Bleu(4).compute_score(gts, res, verbose=0)
            for k in range(4):
                columns[f"bleu{k + 1}"] = bleu[k]
            _add(breakdown, "bleu", before)
            before = _cpu()
            columns["rougeL"] = Rouge().compute_score(gts, res)[1]
            _add(breakdown, "rouge", before)
            before = _cpu()
            columns["cider"] = Cider().compute_score(gts, res)[1]
            _add(breakdown, "cider", before)
            before = _cpu()
            columns["meteor"] = meteor.compute_score(gts, res)[1]
            _add(breakdown, "meteor", before)
            for name, values in columns.items():
                for i, value in zip(gts, values, strict=True):
                    results[i][name] = max(results[i].get(name, float("-inf")), float(value))
    finally:
        before = _cpu()
        meteor.meteor_p.stdin.close()
        meteor.meteor_p.wait()
        _add(breakdown, "meteor", before)
    return results


def compare(ours: Sequence[dict[str, float]], ref: Sequence[dict[str, float]]) -> dict:
    """Per metric: rows compared, rows not identical, max |difference|."""
    out = {}
    for name in NAMES:
        diffs = [abs(a[name] - b[name]) for a, b in zip(ours, ref, strict=False)]
        out[name] = {"rows": len(diffs), "not_identical": sum(
            1 for a, b in zip(ours, ref, strict=False) if a[name] != b[name]),
            "max_abs_diff": max(diffs, default=0.0)}
    return out


def _timing(clock: Clock, rows: int) -> dict:
    return {"rows": rows, "wall_s": round(clock.wall_s, 2), "cpu_s": round(clock.cpu_s, 2),
            "cpu_python_s": round(clock.cpu_self_s, 2),
            "cpu_children_s": round(clock.cpu_children_s, 2),
            "rows_per_s": round(rows / clock.wall_s, 1),
            "rows_per_s_per_core": round(rows / clock.cpu_s, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--reference-rows", type=int, default=None,
                        help="rows the reference scores (default: all)")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench_out")
    args = parser.parse_args(argv)
    ref_rows = args.rows if args.reference_rows is None else min(args.reference_rows, args.rows)

    rows = load_rows()
    kept = unambiguous(rows)
    corpus = build_corpus(kept, args.rows, args.seed)
    unique = len(set(corpus))
    print(f"corpus: {len(corpus)} rows ({unique} distinct; {len(rows) - len(kept)} of "
          f"{len(rows)} source rows left out as context-dependent), "
          f"{sum(len(e.references) for e in corpus)} references", flush=True)
    ours_cpu: dict[str, float] = {}
    ref_cpu: dict[str, float] = {}
    with Clock() as ours_clock:
        ours = run_ours(corpus, args.batch_size, ours_cpu)
    print(f"ours: {ours_clock.wall_s:.1f} s wall", flush=True)
    with Clock() as ref_clock:
        ref = run_reference(corpus[:ref_rows], ref_cpu)
    print(f"reference: {ref_clock.wall_s:.1f} s wall", flush=True)

    # Compare speed on the rows both scored: ours is timed on all rows, so scale per row.
    result = {
        "machine": "2-core CPU", "metrics": list(NAMES), "batch_size": args.batch_size,
        "corpus_rows": len(corpus), "distinct_rows": unique,
        "source_rows_left_out_context_dependent": len(rows) - len(kept),
        "ours": _timing(ours_clock, len(corpus)),
        "reference": _timing(ref_clock, ref_rows),
        "agreement": compare(ours[:ref_rows], ref),
        "peak_rss_mb": {
            "python": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "largest_child": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        },
    }
    result["ours"]["cpu_s_by_family"] = {k: round(v, 2) for k, v in ours_cpu.items()}
    result["reference"]["cpu_s_by_part"] = {k: round(v, 2) for k, v in ref_cpu.items()}
    o, r = result["ours"], result["reference"]
    result["speedup_per_core"] = round(o["rows_per_s_per_core"] / r["rows_per_s_per_core"], 2)
    result["speedup_wall"] = round(o["rows_per_s"] / r["rows_per_s"], 2)

    print(f"\n{'':12}{'rows':>9}{'wall s':>9}{'cpu s':>9}{'py cpu':>9}{'jvm cpu':>9}"
          f"{'rows/s':>10}{'rows/s/core':>13}")
    for name in ("ours", "reference"):
        t = result[name]
        print(f"{name:12}{t['rows']:>9}{t['wall_s']:>9}{t['cpu_s']:>9}{t['cpu_python_s']:>9}"
              f"{t['cpu_children_s']:>9}{t['rows_per_s']:>10}{t['rows_per_s_per_core']:>13}")
    print(f"speed-up per core: {result['speedup_per_core']}x, wall: {result['speedup_wall']}x")
    print(f"CPU s by family, ours ({len(corpus)} rows): {result['ours']['cpu_s_by_family']}")
    print(f"CPU s by part, reference ({ref_rows} rows): {result['reference']['cpu_s_by_part']}")
    print(f"peak RSS: python {result['peak_rss_mb']['python']:.0f} MB, largest child (JVM) "
          f"{result['peak_rss_mb']['largest_child']:.0f} MB")
    bad = {k: v for k, v in result["agreement"].items() if v["not_identical"]}
    print("values identical on all compared rows" if not bad else f"NOT IDENTICAL: {bad}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lexical.json").write_text(json.dumps(result, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
