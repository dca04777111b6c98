"""METEOR 1.5's JVM: the jar shipped in pycocoevalcap, spoken to over -stdio.

One persistent `java -jar -Xmx2G meteor-1.5.jar - - -stdio -l en -norm` per
`MeteorProcess`. For each (prediction, reference) pair a `SCORE ||| reference |||
prediction` line yields the alignment statistics; one `EVAL ||| stats ||| ...` line then
yields one score per pair (and the corpus aggregate, which is ignored). The prediction is
cleaned as coco does (`|||` removed, double spaces collapsed once). Unlike coco, which
waits for each reply before sending the next line, a whole batch is written by a feeder
thread while the replies are read, so the JVM never idles on a round trip.

Starting the JVM costs about 13 CPU-seconds (METEOR loads its paraphrase and synonym
tables), so a process keeps the JVMs its metrics have finished with (`take` and `give_back`:
at most `MAX_IDLE` idle per command line, each used by one metric at a time) for the next
metric that needs one: the next pipeline run in the same process, or another scoring step
of the same run. They stop when the process exits (or when their stdin closes, if the
process is killed).
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import threading
from collections.abc import Sequence

logger = logging.getLogger(__name__)

# JVM flags that change speed only (Java arithmetic is strict IEEE whatever the collector or
# JIT tier). The serial collector spent about 10% less CPU than the default G1 on 100,000
# pairs on a 2-core machine; C1-only compilation (-XX:TieredStopAtLevel=1) warms up faster
# but was 25% slower over that many pairs.
DEFAULT_JVM_OPTIONS = ("-XX:+UseSerialGC",)
# Idle JVMs a process keeps per command line (each holds up to its -Xmx of memory).
MAX_IDLE = 2


def meteor_dir() -> str:
    """Folder of meteor-1.5.jar (and its paraphrase data) inside pycocoevalcap."""
    import pycocoevalcap.meteor.meteor as coco_meteor

    return os.path.dirname(os.path.abspath(coco_meteor.__file__))


def clean_hypothesis(text: str) -> str:
    """coco's cleaning of the hypothesis before it goes into a SCORE line."""
    return text.replace("|||", "").replace("  ", " ")


def command(java: str, max_heap: str, jvm_options: Sequence[str]) -> list[str]:
    """The command line of a METEOR 1.5 JVM (run in `meteor_dir()`)."""
    return [java, *jvm_options, "-jar", f"-Xmx{max_heap}", "meteor-1.5.jar", "-", "-",
            "-stdio", "-l", "en", "-norm"]


class MeteorProcess:
    """A running METEOR 1.5 JVM speaking the -stdio protocol.

    Args:
        java: java executable.
        max_heap: the -Xmx value.
        jvm_options: further JVM flags (before -jar).
    """

    def __init__(self, java: str = "java", max_heap: str = "2G",
                 jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS) -> None:
        cmd = command(java, max_heap, jvm_options)
        self._proc = subprocess.Popen(
            cmd, cwd=meteor_dir(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._lock = threading.Lock()
        logger.info("started METEOR 1.5 (pid %d)", self._proc.pid)

    @property
    def args(self) -> list[str]:
        """The JVM's command line."""
        return list(self._proc.args)

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def _exchange(self, lines: Sequence[str], replies: int) -> list[str]:
        payload = "".join(f"{line}\n" for line in lines).encode("utf-8")
        error: list[BaseException] = []

        def feed() -> None:
            try:
                self._proc.stdin.write(payload)
                self._proc.stdin.flush()
            except OSError as err:  # the JVM died; reported by the reader below
                error.append(err)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        out = []
        for _ in range(replies):
            line = self._proc.stdout.readline()
            if not line:
                break
            out.append(line.decode("utf-8").strip())
        feeder.join()
        if len(out) != replies or error:
            raise RuntimeError(
                f"METEOR process stopped answering (exit code {self._proc.poll()}, "
                f"{len(out)} of {replies} replies, write error: {error or None})"
            )
        return out

    def score_lines(self, score_lines: Sequence[str]) -> list[float]:
        """Segment scores for `SCORE ||| ...` lines, in order."""
        if not score_lines:
            return []
        with self._lock:
            stats = self._exchange(score_lines, len(score_lines))
            replies = self._exchange(["EVAL ||| " + " ||| ".join(stats)], len(stats) + 1)
        return [float(r) for r in replies[: len(stats)]]

    def score_pairs(self, pairs: Sequence[tuple[str, Sequence[str]]]) -> list[float]:
        """METEOR of (hypothesis, references) pairs, coco's SCORE line for each."""
        lines = [" ||| ".join(("SCORE", " ||| ".join(refs), clean_hypothesis(hyp)))
                 for hyp, refs in pairs]
        return self.score_lines(lines)

    def close(self) -> None:
        """Stops the JVM."""
        if self._proc.stdin and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:
                logger.debug("METEOR stdin already closed")
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        logger.info("stopped METEOR 1.5 (pid %d)", self._proc.pid)


_idle: dict[tuple[str, ...], list[MeteorProcess]] = {}
_idle_lock = threading.Lock()


def take(java: str = "java", max_heap: str = "2G",
         jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS) -> MeteorProcess:
    """A running JVM for one user: an idle one of this command line, else a new one."""
    key = tuple(command(java, max_heap, jvm_options))
    with _idle_lock:
        idle = _idle.get(key, [])
        while idle:
            process = idle.pop()
            if process.alive:
                return process
    return MeteorProcess(java, max_heap, jvm_options)


def give_back(process: MeteorProcess) -> None:
    """Keeps a JVM its user has finished with for the next `take` (stopped instead when
    it has died or `MAX_IDLE` of its command line are idle already)."""
    with _idle_lock:
        idle = _idle.setdefault(tuple(process.args), [])
        if process.alive and len(idle) < MAX_IDLE and process not in idle:
            idle.append(process)
            return
    process.close()


@atexit.register
def close_idle() -> None:
    """Stops every idle JVM of this process."""
    with _idle_lock:
        processes = [p for idle in _idle.values() for p in idle]
        _idle.clear()
    for process in processes:
        process.close()
