"""All Kafka I/O of one cluster, in a child process.

Why a process: librdkafka aborts the whole process on some internal
assertions in rare failure paths. We hit one in a real coordinator-failover
test (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``
while describe/offset-fetch requests were timing out). With every librdkafka
client (sampler, record-timestamp reader, report reader) in a child, such an
abort costs one cycle: the main process keeps serving what it knew with
``lagwatch_up 0``, counts ``lagwatch_errors_total{stage="worker_crash"}``,
and starts a new child, which re-reads the compacted reports topic.
Messages are pickled dataclasses over the child's stdin/stdout pipes.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from exporter.config import ClusterConfig, Thresholds
from exporter.reports import ConsumerReport, SparkReport
from exporter.snapshot import TP, Snapshot

log = logging.getLogger("lagwatch.worker")


class WorkerCrashed(Exception):
    pass


@dataclass
class SampleResult:
    snapshot: Snapshot
    consumer_reports: dict[str, list[ConsumerReport]]
    spark_reports: dict[str, SparkReport]
    requests_total: int
    reports_received: dict[str, int]
    reports_dropped: dict[str, int]


class _RepeatFilter(logging.Filter):
    """librdkafka repeats the same connection error several times a second while a
    broker is down; let each distinct message through once a minute."""

    def __init__(self, every: float) -> None:
        super().__init__()
        self.every = every
        self.last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        # librdkafka's lines start with a timestamp-free facility and end with counters
        key = re.sub(r"\d+(\.\d+)?(ms)?", "#", record.getMessage())
        now = time.monotonic()
        if now - self.last.get(key, -1e9) < self.every:
            return False
        if len(self.last) > 1000:
            self.last.clear()
        self.last[key] = now
        return True


class _Pipe:
    """A request/response channel over two file descriptors (pickled messages).

    It owns the descriptors it is given and closes them exactly once."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.reader = Connection(read_fd, writable=False)
        self.writer = Connection(write_fd, readable=False)

    def send(self, obj: Any) -> None:
        self.writer.send(obj)

    def recv(self) -> Any:
        return self.reader.recv()

    def poll(self, timeout: float) -> bool:
        return self.reader.poll(timeout)

    def close(self) -> None:
        for c in (self.reader, self.writer):
            with contextlib.suppress(Exception):
                c.close()


def _serve(conn: _Pipe, cfg: ClusterConfig, thresholds: Thresholds, log_level: str) -> None:
    """Child process main loop: answer requests until the parent goes away."""
    with contextlib.suppress(Exception):  # die with the parent even if it is SIGKILLed
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rd_log = logging.getLogger("lagwatch.librdkafka")
    rd_log.setLevel(max(logging.WARNING, logging.getLogger().level))
    rd_log.addFilter(_RepeatFilter(60.0))
    from exporter.lag import RecordTimestamps
    from exporter.report_reader import ReportReader
    from exporter.sampler import Sampler, client_config

    sampler = Sampler(cfg)
    exact = RecordTimestamps(client_config(cfg), cfg.request_timeout)
    reports: ReportReader | None = None
    if cfg.reports_enabled:
        reports = ReportReader(cfg, thresholds)
        reports.start()
        # Replay the compacted reports before the first view, so that right after a
        # restart a hung Spark query or a livelocked consumer is already known.
        reports.caught_up.wait(cfg.request_timeout)
    while True:
        try:
            kind, arg = conn.recv()
        except (EOFError, OSError):
            break
        if kind == "sample":
            consumer_reports, spark_reports = reports.current() if reports else ({}, {})
            spark_topics = {t for r in spark_reports.values() for (t, _) in r.end_offsets}
            snap = sampler.sample(extra_topics=spark_topics)
            conn.send(SampleResult(snap, consumer_reports, spark_reports, sampler.requests_total,
                                   dict(reports.received) if reports else {},
                                   dict(reports.dropped) if reports else {}))
        elif kind == "timestamps":
            try:
                conn.send(("ok", exact.lookup(arg)))
            except Exception as e:  # noqa: BLE001 - reported to the parent, which counts it
                conn.send(("error", str(e)))
    if reports:
        reports.stop()
    exact.close()
    sampler.close()


def child_main() -> None:
    """The child's entry point: the protocol runs on stdin and a private copy
    of stdout; fd 1 then points at stderr so a stray print cannot corrupt it."""
    proto_out = os.dup(1)
    os.dup2(2, 1)
    conn = _Pipe(0, proto_out)
    try:
        cfg, thresholds, log_level = conn.recv()
    except (EOFError, OSError):
        return
    _serve(conn, cfg, thresholds, log_level)


class KafkaWorker:
    """Parent-side handle: one request at a time, with a deadline; restarts a dead child.

    A plain subprocess (not multiprocessing), so there is exactly one extra process
    per cluster and no resource-tracker helper."""

    def __init__(self, cfg: ClusterConfig, thresholds: Thresholds, log_level: str = "INFO") -> None:
        self.cfg, self.thresholds, self.log_level = cfg, thresholds, log_level
        self.proc: subprocess.Popen | None = None
        self.conn: _Pipe | None = None
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _ensure(self) -> _Pipe:
        if self.proc is not None and self.proc.poll() is None and self.conn is not None:
            return self.conn
        if self.proc is not None:
            self.restarts += 1
            self._reap()
        self.proc = subprocess.Popen(
            # -c, not -m: as __main__ the module's classes would pickle as __main__.X
            [sys.executable, "-c", "from exporter.kafka_worker import child_main; child_main()"],
            stdin=subprocess.PIPE,
            # librdkafka runs a thread per broker; glibc gives each its own malloc arena
            # and their fragmentation, not data, dominated the worker's RSS at scale.
            env={**os.environ, "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2")},
            stdout=subprocess.PIPE, close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        # The pipe takes its own copies of the descriptors; Popen's are closed now, so no
        # descriptor is ever closed twice (a reused number could belong to another cluster).
        self.conn = _Pipe(os.dup(self.proc.stdout.fileno()), os.dup(self.proc.stdin.fileno()))
        self.proc.stdout.close()
        self.proc.stdin.close()
        self.conn.send((self.cfg, self.thresholds, self.log_level))
        return self.conn

    def _call(self, msg: tuple[str, Any], timeout: float) -> Any:
        conn = self._ensure()
        try:
            conn.send(msg)
            if not conn.poll(timeout):
                self._reap()
                raise WorkerCrashed(f"Kafka worker did not answer within {timeout:.0f}s; restarted")
            return conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            code = self.proc.poll() if self.proc is not None else None
            self._reap()
            raise WorkerCrashed(f"Kafka worker process died (exit code {code}); restarting") from None

    def sample(self) -> SampleResult:
        # Every stage of a cycle has its own request timeout; this only guards against a hang.
        return self._call(("sample", None), self.cfg.request_timeout * 12 + 30)

    def timestamps(self, wanted: list[tuple[TP, int]]) -> dict[tuple[str, int, int], float]:
        status, value = self._call(("timestamps", wanted), self.cfg.request_timeout * 3 + 10)
        if status != "ok":
            raise RuntimeError(value)
        return value

    def _reap(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            with contextlib.suppress(Exception):
                self.proc.wait(10)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()


