"""What one sampling cycle saw of one cluster. Immutable: the evaluator only reads it."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from enum import StrEnum

from exporter.contracts.errors import ErrorRecord

TP = tuple[str, int]  # (topic, partition)


class GroupType(StrEnum):
    """What kind of group a GroupSample is; equal to its ``type`` label value."""

    CLASSIC = "classic"  # the classic rebalance protocol (JoinGroup/SyncGroup)
    CONSUMER = "consumer"  # KIP-848 consumer groups, assignment by the coordinator
    STREAMS = "streams"  # KIP-1071 Kafka Streams groups
    SHARE = "share"  # KIP-932 share groups: a queue, progress by acknowledgement
    SPARK = "spark"  # a Spark Structured Streaming query, from its listener's reports


class KafkaGroupState(StrEnum):
    """A group's state as its coordinator names it, in lower case with underscores; a Spark
    query's state as lagwatch names it. The constructor is the one normaliser: it takes the
    broker's spelling (``PreparingRebalance``, ``NotReady``), either lower-case spelling of
    a rebalancing state, and None, and gives ``UNKNOWN`` for a state it does not know (a
    newer Kafka's) instead of a label value no rule or panel expects."""

    UNKNOWN = "unknown"  # the group could not be described, or its state is new to lagwatch
    EMPTY = "empty"
    STABLE = "stable"
    PREPARING_REBALANCE = "preparing_rebalance"  # classic groups
    COMPLETING_REBALANCE = "completing_rebalance"  # classic groups
    ASSIGNING = "assigning"  # KIP-848 consumer and streams groups
    RECONCILING = "reconciling"  # KIP-848 consumer and streams groups
    NOT_READY = "not_ready"  # streams groups: topology or internal topics not ready
    DEAD = "dead"  # deleted, or about to be
    ACTIVE = "active"  # Spark queries: the driver reports
    INACTIVE = "inactive"  # Spark queries: the driver's reports stopped
    TERMINATED = "terminated"  # Spark queries: the query ended

    @classmethod
    def _missing_(cls, value: object) -> KafkaGroupState:
        return _STATE_SPELLINGS.get(str(value or "").replace("_", "").lower(), cls.UNKNOWN)


_STATE_SPELLINGS = {s.value.replace("_", ""): s for s in KafkaGroupState}


# Group types whose members own partitions and whose offsets OffsetFetch reads.
COMMITTING_TYPES = frozenset({GroupType.CLASSIC, GroupType.CONSUMER, GroupType.STREAMS})


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOffsets:
    """Broker-side offsets of one partition; None when a read failed this cycle."""

    leader: int
    replicas: int
    isr: int
    log_start: int | None = None
    hw: int | None = None
    lso: int | None = None
    leo: int | None = None


# A PartitionOffsets' HW as one C-level call: gathered for every group-partition each cycle.
HW_OF = operator.attrgetter("hw")
LOG_START_OF = operator.attrgetter("log_start")


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None = None
    assignment: tuple[TP, ...] = ()
    # KIP-848 consumer, streams and share groups: the member's epoch, which the
    # coordinator bumps at every assignment change; None for classic groups.
    epoch: int | None = None
    process_id: str = ""  # Kafka Streams: the application instance (several threads share it)
    # KIP-848 and streams groups: the coordinator's target assignment, which the member
    # takes over at its next heartbeat (a partition moving between members is in one).
    target: tuple[TP, ...] = ()
    # The topics the member subscribes to (classic: its subscription metadata; KIP-848 and
    # streams: the describe's subscribed topic names); empty when unknown.
    subscribed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSample:
    group_id: str
    type: GroupType
    state: KafkaGroupState
    members: tuple[Member, ...] = ()
    coordinator: int | None = None
    # Committed offsets; for a share group, the share-partition start offsets (KIP-932:
    # every record before it is acknowledged, the group's durable progress).
    committed: dict[TP, int] = field(default_factory=dict)
    # Share groups: the lag as the broker computes it (KIP-1226), which leaves out
    # records already acknowledged beyond the start offset.
    reported_lag: dict[TP, int] = field(default_factory=dict)
    # KIP-848 consumer, streams and share groups: bumped by the coordinator at every
    # membership or subscription change (None for classic groups).
    epoch: int | None = None
    error: str | None = None  # set when the group could not be read this cycle

    def __post_init__(self) -> None:
        # A type read back from a recording or a worker message is checked here, once:
        # an unknown one fails loudly instead of matching no rule.
        # An enum member (the sampler's own, or a copy's) needs no check.
        if type(self.type) is not GroupType:
            object.__setattr__(self, "type", GroupType(self.type))
        if type(self.state) is not KafkaGroupState:
            object.__setattr__(self, "state", KafkaGroupState(self.state))


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    cluster: str
    taken_at: float  # wall clock, seconds
    duration: float
    partitions: dict[TP, PartitionOffsets]
    groups: dict[str, GroupSample]
    errors: tuple[ErrorRecord, ...] = ()  # the failures of this cycle
    ok: bool = True  # False when the cluster itself could not be read
    brokers: int = 0
