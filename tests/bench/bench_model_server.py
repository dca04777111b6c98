"""Where a shared model lives: inside a busy worker process (Beam's way) or in its own.

    python -m tests.bench.bench_model_server [--windows 40] [--window 4] [--device cpu]
        [--model PATH] [--phase_s 20] [--out bench_out]

With `--share_model_across_processes` every worker process sends its padded passes to one
copy of the model. Beam's `ModelHandler(large_model=True)` keeps that copy inside the
first worker process that asks for it, served by threads of that process, while the
process goes on reading and scoring rows; `transforms/inference/model_server.py` keeps it in
a process of its own. A torch forward pass gives up and takes back the GIL at every
operator, so a process whose other thread runs Python serves the model slowly.

A client process (standing for another worker) runs the real host side
(`predictors.Predictor`, no output cache) over a served copy of the packaged MiniLM,
`--windows` windows of `--window` new short texts each (small passes, as on a GPU, where
the operators' dispatch is most of a pass's time), and times each window's
`predict`. The copy is served:

  in_worker_idle   Beam's way (`MultiProcessShared(always_proxy=True)`, no process of
                   its own): in this process, which does nothing else meanwhile;
  in_worker_busy   the same while a thread of this process runs Python without pause
                   (a worker scoring its own rows: the arrangement of a real run);
  own_process_busy `model_server.serve` (a process of its own), this process as busy.

Printed: ms per window (median) and windows/s for each, and in_worker_busy /
own_process_busy; then a call's round trip to a method that does nothing, through the
project's channel (`model_channel.py`: a Unix socket and a key's handshake) and through
Beam's `MultiProcessShared` (TCP, fixed key), each in a process of its own;
`<out>/model_server.json`.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from apache_beam.utils import multi_process_shared

from transforms.inference import model_server
from transforms.models import loading
from transforms.models.device import DeviceModel
from transforms.models.uses import encoder_use


def _use(device: str = "cpu", model: str | None = None):
    return encoder_use(loading.ModelSpec.of(model, device=device), None, pooled=True)


def _not_started() -> None:
    raise RuntimeError("the bench's copy is started before its clients")


def _client(served: tuple[str, str] | model_server.Serving, device: str, model: str | None,
            windows: int, window: int, phase_s: float, queue) -> None:
    """Another worker: the host side over the served copy (Beam's by its tag and folder,
    or ours by its `Serving`), one new window at a time."""
    import torch

    from transforms.models.predictors import Predictor
    torch.set_num_threads(1)
    if isinstance(served, tuple):  # the copy is there: joined, not made
        tag, folder = served
        proxy = multi_process_shared.MultiProcessShared(
            lambda: None, tag=tag, path=folder, always_proxy=True).acquire()
    else:
        proxy = model_server.serve(_not_started, served)
    predictor = Predictor(_use(device, model), model=proxy, cache_size=0)
    times = []
    began = time.perf_counter()
    for w in range(windows + 2):  # the first two warm up
        texts = [f"answer {w} {i}: the tower stands in Paris since 1889" for i in range(window)]
        started = time.perf_counter()
        predictor.predict(texts)
        times.append(time.perf_counter() - started)
        if len(times) >= 5 and time.perf_counter() - began > phase_s:
            break  # a slow arrangement: fewer windows, so the bench ends in its time
    queue.put(times[2:])


class Adder:
    """A served object whose one method costs nothing: a call's round trip alone."""

    def add(self, a: int) -> int:
        return a + 1


def _per_call_us(call, calls: int = 2000) -> float:
    call()
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls * 1e6


def round_trips(rounds: int = 5) -> dict:
    """µs per call of a method that does nothing, through the project's channel and
    through Beam's `MultiProcessShared` (each a process of its own), alternating."""
    ours = model_server.serve(Adder, model_server.new_serving("bench_round_trip"))
    beams = multi_process_shared.MultiProcessShared(
        Adder, tag="bench_round_trip", path=tempfile.mkdtemp(prefix="bench_model_server"),
        always_proxy=True, spawn_process=True).acquire()
    figures: dict[str, list[float]] = {"ours": [], "beam": []}
    for _ in range(rounds):
        figures["ours"].append(_per_call_us(lambda: ours.add(1)))
        figures["beam"].append(_per_call_us(lambda: beams.add(1)))
    ours.stop()
    return {name: round(statistics.median(values), 1) for name, values in figures.items()}


def _busy(stop: threading.Event) -> None:
    total = 0
    while not stop.is_set():
        for i in range(2000):
            total += i * i


def _measure(served: tuple[str, str] | model_server.Serving, device: str, model: str | None, busy: bool, windows: int,
             window: int, phase_s: float) -> dict:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    stop = threading.Event()
    thread = threading.Thread(target=_busy, args=(stop,), daemon=True)
    if busy:
        thread.start()
    client = ctx.Process(target=_client, args=(served, device, model, windows, window, phase_s,
                                               queue))
    client.start()
    times = queue.get(timeout=600)
    client.join()
    stop.set()
    if busy:
        thread.join()
    median = statistics.median(times)
    return {"windows": len(times), "window": window, "ms_per_window": round(median * 1e3, 2),
            "windows_per_s": round(1 / median, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--phase_s", type=float, default=20.0,
                        help="stop a phase's windows after this many seconds (at least 3 "
                             "measured): on a GPU a window served from a busy process took "
                             "so long that 40 of them outlasted a 120 s budget)")
    parser.add_argument("--device", default="cpu", help="where the served copy runs (cuda)")
    parser.add_argument("--model", default=None,
                        help="the encoder (a path or Hub id; default the packaged MiniLM)")
    parser.add_argument("--out", default="bench_out")
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    results = {}
    # Beam's way: the copy in this process, served by its threads
    beam_way = ("bench_in_worker", tempfile.mkdtemp(prefix="bench_model_server"))
    handle = multi_process_shared.MultiProcessShared(
        functools.partial(DeviceModel, _use(args.device, args.model)), tag=beam_way[0],
        path=beam_way[1], always_proxy=True)
    handle.acquire()
    for name, busy in (("in_worker_idle", False), ("in_worker_busy", True)):
        results[name] = _measure(beam_way, args.device, args.model, busy, args.windows, args.window,
                                 args.phase_s)
    # a process of its own
    serving = model_server.new_serving("bench_own_process")
    served = model_server.serve(functools.partial(DeviceModel, _use(args.device, args.model)),
                                serving)
    results["own_process_busy"] = _measure(serving, args.device, args.model, True,
                                           args.windows, args.window, args.phase_s)
    served.stop()
    print(f"a served {args.model or 'MiniLM (packaged)'} on {args.device}, windows of "
          f"{args.window} new texts, one client process:")
    for name, r in results.items():
        print(f"  {name:17} {r['ms_per_window']:8.2f} ms/window {r['windows_per_s']:8.1f} "
              f"windows/s ({r['windows']} windows)")
    ratio = results["in_worker_busy"]["ms_per_window"] / results["own_process_busy"]["ms_per_window"]
    print(f"  in_worker_busy / own_process_busy: {ratio:.1f}x the time per window")
    trips = round_trips()
    print(f"a call's round trip (2,000 calls, median of 5): {trips['ours']} µs through the "
          f"project's channel, {trips['beam']} µs through Beam's MultiProcessShared")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model_server.json").write_text(json.dumps(
        {"device": args.device, "results": results, "busy_over_own": round(ratio, 2),
         "round_trip_us": trips}, indent=2))
    print(f"wrote {out / 'model_server.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
