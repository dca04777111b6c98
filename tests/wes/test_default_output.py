"""With the default flags (random negatives only, no link pairs) `wes-mine` writes, byte
for byte, the files of the code before `--negatives` and `--link_pairs` existed."""

from __future__ import annotations

import hashlib
import json

import pyarrow
import pyarrow.parquet as pq
import pytest

from pipelines import mine_wes
from tests.runners import RUNNER_ARGS

# Produced by the mining code before `--negatives` and `--link_pairs` existed: the real
# sample mined with the default flags (k = 5, seed 0) on the in-process runner. "sha256":
# the file's bytes (pyarrow 25.0.1 wrote them); "content": its schema and rows in file
# order, for another pyarrow version, whose files differ in their metadata.
GOLDEN_PYARROW = "25.0.1"
GOLDEN = {
    "redirects-00000-of-00001.parquet": (
        "66a34cd3feb3e1d59bcc17975d218b3ad3b0036947f3822443ce6173e9d71e59",
        "320988d7c69fde233d38daea77845e2d3c8a3a41b4c3af4caa331b04b358d3ab"),
    "wes-k5/dev-00000-of-00001.parquet": (
        "d2eb2c5c57db9ed60461834330f048d153ba1b7f1bbea7d5b8f28f1a088fb5a1",
        "7a34ae6b49859cbbb921d48b7c65138464f111049aca9ba66210c10493c63370"),
    "wes-k5/test-00000-of-00001.parquet": (
        "888bb9e8ae15012e1e1d7c420cfe902a8416aad965503d5264ee013ac7e2b06d",
        "24b0e31cce95f3e589a8ae92014dd283c66bae80032a91f97f582ca983518250"),
    "wes-k5/train-00000-of-00001.parquet": (
        "0ca3212f879b578899be8d974daa9bb5f24af8bdb4c204b49fead651f422e119",
        "56fb911a3a67377a6468a8baf5677fb8e4dad3df93f2e01578b6040f10ab04ca"),
    "wes-k5-clusters/clusters-00000-of-00001.parquet": (
        "48d3cf937a6b8b0087ea61e26f10ced09340a5bc638dad0ae1b09ec12dba9f29",
        "870b60fde3843eac8f83ae68829c59231408c0e548817d8bc2447531164f665a"),
}
# stats.json and the dataset card, with the output folder and input path replaced by
# <out> and <input>.
GOLDEN_STATS = "38b6425e290a0f519664a8fd26aeb7638434cff9ac125cf482f534dc464b9985"
GOLDEN_CARD = "7338c59915739c63a1d8dc9310869b711db3973ad21c1f85e89230f6ac132e26"


def _content_digest(path) -> str:
    table = pq.read_table(path)
    blob = json.dumps([str(table.schema), table.to_pylist()], ensure_ascii=False,
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@pytest.mark.slow
def test_default_flags_write_the_files_of_the_code_before_the_mix(tmp_path, wiki_sample):
    out = tmp_path / "default"
    mine_wes.run([f"--input={wiki_sample}", f"--output={out}",
                  *RUNNER_ARGS["direct_in_process"]], save_main_session=False)
    files = {str(p.relative_to(out)): p for p in out.rglob("*.parquet")}
    assert sorted(files) == sorted(GOLDEN)
    for name, (sha, content) in GOLDEN.items():
        if pyarrow.__version__ == GOLDEN_PYARROW:
            assert hashlib.sha256(files[name].read_bytes()).hexdigest() == sha, name
        assert _content_digest(files[name]) == content, name
    for name, digest in (("stats.json", GOLDEN_STATS), ("README.md", GOLDEN_CARD)):
        text = (out / name).read_text().replace(str(out), "<out>").replace(
            str(wiki_sample), "<input>")
        assert hashlib.sha256(text.encode()).hexdigest() == digest, name
