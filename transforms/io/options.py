"""The flags every Beam pipeline of this project shares: `--input`/`--output`/`--overwrite`
and the
runtime flags `--progress_interval`/`--verbose`.

Beam collects the flags of every `PipelineOptions` subclass imported in a process into one
parser, so two pipelines that each declared `--input` could not be imported together (by
the demo, or by one test session). They are declared once, here; each pipeline checks
that they were given and what they mean for it. Each pipeline's own parser
(`transforms.io.cli.ArgumentParser`, the one `--help` prints) adds the same flags with
the same functions, in its input/output/runtime groups.
"""

from __future__ import annotations

import os

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from transforms.io.cli import add_runtime_arguments, output_path


def absolute_local(path: str | None) -> str | None:
    """A local path made absolute against the launcher's working directory; a path of
    another file system (`gs://`, `hdfs://`, `s3://`, ...) or None as it is.

    Paths go into the graph absolute: a worker of a distributed runner (Dataflow, Flink,
    Spark, Dask, an external worker pool) starts in a working directory of its own, where
    a relative path names another file or none (docs/decisions.md, "Other engines").
    """
    if not path or FileSystems.get_scheme(path) is not None:
        return path
    return os.path.abspath(os.path.expanduser(path))


def absolute_if_local_file(value: str | None) -> str | None:
    """`absolute_local` of a value that names an existing local file or folder (a model
    checkpoint folder, a baseline file); anything else (a Hugging Face Hub id) as it is."""
    if value and FileSystems.get_scheme(value) is None and os.path.exists(value):
        return absolute_local(value)
    return value


def add_input_argument(group, help: str = "input files: comma-separated paths or globs"):
    group.add_argument("--input", default=None, help=help)


def add_output_argument(group,
                        help: str = "output location (a directory or a prefix, per pipeline)"):
    group.add_argument("--output", default=None, type=output_path, help=help)


def add_overwrite_argument(group, help: str = (
        "replace a complete earlier run in --output (refused otherwise); its files stay as "
        "they were until this run has written all of its own, then every one of them goes"
        )) -> None:
    group.add_argument("--overwrite", action="store_true", help=help)


class InputOutputOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        add_input_argument(parser)
        add_output_argument(parser)
        add_overwrite_argument(parser)


class RuntimeOptions(PipelineOptions):
    """`--progress_interval` and `--verbose` (see `cli.add_runtime_arguments`)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        add_runtime_arguments(parser)
