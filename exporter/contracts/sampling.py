"""What the sampler (in the Kafka worker process) and the runner (in the main process)
exchange besides the snapshot: the listing of a group, and the sampler's memory between
cycles. The worker is stateless: the runner keeps the memory and sends it with each
request, so a worker that crashes (and is replaced) forgets nothing. Plain dataclasses,
pickled over the worker's pipe; no Kafka library is needed to read them."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.contracts.snapshot import GroupType, KafkaGroupState


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedGroup:
    """One group of a ListGroups answer."""

    group_id: str
    type: GroupType  # classic, consumer, streams or share (ListGroups v5; classic before)
    state: KafkaGroupState
    coordinator: int | None = None  # the broker that listed it: its coordinator
    protocol_type: str = ""  # classic groups: consumer, connect, ... ("" for commit-only)


@dataclass(slots=True, kw_only=True)
class SamplerMemory:
    """Everything the sampler remembers from one cycle to the next."""

    # The groups of the last listing (bridged ones included): a group missing from a
    # listing is kept for a few cycles (Sampler._bridge), a broker that does not answer
    # ListGroups keeps its groups.
    last_listed: dict[str, ListedGroup] = field(default_factory=dict)
    # Per listed group, how many listings in a row it has been missing from.
    absent: dict[str, int] = field(default_factory=dict)
    # Per group, the topics of its committed offsets when last read: a group that cannot
    # be read keeps its topics sampled.
    group_topics: dict[str, set[str]] = field(default_factory=dict)
    # Per group, the array elements of its last OffsetFetch answer (batch sizing).
    weight: dict[str, int] = field(default_factory=dict)
    # Per group, its coordinator's broker id (from the listing or FindCoordinator), until
    # a request answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS.
    coordinators: dict[str, int] = field(default_factory=dict)
