"""Mining benchmark: link extraction and the whole pipeline beside their baselines.

    python -m tests.bench.bench_mining [--min_mb 100] [--out bench_out] [--repeats 3]

On one dump of at least `--min_mb` MB of XML built from the real sample's pages (new
titles and ids, `tests/bench/make_dump.py`), split into two bz2 part files as Wikipedia
publishes them, in one run:
  (a) bz2 + XML parsing alone;
  (b) a full mwparserfromhell parse of every page;
  (c) this project's link extraction (`transforms.wiki.links.extract_links`);
  (d) the whole mining pipeline, in-process and with 2 worker processes, and in-process
      with the adversarial mix of negatives and link pairs (`MIX`);
plus the agreement of (c)'s links with (b)'s on the real sample and the peak memory.
(a) and (d) run in turns, `--repeats` rounds; each reports its fastest run and lists all.
Results are printed and written to `<out>/mining.json`.
"""

from __future__ import annotations

import argparse
import bz2
import collections
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.bench.baselines import time_full_parse, time_xml_reading
from tests.bench.bench_data import WIKI_SAMPLE, data_path, require
from tests.bench.make_dump import DEFAULT_SOURCES, build_dump
from tests.bench.watchdog import HighWater
from transforms.wiki.dump import iter_dump_file
from transforms.wiki.links import extract_links, extract_links_full

MB = 10**6
REPO = Path(__file__).resolve().parents[2]
# The adversarial mix the training recipe mines with: each kind of negative, link pairs.
MIX = ["--negatives", "random=1,f1=1,substring=1,article_cooccurrence=1,word_cooccurrence=1",
       "--link_pairs", "2"]
SAMPLE = data_path(WIKI_SAMPLE)


def build_parts(out: Path, min_mb: float) -> tuple[list[Path], int]:
    """A >= min_mb MB dump split into two bz2 parts; returns (parts, XML bytes)."""
    parts = [out / f"bench-dump-p{i}.xml.bz2" for i in (1, 2)]
    if all(p.exists() for p in parts):
        return parts, sum(len(bz2.open(p).read()) for p in parts)
    plain = out / "bench-dump.xml"
    build_dump(plain, min_mb=min_mb / 1.048576, compression=None, seed=0)
    xml = plain.read_bytes()
    first = xml.index(b"  <page>")
    end = xml.rindex(b"</page>") + len(b"</page>\n")
    middle = xml.index(b"  <page>", first + (end - first) // 2)
    for path, body in zip(parts, (xml[first:middle], xml[middle:end])):
        path.write_bytes(bz2.compress(xml[:first] + body + b"</mediawiki>\n", 6))
    plain.unlink()
    return parts, len(xml)


def time_fast_extraction(parts: list[Path]) -> dict:
    """(c): extract_links on every link source page, timing the extraction alone."""
    pages = text_bytes = links = 0
    seconds = cpu = 0.0
    paths = collections.Counter()
    for part in parts:
        with open(part, "rb") as f:
            for page in iter_dump_file(str(part), f):
                if page.namespace != 0 or page.redirect is not None:
                    continue
                t, c = time.perf_counter(), time.process_time()
                result = extract_links(page.text)
                seconds += time.perf_counter() - t
                cpu += time.process_time() - c
                pages += 1
                text_bytes += len(page.text.encode("utf-8"))
                links += len(result.links)
                paths[result.path] += 1
    return {"pages": pages, "text_mb": text_bytes / MB, "links": links,
            "mb_per_s": text_bytes / MB / seconds, "pages_per_s": pages / seconds,
            "mb_per_cpu_s": text_bytes / MB / cpu, "paths": dict(paths)}


def agreement_on_sample() -> dict:
    total = agree = 0
    with open(SAMPLE, "rb") as f:
        for page in iter_dump_file(str(SAMPLE), f):
            if page.namespace != 0 or page.redirect is not None:
                continue
            full = collections.Counter(extract_links_full(page.text))
            fast = collections.Counter(extract_links(page.text).links)
            total += sum(full.values())
            agree += sum((full & fast).values())
    return {"links": total, "agreeing": agree, "share": agree / total}


def time_pipeline(parts: list[Path], xml_mb: float, out: Path, runner_args: list[str]) -> dict:
    """(d): the whole pipeline in a child process; wall and CPU time (the child's user +
    system, with the processes it waited for) and the peak RSS of its largest process."""
    output = out / "bench-mined"
    shutil.rmtree(output, ignore_errors=True)
    cmd = [sys.executable, "-m", "pipelines.mine_wes",
           "--input", ",".join(map(str, parts)), "--output", str(output),
           "--min_incoming_links", "5,10,20", "--seed", "1", *runner_args]
    started = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    # this child's own CPU (its waited-for workers included), not every child's this
    # benchmark has run (RUSAGE_CHILDREN); its memory from /proc: a forked child's rusage
    # peak starts at this process's size
    with HighWater(child.pid) as memory:
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, cmd)
    stats = json.loads((output / "stats.json").read_text())
    return {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "xml_mb_per_s": xml_mb / seconds,
            "pages_per_s": stats["stages"]["pages read"] / seconds,
            "peak_rss_mb_of_largest_process": memory.peak / 2**20,
            "positives_k5": stats["corpora"]["wes-k5"]["positives"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min_mb", type=float, default=100)
    parser.add_argument("--out", default="bench_out")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds of (a) and (d); each reports its fastest run")
    args = parser.parse_args(argv)
    require(SAMPLE, *DEFAULT_SOURCES)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parts, xml_bytes = build_parts(out, args.min_mb)
    xml_mb = xml_bytes / MB
    results = {"machine": f"{os.cpu_count()} cores", "xml_mb": xml_mb}
    full = [time_full_parse(p) for p in parts]
    full_s = sum(f.parse_seconds for f in full)
    full_mb = sum(f.text_bytes for f in full) / MB
    results["b_full_parse"] = {"text_mb": full_mb, "mb_per_s": full_mb / full_s,
                               "pages_per_s": sum(f.parsed_pages for f in full) / full_s}
    results["c_extract_links"] = time_fast_extraction(parts)
    results["c_speedup_over_b"] = results["c_extract_links"]["mb_per_s"] / results["b_full_parse"]["mb_per_s"]
    results["c_agreement_on_real_sample"] = agreement_on_sample()
    # (a) and both (d)s take turns, `--repeats` rounds, and each keeps its fastest run: the
    # machine's speed drifts, and the baseline is sampled over the same period as (d).
    configs = {"d_pipeline_in_process": ["--direct_running_mode=in_memory"],
               "d_pipeline_2_workers": ["--direct_running_mode=multi_processing",
                                        "--direct_num_workers=2"],
               "d_pipeline_mix_in_process": ["--direct_running_mode=in_memory", *MIX]}
    a_runs, d_runs = [], {key: [] for key in configs}
    for _ in range(args.repeats):
        reads = [time_xml_reading(p) for p in parts]
        a_runs.append((sum(r.seconds for r in reads), sum(r.pages for r in reads)))
        for key, runner_args in configs.items():
            d_runs[key].append(time_pipeline(parts, xml_mb, out, runner_args))
    read_s, read_pages = min(a_runs)
    results["a_read"] = {"seconds": read_s, "xml_mb_per_s": xml_mb / read_s,
                         "pages_per_s": read_pages / read_s,
                         "all_seconds": [s for s, _ in a_runs]}
    for key, runs in d_runs.items():
        best = dict(min(runs, key=lambda r: r["seconds"]))
        best["all_seconds"] = [r["seconds"] for r in runs]
        best["all_cpu_seconds"] = [r["cpu_seconds"] for r in runs]
        best["peak_rss_mb_of_largest_process"] = max(
            r["peak_rss_mb_of_largest_process"] for r in runs)
        best["share_of_a"] = best["xml_mb_per_s"] / results["a_read"]["xml_mb_per_s"]
        results[key] = best
    # each side's least CPU over its rounds: a round slowed by the machine's other work
    # costs more CPU too, whichever side it falls on
    results["mix_cpu_over_random"] = (
        min(results["d_pipeline_mix_in_process"]["all_cpu_seconds"])
        / min(results["d_pipeline_in_process"]["all_cpu_seconds"]))
    (out / "mining.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
