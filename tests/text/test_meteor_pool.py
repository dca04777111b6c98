"""transforms/text/meteor_jvm.py's idle JVMs: a process reuses the JVM a metric gave back,
never a dead one, keeps at most MAX_IDLE of one command line, and stops them at exit
(a stand-in `java` speaking the -stdio protocol keeps these tests off the real JVM)."""

from __future__ import annotations

import os
import stat

import pytest

from transforms.metrics.meteor import MeteorMetric
from transforms.text import meteor_jvm


@pytest.fixture()
def java(tmp_path, monkeypatch):
    script = tmp_path / "java"
    script.write_text('#!/bin/sh\nwhile read -r line; do case "$line" in\n'
                      '  EVAL*) echo 0.25; echo 0.25 ;;\n  *) echo 1 2 3 ;;\nesac; done\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(meteor_jvm, "_idle", {})
    yield str(script)
    meteor_jvm.close_idle()


def test_a_given_back_jvm_is_taken_again(java):
    first = meteor_jvm.take(java)
    meteor_jvm.give_back(first)
    assert meteor_jvm.take(java) is first
    other = meteor_jvm.take(java, max_heap="1G")  # another command line: a new JVM
    assert other is not first
    assert first.score_pairs([("a b", ("a c",))]) == [0.25]
    first.close()
    meteor_jvm.give_back(first)  # a dead JVM is not kept
    assert meteor_jvm.take(java) is not first


def test_at_most_max_idle_are_kept_and_exit_stops_them(java):
    taken = [meteor_jvm.take(java) for _ in range(meteor_jvm.MAX_IDLE + 1)]
    for process in taken:
        meteor_jvm.give_back(process)
    assert [p.alive for p in taken] == [True] * meteor_jvm.MAX_IDLE + [False]
    meteor_jvm.close_idle()
    assert not any(p.alive for p in taken)


def test_the_metric_takes_in_setup_and_gives_back_in_teardown(java):
    metric = MeteorMetric(java=java)
    metric.setup()
    process = metric._process
    metric.teardown()
    assert metric._process is None and process.alive
    again = MeteorMetric(java=java)
    again.setup()
    assert again._process is process
    assert os.path.basename(process.args[0]) == "java"
