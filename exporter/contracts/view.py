"""The evaluated view of a cluster: what /metrics, the JSON API and the status page render.

Built once per cycle by the evaluator and never mutated afterwards, so
renderers can read it from any thread without locks.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from exporter.contracts.reports import CommitMode
from exporter.contracts.snapshot import TP, GroupType, KafkaGroupState, PartitionOffsets
from exporter.contracts.status import Status

# Label values in severity order (a group's status is its worst partition's).
STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
SEVERITY: dict[str, int] = {s.value: s.severity for s in Status}


class Membership(StrEnum):
    """How a group's partitions are consumed."""

    MEMBERS = "members"  # by the group's members
    OUTSIDE = "outside"  # no members; a client outside group membership commits (assign())
    NONE = "none"  # no members, and nobody commits


class RebalanceSource(StrEnum):
    """What a group's rebalance count rests on."""

    EPOCH = "epoch"  # the group epoch (KIP-848 consumer, streams and share groups): exact
    MEMBERSHIP = "membership"  # changes of the member set (classic groups): a lower bound
    CLIENTS = "clients"  # the instrumented clients' own counters, when they have seen more


@dataclass(slots=True, kw_only=True)
class PartitionView:
    """One partition of a group as judged in one cycle. Read-only by contract, not frozen:
    one is built for every group-partition every cycle, and a frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field) costs several times as much."""

    topic: str
    partition: int
    committed: int | None
    position: int | None
    lag_offsets: int | None
    lag_seconds: float | None
    stalled_seconds: float
    status: Status
    reason: str  # what holds, with the partition's numbers; "" for ``ok`` without a note
    owner: str  # "client_id@host (member_id)" or ""
    # No member subscribes to the topic any more: shown, not judged, and left out of the
    # group's lag totals (they feed the lag alerts).
    unsubscribed: bool = False
    # What the status rests on (exporter/evaluate/rules.py EVIDENCE): one text per status
    # and evidence, mostly the same string object in every partition it applies to.
    evidence: str = ""

    @property
    def explained(self) -> str:
        """The reason as served (API, a group's reasons): with its evidence."""
        return explained(self.reason, self.evidence)


def explained(reason: str, evidence: str) -> str:
    """A reason followed by what its status rests on."""
    return f"{reason}; evidence: {evidence}" if evidence else reason


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberView:
    member_id: str
    client_id: str
    host: str
    partitions: int
    last_poll_age: float | None  # from the member's own reports, when instrumented
    epoch: int | None = None  # KIP-848 consumer, streams and share groups
    process_id: str = ""  # Kafka Streams application instance
    # From the member's own configuration, when instrumented: auto (every
    # auto_commit_interval seconds) or manual; None when its reports do not say.
    commit_mode: CommitMode | None = None
    auto_commit_interval: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkInfo:
    query_id: str
    run_id: str
    batch_id: int | None
    batch_duration_seconds: float | None
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    last_progress_age: float | None
    batch_running_seconds: float | None
    active: bool
    # Spark Connect: where the listener runs ("client" | "server"; None: a classic driver),
    # and, from a client's reports, seconds since the server last spoke about the query
    connect: str | None = None
    server_silent_seconds: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProgress:
    """Pace of one group-partition (exporter/evaluate/progress.py); None when unknown."""

    consume_rate: float | None  # records/s the consumed offset advanced over the window
    produce_rate: float | None  # records/s the high watermark advanced over the window
    catchup_seconds: float | None  # lag / (consume - produce); None unless catching up
    lost_total: int  # records deleted before the group read them, counted while watched
    below_log_start: int  # records between the consumed offset and the log start now


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupProgress:
    """How fast a group consumes against production, when it catches up, what it lost.

    Kept apart from the judgement (status and reasons): it explains and forecasts,
    it does not judge."""

    window_seconds: float  # span the group's rates were measured over (0: no rates yet)
    consume_rate: float | None
    produce_rate: float | None
    catchup_seconds: float | None
    falling_behind: bool  # some partition with a backlog consumes no faster than it is produced
    records_lost_total: int
    below_log_start: int
    notes: tuple[str, ...]  # human-readable: "caught up in about 4 min at current rates", ...
    partitions: dict[TP, PartitionProgress]
    # Where the committed offset sits in the retained log, lowest over the partitions with
    # lag whose log retention has trimmed: (committed - log start) / (HW - log start), 0 at
    # the log start, negative below it; None without such a partition. The ratio the
    # near-retention alert reads (alerts/lagwatch.rules.yml).
    retained_position: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRebalances:
    """A group's rebalances since lagwatch watches it (exporter/evaluate/rebalances.py).

    Kept apart from the judgement like :class:`GroupProgress`: a storm is a note."""

    total: int  # never decreases while the group exists
    recent: int  # within window_seconds (thresholds.rebalance_window)
    window_seconds: float
    storm: bool  # recent > thresholds.rebalance_storm
    source: RebalanceSource
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupExposure:
    """Redelivery exposure (at-least-once): records consumers fetched but have not committed,
    which a crash or a rebalance right now would deliver again (exporter/evaluate/exposure.py).

    Known only from the consumers' own reports (instrumented consumers, Spark listeners)."""

    records: int | None  # summed over ``partitions``; None when no partition's is known
    partitions: dict[TP, int]  # position - committed, per partition known
    # auto, manual, mixed (members differ) or None: what the instrumented members say
    commit_mode: CommitMode | None
    auto_commit_interval: float | None  # the longest interval of the members in "auto"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupView:
    group: str
    type: GroupType
    state: KafkaGroupState
    status: Status
    reasons: tuple[str, ...]
    members: tuple[MemberView, ...]
    partitions: tuple[PartitionView, ...]
    spark: SparkInfo | None = None
    epoch: int | None = None  # group epoch (KIP-848 consumer, streams and share groups)
    membership: Membership = Membership.MEMBERS
    progress: GroupProgress | None = None  # rates, time to catch up, records lost
    rebalances: GroupRebalances | None = None  # None for Spark queries
    exposure: GroupExposure | None = None  # records a crash would deliver again; None: unknown

    @property
    def notes(self) -> tuple[str, ...]:
        """What follows the judgement's reasons: progress, then rebalance notes."""
        return ((self.progress.notes if self.progress else ())
                + (self.rebalances.notes if self.rebalances else ()))

    @property
    def max_lag_seconds(self) -> float | None:
        vals = [p.lag_seconds for p in self.partitions if p.lag_seconds is not None and not p.unsubscribed]
        return max(vals) if vals else None

    @property
    def total_lag(self) -> int | None:
        vals = [p.lag_offsets for p in self.partitions if p.lag_offsets is not None and not p.unsubscribed]
        return sum(vals) if vals else None


@dataclass(frozen=True, kw_only=True)
class ClusterView:
    cluster: str
    up: bool
    sampled_at: float  # wall clock of the snapshot this view came from (0 = never)
    sample_duration: float
    partitions: dict[TP, PartitionOffsets]
    groups: dict[str, GroupView]
    last_error: str = ""
    brokers: int = 0
    dropped_group_partitions: int = 0
