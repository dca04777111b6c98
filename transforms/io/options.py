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

from apache_beam.options.pipeline_options import PipelineOptions

from transforms.io.cli import add_runtime_arguments


def add_input_argument(group, help: str = "input files: comma-separated paths or globs"):
    group.add_argument("--input", default=None, help=help)


def add_output_argument(group,
                        help: str = "output location (a directory or a prefix, per pipeline)"):
    group.add_argument("--output", default=None, help=help)


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
