"""`WriteStats`: the run's own counts -> `stats.json` and the dataset card.

The card is written twice with the same text: `dataset_card.md` (its name since the first
release) and `README.md`, the file the Hugging Face Hub and `datasets.load_dataset(DIR)`
read. Its YAML front matter declares one config per threshold k (`k2`, `k5`, ...; the
first is the default) whose `data_files` map each split to its shards explicitly, so the
splits keep the names the files use: `train`, `dev`, `test` (not HF's `validation`).

Written once every shard is written and named (their names are a side input), under
temporary names; `PublishRun` (transforms/io/publish.py) moves them in last, `stats.json`
after everything else, so a run that failed never leaves them: the presence of
`stats.json` is what marks an output directory complete.
"""

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.wes.corpus import corpus_name
from transforms.wes.hard_test import (
    hard_card_lines,
    hard_config_lines,
    hard_info_lines,
    hard_summary,
    has_hard_test,
)
from transforms.wes.negative_mix import LINK_LINK, PAIR_KINDS, TITLE_LINK
from transforms.wes.sampling import SPLIT_NAMES

STATS_FILE = "stats.json"
CARD_FILE = "dataset_card.md"
HF_CARD_FILE = "README.md"
# Wikimedia's Terms of Use moved project text to CC BY-SA 4.0 on 7 June 2023; revisions
# before that are CC BY-SA 3.0 (and GFDL).
CC_BY_SA_4_SINCE = "20230607"
# The Parquet columns of a corpus (write.PAIR_SCHEMA) as Hugging Face feature dtypes.
FEATURES = (("title", "string"), ("link_text", "string"), ("label", "int8"),
            ("split", "string"), ("cluster_id", "int64"), ("source_title", "string"),
            ("source_cluster_id", "int64"))
POSITIVE_KINDS = (TITLE_LINK, LINK_LINK)
PAIR_KIND_DOC = (
    "; `pair_kind`: `title_link` (a title and its link text), `link_link` (two link texts "
    "of one title: `source_title` is that title), and for negatives `random` (a link text "
    "of a random title of the split), `f1` (the other name with the highest token F1), "
    "`substring` (a span of the title that names another title), `word_cooccurrence` (a "
    "link text often linked next to the title), `article_cooccurrence` (the title of an "
    "article often linked next to it); a negative's `source_title` is the title its text "
    "names.")

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


def _kind_counts(counts: Mapping[str, int], prefix: str) -> dict[str, int]:
    """{pair kind: count} of the positives' and negatives' kinds under `prefix`."""
    return {kind: counts.get(f"{prefix}{'positives' if kind in POSITIVE_KINDS else 'negatives'}"
                             f":{kind}", 0) for kind in PAIR_KINDS}


def corpus_summary(counts: Mapping[str, int], k: int, kinds: bool = False,
                   hard: bool = False) -> dict[str, Any]:
    """The per-corpus block of stats.json, read from the flat counts; `kinds` (a run with
    a negative mix or link pairs): the counts per pair kind, per split too, and the
    negatives' rejections and shortfalls; `hard` (an adversarial mix): its WES-hard test
    split (`hard_test.hard_summary`)."""
    ns = corpus_name(k)
    summary = {key: counts.get(f"{ns}/{key}", 0) for _, key in CORPUS_STAGES}
    summary["splits"] = {
        split: {what: counts.get(f"{ns}/{split}:{what}", 0)
                for what in ("titles", "positives", "negatives")}
        for split in SPLIT_NAMES}
    if kinds:
        summary["pair_kinds"] = _kind_counts(counts, f"{ns}/")
        for split, block in summary["splits"].items():
            block["pair_kinds"] = _kind_counts(counts, f"{ns}/{split}:")
        for what in ("rejected", "shortfall"):
            prefix = f"{ns}/negatives:{what}:"
            summary[f"negatives_{what}"] = {
                key[len(prefix):]: n for key, n in sorted(counts.items())
                if key.startswith(prefix)}
    if hard:
        summary["hard_test"] = hard_summary(counts, ns)
    return summary


def build_stats(counts: Mapping[str, int], config: Mapping[str, Any],
                files: Sequence[str], bad_files: Sequence[str]) -> dict[str, Any]:
    kinds = "negatives" in config
    hard = has_hard_test(config.get("negatives"))
    return {
        "config": dict(config),
        "complete": not bad_files,
        "bad_files": sorted(bad_files),
        "stages": {label: counts.get(key, 0) for label, key in STAGES},
        "corpora": {corpus_name(k): corpus_summary(counts, k, kinds, hard)
                    for k in config["min_incoming_links"]},
        "counts": dict(sorted(counts.items())),
        "files": sorted(files),
    }


def config_name(corpus: str) -> str:
    """`wes-k5` -> `k5`: the Hugging Face config of a corpus folder."""
    return corpus.removeprefix("wes-")


def dump_dates(inputs: Sequence[str]) -> list[str]:
    """The YYYYMMDD dates in the dump file names (`enwiki-20160501-...`), where present."""
    dates = (re.search(r"wiki-(\d{8})", os.path.basename(p)) for p in inputs)
    return [m.group(1) for m in dates if m]


def text_license(inputs: Sequence[str]) -> str:
    """`cc-by-sa-3.0` when every dump is dated before CC_BY_SA_4_SINCE, else `cc-by-sa-4.0`
    (newer dumps mix 3.0 and 4.0 text; BY-SA 3.0 lets adaptations use a later version)."""
    dates = dump_dates(inputs)
    return "cc-by-sa-3.0" if dates and max(dates) < CC_BY_SA_4_SINCE else "cc-by-sa-4.0"


def dump_languages(inputs: Sequence[str]) -> list[str]:
    """Language codes from dump names (`enwiki-...` -> en, `simplewiki` -> en)."""
    codes = set()
    for path in inputs:
        match = re.match(r"([a-z]{2,3}|simple)wiki-", os.path.basename(path))
        if match:
            codes.add("en" if match.group(1) == "simple" else match.group(1))
    return sorted(codes)


def _size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                        (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"),
                        (100_000_000, "10M<n<100M")):
        if n < limit:
            return name
    return "100M<n<1B"


def _q(value: Any) -> str:
    """A YAML scalar: JSON's quoting (JSON strings and numbers are valid YAML)."""
    return json.dumps(value, ensure_ascii=False)


def front_matter(stats: Mapping[str, Any]) -> list[str]:
    """The card's YAML front matter lines (between `---` lines), Hugging Face's fields."""
    inputs = stats["config"]["inputs"]
    corpora = stats["corpora"]
    sizes = [sum(c["positives"] + c["negatives"] for c in corpus["splits"].values())
             for corpus in corpora.values()]
    lines = ["---", f"license: {text_license(inputs)}"]
    languages = dump_languages(inputs)
    if languages:
        lines += ["language:", *(f"- {_q(code)}" for code in languages)]
    lines += [f"pretty_name: {_q('Wiki Entity Similarity (WES)')}",
              "task_categories:", "- sentence-similarity", "- text-classification",
              "tags:", "- wikipedia", "- entity-linking", "- synonyms",
              "size_categories:", f"- {_size_category(max(sizes, default=0))}",
              "configs:"]
    for i, name in enumerate(corpora):
        lines += [f"- config_name: {config_name(name)}", "  data_files:"]
        for split in SPLIT_NAMES:
            lines += [f"  - split: {split}", f"    path: {_q(f'{name}/{split}-*.parquet')}"]
        if i == 0:
            lines.append("  default: true")
        if "hard_test" in corpora[name]:
            lines += hard_config_lines(name, config_name(name))
    lines.append("dataset_info:")
    for name, corpus in corpora.items():
        lines += [f"- config_name: {config_name(name)}", "  features:"]
        features = FEATURES + ((("pair_kind", "string"),) if "pair_kinds" in corpus else ())
        for feature, dtype in features:
            lines += [f"  - name: {feature}", f"    dtype: {dtype}"]
        lines.append("  splits:")
        for split, c in corpus["splits"].items():
            lines += [f"  - name: {split}", f"    num_examples: {c['positives'] + c['negatives']}"]
        if "hard_test" in corpus:
            lines += hard_info_lines(config_name(name), features, corpus["hard_test"])
    return [*lines, "---", ""]


def funnel(stats: Mapping[str, Any]) -> list[str]:
    """The funnel: pages -> links -> pairs -> each corpus's written pairs, with the share
    kept where a stage counts the same things as an earlier one."""
    stages = stats["stages"]
    steps = [("pages read", stages.get("pages read", 0)),
             ("article pages", stages.get("article pages", 0)),
             ("links extracted", stages.get("links extracted", 0)),
             ("links after the character filter",
              stages.get("links after the character filter (incoming links)", 0)),
             ("distinct (title, link text) pairs",
              stages.get("distinct (title, link text) pairs after dedup", 0))]
    lines = ["## Funnel", "", "| stage | count | kept |", "|---|---:|---|"]

    def kept(n: int, of: int, what: str) -> str:
        return f"{n / of:.1%} of {what}" if of else ""

    (_, pages), (_, articles), (_, links), (_, passed), (_, pairs) = steps
    lines += [f"| pages read | {pages:,} | |",
              f"| article pages | {articles:,} | {kept(articles, pages, 'pages read')} |",
              f"| links extracted (from the article pages) | {links:,} | |",
              f"| links after the character filter | {passed:,} | "
              f"{kept(passed, links, 'links extracted')} |",
              f"| distinct (title, link text) pairs | {pairs:,} | |"]
    for name, corpus in stats["corpora"].items():
        at_k, written = corpus["threshold_pairs"], corpus["positives"]
        lines.append(f"| {name}: pairs of titles with >= k incoming links | {at_k:,} | "
                     f"{kept(at_k, pairs, 'distinct pairs')} |")
        lines.append(f"| {name}: positive pairs written (+ as many negatives) | {written:,} | "
                     f"{kept(written, at_k, 'the pairs at k')} |")
    return [*lines, ""]


def license_text(inputs: Sequence[str]) -> str:
    """The card's license sentence, saying how `text_license` decided."""
    dates = dump_dates(inputs)
    if dates and max(dates) < CC_BY_SA_4_SINCE:
        return (f"CC BY-SA 3.0 (dumps of {', '.join(sorted(set(dates)))}, before Wikimedia "
                "moved project text to CC BY-SA 4.0 on 2023-06-07).")
    return ("CC BY-SA 4.0 (Wikimedia's project license since 2023-06-07; older revisions "
            "are CC BY-SA 3.0, which lets adaptations be shared under 4.0).")


def kind_table(corpus: Mapping[str, Any]) -> list[str]:
    """The pairs of a corpus per kind and split (`pair_kind`), then the candidates the
    negatives rejected (synonyms, other splits) and the adversarial slots that random
    negatives filled."""
    splits = corpus["splits"]
    lines = ["", "| pair kind | label | " + " | ".join(splits) + " | all |",
             "|---|---:|" + "---:|" * (len(splits) + 1)]
    for kind, total in corpus["pair_kinds"].items():
        label = 1 if kind in POSITIVE_KINDS else 0
        lines.append(f"| {kind} | {label} | " + " | ".join(
            f"{c['pair_kinds'][kind]:,}" for c in splits.values()) + f" | {total:,} |")
    for what, title in (("rejected", "candidates rejected"),
                        ("shortfall", "adversarial slots filled by random negatives")):
        found = {k: n for k, n in corpus[f"negatives_{what}"].items() if n}
        if found:
            lines += ["", f"{title}: " + ", ".join(f"{k} {n:,}" for k, n in found.items())]
    return lines


def render_dataset_card(stats: Mapping[str, Any]) -> str:
    """The dataset card (markdown with Hugging Face YAML front matter) of a mining run,
    from its stats."""
    config = stats["config"]
    lines = [
        *front_matter(stats),
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
        *(["- negatives mix: " + ", ".join(f"{k} {w:.0%}" for k, w in config["negatives"].items())
           + f"; link-to-link pairs per cluster: at most {config['link_pairs']}"]
          if "negatives" in config else []),
        "",
    ]
    if stats["bad_files"]:
        lines += ["**INCOMPLETE: these inputs could not be read to their end:**", ""]
        lines += [f"- {b}" for b in stats["bad_files"]] + [""]
    lines += funnel(stats)
    lines += ["## Count after every stage", "", "| stage | count |", "|---|---:|"]
    lines += [f"| {label} | {n:,} |" for label, n in stats["stages"].items()]
    first = next(iter(stats["corpora"]), "wes-k5")
    for name, corpus in stats["corpora"].items():
        lines += ["", f"## Corpus `{name}`", "", "| stage | count |", "|---|---:|"]
        lines += [f"| {label} | {corpus[key]:,} |" for label, key in CORPUS_STAGES]
        lines += ["", "| split | titles | positives | negatives |", "|---|---:|---:|---:|"]
        lines += [f"| {split} | {c['titles']:,} | {c['positives']:,} | {c['negatives']:,} |"
                  for split, c in corpus["splits"].items()]
        if "pair_kinds" in corpus:
            lines += kind_table(corpus)
        if "hard_test" in corpus:
            lines += hard_card_lines(corpus["hard_test"])
    lines += [
        "", "## Files and schema", "",
        "`wes-k<k>/{train,dev,test}-SSSSS-of-NNNNN.parquet`: `title`, `link_text`, "
        "`label` (1 positive, 0 negative), `split`, `cluster_id` (stable per title), "
        "`source_title` and `source_cluster_id` (the title a negative's text came from)"
        + (PAIR_KIND_DOC if "negatives" in config else "."),
        "`wes-k<k>-clusters/clusters-*.parquet`: `title`, `cluster_id`, `split`, `incoming_links`, "
        "`link_texts` (the synonym cluster). `redirects-*.parquet`: `title`, `target`."
        + (" `wes-k<k>-hard/test-*.parquet`: the WES-hard test split, the test titles with "
           "an adversarial negative, their positives and adversarial negatives, in the "
           "columns of `wes-k<k>/` (config `k<k>-hard`)."
           if has_hard_test(config.get("negatives")) else ""),
        "", "## Loading", "",
        f"Configs: {', '.join(f'`{config_name(n)}`' for n in stats['corpora'])} (one per k; "
        f"`{config_name(first)}` is the default). Splits keep the files' names: `train`, "
        "`dev`, `test` (the front matter maps them explicitly; there is no `validation`).",
        "", "```python",
        "from datasets import load_dataset",
        f"wes = load_dataset('<dir>', name={config_name(first)!r})  # <dir>: this folder",
        "train, dev = wes['train'], wes['dev']",
        "import pyarrow.dataset as ds",
        f"train = ds.dataset('<dir>/{first}', format='parquet')"
        ".to_table(filter=ds.field('split') == 'train')",
        "```", "",
        f"## License\n\nText: Wikipedia contributors, {license_text(config['inputs'])}", "",
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
        card = render_dataset_card(stats)
        for name, content in (
                (CARD_FILE, card), (HF_CARD_FILE, card),
                (STATS_FILE, json.dumps(stats, indent=2, ensure_ascii=False) + "\n")):
            temp = FileSystems.join(self._temp_dir, name)
            with FileSystems.create(temp) as f:
                f.write(content.encode("utf-8"))
            yield temp, FileSystems.join(self._dir, name)


class WriteStats(beam.PTransform):
    """{"counts": one stats dict, "files": (temporary, final) shard paths, "bad_files"} ->
    (temporary, final) paths of the dataset card (dataset_card.md, README.md) and
    stats.json."""

    def __init__(self, output_dir: str, temp_dir: str, config: Mapping[str, Any]):
        super().__init__()
        self._fn = WriteStatsFn(output_dir, temp_dir, config)

    def expand(self, inputs):
        return inputs["counts"] | "WriteStatsAndCard" >> beam.ParDo(
            self._fn, files=beam.pvalue.AsList(inputs["files"]),
            bad_files=beam.pvalue.AsList(inputs["bad_files"]))
