"""CIDEr-D document frequencies per n-gram shard: same values as the whole table, elements
bounded."""

from __future__ import annotations

import random
from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.coders import registry as coders
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.runners import RUNNER_ARGS
from transforms.metrics.base import QAExample
from transforms.metrics.cider import CiderMetric, cider_d, corpus_of, needed_ngrams
from transforms.metrics.lexical import tokenize_examples
from transforms.metrics.registry import build_metrics
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.reading.rows import RowSource, ScoringRow
from transforms.scoring.score.batches import ScoreResult
from transforms.scoring.score.in_process import ScoreBatches
from transforms.scoring.statistics.batch_texts import BatchTexts, ReadBits, tokenized_batch
from transforms.scoring.statistics.corpus_stats import (
    DF,
    DOCS,
    REQUESTS,
    TEXT_DF,
    CiderBatchFn,
    ShardedCiderStatistics,
    SumDocumentFrequencies,
    answer_requests,
    answered_frequencies,
    batch_corpora,
    shards_for_input,
)
from transforms.scoring.statistics.global_statistics import ComputeCorpusStatistics
from transforms.scoring.statistics.ngram_hashes import (
    found_frequencies,
    gram_hash,
    hashed_table,
    narrow_frequencies,
    ngram_shard,
    pack_answer,
    unpack_answer,
)

WORDS = "a b c d e f g h i j k l m n o p".split()


def _examples(n: int, seed: int = 3) -> list[QAExample]:
    rnd = random.Random(seed)

    def text() -> str:
        return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 7)))

    refs = [(text(), text()) for _ in range(n // 3 + 1)]
    return [QAExample(text(), refs[i % len(refs)][: 1 + i % 2]) for i in range(n)]


def _whole_table(metric: CiderMetric, examples: list[QAExample]) -> list[dict]:
    (stat,) = metric.corpus_statistics()
    acc = stat.create()
    for ex in examples:
        acc = stat.add(acc, ex)
    return metric.score_batch(examples, {stat.key: stat.extract(acc)})


@pytest.mark.parametrize("df_mode", ["per_position", "pooled"])
def test_restricted_corpora_without_df_one_give_identical_values(df_mode):
    """Each example scored against only its own n-grams with df >= 2 (and the whole
    corpus' size) gets exactly the value of the whole table: df 0 and 1 both weigh 0."""
    examples = _examples(60)
    metric = CiderMetric(df_mode=df_mode)
    (stat,) = metric.corpus_statistics()
    acc = stat.create()
    for ex in examples:
        acc = stat.add(acc, ex)
    assert any(d == 1 for _, df in acc.values() for d in df.values())  # some are left out
    whole = [r["cider"] for r in _whole_table(metric, examples)]
    for ex, expected in zip(tokenize_examples(examples), whole, strict=True):
        corpora = {}
        for key, grams in needed_ngrams(ex.prediction, ex.references, df_mode).items():
            docs, df = acc[key]
            corpora[key] = corpus_of(docs, {g: df[g] for g in grams if df.get(g, 0) >= 2})
        keys = [-1] * len(ex.references) if df_mode == "pooled" else range(len(ex.references))
        assert cider_d(ex.prediction, ex.references, [corpora[k] for k in keys]) == expected


def _arrays(table: dict) -> tuple[np.ndarray, np.ndarray]:
    return hashed_table(table)


def test_sum_document_frequencies_keeps_df_two_and_more():
    fn = SumDocumentFrequencies()
    a = fn.add_input(fn.create_accumulator(), _arrays({"x": 1, "y": 1}))
    b = fn.add_input(fn.create_accumulator(), _arrays({"x": 1, ("z", "w"): 1}))
    hashes, dfs = fn.extract_output(fn.merge_accumulators([a, b]))
    assert hashes.tolist() == [gram_hash("x")] and dfs.tolist() == [2]


def test_sum_document_frequencies_folds_many_parts():
    fn = SumDocumentFrequencies()
    acc = fn.create_accumulator()
    for i in range(200):  # past the point where the parts are folded into one
        acc = fn.add_input(acc, _arrays({"x": 1, f"w{i % 7}": 1}))
    hashes, dfs = fn.extract_output(acc)
    got = dict(zip(hashes.tolist(), dfs.tolist(), strict=True))
    expected = {gram_hash("x"): 200, **{gram_hash(f"w{i}"): 29 for i in range(4)},
                **{gram_hash(f"w{i}"): 28 for i in range(4, 7)}}
    assert got == expected and list(hashes) == sorted(hashes)


def test_answer_requests_and_batch_corpora():
    (stat,) = CiderMetric().corpus_statistics()
    examples = [QAExample("x q", ("a", "x"))]
    batch = RowBatch("f:1", [("f:1", ScoringRow(RowSource("f", 1), examples[0]))])
    requests = [o.value for o in CiderBatchFn([stat], 3, count_documents=False).process(batch)
                if o.tag == REQUESTS]
    # one request per shard for both corpora: "x", "q", "x q" (prediction), "a"; corpus 0
    # reads the prediction's n-grams and reference 0's ("a"), corpus 1 the prediction's
    # (reference 1, "x", is one of them)
    assert sum(len(r[1][1]) for r in requests) == 4
    asked = {key: sorted(h for (_, (_, hashes, reads)) in requests
                         for h in hashes[reads.read_in(key, len(hashes))].tolist())
             for key in (0, 1)}
    prediction = {gram_hash(g) for g in ("x", "q", ("x", "q"))}
    assert asked == {0: sorted(prediction | {gram_hash("a")}), 1: sorted(prediction)}
    answers = []
    for (index, shard), request in requests:
        tables = [(key, _arrays({g: d for g, d in table.items() if ngram_shard(g, 3) == shard}))
                  for key, table in ((1, {"x": 3, "a": 7}), (0, {"a": 300}))]
        group = {DF: [t for t in tables if len(t[1][0])], REQUESTS: [request]}
        answers += list(answer_requests(((index, shard), group)))
    assert {a[0] for a in answers} == {"f:1"}
    # one bit per n-gram the request reads in the corpus (found or not), the dfs of those
    # found in the order of the request, a byte each, 300 apart
    tables = {1: {"x": 3, "a": 7}, 0: {"a": 300}}
    for (_, request), (_, (_, _, packed)) in zip(requests, answers, strict=True):
        assert isinstance(packed, bytes)
        for key, (bits, narrow, wide) in unpack_answer(packed).items():
            read = request[1][request[2].read_in(key, len(request[1]))]
            assert len(bits) == (len(read) + 7) // 8
            found, got = found_frequencies((bits, narrow, wide), len(read))
            expected = {gram_hash(g): d for g, d in tables[key].items()}
            assert found.tolist() == [h in expected for h in read.tolist()]
            assert got.tolist() == [expected[h] for h in read[found].tolist()]
            assert narrow.dtype == np.uint8
            assert wide.tolist() == ([300] if key == 0 else [])
    corpora = batch_corpora([stat], examples, answered_frequencies([a for _, a in answers]),
                            {(0, 1): 4, (0, 0): 2}, shards=3)
    # corpus 1 is asked for "x" (df 3), not for "a" (reference 0's, read in corpus 0)
    assert corpora[stat.key][1] == corpus_of(4, {"x": 3})
    assert corpora[stat.key][0] == corpus_of(2, {"a": 300})
    # a shard without a table answers with nothing; wide dfs take a wider dtype
    requested = np.array(sorted([gram_hash("x"), gram_hash("q")]), dtype=np.uint64)
    both = ReadBits((1,), np.packbits([[True], [True]], axis=0))
    empty = list(answer_requests(((0, 2), {DF: [], REQUESTS: [("b2", requested, both)]})))
    assert empty == [("b2", (0, 2, pack_answer({})))] and unpack_answer(pack_answer({})) == {}
    wide = list(answer_requests(((0, 2), {DF: [(1, _arrays({"x": 70_000}))],
                                          REQUESTS: [("b3", requested, both)]})))
    (bits, narrow, apart), = unpack_answer(wide[0][1][2]).values()
    assert narrow.tolist() == [255] and apart.dtype == np.uint32
    found, dfs = found_frequencies((bits, narrow, apart), 2)
    assert dfs.tolist() == [70_000]
    assert found.tolist() == [h == gram_hash("x") for h in requested.tolist()]


@pytest.mark.parametrize("df_mode", ["per_position", "pooled"])
def test_requests_ask_each_corpus_for_what_cider_reads_in_it(df_mode):
    """Independent of the hashing: per corpus, the n-grams a batch's requests read there are
    the union of `cider.needed_ngrams` over its examples; every shard holds its own."""
    rnd = random.Random(5)

    def text() -> str:
        return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 6)))

    examples = [QAExample(text(), tuple(text() for _ in range(rnd.randint(1, 4))))
                for _ in range(40)]
    (stat,) = CiderMetric(df_mode=df_mode).corpus_statistics()
    expected: dict[int, set] = {}
    for tokens in tokenize_examples(examples):
        for key, grams in needed_ngrams(tokens.prediction, tokens.references, df_mode).items():
            expected.setdefault(key, set()).update(gram_hash(g) for g in grams)
    got: dict[int, set] = {}
    texts = BatchTexts(tokenized_batch(stat, examples))
    for shard, part, reads in texts.requests(df_mode, 5):
        assert all(int(h) % 5 == shard for h in part) and list(part) == sorted(part)
        assert reads.read_in(99, len(part)) is None
        for key in reads.keys:
            got.setdefault(key, set()).update(part[reads.read_in(key, len(part))].tolist())
    assert got == expected and len(got) == (4 if df_mode == "per_position" else 1)


def test_found_frequencies_checks_the_answer_against_the_request():
    found = np.array([True, False, False, True, False, False, False, False, True])
    answer = (np.packbits(found), *narrow_frequencies(np.array([2, 70_000, 255])))
    assert answer[1].tolist() == [2, 255, 255] and answer[2].tolist() == [70_000, 255]
    got, dfs = found_frequencies(answer, 9)
    assert got.tolist() == found.tolist() and dfs.tolist() == [2, 70_000, 255]
    with pytest.raises(RuntimeError, match="for 16 n-grams came back for a request of 17"):
        found_frequencies(answer, 17)
    with pytest.raises(RuntimeError, match="names 3 n-grams and holds 2 frequencies"):
        found_frequencies((answer[0], answer[1][:2], answer[2]), 9)
    with pytest.raises(RuntimeError, match="marks 2 frequencies as wide and holds 1"):
        found_frequencies((*answer[:2], answer[2][:1]), 9)


def test_an_answer_packed_is_read_back_whole_and_checked():
    answer = {-1: (np.packbits([True, False, True]), np.array([3, 255], dtype=np.uint8),
                   np.array([70_000], dtype=np.uint32)),
              2: (np.packbits([False] * 9), np.array([], dtype=np.uint8),
                  np.array([], dtype=np.uint8)),
              0: (np.packbits([True]), np.array([255], dtype=np.uint8),
                  np.array([300], dtype=np.uint16))}
    packed = pack_answer(answer)
    got = unpack_answer(packed)
    assert list(got) == [-1, 2, 0]
    for key, arrays in answer.items():
        assert [(a.dtype, a.tolist()) for a in got[key]] == [
            (a.dtype, a.tolist()) for a in arrays]
    # its data and a header of 4 + 20 bytes per corpus, where pickled arrays took ~130 each
    assert len(packed) == 4 + 3 * 20 + sum(a.nbytes for arrays in answer.values()
                                           for a in arrays)
    with pytest.raises(RuntimeError, match="cut short"):
        unpack_answer(packed[:-1])
    with pytest.raises(RuntimeError, match=f"an answer of {len(packed) + 1} bytes holds"):
        unpack_answer(packed + b"x")


@pytest.mark.parametrize("values, narrow, wide, dtype", [
    ([], [], [], np.uint8), ([0, 1, 254], [0, 1, 254], [], np.uint8),
    ([255, 3, 256, 65_535], [255, 3, 255, 255], [255, 256, 65_535], np.uint16),
    ([1_000_000, 9], [255, 9], [1_000_000], np.uint32)])
def test_narrow_frequencies_give_a_byte_each_and_the_wide_ones_apart(values, narrow, wide,
                                                                     dtype):
    low, apart = narrow_frequencies(np.array(values, dtype=np.int64))
    assert low.dtype == np.uint8 and low.tolist() == narrow
    assert apart.dtype == dtype and apart.tolist() == wide
    bits = np.packbits(np.ones(len(values), dtype=bool))
    assert found_frequencies((bits, low, apart), len(values))[1].tolist() == values


def test_batch_fn_splits_by_shard():
    """Every output is in its shard; `text_df` holds the same frequencies as `df`, by
    n-gram text instead of hash (the saved statistics are the ones the run scores with)."""
    (stat,) = CiderMetric().corpus_statistics()
    rows = [(f"f:{i}", ScoringRow(RowSource("f", i), ex))
            for i, ex in enumerate(_examples(9), start=1)]
    out = list(CiderBatchFn([stat], 4, text_frequencies=True).process(RowBatch("f:1", rows)))
    tags = Counter(o.tag for o in out)
    assert tags["rows"] == 1 and tags[DOCS] == 2 and 0 < tags[DF] <= 8
    assert tags[TEXT_DF] == tags[DF]  # one per (corpus, shard) that has n-grams
    by_hash: dict[tuple, dict[int, int]] = {}
    by_text: dict[tuple, dict[int, int]] = {}
    for o in out:
        if o.tag in (DF, REQUESTS):
            key, value = o.value
            hashes = value[0] if o.tag == DF else value[1]
            assert len(hashes) and all(int(h) % 4 == key[-1] for h in hashes)
        if o.tag == DF:
            (index, corpus, _), (hashes, counts) = o.value
            by_hash.setdefault((index, corpus), {}).update(
                zip(hashes.tolist(), counts.tolist(), strict=True))
        if o.tag == TEXT_DF:
            (index, corpus, shard), table = o.value
            assert table and all(ngram_shard(g, 4) == shard for g in table)
            part = by_text.setdefault((index, corpus), {})
            for gram, n in table.items():
                assert gram_hash(gram) not in part  # each n-gram in one shard only
                part[gram_hash(gram)] = n
    assert set(by_text) == {(0, 0), (0, 1)}
    assert by_text == by_hash
    # without text_frequencies (a run that saves nothing) there is none
    plain = CiderBatchFn([stat], 4).process(RowBatch("f:1", rows))
    assert TEXT_DF not in {o.tag for o in plain if hasattr(o, "tag")}


def test_shards_follow_the_input_size(tmp_path):
    small = tmp_path / "a.jsonl"
    small.write_bytes(b"x" * 10)
    big = tmp_path / "b.jsonl"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # sparse: a 1 GiB input without writing it
    assert shards_for_input([str(small)]) == 16
    assert shards_for_input([str(small), str(big)]) == 65


def _keyed(examples):
    return [(f"f:{i}", ScoringRow(RowSource("f", i), ex))
            for i, ex in enumerate(examples, start=1)]


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["direct_in_process", "direct_multi_processing"])
def test_score_batches_with_shards_equals_the_whole_table(runner):
    examples = _examples(90)
    metrics = build_metrics(["cider", "bleu1"], {"cider": {"df_mode": "per_position"}})
    pooled = CiderMetric(df_mode="pooled", columns=("cider",))
    expected = []
    by_family = {m.family: m for m in metrics}
    whole = _whole_table(by_family["cider"], examples)
    whole_pooled = _whole_table(pooled, examples)
    bleu = by_family["bleu"].score_batch(examples, {})
    for i, (c, p, b) in enumerate(zip(whole, whole_pooled, bleu, strict=True), start=1):
        expected.append((f"f:{i}", c["cider"], p["cider"], b["bleu1"]))
    rows = _keyed(examples)
    with test_pipeline.TestPipeline(argv=RUNNER_ARGS[runner]) as pipeline:
        def batches(size, label):
            return pipeline | label >> beam.Create(
                [RowBatch(rows[i][0], rows[i:i + size]) for i in range(0, len(rows), size)])

        stats = beam.pvalue.AsSingleton(batches(90, "Whole") | ComputeCorpusStatistics(metrics))
        per_position = batches(7, "Sevens") | "pp" >> ScoreBatches(metrics, stats, shards=3)
        in_pool = batches(5, "Fives") | "pooled" >> ScoreBatches([pooled], stats, shards=2)

        def keyed(scored, label, columns):
            return scored["scored"] | label >> beam.FlatMap(
                lambda records: [(r["row_key"], [r[c] for c in columns]) for r in records])

        joined = ({"a": keyed(per_position, "KeyA", ["cider", "bleu1"]),
                   "b": keyed(in_pool, "KeyB", ["cider"])} | beam.CoGroupByKey()
                  | beam.Map(lambda kv: (kv[0], kv[1]["a"][0][0], kv[1]["b"][0][0],
                                         kv[1]["a"][0][1])))
        assert_that(joined, equal_to(expected))


def test_score_result_shape_is_unchanged():
    """Fields, their order (branches build results positionally) and defaults."""
    assert ScoreResult._fields == ("scores", "reason", "kind")
    assert ScoreResult._field_defaults == {"reason": None, "kind": "metric_input_error"}
    assert ScoreResult({"a": 1.0}) == ({"a": 1.0}, None, "metric_input_error")
    failed = ScoreResult(None, "squad: no references", "inference_failed")
    assert (failed.scores, failed.reason, failed.kind) == (
        None, "squad: no references", "inference_failed")
    rejected = ScoreResult(None, "squad: no references")
    assert (rejected.reason, rejected.kind) == ("squad: no references", "metric_input_error")


def _largest_encoded(pcoll: beam.PCollection, label: str) -> beam.PCollection:
    coder = coders.get_coder(object)
    return (pcoll | f"Size{label}" >> beam.Map(lambda x: len(coder.encode(x)))
            | f"Max{label}" >> beam.CombineGlobally(max).without_defaults())


@pytest.mark.slow
def test_statistics_of_50k_rows_reach_scoring_in_bounded_elements():
    """On 50,000 rows every element carrying statistics to the
    scoring step (frequency tables per shard, answers per batch, corpus sizes) encodes to
    less than 64 MB, while the whole table, as the old single side input, is larger than
    any of them by far."""
    from tests.bench.scale_data import generate_rows

    keyed = _keyed([QAExample(r["prediction"], tuple(r["references"]))
                    for r in generate_rows(50_000)])
    # batches of 500 rows in generated order (a question's five systems together), as
    # a reader forms them; 100 elements to create instead of 50,000
    (stat,) = CiderMetric().corpus_statistics()
    bound = 64 << 20
    with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
        batches = pipeline | beam.Create(
            [RowBatch(keyed[i][0], keyed[i: i + 500]) for i in range(0, len(keyed), 500)])
        stats = batches | ShardedCiderStatistics([stat], shards=16)
        sizes = [_largest_encoded(stats[name], name) for name in ("df", "answers", DOCS)]
        largest = sizes | beam.Flatten() | beam.CombineGlobally(max)
        total_df = (stats["df"] | beam.Map(lambda kv: len(kv[1][0]))
                    | beam.CombineGlobally(sum))
        # the whole table as one element (what the old single side input was): the
        # encoded size of every shard's table together
        coder = coders.get_coder(object)
        whole = (stats["df"] | "SizeOfEachTable" >> beam.Map(lambda x: len(coder.encode(x)))
                 | "WholeTable" >> beam.CombineGlobally(sum))
        assert_that(largest, lambda got: _check(got[0] < bound and got[0] > 0, got),
                    label="bounded")
        assert_that(total_df, lambda got: _check(got[0] > 400_000, got), label="big table")
        both = ((whole | "TagWhole" >> beam.Map(lambda n: ("whole", n)),
                 largest | "TagLargest" >> beam.Map(lambda n: ("largest", n)))
                | "Both" >> beam.Flatten() | "Sizes" >> beam.combiners.ToDict())
        assert_that(both, lambda got: _check(_far_larger(got[0]), got), label="far larger")


def _far_larger(sizes: dict[str, int]) -> bool:
    """The whole table encodes to at least 8 times the largest element (16 shards: about
    16 times)."""
    return sizes["whole"] >= 8 * sizes["largest"] > 0


def _check(ok: bool, got) -> None:
    if not ok:
        raise AssertionError(got)
