"""All Kafka I/O of one cluster, in a child process.

Why a process: librdkafka kills the whole process in some failure paths: an
assertion when describe or offset-fetch requests time out during a coordinator
failover (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``,
confluentinc/librdkafka#4605), and a segfault whenever the admin client's OffsetFetch
meets a coordinator that moved (confluentinc/librdkafka#5040: ``rd_kafka_cgrp_op`` on
the NULL consumer group of an admin client). With every librdkafka
client (sampler, record-timestamp reader, report reader) in a child, such an
abort costs one cycle: the main process keeps serving what it knew with
``lagwatch_up 0``, counts ``lagwatch_errors_total{stage="worker_crash"}``,
and starts a new child, which re-reads the compacted reports topic.
A Python exception inside the child's sampling is no crash: the child reports
it as that cycle's ``sample_exception`` error and keeps running.
Messages are the pickled dataclasses of exporter/contracts/worker.py over the child's
stdin/stdout pipes.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from exporter import logs
from exporter.config import ClusterConfig, Thresholds
from exporter.contracts.errors import ErrorRecord, ErrorStage
from exporter.contracts.sampling import SamplerMemory
from exporter.contracts.snapshot import TP, Snapshot
from exporter.contracts.worker import (
    LeaveRequest,
    PartitionLinesChunk,
    PartitionLinesReply,
    PartitionLinesRequest,
    SampleReply,
    SampleRequest,
    StateLoadReply,
    StateLoadRequest,
    StateWriteReply,
    StateWriteRequest,
    Timestamps,
    TimestampsReply,
    TimestampsRequest,
    WorkerCounters,
    WorkerStart,
)
from exporter.expose.partition_lines import PartitionLines
from exporter.runtime import collect_less

if TYPE_CHECKING:
    from exporter.kafka.sampler import Sampler
    from exporter.kafka.timestamps import RecordTimestamps
    from exporter.reports.reader import ReportReader
    from exporter.state.coordination import Coordinator
    from exporter.state.topic import StateTopic

log = logging.getLogger("lagwatch.worker")


# The runner -> worker pipe's buffer (the kernel's default pipe-max-size).
PIPE_BYTES = 1 << 20


class WorkerCrashed(Exception):
    pass


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


def _serve(conn: _Pipe, start: WorkerStart) -> None:
    """Child process main loop: answer requests until the parent goes away."""
    with contextlib.suppress(Exception):  # die with the parent even if it is SIGKILLed
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
    # Ctrl-C and SIGTERM are the parent's business: a signal sent to the whole process group
    # (a terminal, `timeout`, a service manager) must not look like a worker crash; the
    # parent stops its worker itself, and the worker dies with it in any case.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # librdkafka has aborted (SIGABRT) and segfaulted in this process around broker
    # failovers; the Python stack of every thread, dumped to the log, says which request
    # was in flight, which a bug report upstream needs (and the exit code alone does not).
    faulthandler.enable(all_threads=True)
    collect_less()
    cfg = start.cluster
    logs.setup(start.log_level)
    from exporter.kafka.sampler import Sampler, client_config
    from exporter.kafka.timestamps import RecordTimestamps

    sampler = Sampler(cfg)
    exact = RecordTimestamps(client_config(cfg), cfg.request_timeout)
    reports = _replayed_reports(start, sampler)
    ctx = _Clients(cfg, sampler, exact, reports)
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            break
        if isinstance(req, PartitionLinesChunk):  # answered by none
            ctx.render(req)
            del req
            continue
        reply = ctx.answer(req)
        if reply is None:  # a parent of another version: no answer, its deadline restarts us
            log.error("cluster %s: unknown request %s", cfg.name, type(req).__name__)
            continue
        try:
            conn.send(reply)
        except OSError:
            break
        del reply  # the snapshot must not stay alive until the next cycle
    ctx.close()


class _Clients:
    """The worker's Kafka clients of one cluster, and the request each answers."""

    def __init__(self, cfg: ClusterConfig, sampler: Sampler, exact: RecordTimestamps,
                 reports: ReportReader | None) -> None:
        self.cfg, self.sampler, self.exact, self.reports = cfg, sampler, exact, reports
        self.counts = WorkerCounters()
        self.state: StateTopic | None = None  # the state topic's clients, made at first use
        self.coordinator: Coordinator | None = None  # with replicas, made at the first cycle
        self.lines: PartitionLines | None = None  # the per-partition lines of the runner's cycle
        self.lines_error: str | None = None  # why this cycle's lines failed, if they did

    def render(self, chunk: PartitionLinesChunk) -> None:
        """A chunk's lines added to its cycle's (exporter/expose/partition_lines.py); a
        Python exception fails the cycle's lines, and the runner renders them itself."""
        if self.lines is None or self.lines.cycle != chunk.cycle:
            self.lines, self.lines_error = PartitionLines(chunk.cycle), None
        if self.lines_error is not None:
            return
        try:
            self.lines.add(chunk)
        except Exception as e:  # noqa: BLE001 - said in the reply; the runner renders them
            log.exception("cluster %s: rendering partition lines failed", self.cfg.name)
            self.lines_error = f"{type(e).__name__}: {e}"

    def _rendered(self, req: PartitionLinesRequest) -> PartitionLinesReply:
        lines, error = self.lines, self.lines_error
        self.lines, self.lines_error = None, None
        if lines is None or lines.cycle != req.cycle:  # no chunk this cycle: no line
            lines, error = PartitionLines(req.cycle), None
        if error is not None:
            return PartitionLinesReply(None, error)
        try:
            return PartitionLinesReply(lines.bodies())
        except Exception as e:  # noqa: BLE001 - said in the reply; the runner renders them
            log.exception("cluster %s: rendering partition lines failed", self.cfg.name)
            return PartitionLinesReply(None, f"{type(e).__name__}: {e}")

    def _state(self) -> StateTopic:
        if self.state is None:
            from exporter.state.topic import StateTopic
            self.state = StateTopic(self.cfg)
        return self.state

    def answer(self, req: Any) -> (SampleReply | TimestampsReply | StateLoadReply | StateWriteReply
                                   | PartitionLinesReply | None):
        if isinstance(req, SampleRequest):
            return self._sample(req)
        if isinstance(req, PartitionLinesRequest):
            return self._rendered(req)
        if isinstance(req, TimestampsRequest):
            try:
                return TimestampsReply(found=self.exact.lookup(req.wanted))
            except Exception as e:  # noqa: BLE001 - reported to the parent, which counts it
                return TimestampsReply(found={}, error=str(e))
        if isinstance(req, StateLoadRequest | StateWriteRequest):
            reply = _state(self._state(), req)
            if isinstance(req, StateWriteRequest) and req.release and self.coordinator is not None:
                self._state().flush(self.cfg.request_timeout)  # delivered before handed on
                self.coordinator.release(req.release)
            return reply
        if isinstance(req, LeaveRequest):
            if self.coordinator is not None:
                self.coordinator.close()
            return StateWriteReply(0, 0)
        return None

    def _sample(self, req: SampleRequest) -> SampleReply:
        shards, load = None, None
        if self.cfg.state_replicas:
            if self.coordinator is None:
                from exporter.state.coordination import Coordinator
                self.coordinator = Coordinator(self.cfg, self._state())
            shards, load = self.coordinator.cycle()
            self.sampler.shards = shards
        sampled = _sample_or_fail(self.sampler, self.reports, req, self.counts)
        self.counts = sampled.counters  # for a later cycle that raises
        sampled.shards, sampled.state = shards, load
        return sampled

    def close(self) -> None:
        if self.reports:
            self.reports.stop()
        if self.coordinator is not None:
            self.coordinator.close()
        if self.state is not None:
            self.state.close()
        self.exact.close()
        self.sampler.close()


def _sample_or_fail(sampler: Sampler, reports: ReportReader | None, req: SampleRequest,
                    counts: WorkerCounters) -> SampleReply:
    """The cycle's reply; a Python exception is that cycle's sample_exception error."""
    try:
        return _sample(sampler, reports, req.memory)
    except Exception as e:  # noqa: BLE001 - a bug must cost one cycle, not the worker
        log.exception("cluster %s: sampling raised an exception (a bug in lagwatch; the "
                      "Kafka worker keeps running)", sampler.cfg.name)
        return _failed(sampler.cfg.name, counts, f"{type(e).__name__}: {e}")


def _replayed_reports(start: WorkerStart, sampler: Sampler) -> ReportReader | None:
    """The reports tail, started; None when the cluster reads no reports."""
    from exporter.reports.reader import ReportReader

    cfg = start.cluster
    if not cfg.reports_enabled:
        return None
    reports = ReportReader(cfg, start.thresholds)
    reports.start()
    # Replay the compacted reports before the first view, so that right after a
    # restart a hung Spark query or a livelocked consumer is already known; unless the
    # credentials are refused: then nothing can be replayed, and the first cycle says so.
    deadline = time.monotonic() + cfg.request_timeout
    while not reports.caught_up.wait(0.1) and time.monotonic() < deadline:
        if sampler.credential_error():
            break
    return reports


def _state(state: StateTopic, req: StateLoadRequest | StateWriteRequest
           ) -> StateLoadReply | StateWriteReply:
    """The state topic's request answered; a Python exception is that request's error."""
    try:
        return state.load() if isinstance(req, StateLoadRequest) else state.write(req.records)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which counts it
        log.exception("cluster %s: state topic request failed", state.cfg.name)
        if isinstance(req, StateLoadRequest):
            return StateLoadReply(None, {}, error=f"{type(e).__name__}: {e}")
        return StateWriteReply(0, len(req.records), error=f"{type(e).__name__}: {e}")


def _sample(sampler: Sampler, reports: ReportReader | None, memory: SamplerMemory | None
            ) -> SampleReply:
    if memory is not None:  # the runner's copy: this worker is new, or its last cycle failed
        sampler.memory = memory
    before = sampler.memory.copy()
    consumer_reports, spark_reports = reports.current() if reports else ({}, {})
    if sampler.shards is not None:  # another replica's groups are not this one's to judge
        consumer_reports = {g: r for g, r in consumer_reports.items() if sampler.judges(g)}
        spark_reports = {g: r for g, r in spark_reports.items() if sampler.judges(g)}
    spark_topics = {t for r in spark_reports.values() for (t, _) in r.end_offsets}
    snap = sampler.sample(spark_topics=spark_topics)
    counters = WorkerCounters(sampler.requests_total,
                              dict(reports.received) if reports else {},
                              dict(reports.dropped) if reports else {},
                              reports.requests if reports else 0)
    return SampleReply(snap, consumer_reports, spark_reports, counters, sampler.memory.changes_since(before))


def _failed(cluster: str, counts: WorkerCounters, error: str) -> SampleReply:
    """A cycle whose sampling raised: no data, one sample_exception error; the counters
    are the last ones known (they must never go back)."""
    snap = Snapshot(cluster=cluster, taken_at=time.time(), duration=0.0, partitions={}, groups={},
                    errors=(ErrorRecord(stage=ErrorStage.SAMPLE_EXCEPTION, message=error),), ok=False)
    return SampleReply(snap, {}, {}, counts)


def child_main() -> None:
    """The child's entry point: the protocol runs on stdin and a private copy
    of stdout; fd 1 then points at stderr so a stray print cannot corrupt it."""
    proto_out = os.dup(1)
    os.dup2(2, 1)
    conn = _Pipe(0, proto_out)
    try:
        start = conn.recv()
    except (EOFError, OSError):
        return
    _serve(conn, start)


class KafkaWorker:
    """Parent-side handle: one request at a time, with a deadline; restarts a dead child.

    A plain subprocess (not multiprocessing), so there is exactly one extra process
    per cluster and no resource-tracker helper."""

    def __init__(self, cfg: ClusterConfig, thresholds: Thresholds, log_level: str = "INFO") -> None:
        self.cfg, self.thresholds, self.log_level = cfg, thresholds, log_level
        self.proc: subprocess.Popen | None = None
        self.conn: _Pipe | None = None
        self.restarts = 0
        self._holds_memory: subprocess.Popen | None = None  # the process holding the runner's memory

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _ensure(self) -> _Pipe:
        if self.proc is not None and self.proc.poll() is None and self.conn is not None:
            return self.conn
        if self.conn is not None:  # it was serving and died since the last request
            raise self._crashed()
        if self.proc is not None:
            self.restarts += 1
            self._reap()
        self.proc = subprocess.Popen(
            # -c, not -m: as __main__ the module's classes would pickle as __main__.X
            [sys.executable, "-c", "from exporter.kafka.worker import child_main; child_main()"],
            stdin=subprocess.PIPE,
            # librdkafka runs a thread per broker; glibc gives each its own malloc arena
            # and their fragmentation, not data, dominated the worker's RSS at scale. The
            # mmap threshold fixed as in the main process (exporter/cli.py _tune_malloc):
            # the partition lines' buffers, left to a dynamic threshold, stay in the heap.
            env={**os.environ, "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2"),
                 "MALLOC_MMAP_THRESHOLD_": os.environ.get("MALLOC_MMAP_THRESHOLD_", str(128 * 1024))},
            stdout=subprocess.PIPE, close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        # The pipe takes its own copies of the descriptors; Popen's are closed now, so no
        # descriptor is ever closed twice (a reused number could belong to another cluster).
        self.conn = _Pipe(os.dup(self.proc.stdout.fileno()), os.dup(self.proc.stdin.fileno()))
        # Room for a few chunks of partition lines (about 200 KB each at 4,096 rows): with
        # the default 64 KB, judging waited at each send for the worker to finish the last.
        with contextlib.suppress(OSError, AttributeError):  # Linux only; capped by pipe-max-size
            fcntl.fcntl(self.proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self.proc.stdout.close()
        self.proc.stdin.close()
        self.conn.send(WorkerStart(self.cfg, self.thresholds, self.log_level))
        return self.conn

    def _call(self, msg: Any, timeout: float) -> Any:
        conn = self._ensure()
        try:
            conn.send(msg)
            if not conn.poll(timeout):
                self._reap()
                raise WorkerCrashed(f"Kafka worker did not answer within {timeout:.0f}s; restarted")
            return conn.recv()
        except (EOFError, OSError):
            raise self._crashed() from None

    def _crashed(self) -> WorkerCrashed:
        self._reap()
        code = self.proc.returncode if self.proc is not None else None
        return WorkerCrashed(f"Kafka worker process died (exit code {code}); restarting")

    def sample(self, memory: SamplerMemory) -> SampleReply:
        """One cycle. ``memory``, the runner's copy of the sampler's memory, goes only to a
        worker process that does not hold it: a new one, or one whose last cycle failed
        (its own may then be half a cycle on); the reply brings what the cycle changed."""
        held = self.proc is not None and self.proc is self._holds_memory and self.proc.poll() is None
        # Every stage of a cycle has its own request timeout; this only guards against a hang.
        reply = self._call(SampleRequest(None if held else memory), self.cfg.request_timeout * 12 + 30)
        assert isinstance(reply, SampleReply), type(reply)
        self._holds_memory = self.proc if reply.memory_changes is not None else None
        return reply

    def load_state(self) -> StateLoadReply:
        reply = self._call(StateLoadRequest(), self.cfg.request_timeout * 12 + 60)
        assert isinstance(reply, StateLoadReply), type(reply)
        return reply

    def write_state(self, records: list[tuple[bytes, bytes | None, str]],
                    release: frozenset[int] = frozenset()) -> StateWriteReply:
        reply = self._call(StateWriteRequest(records, release), self.cfg.request_timeout * 7 + 10)
        assert isinstance(reply, StateWriteReply), type(reply)
        return reply

    def leave(self) -> None:
        """Leave the coordination group (replicas), if the worker is running."""
        if self.proc is not None and self.proc.poll() is None and self.conn is not None:
            self._call(LeaveRequest(), self.cfg.request_timeout + 10)

    def send_lines(self, chunk: PartitionLinesChunk) -> bool:
        """A chunk of the cycle's judged groups to render (no answer). False: no worker is
        running (none is started for this: the runner renders what did not go)."""
        if self.conn is None:
            return False
        if self.proc is None or self.proc.poll() is not None:
            raise self._crashed()
        try:
            self.conn.send(chunk)
        except OSError:
            raise self._crashed() from None
        return True

    def partition_lines(self, cycle: int) -> PartitionLinesReply | None:
        """The lines of the cycle's chunks; None: no worker is running."""
        if self.conn is None:
            return None
        reply = self._call(PartitionLinesRequest(cycle), self.cfg.request_timeout + 30)
        assert isinstance(reply, PartitionLinesReply), type(reply)
        return reply

    def timestamps(self, wanted: list[tuple[TP, int]]) -> Timestamps:
        reply = self._call(TimestampsRequest(wanted), self.cfg.request_timeout * 3 + 10)
        assert isinstance(reply, TimestampsReply), type(reply)
        if reply.error is not None:
            raise RuntimeError(reply.error)
        return reply.found

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


