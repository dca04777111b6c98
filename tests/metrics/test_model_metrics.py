"""bi_encoder, sas/wes, bem, square: configuration, requests (layouts), folding, and scores
equal to the model run directly."""

from __future__ import annotations

import numpy as np
import pytest

from transforms.metrics import model_metrics as mm
from transforms.metrics.base import MetricInputError, QAExample
from transforms.metrics.corpus import score_corpus
from transforms.models import layouts, loading, predictors

EXAMPLE = QAExample("Shakespeare", ("William Shakespeare", "the bard"),
                    question="Who wrote Hamlet?", negative_references=("Marlowe",))


@pytest.mark.parametrize("factory, family, hint", [
    (mm.SASMetric, "sas", "stsb"), (mm.WESMetric, "wes", "mine_wes"),
    (mm.BEMMetric, "bem", "BEM-style"), (mm.SQuArEMetric, "square", "SQuArE-style"),
])
def test_fine_tuned_checkpoint_required_at_build_time(factory, family, hint):
    with pytest.raises(ValueError, match=f"--{family}_model") as info:
        factory()
    assert "train_cross_encoder" in str(info.value) and hint in str(info.value)


def test_plain_encoder_is_not_a_cross_encoder():
    with pytest.raises(ValueError, match="not a sequence classifier"):
        mm.SASMetric(model=loading.packaged_model_path())


def test_sas_is_the_max_over_references_of_the_pair_scores(cross_encoder_path):
    metric = mm.SASMetric(model=cross_encoder_path)
    assert [r.input for r in metric.requests(EXAMPLE)] == [
        ("Shakespeare", "William Shakespeare"), ("Shakespeare", "the bard")]
    predictor = predictors.load_predictor(metric.model_uses()["cross_encoder"])
    direct, _ = predictor.predict([r.input for r in metric.requests(EXAMPLE)])
    [score] = score_corpus([metric], [EXAMPLE])
    assert score == {"sas": pytest.approx(max(direct), abs=1e-7)}
    assert metric.fold(EXAMPLE, [0.2, 0.7], {}) == {"sas": 0.7}
    sig = metric.signature()["sas"]
    assert sig.startswith("sas|v:1.0|model:" + cross_encoder_path) and "|act:sigmoid|refs:max" in sig
    assert mm.WESMetric(model=cross_encoder_path).columns == ("wes",)


def test_bem_layout_question_and_token_types(cross_encoder_path, bem_path):
    metric = mm.BEMMetric(model=bem_path)
    assert [r.input for r in metric.requests(EXAMPLE)] == [
        ("Shakespeare", "William Shakespeare", "Who wrote Hamlet?"),
        ("Shakespeare", "the bard", "Who wrote Hamlet?")]
    [score] = score_corpus([metric], [EXAMPLE])
    assert 0.0 < score["bem"] < 1.0
    assert metric.model_uses()["cross_encoder"].activation == "softmax"
    with pytest.raises(MetricInputError, match="bem needs a question"):
        metric.requests(QAExample("a", ("b",)))
    with pytest.raises(ValueError, match="type_vocab_size=2"):
        mm.BEMMetric(model=cross_encoder_path)
    clamped = mm.BEMMetric(model=cross_encoder_path, segment_overflow="clamp")
    assert "segments:0/1/2,clamp" in clamped.signature()["bem"]
    assert 0.0 < score_corpus([clamped], [EXAMPLE])[0]["bem"] < 1.0


def test_square_builds_one_input_with_all_references(cross_encoder_path):
    metric = mm.SQuArEMetric(model=cross_encoder_path)
    [request] = metric.requests(EXAMPLE)
    assert request.input == (
        "Question: Who wrote Hamlet? Target: Shakespeare Pos_Ref: William Shakespeare "
        "Pos_Ref: the bard Neg_Ref: Marlowe",)
    capped = mm.SQuArEMetric(model=cross_encoder_path, max_positive=1, max_negative=0)
    assert capped.requests(EXAMPLE)[0].input == (
        "Question: Who wrote Hamlet? Target: Shakespeare Pos_Ref: William Shakespeare",)
    assert "|pos:1|neg:0" in capped.signature()["square"]
    predictor = predictors.load_predictor(metric.model_uses()["cross_encoder"])
    [direct], _ = predictor.predict([request.input])
    assert score_corpus([metric], [EXAMPLE]) == [{"square": pytest.approx(direct, abs=1e-7)}]
    with pytest.raises(ValueError, match="max_positive must be >= 1"):
        mm.SQuArEMetric(model=cross_encoder_path, max_positive=0)


def test_bi_encoder_cosine_max_over_references():
    from sentence_transformers import SentenceTransformer
    metric = mm.BiEncoderMetric()
    [score] = score_corpus([metric], [EXAMPLE])
    st = SentenceTransformer(loading.packaged_model_path(), device="cpu")
    vectors = st.encode([EXAMPLE.prediction, *EXAMPLE.references], normalize_embeddings=True)
    assert score["bi_encoder"] == pytest.approx(float(max(vectors[1:] @ vectors[0])), abs=1e-5)
    assert mm.cosine(np.zeros(3), np.ones(3)) == 0.0
    assert metric.signature()["bi_encoder"].endswith("|layer:6")


@pytest.mark.parametrize("factory, columns", [
    (mm.BiEncoderMetric, ("bi_encoder", "x")), (mm.BiEncoderMetric, ("sas",)),
])
def test_single_column_families(factory, columns):
    with pytest.raises(ValueError, match="single column"):
        factory(columns)


def test_references_required():
    with pytest.raises(MetricInputError, match="bi_encoder needs at least one reference"):
        mm.BiEncoderMetric().requests(QAExample("a", ()))


def test_layout_functions_are_the_ones_requested(cross_encoder_path):
    assert mm.SASMetric(model=cross_encoder_path).requests(EXAMPLE)[0].input == layouts.pair_input(
        "Shakespeare", "William Shakespeare")
