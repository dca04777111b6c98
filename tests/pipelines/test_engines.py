"""Both pipelines on engines that place work in other processes, their outputs
equal to the in-process FnApiRunner's:

- external workers: Beam's job service and worker pool, each a process of its own
  (`--environment_type EXTERNAL`, the layout of Flink and Spark), the workers importing
  the project from its installed wheel;
- a Dask cluster of 2 worker processes under Beam's DaskRunner as this project corrects
  it (`transforms.io.dask_runner.DaskRunner`; Beam's own runs neither pipeline:
  docs/repro/dask_runner_faults.py).

Mining is compared on every output row and stats.json; scoring on the scores, the dead
letters and summary.json, for lexical metrics with CIDEr-D (its statistics join) and one
model metric (bi_encoder on the packaged MiniLM).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import mine_wes, score_predictions
from tests.runners import RUNNER_ARGS, dask_cluster, external_workers

pytestmark = pytest.mark.slow

K = 5
SEED = 3
METRICS = "em,f1,cider,bi_encoder"
MODEL_METRICS = {"bi_encoder"}
# Run-specific fields of summary.json (identity and times of the run).
RUN_FIELDS = {"run_id", "started_at", "finished_at"}


def _mine(dump: Path, out: Path, runner_args: list[str]) -> None:
    mine_wes.run([f"--input={dump}", f"--output={out}", f"--min_incoming_links={K}",
                  f"--seed={SEED}", *runner_args], save_main_session=False)


def mined_outputs(out: Path) -> dict:
    """Everything a mining run wrote, independent of how its shards were cut: the rows of
    every Parquet output (by folder and split, sorted) and stats.json (its file list as
    those groups)."""
    tables: dict[str, list] = {}
    for path in sorted(out.rglob("*.parquet")):
        group = str(path.relative_to(out).parent / path.name.split("-0")[0])
        tables.setdefault(group, []).extend(
            tuple(json.dumps(v, sort_keys=True) for v in row.values())
            for row in pq.read_table(path).to_pylist())
    stats = json.loads((out / "stats.json").read_text())
    stats["files"] = sorted({str(Path(f).relative_to(out).parent / Path(f).name.split("-0")[0])
                             for f in stats["files"]})
    return {"tables": {k: sorted(v) for k, v in tables.items()}, "stats": stats,
            "card": (out / "dataset_card.md").read_text()}


def write_rows(path: Path) -> Path:
    """20 scorable rows (two systems, questions repeated so CIDEr-D has document
    frequencies above 1) and one dead letter."""
    base = [("the Eiffel tower", ["Eiffel Tower", "the tower"]), ("1889", ["in 1889"]),
            ("Paris, France", ["Paris"]), ("a cat", ["the dog"]),
            ("blue whale", ["the blue whale", "whale"])]
    rows = [{"id": f"r{i}", "system": "ab"[i % 2],
             "prediction": base[i % 5][0] + ("" if i < 5 else f" {i}"),
             "references": base[i % 5][1], "human": float(i % 3)} for i in range(20)]
    rows.append({"id": "empty", "system": "a", "prediction": "", "references": ["x"]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _score(rows: Path, prefix: Path, runner_args: list[str]) -> None:
    score_predictions.run(["--input", str(rows), "--output", str(prefix), "--metrics",
                           METRICS, *runner_args], save_main_session=False)


def scored_outputs(prefix: Path) -> dict:
    """Scores (by row key), dead letters (sorted) and summary.json less its run identity."""
    scores = sorted(pq.read_table(f"{prefix}.scores.parquet").to_pylist(),
                    key=lambda r: r["row_key"])
    with open(f"{prefix}.dead_letter.jsonl") as f:
        dead = sorted(f.read().splitlines())
    with open(f"{prefix}.summary.json") as f:
        summary = {k: v for k, v in json.load(f).items() if k not in RUN_FIELDS}
    return {"scores": scores, "dead": dead, "summary": summary}


def _close(a, b, path: str = "") -> None:
    """Equal, floats of model metrics within 1e-6 (other batch compositions pad
    differently); every other value exactly."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif (isinstance(a, float) and isinstance(b, float)
          and any(m in path for m in MODEL_METRICS)):
        assert math.isclose(a, b, rel_tol=0, abs_tol=1e-6), (path, a, b)
    else:
        assert a == b, (path, a, b)


@pytest.fixture(scope="module")
def mined_in_process(tmp_path_factory, wiki_sample) -> dict:
    out = tmp_path_factory.mktemp("engines") / "mined"
    _mine(wiki_sample, out, RUNNER_ARGS["direct_in_process"])
    return mined_outputs(out)


@pytest.fixture(scope="module")
def score_input(tmp_path_factory) -> Path:
    return write_rows(tmp_path_factory.mktemp("engines_input") / "rows.jsonl")


@pytest.fixture(scope="module")
def scored_in_process(tmp_path_factory, score_input) -> dict:
    prefix = tmp_path_factory.mktemp("engines") / "in_process"
    _score(score_input, prefix, RUNNER_ARGS["direct_in_process"])
    outputs = scored_outputs(prefix)
    assert len(outputs["scores"]) == 20 and len(outputs["dead"]) == 1
    assert all(r["cider"] is not None and r["bi_encoder"] is not None
               for r in outputs["scores"])
    return outputs


def test_mining_with_external_workers(mined_in_process, wiki_sample, worker_site, tmp_path):
    out = tmp_path / "mined"
    with external_workers(worker_site, str(_workdir(tmp_path))) as args:
        _mine(wiki_sample, out, args)
    assert mined_outputs(out) == mined_in_process


def test_scoring_with_external_workers(scored_in_process, score_input, worker_site,
                                       tmp_path):
    prefix = tmp_path / "external"
    with external_workers(worker_site, str(_workdir(tmp_path))) as args:
        _score(score_input, prefix, args)
    _close(scored_outputs(prefix), scored_in_process)


def _workdir(tmp_path: Path) -> Path:
    """An empty working directory for the services (and their logs)."""
    workdir = tmp_path / "services"
    workdir.mkdir()
    return workdir


def _dask_missing() -> str | None:
    """Why the Dask tests cannot run here, or None."""
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        return f"dask.distributed is not installed ({e}); `make setup` installs it"
    return None


needs_dask = pytest.mark.skipif(_dask_missing() is not None, reason=str(_dask_missing()))


@needs_dask
def test_mining_on_a_dask_cluster(mined_in_process, wiki_sample, worker_site, tmp_path):
    out = tmp_path / "mined"
    with dask_cluster(worker_site, str(_workdir(tmp_path))) as args:
        _mine(wiki_sample, out, args)
    assert mined_outputs(out) == mined_in_process


@needs_dask
def test_scoring_on_a_dask_cluster(scored_in_process, score_input, worker_site, tmp_path):
    prefix = tmp_path / "dask"
    with dask_cluster(worker_site, str(_workdir(tmp_path))) as args:
        _score(score_input, prefix, args)
    _close(scored_outputs(prefix), scored_in_process)
