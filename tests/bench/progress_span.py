"""The rates a run's progress lines give: `qa-score` logs one line every
`--progress_interval` seconds (`pipelines.score_predictions.describe_progress`); the
benchmarks (bench_gpu, bench_model_host) read from them how fast rows went through the
model branch after start-up and how long the model waited for its first window.
tests/scoring/test_bench_progress_span.py feeds them lines made by `describe_progress`
itself, so a change of the wording fails there, not on a GPU machine."""

from __future__ import annotations

import datetime
import re

_READ = re.compile(r"progress (\d+(?:\.\d+)?) s: ([\d,]+) rows read")
_PROGRESS = re.compile(r"progress (\d+(?:\.\d+)?) s: .*model metrics ([\d,]+)/")


def _points(lines: list[str]) -> list[tuple[float, int, int, str]]:
    """(elapsed seconds, rows read, rows through the model branch, timestamp) of each
    progress line that saw a row read."""
    points = []
    for line in lines:
        m = _READ.search(line)
        if m:
            done = _PROGRESS.search(line)
            points.append((float(m.group(1)), int(m.group(2).replace(",", "")),
                           int(done.group(2).replace(",", "")) if done else 0, line[:23]))
    return [p for p in points if p[1] > 0]


def _seconds(first: tuple, last: tuple) -> tuple[float, float, float]:
    """Seconds between two `_points` by their lines' timestamps (their whole-second
    "progress N s" where a line has none), and the two times (NaN without timestamps)."""
    try:
        when = [datetime.datetime.strptime(p[3], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                for p in (first, last)]
        return when[1] - when[0], when[0], when[1]
    except ValueError:  # a log line without the timestamp: no span to sample
        return last[0] - first[0], float("nan"), float("nan")


def steady_span(lines: list[str]) -> tuple[float, float, float] | None:
    """Rows per second through the model branch after start-up, and the wall-clock times
    (the log's clock) it was measured between: from the first progress line that saw a
    row read (start-up is over: the models are loaded) to the first that saw every row
    through the branch (later lines are the writing of the outputs), timed by the lines'
    timestamps (milliseconds; their whole-second "progress N s" where a line has none).
    Measured from the first line that saw rows done instead, it would leave out the
    first window's time: with windows of thousands of rows a worker and several workers,
    that overstates the rate (80,245 rows/s against 39,952 from the first row read,
    on the same H200 run)."""
    return _steady(_points(lines))


def first_done_s(lines: list[str]) -> float | None:
    """Seconds from the first progress line that saw a row read to the first that saw
    rows through the model branch: how long the model waited for its first window (the
    ramp that windows doubling from a small first one shorten). None when no
    line saw rows done."""
    return _first_done(_points(lines))


def progress_figures(lines: list[str]) -> tuple[dict[str, float | None],
                                                 tuple[float, float, float] | None]:
    """What a benchmark records of a run's progress lines (`steady_rows_per_s`,
    `first_done_s`), and `steady_span`'s span (None without one); the lines parsed
    once."""
    points = _points(lines)
    span = _steady(points)
    return ({"steady_rows_per_s": span[0] if span else None,
             "first_done_s": _first_done(points)}, span)


def _steady(points: list[tuple]) -> tuple[float, float, float] | None:
    if not points or points[-1][2] == 0:
        return None
    first = points[0]
    last = next(p for p in points if p[2] == points[-1][2])
    seconds, start, end = _seconds(first, last)
    if seconds <= 0:
        return None
    return (last[2] - first[2]) / seconds, start, end


def _first_done(points: list[tuple]) -> float | None:
    done = next((p for p in points if p[2] > 0), None)
    return None if done is None else _seconds(points[0], done)[0]
