"""transforms/io/options.py: both pipelines' flags parse in one process."""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.mine_wes import MineWesOptions
from pipelines.score_predictions import ScoreOptions
from transforms.io.options import InputOutputOptions


def test_both_pipelines_options_coexist():
    # Beam parses the flags of every imported PipelineOptions subclass together: two
    # classes declaring --input would make get_all_options raise.
    options = PipelineOptions(["--input=a.jsonl", "--output=out/x", "--metrics=em",
                               "--min_incoming_links=5"])
    assert options.get_all_options()["input"] == "a.jsonl"
    io = options.view_as(InputOutputOptions)
    assert (io.input, io.output) == ("a.jsonl", "out/x")
    assert options.view_as(ScoreOptions).metrics == "em"
    assert options.view_as(MineWesOptions).min_incoming_links == "5"
