"""The names of a scoring run's outputs at its prefix (`--output`), final and temporary.

Final names (PREFIX = --output): PREFIX.scores.parquet | PREFIX.scores.jsonl,
PREFIX.dead_letter.jsonl, PREFIX.summary.json, and with a human column PREFIX.report.md,
PREFIX.report.png and PREFIX.report.json. Written by write.py; validated when the graph is
built (config.py), so kept apart from the writers.

A prefix holds a complete run when its summary.json exists (the summary is moved in
last). `check_prefix` refuses such a prefix unless `--overwrite`: the new run then
replaces every file of the old one, and only once it has written all of its own.
"""

from __future__ import annotations

import dataclasses
import logging

from apache_beam.io.filesystems import FileSystems

logger = logging.getLogger(__name__)

OUTPUT_FORMATS = ("parquet", "jsonl")


@dataclasses.dataclass(frozen=True)
class OutputPaths:
    """Final and temporary names of every output of one run."""

    prefix: str
    output_format: str
    run_id: str

    @classmethod
    def of_done_run(cls, prefix: str, output_format: str = "parquet") -> OutputPaths:
        """The final names of a run already done at `prefix` (no temporary name of it is
        asked for: no run id)."""
        return cls(prefix, output_format, "")

    def __post_init__(self) -> None:
        if self.output_format not in OUTPUT_FORMATS:
            raise ValueError(
                f"unknown output format {self.output_format!r}; available: {list(OUTPUT_FORMATS)}")
        if not self.prefix or self.prefix.endswith(("/", "\\")):
            raise ValueError(f"--output must be a file prefix, got {self.prefix!r}")

    @property
    def scores(self) -> str:
        return f"{self.prefix}.scores.{self.output_format}"

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}.dead_letter.jsonl"

    @property
    def summary(self) -> str:
        return f"{self.prefix}.summary.json"

    @property
    def report_json(self) -> str:
        return f"{self.prefix}.report.json"

    @property
    def report_md(self) -> str:
        return f"{self.prefix}.report.md"

    @property
    def report_png(self) -> str:
        return f"{self.prefix}.report.png"

    @property
    def temp_pattern(self) -> str:
        """Matches the temporary files of every run at this prefix."""
        return f"{self.prefix}.*.tmp-*"

    def temp(self, final: str) -> str:
        return f"{final}.tmp-{self.run_id}"

    def every_final(self) -> list[str]:
        """Every name a run at this prefix may have written (either format, with or
        without a report): an earlier run's files, which a new run replaces."""
        other = dataclasses.replace(
            self, output_format=next(f for f in OUTPUT_FORMATS if f != self.output_format))
        return [*self.finals(with_report=True), other.scores]

    @property
    def aside_dir(self) -> str:
        """Where an earlier run's files wait while the new ones move in."""
        return f"{self.prefix}.tmp-{self.run_id}.previous"

    def finals(self, with_report: bool) -> list[str]:
        """Final names in the order they are renamed (summary last)."""
        names = [self.scores, self.dead_letter]
        if with_report:
            names += [self.report_json, self.report_md, self.report_png]
        return [*names, self.summary]


def existing_files(paths: OutputPaths) -> list[str]:
    """The final names at the prefix that exist (of a complete or an incomplete run)."""
    return [p for p in paths.every_final() if FileSystems.exists(p)]


def leftover_temp_files(paths: OutputPaths) -> list[str]:
    """Temporary files at the prefix of other runs (killed before they published)."""
    own = f".tmp-{paths.run_id}"
    return sorted(m.path for r in FileSystems.match([paths.temp_pattern])
                  for m in r.metadata_list if not m.path.endswith(own))


def check_prefix(paths: OutputPaths, overwrite: bool) -> None:
    """Refuses, before anything runs, a prefix holding a complete run unless `overwrite`;
    logs what an incomplete run left there (replaced or removed when this run succeeds).

    Raises:
        ValueError: the prefix holds a complete run and not `overwrite`.
    """
    existing = existing_files(paths)
    if paths.summary in existing and not overwrite:
        raise ValueError(
            f"--output {paths.prefix} holds a complete run ({paths.summary} and "
            f"{len(existing) - 1} other files); pass --overwrite to replace it (its files "
            "stay until the new run has written all of its own) or choose another --output")
    if existing and paths.summary not in existing:
        logger.warning("--output %s holds files of a run that did not finish (%s); this "
                       "run replaces them when it succeeds", paths.prefix, ", ".join(existing))
    leftovers = leftover_temp_files(paths)
    if leftovers:
        logger.warning("--output %s holds %d temporary files of runs that did not finish "
                       "(e.g. %s); this run removes them when it succeeds", paths.prefix,
                       len(leftovers), leftovers[0])
