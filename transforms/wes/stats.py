"""`WriteStats`: the run's own counts -> `stats.json` and `dataset_card.md`.

Written once every shard is written and named (their names are a side input), under
temporary names; `PublishRun` (transforms/io/publish.py) moves them in last, `stats.json`
after everything else, so a run that failed never leaves them: the presence of
`stats.json` is what marks an output directory complete.
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.wes.corpus import corpus_name
from transforms.wes.sampling import SPLIT_NAMES

STATS_FILE = "stats.json"
CARD_FILE = "dataset_card.md"

# (label, stats key) in pipeline order: the count after every stage.
STAGES = (
    ("dump files read", "read_dump/files"),
    ("pages read", "read_dump/pages"),
    ("pages outside namespace 0", "read_dump/filtered:namespace"),
    ("redirect pages (not link sources)", "read_dump/redirects"),
    ("article pages", "read_dump/articles"),
    ("pages skipped: not a valid page", "read_dump/filtered:bad_page"),
    ("files with read errors (skipped)", "read_dump/filtered:bad_file"),
    ("pages parsed on the fast path", "extract_links/pages:fast_path"),
    ("pages parsed whole (fallback)", "extract_links/pages:full_parse"),
    ("pages skipped: parser error", "extract_links/filtered:parser_error"),
    ("pages skipped: parser timeout", "extract_links/filtered:parser_timeout"),
    ("pages skipped: too large", "extract_links/filtered:page_too_large"),
    ("links extracted", "extract_links/links"),
    ("links dropped: empty link text", "filter_links/filtered:empty_text"),
    ("links dropped: text over 1,000 characters", "filter_links/filtered:long_text"),
    ("links dropped: parser error in the text", "filter_links/filtered:text_parser_error"),
    ("links dropped: invalid title", "filter_links/filtered:invalid_title"),
    ("links dropped: '#' in title", "filter_links/filtered:title_has_hash"),
    ("links dropped: ':' in title", "filter_links/filtered:title_has_colon"),
    ("links dropped: '(' in title", "filter_links/filtered:title_has_paren"),
    ("links after the character filter (incoming links)", "filter_links/passed"),
    ("redirect titles folded into their targets", "resolve_redirects/titles_resolved"),
    ("distinct titles", "dedup/titles"),
    ("distinct (title, link text) pairs after dedup", "dedup/pairs"),
    ("  of which dictionary-word text, non-dictionary title", "dedup/pairs:dictionary_word_text"),
)

CORPUS_STAGES = (
    ("titles below the threshold", "filtered:below_threshold_titles"),
    ("titles at or above the threshold", "threshold_titles"),
    ("pairs at or above the threshold", "threshold_pairs"),
    ("pairs dropped by the dictionary-word filter", "filtered:dictionary_word"),
    ("titles left without positives", "filtered:no_positives_left"),
    ("titles dropped: split too small for n donors", "filtered:too_few_donors"),
    ("titles dropped: no donor texts outside own positives", "filtered:negatives_unavailable"),
    ("titles written", "titles_written"),
    ("positive pairs", "positives"),
    ("negative pairs", "negatives"),
)


def corpus_summary(counts: Mapping[str, int], k: int) -> dict[str, Any]:
    """The per-corpus block of stats.json, read from the flat counts."""
    ns = corpus_name(k)
    summary = {key: counts.get(f"{ns}/{key}", 0) for _, key in CORPUS_STAGES}
    summary["splits"] = {
        split: {what: counts.get(f"{ns}/{split}:{what}", 0)
                for what in ("titles", "positives", "negatives")}
        for split in SPLIT_NAMES}
    return summary


def build_stats(counts: Mapping[str, int], config: Mapping[str, Any],
                files: Sequence[str], bad_files: Sequence[str]) -> dict[str, Any]:
    return {
        "config": dict(config),
        "complete": not bad_files,
        "bad_files": sorted(bad_files),
        "stages": {label: counts.get(key, 0) for label, key in STAGES},
        "corpora": {corpus_name(k): corpus_summary(counts, k) for k in config["min_incoming_links"]},
        "counts": dict(sorted(counts.items())),
        "files": sorted(files),
    }


def render_dataset_card(stats: Mapping[str, Any]) -> str:
    """The dataset card (markdown) of a mining run, from its stats."""
    config = stats["config"]
    lines = [
        "# Wiki Entity Similarity (WES) corpus",
        "",
        "(article title, link text) pairs mined from Wikipedia links, after Huang (2022), "
        "\"'Tis but Thy Name\". Positive pairs: a link text and the title it links to; "
        "negatives: the title paired with a link text of another title of the same split.",
        "",
        "## Configuration",
        "",
        f"- inputs: {', '.join(config['inputs'])}",
        f"- incoming-link thresholds k: {', '.join(map(str, config['min_incoming_links']))}",
        f"- seed: {config['seed']}; splits train/dev/test: {config['splits']}",
        f"- dictionary-word filter: {'on' if config['dictionary_filter'] else 'off'}; "
        f"redirects resolved: {'yes' if config['resolve_redirects'] else 'no'}",
        "",
    ]
    if stats["bad_files"]:
        lines += ["**INCOMPLETE: these inputs could not be read to their end:**", ""]
        lines += [f"- {b}" for b in stats["bad_files"]] + [""]
    lines += ["## Count after every stage", "", "| stage | count |", "|---|---:|"]
    lines += [f"| {label} | {n:,} |" for label, n in stats["stages"].items()]
    first = next(iter(stats["corpora"]), "wes-k5")
    for name, corpus in stats["corpora"].items():
        lines += ["", f"## Corpus `{name}`", "", "| stage | count |", "|---|---:|"]
        lines += [f"| {label} | {corpus[key]:,} |" for label, key in CORPUS_STAGES]
        lines += ["", "| split | titles | positives | negatives |", "|---|---:|---:|---:|"]
        lines += [f"| {split} | {c['titles']:,} | {c['positives']:,} | {c['negatives']:,} |"
                  for split, c in corpus["splits"].items()]
    lines += [
        "", "## Files and schema", "",
        "`wes-k<k>/{train,dev,test}-SSSSS-of-NNNNN.parquet`: `title`, `link_text`, "
        "`label` (1 positive, 0 negative), `split`, `cluster_id` (stable per title), "
        "`source_title` and `source_cluster_id` (the title a negative's text came from).",
        "`wes-k<k>-clusters/clusters-*.parquet`: `title`, `cluster_id`, `split`, `incoming_links`, "
        "`link_texts` (the synonym cluster). `redirects-*.parquet`: `title`, `target`.",
        "", "```python",
        "import pyarrow.dataset as ds",
        f"train = ds.dataset('<dir>/{first}', format='parquet')"
        ".to_table(filter=ds.field('split') == 'train')",
        "from datasets import load_dataset",
        f"wes = load_dataset('parquet', data_files={{s: f'<dir>/{first}/{{s}}-*.parquet' "
        "for s in ('train', 'dev', 'test')})",
        "```", "",
        "Text: Wikipedia contributors, CC BY-SA.", "",
    ]
    return "\n".join(lines)


class WriteStatsFn(beam.DoFn):
    """Writes stats.json and the dataset card to the run's temporary folder once every
    shard is written; yields their (temporary, final) paths, stats.json last."""

    def __init__(self, output_dir: str, temp_dir: str, config: Mapping[str, Any]):
        self._dir = output_dir
        self._temp_dir = temp_dir
        self._config = dict(config)

    def process(self, counts, files, bad_files):
        stats = build_stats(counts, self._config, [final for _, final in files], bad_files)
        for name, content in (
                (CARD_FILE, render_dataset_card(stats)),
                (STATS_FILE, json.dumps(stats, indent=2, ensure_ascii=False) + "\n")):
            temp = FileSystems.join(self._temp_dir, name)
            with FileSystems.create(temp) as f:
                f.write(content.encode("utf-8"))
            yield temp, FileSystems.join(self._dir, name)


class WriteStats(beam.PTransform):
    """{"counts": one stats dict, "files": (temporary, final) shard paths, "bad_files"} ->
    (temporary, final) paths of the dataset card and stats.json."""

    def __init__(self, output_dir: str, temp_dir: str, config: Mapping[str, Any]):
        super().__init__()
        self._fn = WriteStatsFn(output_dir, temp_dir, config)

    def expand(self, inputs):
        return inputs["counts"] | "WriteStatsAndCard" >> beam.ParDo(
            self._fn, files=beam.pvalue.AsList(inputs["files"]),
            bad_files=beam.pvalue.AsList(inputs["bad_files"]))
