"""transforms/io/local_malloc.py: glibc's malloc tuned for a local run, never over the
user's settings."""


def test_local_runs_tune_malloc_and_leave_the_users_settings(monkeypatch):
    import os

    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.io import local_malloc

    calls = []

    def mallopt(parameter, value):  # glibc's mallopt would change this test process
        calls.append((parameter, value))
        return True

    def tune(*flags):
        return local_malloc.tune_local_malloc(PipelineOptions(list(flags)), mallopt=mallopt)

    multi = ("--runner=FnApiRunner", "--direct_running_mode=multi_processing")
    for name in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    assert tune("--runner=DataflowRunner", "--direct_running_mode=multi_processing") == {}
    assert calls == []
    assert local_malloc.tune_local_malloc(  # torch's activations would each be mapped
        PipelineOptions(list(multi)), runs_models=True, mallopt=mallopt) == {}
    assert calls == [] and "MALLOC_ARENA_MAX" not in os.environ
    assert tune("--runner=FnApiRunner") == {"mmap_threshold": "1048576"}
    assert calls == [(-3, 1 << 20)]
    assert "MALLOC_ARENA_MAX" not in os.environ  # one process: nothing to inherit
    assert tune(*multi) == {"mmap_threshold": "1048576",
                            "MALLOC_MMAP_THRESHOLD_": "1048576", "MALLOC_ARENA_MAX": "2"}
    assert os.environ["MALLOC_ARENA_MAX"] == "2"  # the workers inherit these
    assert os.environ["MALLOC_MMAP_THRESHOLD_"] == "1048576"
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    calls.clear()
    assert tune(*multi) == {}  # the user's own values stay, in every process
    assert calls == []
    assert os.environ["MALLOC_ARENA_MAX"] == "4"
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    assert local_malloc.tune_local_malloc(  # not glibc: nothing claimed
        PipelineOptions(["--runner=FnApiRunner"]), mallopt=lambda *_: False) == {}
