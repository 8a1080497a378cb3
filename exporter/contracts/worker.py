"""The messages between the runner (main process) and its Kafka worker process, pickled
over the worker's pipe: one start message, then one request at a time, each answered by
exactly one reply, but for :class:`PartitionLinesChunk`, which is answered by none (the
cycle's :class:`PartitionLinesRequest` collects what the chunks rendered). The worker
keeps nothing between requests that the runner does not also hold: the sampler's memory
goes with a SampleRequest to a worker that does not hold it, and each SampleReply
brings what its cycle changed in it (exporter/contracts/sampling.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exporter.contracts.packed import Packed
from exporter.contracts.reports import ConsumerReport, SparkReport
from exporter.contracts.sampling import MemoryChanges, SamplerMemory
from exporter.contracts.snapshot import TP, Snapshot

if TYPE_CHECKING:  # only annotations: the contracts import no application module
    from exporter.config import ClusterConfig, Thresholds

# (topic, partition, offset) -> the record's timestamp, seconds since the epoch
Timestamps = dict[tuple[str, int, int], float]


@dataclass(frozen=True, slots=True)
class WorkerStart:
    """The first message a new worker reads: what it samples and how it logs."""

    cluster: ClusterConfig  # the one cluster this worker reads
    thresholds: Thresholds  # for the reports reader's liveness judgement of report streams
    log_level: str  # the root log level of the worker process


@dataclass(frozen=True, slots=True)
class SampleRequest:
    """Sample one cycle."""

    # The runner's copy of the sampler's memory, for a worker that does not hold it (new,
    # or its last cycle failed); None: go on from the worker's own.
    memory: SamplerMemory | None


@dataclass(frozen=True, slots=True)
class WorkerCounters:
    """The worker's counters, cumulative over the worker process's life (never going back)."""

    requests_total: int = 0  # Kafka requests sent for sampling
    reports_received: dict[str, int] = field(default_factory=dict)  # per report kind, decoded
    reports_dropped: dict[str, int] = field(default_factory=dict)  # per reason, refused
    reports_requests: int = 0  # Kafka requests of the reports tail


@dataclass(slots=True)
class SampleReply:
    """One cycle's sample, with the worker's counters."""

    snapshot: Snapshot  # what the cycle saw; ok=False when the cluster could not be read
    consumer_reports: dict[str, list[ConsumerReport]]  # per group, its clients' latest reports
    spark_reports: dict[str, SparkReport]  # per Spark query, its latest report
    counters: WorkerCounters
    # What this cycle changed in the sampler's memory, for the runner to apply to its
    # copy; None when the cycle raised (the runner keeps its copy and sends it next time).
    memory_changes: MemoryChanges | None = None
    # With replicas (state.replicas): this replica's shards, and the state topic as read
    # back for the shards newly assigned (imported before this cycle is judged).
    shards: Shards | None = None
    state: StateLoadReply | None = None


@dataclass(frozen=True, slots=True)
class TimestampsRequest:
    """Read the timestamps of the records at these offsets (exact lag seconds)."""

    wanted: list[tuple[TP, int]]  # (partition, offset) pairs


@dataclass(frozen=True, slots=True)
class TimestampsReply:
    """The timestamps found, or why none could be read."""

    found: Timestamps  # empty when error is set
    error: str | None = None  # the reader's failure; the runner counts it as exact_lag


@dataclass(frozen=True, slots=True)
class StateLoadRequest:
    """Read the state topic whole (exporter/state/topic.py), once after a start."""


@dataclass(frozen=True, slots=True)
class StateLoadReply:
    """The state topic read to its end: each key's last value (None: deleted)."""

    cluster_id: str | None  # the Kafka cluster's id (metadata), None when unknown
    records: dict[bytes, tuple[bytes | None, float]]  # key -> (value, record timestamp)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StateWriteRequest:
    """Write these records to the state topic: (key, value or None, the name that places it)."""

    records: list[tuple[bytes, bytes | None, str]]
    # Shards being revoked whose groups these records wrote: once delivered, another
    # replica may take them (exporter/state/coordination.py).
    release: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class LeaveRequest:
    """Leave the coordination group now (a replica shutting down hands its shards on)."""


@dataclass(frozen=True, slots=True)
class Shards:
    """This replica's share of a cluster's groups, as the coordination group assigned it
    (state partitions; exporter/state/placement.py places a group in one)."""

    owned: frozenset[int]  # assigned and read back: their groups are judged here
    restored: frozenset[int]  # read back for this cycle (the records come with it)
    revoking: frozenset[int]  # owned, handed to another replica once written
    partitions: int  # the state topic's (N)
    offsets_partitions: int  # __consumer_offsets' (the modulus of a group's P)
    refused: str | None = None  # why this replica may not join: it judges every group


@dataclass(frozen=True, slots=True)
class StateWriteReply:
    written: int
    failed: int
    denied: str | None = None  # why lagwatch may not write the topic (authorization)
    error: str | None = None
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionLinesChunk:
    """Judged groups whose per-partition lines the worker renders (exporter/expose/
    partition_lines.py); no reply. A chunk of a cycle other than the one the worker holds
    starts that cycle's lines afresh."""

    cycle: int  # the runner's cycle number
    labels: list[str]  # per group: its label text (cluster and group, escaped)
    sizes: list[int]  # per group: its rows, in order
    tps: list[TP]  # every group's (topic, partition) rows, one after the other
    # The rows' columns (exporter/contracts/view.py PartitionRows) as their arrays' bytes,
    # native int64 or float64, read with the standard library's ``array``: the worker
    # imports no numpy (its interpreter stays about 10 MB smaller).
    committed: bytes  # int64
    position: bytes  # int64
    lag_offsets: bytes  # int64
    lag_seconds: bytes  # float64
    stalled_seconds: bytes  # float64


@dataclass(frozen=True, slots=True)
class PartitionLinesRequest:
    """The lines of this cycle's chunks, rendered: answered by :class:`PartitionLinesReply`."""

    cycle: int


# The five per-partition families' bodies, in the contract's order: text, or deflated.
PartitionBodies = tuple[bytes | Packed, ...]


@dataclass(frozen=True, slots=True)
class PartitionLinesReply:
    bodies: PartitionBodies | None  # None: rendering failed (error says why)
    error: str | None = None
