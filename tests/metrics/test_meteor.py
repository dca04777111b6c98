"""METEOR 1.5 through the jar: hand-worked values and the KPQA released values.

One JVM (about 10 s to load the paraphrase table) serves the whole module.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest

from tests.metrics.test_released_values import load_kpqa, score_all
from transforms.metrics.base import QAExample
from transforms.metrics.meteor import MeteorMetric
from transforms.metrics.registry import build_metrics
from transforms.text.meteor_jvm import clean_hypothesis

ALPHA, BETA, GAMMA = 0.85, 0.2, 0.6  # METEOR 1.5 English defaults


def meteor_formula(p: float, r: float, chunks: int, matches: float) -> float:
    fmean = p * r / (ALPHA * p + (1 - ALPHA) * r)
    return fmean * (1 - GAMMA * (chunks / matches) ** BETA)


@pytest.fixture(scope="module")
def meteor() -> Iterator[MeteorMetric]:
    (metric,) = build_metrics(["meteor"])
    metric.setup()
    yield metric
    metric.teardown()


@pytest.mark.parametrize(
    ("prediction", "references", "expected"),
    [
        ("the cat sat on the mat", ("the cat sat on the mat",), 1.0),  # perfect: no penalty
        # every word matched but each is its own chunk: 1 - 0.6 * 1^0.2
        ("mat the on sat cat the", ("the cat sat on the mat",), meteor_formula(1, 1, 6, 6)),
        # content words only, 2 of 3 matched in one chunk
        ("zebra giraffe elephant", ("zebra giraffe hippo",),
         meteor_formula(2 / 3, 2 / 3, 1, 2)),
        ("zebra giraffe", ("zebra giraffe elephant",), meteor_formula(1, 2 / 3, 1, 2)),
        ("zebra giraffe", ("hippo lion",), 0.0),                     # no overlap
        ("", ("a man",), 0.0),                                         # empty prediction
        ("a man", ("",), 0.0),                                         # empty reference
        ("zebra giraffe", ("giraffe",), meteor_formula(1 / 2, 1, 1, 1)),
        # several references: the best single-reference score (the one just above)
        ("zebra giraffe", ("hippo", "zebra giraffe elephant", "giraffe"),
         meteor_formula(1 / 2, 1, 1, 1)),
    ],
)
@pytest.mark.slow
def test_values(meteor: MeteorMetric, prediction: str, references: tuple[str, ...],
                expected: float) -> None:
    (row,) = meteor.score_batch([QAExample(prediction, references)], {})
    assert row["meteor"] == pytest.approx(expected, abs=1e-12)


def test_batch_with_duplicates_keeps_order(meteor: MeteorMetric) -> None:
    rows = [QAExample("zebra giraffe", ("zebra giraffe elephant",)),
            QAExample("lion", ("hippo",)),
            QAExample("zebra giraffe", ("zebra giraffe elephant",))]
    out = meteor.score_batch(rows, {})
    assert [r["meteor"] for r in out] == pytest.approx(
        [meteor_formula(1, 2 / 3, 1, 2), 0.0, meteor_formula(1, 2 / 3, 1, 2)])


def test_clean_hypothesis_like_coco() -> None:
    # "|||" removed, then each double space replaced once: 3 spaces become 2
    assert clean_hypothesis("a |||  b") == "a  b"


def test_pickles_without_the_jvm(meteor: MeteorMetric) -> None:
    copy = pickle.loads(pickle.dumps(meteor))
    assert copy._process is None and copy.columns == ("meteor",)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["avsd_all", "nrqa_mhpgm", "semeval_mhpgm"])
def test_released_meteor(meteor: MeteorMetric, name: str) -> None:
    rows, released = load_kpqa(name)
    ours = score_all([meteor], rows, batch_size=500)
    bad = [(i, ours[i]["meteor"], released[i]["meteor"]) for i in range(len(rows))
           if abs(ours[i]["meteor"] - released[i]["meteor"]) > 1e-3]
    assert bad == [], f"{name}: {len(bad)} rows differ, first {bad[:3]}"
