"""The `judge` metric: the trainer's layout at scoring time, its signature and threshold."""

from __future__ import annotations

import json

import pytest

from transforms.metrics import registry
from transforms.metrics.base import MetricInputError, QAExample
from transforms.metrics.judge import JudgeMetric, judge_reference
from transforms.models.uses import DECISION_THRESHOLD_KEY
from transforms.training import pair_data

GOLDS = ("Sunset Blvd", "West Sunset Boulevard", "Sunset Boulevard", "Sunset Blvd.")


def _checkpoint(folder, threshold=0.62, token_types=3):
    folder.mkdir()
    config = {"architectures": ["BertForSequenceClassification"], "num_labels": 1,
              "id2label": {"0": "LABEL_0"}, "type_vocab_size": token_types,
              "max_position_embeddings": 512}
    if threshold is not None:
        config[DECISION_THRESHOLD_KEY] = threshold
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"not read here")
    return str(folder)


def test_one_input_per_row_in_the_trainers_layout(tmp_path):
    metric = JudgeMetric(model=_checkpoint(tmp_path / "j"))
    example = QAExample("It is on Sunset Boulevard.", GOLDS, question="Which street?")
    (request,) = metric.requests(example)
    assert request.input == ("It is on Sunset Boulevard.", "Sunset Boulevard",
                               "Which street?")
    # The same segment the training rows get: the function is shared, not copied.
    assert pair_data.judge_reference is judge_reference
    wide = JudgeMetric(model=str(tmp_path / "j"), gold_layout="all", max_gold_chars=40)
    assert wide.requests(example)[0].input[1] == "Sunset Boulevard / West Sunset Boulevard"
    assert metric.fold(example, [0.25], {}) == {"judge": 0.25}
    with pytest.raises(MetricInputError, match="judge needs a question"):
        metric.requests(QAExample("x", GOLDS))
    with pytest.raises(MetricInputError, match="at least one reference"):
        metric.requests(QAExample("x", (), question="q"))


def test_signature_records_layout_and_threshold(tmp_path):
    sig = JudgeMetric(model=_checkpoint(tmp_path / "j")).signature()["judge"]
    assert sig.startswith("judge|v:1|") and "|thr:0.62|" in sig and sig.endswith("|refs:best")
    wide = JudgeMetric(model=str(tmp_path / "j"), gold_layout="all").signature()["judge"]
    assert wide.endswith("|refs:all<=200")
    plain = JudgeMetric(model=_checkpoint(tmp_path / "p", None)).signature()["judge"]
    assert "thr:" not in plain


def test_bad_options_fail_when_built(tmp_path):
    ck = _checkpoint(tmp_path / "j")
    with pytest.raises(ValueError, match="judge: gold_layout must be one of"):
        JudgeMetric(model=ck, gold_layout="every")
    with pytest.raises(ValueError, match="max_gold_chars must be an integer >= 1"):
        JudgeMetric(model=ck, max_gold_chars=0)
    with pytest.raises(ValueError, match="--judge_model.*train_cross_encoder --format evouna"):
        JudgeMetric()
    with pytest.raises(ValueError, match="token types"):
        JudgeMetric(model=_checkpoint(tmp_path / "two", token_types=2))
    (built,) = registry.build_metrics(["judge"], {"judge": {"model": ck, "gold_layout": "all"}})
    assert built.gold_layout == "all" and registry.family_spec("judge").model_backed


def test_marked_layout_states_the_containment_evidence(tmp_path):
    """`marked`: the best gold after [found] when a normalised gold is in the normalised
    answer (articles and punctuation aside), [not found] otherwise (an alias it misses)."""
    assert judge_reference("It is on the Sunset Boulevard!", GOLDS, "marked") == (
        "[found] Sunset Boulevard")
    assert judge_reference("Hollywood's main strip", GOLDS, "marked").startswith("[not found] ")
    metric = JudgeMetric(model=_checkpoint(tmp_path / "j"), gold_layout="marked")
    example = QAExample("Sunset Blvd.", GOLDS, question="Which street?")
    assert metric.requests(example)[0].input == ("Sunset Blvd.", "[found] Sunset Blvd",
                                                 "Which street?")
    assert metric.signature()["judge"].endswith("|refs:best+mark")


def test_layout_comes_from_the_checkpoint_unless_given(tmp_path):
    folder = tmp_path / "marked"
    _checkpoint(folder)
    config = json.loads((folder / "config.json").read_text())
    config["qa_eval_judge_layout"] = {"gold_layout": "marked", "max_gold_chars": 200}
    (folder / "config.json").write_text(json.dumps(config))
    assert JudgeMetric(model=str(folder)).gold_layout == "marked"
    assert JudgeMetric(model=str(folder), gold_layout="marked").gold_layout == "marked"
    with pytest.raises(ValueError, match="trained with gold_layout='marked'"):
        JudgeMetric(model=str(folder), gold_layout="best")
    # a checkpoint without the entry (trained before it was saved) reads as "best"
    assert JudgeMetric(model=_checkpoint(tmp_path / "old")).gold_layout == "best"


def _reference_best(answer, golds):
    """The gold choice as first written: every gold ranked by overlap_score's
    (containment, token recall), the first maximum kept."""
    from transforms.metrics.overlap import overlap_score

    return max(golds, key=lambda g: overlap_score(answer, (g,))[:2])


def test_best_gold_equals_ranking_every_gold_on_all_evouna_answers():
    """The memoised choice (recall only among the best-contained golds) picks the gold
    that ranking every gold by (containment, recall) picks, on every EVOUNA-TQ answer and
    on hand-made ties; the marked layout's mark is that gold's containment."""
    from tests.conftest import SHARED_DATA
    from transforms.metrics.judge import MARKS, best_gold, ranked_golds
    from transforms.metrics.overlap import overlap_score
    from transforms.training import evouna

    questions = evouna.read_questions(str(SHARED_DATA / "judgments" / "evouna" / "TQ.json"))
    cases = [(a.prediction, a.references) for a in evouna.judged_answers(questions)]
    cases += [("the cat sat", ("dog", "a bird", "the cow")),  # nothing contained: recall
              ("cat cat dog", ("cat cat", "cat dog", "dog")),  # several contained: recall
              ("", ("The", "x")), ("The", ("", "an")), ("x y", ("y x", "x", "x y")),
              # golds with a repeated token (multiset recall) against golds without (a
              # set's): 1/3 vs 1/2, then 2/3 vs 2/4
              ("b c x", ("b b q", "c z")), ("b b c", ("b b q", "b c z q")),
              ("b c", ("q b b", "z c c", "b c b"))]
    for answer, golds in cases:
        best = best_gold(answer, golds)
        assert best == _reference_best(answer, golds), (answer, golds)
        contained = bool(overlap_score(answer, (best,)).contains)
        assert judge_reference(answer, golds, "marked") == f"{MARKS[contained]} {best}"
        assert ranked_golds(answer, golds)[0] == best
