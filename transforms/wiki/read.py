"""`ReadPages`: dump files -> article pages of namespace 0, plus redirects and counts."""

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import IO

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.io import progress
from transforms.io.counting import STATS_TAG, CountingDoFn, StatKey
from transforms.io.decompress import open_range
from transforms.io.options import absolute_local
from transforms.wiki.dump import (
    BadPageCallback,
    DumpReadError,
    Page,
    check_cuts,
    iter_dump_file,
    iter_pages,
    multistream_index_path,
    split_ranges,
    stream_offsets,
)

logger = logging.getLogger(__name__)

REDIRECTS_TAG = "redirects"
BAD_FILES_TAG = "bad_files"
BYTES_READ = "read_dump/bytes_read"  # progress lines only: not a Beam counter, not in stats.json


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
        # absolute: workers start in working directories of their own
        paths.extend(sorted(absolute_local(m.path) for m in results))
    return paths


_ROOT_OPEN = b"<mediawiki>"
_ROOT_CLOSE = b"</mediawiki>"


class _RangeDocument:
    """The XML of a byte range as one document for the parser: the range's `<page>`
    elements under a `<mediawiki>` root, opened unless the range starts the file (which
    holds the dump's header), closed unless it ends with the dump's footer."""

    _TAIL = 4096  # the bytes kept to see whether the footer ends the range

    def __init__(self, stream: IO[bytes], opens_root: bool) -> None:
        self._stream = stream
        self._pending = _ROOT_OPEN if opens_root else b""
        self._tail = b""
        self._ended = False

    def read(self, size: int = -1) -> bytes:
        if self._pending:
            out, self._pending = self._pending, b""
            return out
        if self._ended:
            return b""
        data = self._stream.read(size)
        if data:
            self._tail = (self._tail + data)[-self._TAIL:]
            return data
        self._ended = True
        return b"" if self._tail.rstrip().endswith(_ROOT_CLOSE) else _ROOT_CLOSE


def read_range_pages(fileobj: IO[bytes], name: str, start: int, end: int,
                     on_bad_page: BadPageCallback | None = None) -> Iterator[Page]:
    """The pages of the whole bz2 streams in bytes [start, end) of a multistream dump,
    decompressed ahead in a thread (see `open_range`); memory is bounded by the largest
    page, as for a whole file. Bad pages as in `iter_pages` (their position counted from
    the range's first page, named by the range).

    Raises:
        DumpReadError: the range is cut short, holds a damaged stream (any of its streams,
            not only the first) or bytes that are not a stream, or its XML is broken;
            naming the file and the byte range.
    """
    where = f"{name} bytes {start}-{end}"
    with open_range(fileobj, start, end) as stream:
        yield from iter_pages(_RangeDocument(stream, opens_root=start > 0), where, on_bad_page)


@dataclasses.dataclass(frozen=True)
class DumpRange:
    """What one read covers: a whole dump file (start None) or bytes [start, end) of a
    multistream dump, cut at bz2 stream starts."""

    path: str
    start: int | None = None
    end: int | None = None


class PlanReadsFn(CountingDoFn):
    """A matched dump file -> the ranges it is read in.

    A multistream dump with its index next to it (Wikipedia's names, see
    `multistream_index_path`) is cut into ranges of about `split_bytes`, so that
    workers read one large file in parallel; anything else is read whole. An index that
    cannot be used (unreadable, of another file, not at stream starts) is logged and
    counted, and the file is read whole: nothing is skipped because of an index.
    """

    def __init__(self, split_bytes: int):
        super().__init__("read_dump", ["files_split", "index_unusable"])
        self._split_bytes = split_bytes

    def process(self, metadata):
        ranges = self._ranges(metadata.path, metadata.size_in_bytes)
        if len(ranges) > 1:
            self.count("files_split")
        for start, end in ranges:
            yield DumpRange(metadata.path, start, end)

    def _ranges(self, path: str, size: int) -> list[tuple[int | None, int | None]]:
        index = multistream_index_path(path)
        # A file no larger than one range is streamed whole, its index left unread.
        if (not self._split_bytes or size <= self._split_bytes or index is None
                or not FileSystems.exists(index)):
            return [(None, None)]
        try:
            with FileSystems.open(index, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                offsets = stream_offsets(f, index)
            ranges = split_ranges(offsets, size, self._split_bytes)
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                check_cuts(f, path, ranges)
        except DumpReadError as e:
            logger.warning("reading %s whole: its index %s cannot be used (%s)", path, index, e)
            self.count("index_unusable")
            return [(None, None)]
        return ranges if len(ranges) > 1 else [(None, None)]


class ReadDumpFn(CountingDoFn):
    """Reads one dump file or byte range; routes pages by namespace and redirect status."""

    def __init__(self, skip_bad_files: bool):
        super().__init__("read_dump", [
            "files", "pages", "articles", "filtered:namespace", "redirects",
            "filtered:bad_page", "filtered:bad_file"])
        self._skip_bad_files = skip_bad_files

    def count_bad_page(self, message: str) -> None:
        """Counts a page that `dump.iter_pages` skipped (and logged) as not valid."""
        self.count("filtered:bad_page")

    def process(self, part: DumpRange):
        if not part.start:
            self.count("files")  # once per file: whole, or its first range
        try:
            with contextlib.ExitStack() as stack:
                # The bytes read (compressed) feed the progress lines only.
                raw = progress.CountingReader(stack.enter_context(FileSystems.open(
                    part.path, compression_type=CompressionTypes.UNCOMPRESSED)), BYTES_READ)
                # Closed before the file, whatever happens downstream: the reader's
                # prefetch thread stops before its file goes away.
                # dump.py logs each bad page by name; here it is counted.
                bad_page = self.count_bad_page
                pages = stack.enter_context(contextlib.closing(
                    iter_dump_file(part.path, raw, on_bad_page=bad_page)
                    if part.start is None
                    else read_range_pages(raw, part.path, part.start, part.end, bad_page)))
                for page in pages:
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
        split_mb: cut multistream dumps that have their index next to them into byte
            ranges of about this many MB (compressed), read in parallel; 0 = read every
            file whole.
    """

    def __init__(self, paths: Sequence[str], skip_bad_files: bool = False,
                 split_mb: float = 16.0):
        super().__init__()
        if split_mb < 0:
            raise ValueError(f"split_mb must be >= 0, got {split_mb}")
        self._paths = list(paths)
        self._skip_bad_files = skip_bad_files
        self._split_bytes = int(split_mb * 1_000_000)
        self._plan = PlanReadsFn(self._split_bytes)
        self._fn = ReadDumpFn(skip_bad_files)

    def stat_keys(self) -> list[StatKey]:
        return self._plan.stat_keys() + self._fn.stat_keys()

    def expand(self, pbegin):
        plans = (
            pbegin
            | "ListDumpFiles" >> beam.Create(self._paths)
            # a file matched at launch that a worker does not see fails the run, naming it
            | "MatchDumpFiles" >> fileio.MatchAll(fileio.EmptyMatchTreatment.DISALLOW)
            | "PlanReads" >> beam.ParDo(self._plan).with_outputs(STATS_TAG, main="ranges")
        )
        outputs = (
            plans.ranges
            | "SpreadReads" >> beam.Reshuffle()
            | "ParsePages" >> beam.ParDo(self._fn).with_outputs(
                REDIRECTS_TAG, BAD_FILES_TAG, STATS_TAG, main="pages")
        )
        return {
            "pages": outputs.pages,
            "redirects": outputs[REDIRECTS_TAG],
            "bad_files": outputs[BAD_FILES_TAG],
            "stats": (plans[STATS_TAG], outputs[STATS_TAG]) | "FlattenReadStats" >> beam.Flatten(),
        }
