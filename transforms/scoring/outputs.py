"""The names of a scoring run's outputs at its prefix (`--output`), final and temporary.

Final names (PREFIX = --output): PREFIX.scores.parquet | PREFIX.scores.jsonl,
PREFIX.dead_letter.jsonl, PREFIX.summary.json, and with a human column PREFIX.report.md,
PREFIX.report.png and PREFIX.report.json. Written by write.py; validated when the graph is
built (config.py), so kept apart from the writers.
"""

from __future__ import annotations

import dataclasses

OUTPUT_FORMATS = ("parquet", "jsonl")


@dataclasses.dataclass(frozen=True)
class OutputPaths:
    """Final and temporary names of every output of one run."""

    prefix: str
    output_format: str
    run_id: str

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
