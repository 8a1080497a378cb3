"""The live shape of ``bench_core --live``: a fleet whose every value changes every cycle.

One thread, in rounds: it writes ``records`` records to every partition of the topic,
waits for them to be acknowledged, then commits every group ``behind`` records below the
new high watermark (assign()-style: no members). A round starts ``every`` seconds after
the previous one started, or at once when it took longer. Each group thus reads ``ok`` to
an exporter (it keeps up), while its committed offset, its HW and its lag seconds move all
the time.

The writer stands in for consumers that run on other machines, yet it shares the measured
machine's cores with the exporter and the peers. It commits with OffsetCommit requests
built once a round (``writer="raw"``, :mod:`bench.commits`), or through ``confluent_kafka``'s
Admin client, 200 groups in flight (``writer="admin"``, several times the CPU a round).
:meth:`LiveFleet.summary` says what a round cost.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.commits import Committer
from devenv.procs import cpu_seconds

COMMIT_BATCH = 200
WRITERS = ("raw", "admin")


@dataclass
class Round:
    start: float
    end: float
    failed: int  # groups whose commit failed in this round
    cpu: float  # at its end: CPU seconds of this process's threads but the main one


@dataclass
class LiveFleet:
    bootstrap: str
    topic: str
    gids: list[str]
    partitions: int
    hw: int  # the high watermark of every partition when the thread starts
    commit: Callable[[AdminClient, list[str], str, int, Callable[[int], int]], list[str]]
    every: float = 2.0
    records: int = 5
    behind: int = 3
    writer: str = "raw"  # one of WRITERS
    rounds: list[Round] = field(default_factory=list)
    error: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LiveFleet:
        self._thread = threading.Thread(target=self._run, name="live-fleet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(300)

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        committer = None
        try:
            if self.writer == "raw":
                committer = Committer(self.bootstrap, self.gids, self.topic, self.partitions)
            else:
                admin = AdminClient({"bootstrap.servers": self.bootstrap})
            while not self._stop.is_set():
                start = time.monotonic()
                self._write(producer)
                failed = (committer.commit(self.hw - self.behind) if committer is not None else
                          self.commit(admin, self.gids, self.topic, self.partitions, self._at))
                self.rounds.append(Round(start, time.monotonic(), len(failed), _cpu_beside_main()))
                self._stop.wait(max(0.0, start + self.every - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - reported in the output, the run goes on
            self.error = f"{type(e).__name__}: {e}"
        finally:
            if committer is not None:
                committer.close()

    def _at(self, _group: int) -> int:
        return self.hw - self.behind

    def _write(self, producer: Producer) -> None:
        for part in range(self.partitions):
            for _ in range(self.records):
                producer.produce(self.topic, value=b"x", partition=part)
            producer.poll(0)
        if producer.flush(60) != 0:
            raise RuntimeError("records not acknowledged in 60 s")
        self.hw += self.records

    def summary(self, since: float, until: float) -> str:
        """How often every group committed between ``since`` and ``until`` (monotonic)."""
        inside = [r for r in self.rounds if since <= r.end <= until]
        span = until - since
        if not inside:
            return f"live: no round of commits ended in the {span:.1f} s measured {self.error}".rstrip()
        took = [r.end - r.start for r in inside]
        failed = sum(r.failed for r in inside)
        n = len(inside)
        before = [r for r in self.rounds if r.end < inside[0].end]
        cpu = (f"; {self.writer} writer: {(inside[-1].cpu - before[-1].cpu) / n:.2f} s of CPU a round"
               if before else "")
        return (f"live: every group committed {n} time{'s' * (n != 1)} in the {span:.1f} s measured "
                f"(every {span / n:.1f} s, target {self.every:g} s), {failed} commits failed; a round "
                f"(write {self.records} records to each of {self.partitions} partitions, commit "
                f"{len(self.gids)} groups {self.behind} behind) took {statistics.median(took):.2f} s "
                f"median, {max(took):.2f} s max{cpu} {self.error}").rstrip()


def _cpu_beside_main() -> float:
    """CPU seconds of this process's threads other than the main one: the writer's (its
    thread, its clients' librdkafka threads, :class:`~bench.commits.Committer`'s lanes),
    the benchmark measuring from the main thread."""
    return cpu_seconds("self") - cpu_seconds("self", os.getpid())
