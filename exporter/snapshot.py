"""What one sampling cycle saw of one cluster. Immutable: the evaluator only reads it."""

from __future__ import annotations

from dataclasses import dataclass, field

TP = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """Broker-side offsets of one partition; None when a read failed this cycle."""

    leader: int
    replicas: int
    isr: int
    log_start: int | None = None
    hw: int | None = None
    lso: int | None = None
    leo: int | None = None


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: tuple[TP, ...]


@dataclass(frozen=True, slots=True)
class GroupSample:
    group_id: str
    type: str  # classic | consumer | spark
    state: str  # lower case: stable, empty, preparingrebalance, ... unknown
    members: tuple[Member, ...] = ()
    coordinator: int | None = None
    committed: dict[TP, int] = field(default_factory=dict)
    error: str | None = None  # set when the group could not be read this cycle


@dataclass(frozen=True)
class Snapshot:
    cluster: str
    taken_at: float  # wall clock, seconds
    duration: float
    partitions: dict[TP, PartitionOffsets]
    groups: dict[str, GroupSample]
    errors: tuple[tuple[str, str], ...] = ()  # (stage, message) of failures this cycle
    ok: bool = True  # False when the cluster itself could not be read
    brokers: int = 0
