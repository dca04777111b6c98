"""The `--input`/`--output`/`--overwrite` flags every pipeline of this project shares.

Beam collects the flags of every `PipelineOptions` subclass imported in a process into one
parser, so two pipelines that each declared `--input` could not be imported together (by
the demo, or by one test session). They are declared once, here; each pipeline checks
that they were given and what they mean for it.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions


class InputOutputOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--input", default=None,
                            help="input files: comma-separated paths or globs")
        parser.add_argument("--output", default=None,
                            help="output location (a directory or a prefix, per pipeline)")
        parser.add_argument("--overwrite", action="store_true",
                            help="replace a complete earlier run in --output (refused "
                                 "otherwise); its files stay as they were until this run "
                                 "has written all of its own, then every one of them goes")
