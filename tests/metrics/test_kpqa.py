"""KPQA: the weighted BLEU-1 / ROUGE-L / BERTScore of the released code, on hand-worked values,
against the unweighted reference implementations, and end to end with a real checkpoint."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tests.conftest import SHARED_DATA
from transforms.metrics import kpqa
from transforms.metrics.base import MetricInputError, QAExample
from transforms.metrics.bertscore import greedy_match
from transforms.metrics.corpus import score_corpus
from transforms.models import loading, predictors
from transforms.models.uses import TokenEmbeddings, TokenScores

AVSD = str(SHARED_DATA / "judgments" / "kpqa" / "avsd_all.csv")


@pytest.fixture(scope="module")
def avsd_tokens():
    tokenizer = loading.load_tokenizer(loading.ModelSpec.of(None))
    frame = pd.read_csv(AVSD).head(300)
    return [(tokenizer.tokenize(a), tokenizer.tokenize(r))
            for a, r in zip(frame["answer"], frame["reference1"])]


def test_bleu1_hand_worked():
    pred = ["the", "man", "the", "dog"]
    weights = [0.1, 0.8, 0.3, 0.5]
    ref = ["a", "man", "the", "cat", "sat"]
    # mean weights: the 0.2, man 0.8, dog 0.5; clipped matches: the 1 x 0.2 + man 1 x 0.8
    # = 1.0 over 1.7; brevity: c = 4 < r = 5 -> exp(1 - 5/4)
    assert kpqa.bleu1_kpqa(pred, weights, [ref]) == pytest.approx(1.0 / 1.7 * math.exp(-0.25))
    # a longer prediction has no brevity penalty; closest reference length wins
    assert kpqa.bleu1_kpqa(["a", "b"], [1.0, 1.0], [["a", "c", "d"], ["a"]]) == \
        pytest.approx(0.5)


def test_bleu1_unit_weights_equal_coco_caption_bleu1(avsd_tokens):
    from pycocoevalcap.bleu.bleu_scorer import BleuScorer
    scorer = BleuScorer(n=4)
    for pred, ref in avsd_tokens:
        scorer += (" ".join(pred), [" ".join(ref)])
    _, per_sentence = scorer.compute_score(option="closest")
    ours = [kpqa.bleu1_kpqa(p, [1.0] * len(p), [r]) for p, r in avsd_tokens]
    np.testing.assert_allclose(ours, per_sentence[0], rtol=1e-12, atol=1e-15)


def test_bleu1_empty_prediction_and_bad_weights():
    assert kpqa.bleu1_kpqa([], [], [["a"]]) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="2 tokens but 1 weights"):
        kpqa.bleu1_kpqa(["a", "b"], [1.0], [["a"]])
    with pytest.raises(ValueError, match="at least one reference"):
        kpqa.bleu1_kpqa(["a"], [1.0], [])


def test_rouge_l_hand_worked():
    score = kpqa.rouge_l_kpqa(["a", "b", "c"], [1.0, 0.5, 0.2], ["a", "c", "b"], [0.9, 0.4, 0.3])
    # the release's DP: a (0.9) then c (0.4) beats a then b (0.3): LCS weight 1.3
    p, r = 1.3 / 1.7, 1.3 / 1.6
    assert score == pytest.approx((p, r, 2 * p * r / (p + r)))


def test_rouge_l_unit_weights_equal_plain_lcs(avsd_tokens):
    from rouge_score import rouge_scorer
    for pred, ref in avsd_tokens:
        ours = kpqa.rouge_l_kpqa(pred, [1.0] * len(pred), ref, [1.0] * len(ref))
        theirs = rouge_scorer._score_lcs(ref, pred)
        assert ours == pytest.approx((theirs.precision, theirs.recall, theirs.fmeasure))


def test_rouge_l_empty_and_zero_weights():
    assert kpqa.rouge_l_kpqa([], [], ["a"], [1.0]) == (0.0, 0.0, 0.0)
    assert kpqa.rouge_l_kpqa(["a"], [0.0], ["a"], [0.0]) == (0.0, 0.0, 0.0)


def test_mean_weight_per_token():
    assert kpqa.mean_weight_per_token(["x", "y", "x"], [0.2, 0.5, 0.6]) == pytest.approx(
        {"x": 0.4, "y": 0.5})


def _emb(ids, vectors):
    ids = np.asarray(ids)
    return TokenEmbeddings(ids, np.asarray(vectors, dtype=np.float32),
                           np.isin(ids, [101, 102]))


def test_placed_weights_and_bertscore_kpqa():
    emb = _emb([101, 7, 8, 102], [[1, 0], [1, 0], [0, 1], [1, 1]])
    kp = TokenScores(("x", "y"), np.array([7, 8]), np.array([0.9, 0.1], dtype=np.float32))
    np.testing.assert_allclose(kpqa.placed_weights(emb, kp), [0.0, 0.9, 0.1, 0.0])
    ref = _emb([101, 7, 102], [[1, 0], [0, 1], [1, 1]])
    ref_kp = TokenScores(("x",), np.array([7]), np.array([1.0], dtype=np.float32))
    expected = greedy_match(emb.vectors, np.array([0, 0.9, 0.1, 0]),
                            ref.vectors, np.array([0, 1.0, 0])).fmeasure
    assert kpqa.bertscore_kpqa(emb, kp, ref, ref_kp) == pytest.approx(expected)
    other_vocab = TokenScores(("z",), np.array([9]), np.array([1.0], dtype=np.float32))
    with pytest.raises(MetricInputError, match="same vocabulary"):
        kpqa.placed_weights(emb, other_vocab)


def test_metric_needs_a_keyphrase_checkpoint():
    with pytest.raises(ValueError, match="--kpqa_model") as info:
        kpqa.KPQAMetric()
    assert "train_keyphrase" in str(info.value)
    with pytest.raises(ValueError, match="not a token classifier"):
        kpqa.KPQAMetric(model=loading.packaged_model_path())
    with pytest.raises(ValueError, match="kpqa columns are"):
        kpqa.KPQAMetric(["bleu1"], model=loading.packaged_model_path())


def test_metric_end_to_end_with_a_real_checkpoint(keyphrase_path):
    metric = kpqa.KPQAMetric(model=keyphrase_path, encoder_layer=3)
    example = QAExample("he is a young man", ("a young man", "it is a woman"),
                        question="who is in the video ?")
    requests = metric.requests(example)
    assert [r.role for r in requests] == ["keyphrase"] * 3 + ["encoder"] * 3
    assert requests[0].input == ("who is in the video ?", "he is a young man")
    [scores] = score_corpus([metric], [example])
    # recompute from the models' own outputs with the pure functions
    kp_out, _ = predictors.load_predictor(metric.model_uses()["keyphrase"]).predict(
        [r.input for r in requests[:3]])
    emb_out, _ = predictors.load_predictor(metric.model_uses()["encoder"]).predict(
        [r.input for r in requests[3:]])
    assert kp_out[0].tokens == ("he", "is", "a", "young", "man")
    bleu = [kpqa.bleu1_kpqa(kp_out[0].tokens, kp_out[0].scores, [k.tokens]) for k in kp_out[1:]]
    rouge = [kpqa.rouge_l_kpqa(kp_out[0].tokens, kp_out[0].scores, k.tokens, k.scores).fmeasure
             for k in kp_out[1:]]
    bert = [kpqa.bertscore_kpqa(emb_out[0], kp_out[0], e, k)
            for e, k in zip(emb_out[1:], kp_out[1:])]
    assert scores == pytest.approx({"kpqa_bleu1": max(bleu), "kpqa_rougeL": max(rouge),
                                    "kpqa_bertscore": max(bert)}, abs=1e-6)
    assert 0.0 < scores["kpqa_bleu1"] <= 1.0


def test_metric_without_bertscore_needs_no_encoder(keyphrase_path):
    metric = kpqa.KPQAMetric(["kpqa_bleu1"], model=keyphrase_path)
    assert list(metric.model_uses()) == ["keyphrase"]
    sig = metric.signature()["kpqa_bleu1"]
    assert sig.startswith("kpqa_bleu1|v:1.0|kp_model:") and "|kp_label:0|refs:max" in sig
    # kpqa_bertscore's sums are float64 (its 1.1); the other columns keep version 1.0
    both = kpqa.KPQAMetric(["kpqa_bleu1", "kpqa_bertscore"], model=keyphrase_path).signature()
    assert both["kpqa_bleu1"].startswith("kpqa_bleu1|v:1.0|")
    assert both["kpqa_bertscore"].startswith("kpqa_bertscore|v:1.1|")
    with pytest.raises(MetricInputError, match="needs a question"):
        metric.requests(QAExample("a", ("b",)))
    with pytest.raises(MetricInputError, match="at least one reference"):
        metric.requests(QAExample("a", (), question="q"))
