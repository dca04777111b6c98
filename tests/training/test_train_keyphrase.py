"""The keyphrase entry point on two real SQuAD articles: loss, checkpoints, the scorer."""

from __future__ import annotations

import json

import pytest

from pipelines import train_keyphrase
from tests.training.conftest import FAST
from transforms.metrics.base import QAExample
from transforms.metrics.corpus import score_corpus
from transforms.metrics.kpqa import KPQAMetric
from transforms.models import loading
from transforms.training import squad_data
from transforms.training.config import TrainConfig
from transforms.training.keyphrase import KeyphraseTask
from transforms.training.loop import Trainer


def _held_out_features(squad_path, tokenizer):
    articles = squad_data.read_squad(str(squad_path))
    _, held = squad_data.split_articles(articles, 1, 1, seed=13)
    examples, _ = squad_data.build_examples(held)
    return squad_data.encode_examples(tokenizer, examples, 48)[0]


@pytest.mark.slow
def test_keyphrase_loss_falls_and_checkpoint_round_trips(squad_two_articles, tmp_path):
    out = tmp_path / "kp"
    info = train_keyphrase.run([
        f"--squad={squad_two_articles}", f"--output={out}", "--train_articles=1",
        "--eval_articles=1", *FAST, "--max_length=48", "--batch_size=8", "--max_steps=8",
        "--lr=1e-4", "--eval_first", "--eval_every=4", "--seed=13"])
    history = info["dev_history"]
    assert [h["step"] for h in history] == [0, 4, 8]
    assert history[-1]["loss"] < history[0]["loss"]
    assert {"token_f1", "span_f1", "token_precision", "span_recall", "token_auroc"} <= set(
        history[-1])
    counts = info["data"]["counts"]
    assert counts["train"]["articles"] == counts["dev"]["articles"] == 1
    assert info["data"]["train_articles"] != info["data"]["held_out_articles"]
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForTokenClassification"]
    assert config["id2label"] == {"0": "K", "1": "O"}
    # Reloaded from disk, the best and the last checkpoints give the recorded numbers.
    tokenizer = loading.load_tokenizer(loading.ModelSpec(str(out)))
    features = _held_out_features(squad_two_articles, tokenizer)
    assert len(features) == info["data"]["rows"]["dev"]
    trainer = Trainer(KeyphraseTask("token_f1"), TrainConfig(str(tmp_path / "unused"),
                                                             num_threads=1),
                      features, features, tokenizer=tokenizer, model_source=str(out),
                      fingerprint={})
    best = next(h for h in history if h["step"] == info["best"]["step"])
    for path, expected in ((out, best), (out / "last", history[-1])):
        got = trainer.evaluate_checkpoint(str(path), features)
        for name in ("token_f1", "span_f1", "loss"):
            assert got[name] == pytest.approx(expected[name], abs=1e-5)
    # The scorer's KPQA metrics load it by path, reading K as the keyphrase class.
    metric = KPQAMetric(model=str(out))
    assert f"kp_model:{out}|" in metric.signature()["kpqa_bleu1"]
    assert "kp_label:0" in metric.signature()["kpqa_bleu1"]
    scores = score_corpus([metric], [QAExample("Denver Broncos", ("the Broncos",),
                                           question="Which team won Super Bowl 50?")])[0]
    assert 0 <= scores["kpqa_bleu1"] <= 1
    assert "held out (the dev split)" in (out / "model_card.md").read_text()


@pytest.mark.parametrize("extra, message", [
    (["--squad=/nonexistent.json.gz"], "does not exist"),
    (["--train_articles=2", "--eval_articles=1"], "the file has 2"),
    (["--max_length=4"], "max_length must be >= 8"),
    (["--model={packaged}", "--precision=bf16", "--device=cpu"], "needs CUDA"),
])
def test_bad_input_fails_before_training(squad_two_articles, tmp_path, extra, message):
    out = tmp_path / "out"
    args = [a.replace("{packaged}", loading.packaged_model_path()) for a in extra]
    if not any(a.startswith("--squad") for a in args):
        args.append(f"--squad={squad_two_articles}")
    with pytest.raises(ValueError, match=message):
        train_keyphrase.run([*args, f"--output={out}", *FAST, "--max_steps=1"])
    assert not out.exists()
