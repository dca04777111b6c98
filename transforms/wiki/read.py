"""`ReadPages`: dump files -> article pages of namespace 0, plus redirects and counts."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.counting import STATS_TAG, CountingDoFn, zero_stats
from transforms.wiki.dump import DumpReadError, iter_dump_file

logger = logging.getLogger(__name__)

REDIRECTS_TAG = "redirects"
BAD_FILES_TAG = "bad_files"


def match_inputs(patterns: Sequence[str]) -> list[str]:
    """Expands input globs at graph build time.

    Raises:
        ValueError: a pattern matches no file (naming it).
    """
    paths = []
    for pattern in patterns:
        results = FileSystems.match([pattern])[0].metadata_list
        if not results:
            raise ValueError(f"--input pattern {pattern!r} matches no file")
        paths.extend(sorted(m.path for m in results))
    return paths


class ReadDumpFn(CountingDoFn):
    """Reads one dump file; routes pages by namespace and redirect status."""

    def __init__(self, skip_bad_files: bool):
        super().__init__("read_dump", [
            "files", "pages", "articles", "filtered:namespace", "redirects",
            "filtered:bad_file"])
        self._skip_bad_files = skip_bad_files

    def process(self, readable: fileio.ReadableFile):
        path = readable.metadata.path
        self.count("files")
        try:
            with readable.open(compression_type=CompressionTypes.UNCOMPRESSED) as raw:
                for page in iter_dump_file(path, raw):
                    self.count("pages")
                    if page.namespace != 0:
                        self.count("filtered:namespace")
                    elif page.redirect is not None:
                        self.count("redirects")
                        yield beam.pvalue.TaggedOutput(REDIRECTS_TAG, page)
                    else:
                        self.count("articles")
                        yield page
        except DumpReadError as e:
            if not self._skip_bad_files:
                raise
            # Pages read before the damage stay in the run; the file is reported.
            logger.error("skipping the rest of a bad dump file: %s", e)
            self.count("filtered:bad_file")
            yield beam.pvalue.TaggedOutput(BAD_FILES_TAG, str(e))


class ReadPages(beam.PTransform):
    """Dump files -> {"pages", "redirects", "bad_files", "stats"}.

    Args:
        paths: dump files (already matched, see `match_inputs`).
        skip_bad_files: log, count and report a file that cannot be read to its end
            instead of failing the run.
    """

    def __init__(self, paths: Sequence[str], skip_bad_files: bool = False):
        super().__init__()
        self._paths = list(paths)
        self._skip_bad_files = skip_bad_files

    def expand(self, pbegin):
        fn = ReadDumpFn(self._skip_bad_files)
        outputs = (
            pbegin
            | "ListDumpFiles" >> beam.Create(self._paths)
            | "SpreadFiles" >> beam.Reshuffle()
            | "MatchDumpFiles" >> fileio.MatchAll()
            | "OpenDumpFiles" >> fileio.ReadMatches()
            | "ParsePages" >> beam.ParDo(fn).with_outputs(
                REDIRECTS_TAG, BAD_FILES_TAG, STATS_TAG, main="pages")
        )
        stats = (outputs[STATS_TAG], zero_stats(pbegin.pipeline, "ZeroReadStats",
                                                fn.stat_keys())) | "FlattenReadStats" >> beam.Flatten()
        return {
            "pages": outputs.pages,
            "redirects": outputs[REDIRECTS_TAG],
            "bad_files": outputs[BAD_FILES_TAG],
            "stats": stats,
        }
