"""transforms/wes/mine.py: the --min_incoming_links value (the graph itself runs in
tests/pipelines/test_mine_wes.py)."""

from __future__ import annotations

import pytest

from transforms.wes.mine import parse_thresholds


@pytest.mark.parametrize("spec, expected", [
    ("5", [5]), ("20,5,10", [5, 10, 20]), ("5, 5,10,", [5, 10]), (" 1 ", [1])])
def test_parse_thresholds_sorts_and_dedups(spec, expected):
    assert parse_thresholds(spec) == expected


@pytest.mark.parametrize("spec, message", [
    ("five", "must be integers"), ("2.5", "must be integers"), ("", ">= 1"), (",", ">= 1"),
    ("0,5", ">= 1"), ("-3", ">= 1")])
def test_parse_thresholds_refuses(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_thresholds(spec)
