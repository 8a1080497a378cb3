"""What clients say about themselves through the reports topic, as records: an
instrumented consumer's report and a Spark listener's. exporter/reports/decode.py makes
them from the wire format; the Kafka worker sends them to the runner with each cycle's
snapshot (contracts/worker.py), and the evaluator reads them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from exporter.contracts.snapshot import TP


class CommitMode(StrEnum):
    """How a consumer commits, from its own configuration (``enable.auto.commit``)."""

    AUTO = "auto"  # every auto_commit_interval seconds, by the client
    MANUAL = "manual"  # when the application says
    MIXED = "mixed"  # a group's members differ (a group's exposure only, never a report)


# What one consumer's report may say.
REPORTED_COMMIT_MODES = (CommitMode.AUTO, CommitMode.MANUAL)


class ConnectSide(StrEnum):
    """Where a Spark listener runs under Spark Connect (a classic driver: neither)."""

    CLIENT = "client"  # PySpark 4.x: in the client, apart from the server that runs the query
    SERVER = "server"  # PySpark 3.5: in the server's Python listener worker


class SparkEvent(StrEnum):
    """What made a Spark listener send its report."""

    STARTED = "started"  # the query started
    PROGRESS = "progress"  # a micro-batch ended (Spark's QueryProgressEvent)
    IDLE = "idle"  # the query has no new data (QueryIdleEvent)
    HEARTBEAT = "heartbeat"  # the listener's own timer
    TERMINATED = "terminated"  # the query ended


@dataclass(frozen=True, slots=True)
class ConsumerReport:
    group: str
    client_id: str
    member_id: str
    host: str
    sent_at: float
    last_poll: float
    interval: float
    positions: dict[TP, int]
    committed: dict[TP, int]
    closed: bool
    received_at: float
    rebalances: int | None = None  # the client's own cumulative rebalance count
    commit_mode: CommitMode | None = None  # auto or manual; None from reporters that do not say
    auto_commit_interval: float | None = None  # seconds, with commit_mode "auto"

    def poll_age(self, now: float) -> float:
        return max(0.0, self.sent_at - self.last_poll) + max(0.0, now - self.received_at)


@dataclass(frozen=True, slots=True)
class RunningBatch:
    """A Spark micro-batch planned (offset log) and not yet committed (commit log)."""

    batch_id: int | None
    start_offsets: dict[TP, int]  # where it starts: the end of the last committed batch
    end_offsets: dict[TP, int]


@dataclass(frozen=True, slots=True)
class SparkReport:
    group: str
    query_id: str
    run_id: str
    name: str | None
    sent_at: float
    event: SparkEvent
    batch_id: int | None
    batch_started: float | None
    last_progress: float | None
    batch_duration_ms: float | None
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    interval: float
    end_offsets: dict[TP, int]
    latest_offsets: dict[TP, int]
    exception: str | None
    received_at: float
    # The batch planned but not committed: None when unknown (older listeners), else
    # RunningBatch (no batch running: empty offset maps, batch_id None).
    running: RunningBatch | None = None
    connect: ConnectSide | None = None  # under Spark Connect: where the listener runs
    server_seen: float | None = None  # a client listener: the server's last word on the query
    server_error: str | None = None  # a client listener: why its last probe of the server failed

    @property
    def terminated(self) -> bool:
        return self.event == SparkEvent.TERMINATED

    def server_silent(self, now: float) -> float | None:
        """Seconds since the Connect server last spoke about the query, as its client listener
        reports (None: not a Connect client, or an older listener)."""
        if self.connect != ConnectSide.CLIENT or self.server_seen is None:
            return None
        return max(0.0, self.sent_at - self.server_seen) + max(0.0, now - self.received_at)

    def batch_running(self, now: float) -> float | None:
        if self.batch_started is None:
            return None
        return max(0.0, self.sent_at - self.batch_started) + max(0.0, now - self.received_at)

    def progress_age(self, now: float) -> float | None:
        if self.last_progress is None:
            return None
        return max(0.0, self.sent_at - self.last_progress) + max(0.0, now - self.received_at)


Report = ConsumerReport | SparkReport
