"""Session fixtures of the training tests: real data, shaped small.

- `wes_corpus`: a WES corpus mined once from the real Wikipedia sample (k = 2).
- `wes_mixed_corpus`: the same with every negative kind (`pair_kind`, `wes-k2-hard/`).
- `stsb_small`: the first rows of the real STS-B train and dev files.
- `squad_two_articles`: two real SQuAD dev articles (a few paragraphs each).
- `bem_square_rows`: BEM and SQuArE JSONL rows built from real SQuAD questions/answers.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA
from tests.runners import RUNNER_ARGS

STSB = SHARED_DATA / "stsb"
SQUAD = SHARED_DATA / "squad" / "dev-v1.1.json.gz"
# Tiny and fast: one torch thread (other suites share the two cores), short inputs.
FAST = ["--num_threads=1", "--no_progress", "--eval_batch_size=64", "--log_every=1"]
WES_MIX = "random=1,f1=1,substring=1,article_cooccurrence=1,word_cooccurrence=1"


@pytest.fixture(scope="session")
def wes_corpus(tmp_path_factory, wiki_sample) -> Path:
    from pipelines import mine_wes
    out = tmp_path_factory.mktemp("wes")
    mine_wes.run([f"--input={wiki_sample}", f"--output={out}", "--min_incoming_links=2",
                  "--seed=13", *RUNNER_ARGS["direct_in_process"]], save_main_session=False)
    return out / "wes-k2"


@pytest.fixture(scope="session")
def wes_mixed_corpus(tmp_path_factory, wiki_sample) -> Path:
    """A corpus mined with every negative kind (k = 2): `pair_kind` on every row, and
    its WES-hard test split beside it (`wes-k2-hard/`)."""
    from pipelines import mine_wes
    out = tmp_path_factory.mktemp("wes-mixed")
    mine_wes.run([f"--input={wiki_sample}", f"--output={out}", "--min_incoming_links=2",
                  "--seed=13", f"--negatives={WES_MIX}", *RUNNER_ARGS["direct_in_process"]],
                 save_main_session=False)
    return out / "wes-k2"


@pytest.fixture(scope="session")
def stsb_small(tmp_path_factory) -> Path:
    """sts-train.csv: the first 48 real rows; sts-dev.csv and sts-test.csv: the first 24."""
    d = tmp_path_factory.mktemp("stsb")
    for split, n in (("train", 48), ("dev", 24), ("test", 24)):
        lines = (STSB / f"sts-{split}.csv").read_text(encoding="utf-8").splitlines(True)
        (d / f"sts-{split}.csv").write_text("".join(lines[:n]), encoding="utf-8")
    return d


@pytest.fixture(scope="session")
def squad_articles() -> list[dict]:
    with gzip.open(SQUAD, "rt", encoding="utf-8") as f:
        return json.load(f)["data"]


@pytest.fixture(scope="session")
def squad_two_articles(tmp_path_factory, squad_articles) -> Path:
    """The first two real articles, three paragraphs each (gzip, as the real file)."""
    data = [{**a, "paragraphs": a["paragraphs"][:3]} for a in squad_articles[:2]]
    path = tmp_path_factory.mktemp("squad") / "two-articles.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": data}, f)
    return path


def _qa_rows(articles: list[dict]) -> list[dict]:
    """question, gold answer, another annotator's answer, a wrong answer (same paragraph)."""
    rows = []
    for article in articles:
        for p in article["paragraphs"]:
            qas = [q for q in p["qas"] if q["answers"]]
            for i, q in enumerate(qas):
                gold = q["answers"][0]["text"]
                other = next((a["text"] for a in q["answers"][1:] if a["text"] != gold), gold)
                wrong = qas[(i + 1) % len(qas)]["answers"][0]["text"]
                if wrong != gold:
                    rows.append({"question": q["question"], "gold": gold, "other": other,
                                 "wrong": wrong})
    return rows


@pytest.fixture(scope="session")
def bem_square_rows(tmp_path_factory, squad_articles) -> dict[str, Path]:
    """`{bem,square}/{train,dev}.jsonl` with 0/1 labels from real SQuAD answers."""
    rows = _qa_rows(squad_articles[:1])[:40]
    out = {}
    for fmt in ("bem", "square"):
        d = tmp_path_factory.mktemp(fmt)
        for split, part in (("train", rows[:24]), ("dev", rows[24:40])):
            lines = []
            for r in part:
                for candidate, label in ((r["other"], 1), (r["wrong"], 0)):
                    if fmt == "bem":
                        obj = {"question": r["question"], "reference": r["gold"],
                               "candidate": candidate, "label": label}
                    else:
                        obj = {"question": r["question"], "target": candidate,
                               "positive_references": [r["gold"]],
                               "negative_references": [r["wrong"]] if label else [],
                               "label": label}
                    lines.append(json.dumps(obj))
            (d / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        out[fmt] = d
    return out


def main_exit_code(argv: list[str]) -> int:
    """`train_cross_encoder.main(argv)`'s exit status, with transformers' logging set back
    to its defaults afterwards (the command line quiets it)."""
    from transformers.utils import logging as hf_logging

    from pipelines import train_cross_encoder
    try:
        return train_cross_encoder.main(argv)
    finally:
        hf_logging.set_verbosity_warning()
        hf_logging.enable_progress_bar()
