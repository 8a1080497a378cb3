"""All Kafka I/O of one cluster, in a child process.

Why a process: librdkafka aborts the whole process on some internal
assertions in rare failure paths. We hit one in a real coordinator-failover
test (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``
while describe/offset-fetch requests were timing out). With every librdkafka
client (sampler, record-timestamp reader, report reader) in a child, such an
abort costs one cycle: the main process keeps serving what it knew with
``lagwatch_up 0``, counts ``lagwatch_errors_total{stage="worker_crash"}``,
and starts a new child, which re-reads the compacted reports topic.
Messages are plain pickled dataclasses over a multiprocessing pipe.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import signal
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


def _serve(conn: Connection, cfg: ClusterConfig, thresholds: Thresholds, log_level: str) -> None:
    """Child process main loop: answer requests until the parent goes away."""
    with contextlib.suppress(Exception):  # die with the parent even if it is SIGKILLed
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("lagwatch.librdkafka").setLevel(max(logging.WARNING, logging.getLogger().level))
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
        elif kind == "stop":
            break
    if reports:
        reports.stop()
    exact.close()
    sampler.close()


class KafkaWorker:
    """Parent-side handle: one request at a time, with a deadline; restarts a dead child."""

    def __init__(self, cfg: ClusterConfig, thresholds: Thresholds, log_level: str = "INFO") -> None:
        self.cfg, self.thresholds, self.log_level = cfg, thresholds, log_level
        self._ctx = multiprocessing.get_context("spawn")
        self.proc: Any = None
        self.conn: Connection | None = None
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _ensure(self) -> Connection:
        if self.proc is not None and self.proc.is_alive() and self.conn is not None:
            return self.conn
        if self.proc is not None:
            self.restarts += 1
            self._reap()
        parent, child = self._ctx.Pipe()
        self.proc = self._ctx.Process(target=_serve, name=f"lagwatch-kafka-{self.cfg.name}",
                                      args=(child, self.cfg, self.thresholds, self.log_level),
                                      daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        return parent

    def _call(self, msg: tuple[str, Any], timeout: float) -> Any:
        conn = self._ensure()
        try:
            conn.send(msg)
            if not conn.poll(timeout):
                self._reap()
                raise WorkerCrashed(f"Kafka worker did not answer within {timeout:.0f}s; restarted")
            return conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            code = self.proc.exitcode if self.proc is not None else None
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
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(10)

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()

    def close(self) -> None:
        if self.conn is not None and self.proc is not None and self.proc.is_alive():
            with contextlib.suppress(Exception):
                self.conn.send(("stop", None))
                self.proc.join(10)
        self._reap()
