"""The GPU benchmark's "after start-up" rate reads `qa-score`'s progress lines: made here
by the pipeline's own `describe_progress`, so a change of their wording that the bench no
longer parses fails here, not silently on a GPU machine."""

import math

from pipelines.score_predictions import describe_progress
from tests.bench.progress_span import first_done_s, progress_figures, steady_span


def _line(clock: str, elapsed: float, read: int, done: int, rows_in: int) -> str:
    counts = {"read/passed": read, "join/passed": done,
              "qa_eval_model_metrics/rows_in": rows_in,
              "qa_eval_model_metrics/rows_done": done}
    return f"2026-11-27 {clock} INFO __main__: " + describe_progress(counts, elapsed)


def test_the_span_runs_from_the_first_row_read_to_every_row_done():
    lines = [
        _line("22:31:15,300", 27, 0, 0, 0),            # start-up: nothing read
        _line("22:31:16,300", 28, 640, 0, 0),          # the first row read: the span starts
        _line("22:31:21,300", 33, 400_000, 15_536, 380_000),
        _line("22:31:28,800", 38, 1_000_000, 1_000_000, 1_000_000),  # all done: it ends
        _line("22:31:29,800", 39, 1_000_000, 1_000_000, 1_000_000),  # writing the outputs
    ]
    rate, start, end = steady_span(lines)
    assert end - start == 12.5  # the clocks' span (a line can come late), not 38 - 28 s
    assert rate == 80_000.0  # from 0 done at the first row read
    assert first_done_s(lines) == 5.0  # the model's wait for its first window, by the clocks
    assert progress_figures(lines) == ({"steady_rows_per_s": rate, "first_done_s": 5.0},
                                       (rate, start, end))


def test_no_span_before_rows_are_done_and_seconds_where_lines_have_no_clock():
    read_only = [_line("22:31:16,300", 28, 640, 0, 0), _line("22:31:17,300", 29, 9_000, 0, 9_000)]
    assert steady_span(read_only) is None
    assert first_done_s(read_only) is None
    bare = [describe_progress({"read/passed": 10, "qa_eval_model_metrics/rows_in": 10}, 2),
            describe_progress({"read/passed": 10, "join/passed": 10,
                               "qa_eval_model_metrics/rows_in": 10,
                               "qa_eval_model_metrics/rows_done": 10}, 7)]
    rate, start, end = steady_span(bare)
    assert rate == 2.0 and math.isnan(start) and math.isnan(end)
    assert first_done_s(bare) == 5.0
