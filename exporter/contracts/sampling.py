"""What the sampler (in the Kafka worker process) and the runner (in the main process)
exchange besides the snapshot: the listing of a group, and the sampler's memory between
cycles. The runner keeps a copy of the memory, so a worker that crashes (and is
replaced) forgets nothing: a worker that does not hold it (new, or its last cycle
failed) is sent the copy; each reply carries what its cycle changed in the memory
(:class:`MemoryChanges`), which the runner applies to its copy: the whole memory, 1.7 MB
pickled at 10,000 groups, crosses the pipe only to a new worker. Plain dataclasses,
pickled over the worker's pipe; no Kafka library is needed to read them."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

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

    def copy(self) -> SamplerMemory:
        """Its maps copied: what :meth:`changes_since` compares with after a cycle (the
        sampler replaces a value, never changes one in place)."""
        return SamplerMemory(**{name: dict(getattr(self, name)) for name in MEMORY_FIELDS})

    def changes_since(self, before: SamplerMemory) -> MemoryChanges:
        """What changed since ``before`` (a :meth:`copy`): per map, the entries new or
        different, and the keys gone."""
        entries: dict[str, dict[str, Any]] = {}
        removed: dict[str, tuple[str, ...]] = {}
        for name in MEMORY_FIELDS:
            old, new = getattr(before, name), getattr(self, name)
            if changed := {k: v for k, v in new.items() if old.get(k, _ABSENT) != v}:
                entries[name] = changed
            if gone := tuple(k for k in old if k not in new):
                removed[name] = gone
        return MemoryChanges(entries, removed)

    def apply(self, changes: MemoryChanges) -> None:
        """``changes`` made here too: this memory is then the one they were taken from."""
        for name, changed in changes.entries.items():
            getattr(self, name).update(changed)
        for name, gone in changes.removed.items():
            kept = getattr(self, name)
            for k in gone:
                kept.pop(k, None)


@dataclass(frozen=True, slots=True)
class MemoryChanges:
    """What one cycle changed in the sampler's memory, per map of :class:`SamplerMemory`
    (by field name; a map left as it was is absent): the entries set, the keys removed."""

    entries: dict[str, dict[str, Any]]
    removed: dict[str, tuple[str, ...]]


MEMORY_FIELDS = tuple(f.name for f in fields(SamplerMemory))
_ABSENT = object()  # a key the memory before did not hold
