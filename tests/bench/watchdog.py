"""Runs a command under a memory watchdog: kills its process tree above a resident limit.

    python -m tests.bench.watchdog --max_gb 6 -- python -m pytest ...

Polls the resident memory of the command and all its descendants (/proc) every 0.2 s;
above `--max_gb` the whole tree is killed and the exit status is 137. Prints the peak
resident memory of the tree when the command ends. Large benchmarks run under it, so a
regression cannot take the shared machine down.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

_PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (from /proc/*/stat parent ids)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, ()))
    return out


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants (0 for those gone meanwhile)."""
    total = 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


def largest_high_water(pid: int) -> int:
    """The largest peak resident bytes (VmHWM) of a process and its descendants. A
    process's own since its exec: unlike the rusage of a child forked from a large parent,
    which starts from the parent's size."""
    largest = 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        largest = max(largest, int(line.split()[1]) * 1024)
                        break
        except (OSError, IndexError, ValueError):
            pass
    return largest


class HighWater:
    """Polls `largest_high_water` of a process tree until stopped; keeps the maximum."""

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HighWater:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, largest_high_water(self.pid))
            self._stop.wait(self.interval)


class Watchdog:
    """Polls a process tree's resident memory, keeps the peak, kills it above `limit`."""

    def __init__(self, pid: int, limit_bytes: int, interval_s: float = 0.2) -> None:
        self.pid = pid
        self.limit = limit_bytes
        self.interval = interval_s
        self.peak = 0
        self.killed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = tree_rss(self.pid)
            self.peak = max(self.peak, rss)
            if rss > self.limit:
                self.killed = True
                for p in reversed(descendants(self.pid)):
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
                return
            self._stop.wait(self.interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max_gb", type=float, default=6.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    started = time.perf_counter()
    child = subprocess.Popen(command)
    dog = Watchdog(child.pid, int(args.max_gb * (1 << 30))).start()
    rc = child.wait()
    dog.stop()
    print(f"watchdog: peak RSS {dog.peak / (1 << 30):.2f} GB, {time.perf_counter() - started:.0f} s"
          f"{', KILLED above the limit' if dog.killed else ''}", file=sys.stderr, flush=True)
    return 137 if dog.killed else rc


if __name__ == "__main__":
    sys.exit(main())
