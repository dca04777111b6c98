"""CIDEr-D's frequencies read from files on a run whose workers share this machine's
files: the same values as the sharded join, files written, read, checked and removed."""

from __future__ import annotations

import gc
import json
import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.dofns import step_labels
from tests.runners import RUNNER_ARGS
from tests.scoring.test_corpus_stats import _examples, _keyed, _whole_table
from transforms.metrics.base import QAExample
from transforms.metrics.cider import CiderMetric
from transforms.scoring.outputs.paths import OutputPaths, leftover_temp_files
from transforms.scoring.reading.row_batch import RowBatch
from transforms.scoring.score.in_process import ScoreBatches
from transforms.scoring.statistics import frequency_files
from transforms.scoring.statistics.corpus_stats import (
    DF,
    DOCS,
    REQUESTS,
    CiderBatchFn,
    SumDocumentFrequencies,
    answer_requests,
    answered_frequencies,
    batch_corpora,
)
from transforms.scoring.statistics.frequency_files import (
    SumTableFilesFn,
    TableFileNames,
    WritePartialTablesFn,
    WriteTableFn,
    read_table,
    remove_files,
    shared_tables,
    table_frequencies,
)
from transforms.scoring.statistics.global_statistics import ComputeCorpusStatistics


def _temp(run_id: str):
    """A run's temporary name of a file (`OutputPaths.temp`)."""
    return OutputPaths("unused", "parquet", run_id).temp


def _table(n: int, seed: int = 1, top: int = 300) -> tuple[np.ndarray, np.ndarray]:
    rnd = np.random.default_rng(seed)
    hashes = np.unique(rnd.integers(0, 2**63, size=n, dtype=np.uint64))
    return hashes, rnd.integers(2, top, size=len(hashes)).astype(np.uint16)


def test_a_table_is_written_and_read_back(tmp_path):
    names = TableFileNames(str(tmp_path / "run"), _temp("r1"))
    hashes, dfs = _table(1000)
    ((key, path),) = WriteTableFn(names).process(((0, -1, 5), (hashes, dfs)))
    assert key == (0, -1, 5) and path == str(tmp_path / "run.cider_df-0--1-5.npy.tmp-r1")
    got_hashes, got_dfs = read_table(path)
    assert got_hashes.tolist() == hashes.tolist() and got_hashes.dtype == np.uint64
    assert got_dfs.tolist() == dfs.tolist() and got_dfs.dtype == np.uint16
    # a table file is a temporary file of its run: another run at the prefix that
    # completes removes it, the run itself does not take it for another's
    other = OutputPaths(str(tmp_path / "run"), "parquet", "r2")
    assert leftover_temp_files(other) == [path]
    assert leftover_temp_files(OutputPaths(str(tmp_path / "run"), "parquet", "r1")) == []


def test_partial_counts_are_summed_from_their_files_as_the_combiner_sums_them(tmp_path):
    """Per key, the counts of each bundle go to a file of the bundle's; the files of a key
    sum to the table `SumDocumentFrequencies` makes of the same counts."""
    names = TableFileNames(str(tmp_path / "run"), _temp("r1"))
    rnd = np.random.default_rng(4)
    vocabulary = rnd.integers(0, 2**63, size=500, dtype=np.uint64)
    parts = {key: [] for key in ((0, 0, 1), (0, 2, 1))}
    for key_parts in parts.values():
        for _ in range(150):  # past the point where a bundle's parts are folded
            hashes = np.unique(rnd.choice(vocabulary, size=rnd.integers(1, 9)))
            key_parts.append((hashes, rnd.integers(1, 3, size=len(hashes)).astype(np.uint8)))
    bundles = []
    for half in (slice(0, 100), slice(100, 150)):  # two bundles
        fn = WritePartialTablesFn(names)
        fn.start_bundle()
        for key, key_parts in parts.items():
            for part in key_parts[half]:
                assert fn.process((key, part)) is None
        bundles.append(list(fn.finish_bundle()))
    files = {}
    for bundle in bundles:
        assert len({w.value[1].split(".")[-3] for w in bundle}) == 1  # one bundle's name
        for windowed in bundle:
            key, path = windowed.value
            files.setdefault(key, []).append(path)
    assert sorted(files) == sorted(parts) and all(len(p) == 2 for p in files.values())
    combiner = SumDocumentFrequencies()
    for key, paths in files.items():
        ((got_key, path),) = SumTableFilesFn(names).process((key, paths))
        assert got_key == key and path == names(key)
        acc = combiner.create_accumulator()
        for part in parts[key]:
            acc = combiner.add_input(acc, part)
        expected = combiner.extract_output(acc)
        got = read_table(path)
        assert got[0].tolist() == expected[0].tolist() and len(got[0]) > 10
        assert got[1].tolist() == expected[1].tolist() and min(got[1]) >= 2


def test_a_broken_table_file_is_an_error_that_names_it(tmp_path):
    names = TableFileNames(str(tmp_path / "run"), _temp("r1"))
    ((_, path),) = WriteTableFn(names).process(((0, 0, 0), _table(100)))
    whole = open(path, "rb").read()
    broken = {"cut": whole[: len(whole) - 9], "extra": whole + b"x",
              "missing": None}
    for name, content in broken.items():
        target = str(tmp_path / name)
        if content is not None:
            open(target, "wb").write(content)
        with pytest.raises(RuntimeError, match=name):
            read_table(target)
    floats = str(tmp_path / "floats")
    with open(floats, "wb") as f:
        np.save(f, np.zeros(3))
        np.save(f, np.zeros(3, np.uint8))
    with pytest.raises(RuntimeError, match="floats holds no table"):
        read_table(floats)
    uneven = str(tmp_path / "uneven")
    with open(uneven, "wb") as f:
        np.save(f, np.zeros(3, np.uint64))
        np.save(f, np.zeros(2, np.uint8))
    with pytest.raises(RuntimeError, match="3 uint64 hashes, 2 frequencies"):
        read_table(uneven)
    pickled = str(tmp_path / "pickled")  # an object array would run code when loaded
    with open(pickled, "wb") as f:
        np.save(f, np.array([{"x": 1}], dtype=object), allow_pickle=True)
        np.save(f, np.zeros(1, np.uint8))
    with pytest.raises(RuntimeError, match="frequencies in .*pickled: Object arrays"):
        read_table(pickled)


def test_tables_are_read_once_per_process_while_held(tmp_path, monkeypatch):
    names = TableFileNames(str(tmp_path / "run"), _temp("r1"))
    files = [next(WriteTableFn(names).process(((0, k, s), _table(50, seed=k * 7 + s))))
             for k in range(2) for s in range(3)]
    reads = []
    real = frequency_files.read_table
    monkeypatch.setattr(frequency_files, "read_table", lambda p: reads.append(p) or real(p))
    first = shared_tables(files)
    again = shared_tables(reversed(files))  # the same files in another order
    assert again is first and len(reads) == 6
    assert set(first) == {(0, k, s) for k in range(2) for s in range(3)}
    del first, again
    gc.collect()
    shared_tables(files)  # no holder was left: read again
    assert len(reads) == 12
    held = shared_tables(files)
    fewer = shared_tables(files[:2])  # other files, while those are held: other tables
    assert set(fewer) == {(0, 0, 0), (0, 0, 1)} and len(reads) == 20 and len(held) == 6
    (tmp_path / "other.npy").write_bytes(b"")  # not the run's: left
    remove_files(None, names)
    assert [p.name for p in tmp_path.iterdir()] == ["other.npy"]


@pytest.mark.parametrize("df_mode", ["per_position", "pooled"])
def test_frequencies_from_tables_equal_the_answers_of_the_join(df_mode):
    """Per batch, the corpora built from the tables equal those from the join's answers
    (the requests and the tables of the same rows)."""
    examples = _examples(60, seed=11)
    (stat,) = CiderMetric(df_mode=df_mode).corpus_statistics()
    shards, rows = 4, _keyed(examples)
    batches = [RowBatch(rows[i][0], rows[i:i + 9]) for i in range(0, len(rows), 9)]
    outputs: dict[str, list] = {}
    for batch in batches:
        for o in CiderBatchFn([stat], shards).process(batch):
            outputs.setdefault(o.tag, []).append(o.value)
    fn, parts = SumDocumentFrequencies(), {}
    for key, part in outputs[DF]:
        parts[key] = fn.add_input(parts.get(key, fn.create_accumulator()), part)
    tables = {key: fn.extract_output(acc) for key, acc in parts.items()}
    docs: dict = {}
    for key, n in outputs[DOCS]:
        docs[key] = docs.get(key, 0) + n
    requests = outputs[REQUESTS]
    answers: dict = {}
    for (index, shard) in {r[0] for r in requests}:
        group = {DF: [(k[1], t) for k, t in tables.items() if (k[0], k[2]) == (index, shard)],
                 REQUESTS: [r[1] for r in requests if r[0] == (index, shard)]}
        for batch_id, answer in answer_requests(((index, shard), group)):
            answers.setdefault(batch_id, []).append(answer)
    assert set(answers) == {b.batch_id for b in batches}
    for batch in batches:
        batch_examples = [row.example for _, row in batch.rows]
        joined = batch_corpora([stat], batch_examples, answered_frequencies(
            answers[batch.batch_id]), docs, shards)
        from_tables = batch_corpora([stat], batch_examples, table_frequencies(tables),
                                    docs, shards)
        assert from_tables == joined and joined[stat.key]


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["direct_in_process", "direct_multi_processing"])
def test_scoring_from_table_files_equals_the_whole_table_and_removes_them(tmp_path, runner):
    """What `ScoreBatches` scores from the table files equals CIDEr-D over the whole
    table (per position and pooled); no file is left once the run is done."""
    examples = [*_examples(90), QAExample("a b", ("a b c", "b", "c d"))]
    metrics = {"pp": CiderMetric(df_mode="per_position", columns=("cider",)),
               "pooled": CiderMetric(df_mode="pooled", columns=("cider",))}
    expected = {name: [(f"f:{i}", round(r["cider"], 12)) for i, r in
                       enumerate(_whole_table(metric, examples), start=1)]
                for name, metric in metrics.items()}
    rows = _keyed(examples)
    with test_pipeline.TestPipeline(argv=RUNNER_ARGS[runner]) as pipeline:
        for (name, metric), size, shards in zip(metrics.items(), (7, 5), (3, 2), strict=True):
            batches = pipeline | f"{name}Batches" >> beam.Create(
                [RowBatch(rows[i][0], rows[i:i + size]) for i in range(0, len(rows), size)])
            stats = beam.pvalue.AsSingleton(
                batches | f"{name}Stats" >> ComputeCorpusStatistics([metric]))
            scored = batches | f"{name}Score" >> ScoreBatches(
                [metric], stats, shards=shards,
                table_files=TableFileNames(str(tmp_path / name), _temp("t1")))
            got = scored["scored"] | f"{name}Values" >> beam.FlatMap(
                lambda records: [(r["row_key"], round(r["cider"], 12)) for r in records])
            assert_that(got, equal_to(expected[name]), label=f"{name}Equal")
            assert_that(scored["removed"], equal_to([]), label=f"{name}Removed")
    assert list(tmp_path.iterdir()) == []


def test_a_local_run_reads_tables_and_another_runner_joins(tmp_path):
    """The graph of a local run has no join of requests and no table left after it; a
    run on workers elsewhere joins each shard's requests and writes no table."""
    from pipelines.score_predictions import absolute_paths, build_parser, configure, main
    from transforms.io import cli
    from transforms.scoring.score_predictions import ScorePredictions

    rnd = random.Random(2)
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"prediction": rnd.choice("abc"),
                                        "references": [rnd.choice("abcd"), "d"]}) + "\n"
                            for _ in range(30)))
    common = ["--input", str(data), "--metrics", "cider"]
    assert main([*common, "--output", str(tmp_path / "out"),
                 *RUNNER_ARGS["direct_in_process"]]) == 0
    assert not [p.name for p in tmp_path.iterdir() if "cider_df" in p.name]

    def labels(options: list[str]) -> set[str]:
        args = cli.parse_flags(build_parser(), [*common, "--output", str(tmp_path / "g")])
        absolute_paths(args)
        pipeline = beam.Pipeline(options=PipelineOptions(options))
        _ = pipeline | ScorePredictions(configure(args, "graph"))
        return {t.unique_name.rsplit("/", 1)[-1]
                for t in pipeline.to_runner_api().components.transforms.values()}

    local = labels([])
    elsewhere = labels(["--runner", "PortableRunner", "--environment_type", "DOCKER"])
    assert "WriteFrequencyTables" in local and "RemoveFrequencyTables" in local
    assert not any(label.startswith("GroupRequestsByShard") for label in local)
    assert "GroupRequestsByShard0" in elsewhere and "WriteFrequencyTables" not in elsewhere


def test_table_frequencies_read_every_corpus_with_a_table():
    hashes = np.array([2, 5, 9], dtype=np.uint64)
    tables = {(0, 1, 3): (hashes, np.array([4, 2, 300], dtype=np.uint16))}

    class Reads:  # corpus 0 has no table in shard 3; corpus 1 reads the whole request
        keys = (0, 1)

        @staticmethod
        def read_in(key, n):
            return np.ones(n, dtype=bool)

    request = np.array([1, 5, 9], dtype=np.uint64)
    ((key, found, dfs),) = table_frequencies(tables)(0, 3, request, Reads())
    assert key == 1 and found.tolist() == [5, 9]
    assert dfs.tolist() == [2, 300] and dfs.dtype == np.int64


@pytest.mark.slow
@pytest.mark.mutation
def test_frequency_tables_are_written_summed_or_from_partial_counts(tmp_path):
    """`WriteFrequencyTables`: summed tables (a statistics file's) are written as they
    are; partial counts are summed per key and keep the n-grams with df >= 2."""
    from transforms.scoring.statistics.frequency_files import WriteFrequencyTables

    u64, u8 = np.uint64, np.uint8
    summed = [((0, 1, 0), (np.array([3, 7], u64), np.array([1, 9], np.uint16)))]
    partial = [((0, 2, 1), (np.array([3, 7], u64), np.array([1, 1], u8))),
               ((0, 2, 1), (np.array([7, 8], u64), np.array([2, 1], u8))),
               ((1, 2, 0), (np.array([4], u64), np.array([5], u8)))]
    got = {}
    for name, elements, is_summed in (("summed", summed, True), ("partial", partial, False)):
        names = TableFileNames(str(tmp_path / name), _temp(name))
        with test_pipeline.TestPipeline(argv=RUNNER_ARGS["direct_in_process"]) as pipeline:
            files = (pipeline | beam.Create(elements)
                     | WriteFrequencyTables(names, summed=is_summed))
            assert_that(files | beam.Keys(), equal_to(sorted({k for k, _ in elements})))
        got[name] = {tuple(int(v) for v in p.name.split(".")[1].split("-")[1:]):
                     read_table(str(p))
                     for p in tmp_path.iterdir() if p.name.startswith(name)
                     and p.name.split(".")[2] == "npy"}
    assert {k: (h.tolist(), d.tolist()) for k, (h, d) in got["summed"].items()} == {
        (0, 1, 0): ([3, 7], [1, 9])}
    assert {k: (h.tolist(), d.tolist()) for k, (h, d) in got["partial"].items()} == {
        (0, 2, 1): ([7], [3]), (1, 2, 0): ([4], [5])}


def test_frequency_tables_have_stable_step_names(tmp_path):
    from transforms.scoring.statistics.frequency_files import WriteFrequencyTables

    names = TableFileNames(str(tmp_path / "run"), _temp("r1"))
    pipeline = beam.Pipeline()
    tables = pipeline | beam.Create([])
    _ = tables | "Summed" >> WriteFrequencyTables(names, summed=True)
    _ = tables | "Partial" >> WriteFrequencyTables(names, summed=False)
    assert {label for label in step_labels(pipeline) if label.count("/") == 1
            and not label.startswith("Create")} == {
        "Summed/WriteTables", "Partial/WritePartialTables", "Partial/GroupPartialTables",
        "Partial/SumPartialTables"}
