"""The live shape of ``bench_core --live``: a fleet whose every value changes every cycle.

One thread, in rounds: it writes ``records`` records to every partition of the topic,
waits for them to be acknowledged, then commits every group ``behind`` records below the
new high watermark (Admin API, assign()-style: no members), 200 groups' commits in
flight at a time. A round starts ``every`` seconds after the previous one started, or at
once when it took longer. Each group thus reads ``ok`` to an exporter (it keeps up), while
its committed offset, its HW and its lag seconds move all the time.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

COMMIT_BATCH = 200


@dataclass
class Round:
    start: float
    end: float
    failed: int  # groups whose commit failed in this round


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
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        try:
            while not self._stop.is_set():
                start = time.monotonic()
                self._write(producer)
                failed = self.commit(admin, self.gids, self.topic, self.partitions, self._at)
                self.rounds.append(Round(start, time.monotonic(), len(failed)))
                self._stop.wait(max(0.0, start + self.every - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - reported in the output, the run goes on
            self.error = f"{type(e).__name__}: {e}"

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
        return (f"live: every group committed {n} time{'s' * (n != 1)} in the {span:.1f} s measured "
                f"(every {span / n:.1f} s, target {self.every:g} s), {failed} commits failed; a round "
                f"(write {self.records} records to each of {self.partitions} partitions, commit "
                f"{len(self.gids)} groups {self.behind} behind) took {statistics.median(took):.2f} s "
                f"median, {max(took):.2f} s max {self.error}").rstrip()
