"""The state store: one immutable record per cluster, replaced whole once per cycle.

A record holds everything served about a cluster for one cycle: the evaluated
view, the runner's own statistics and the rendered exposition. The runner
builds it completely before publishing it, so a scrape sees one cycle or the
next, never a mix, and never waits for a render; a scrape that still holds
the previous record writes that one and cannot touch the new one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from exporter.contracts.view import ClusterView
from exporter.expose.metrics import CycleStage
from exporter.expose.render import Exposition, render_cluster

_EMPTY: Mapping[str, int] = MappingProxyType({})
NO_STAGES: Mapping[CycleStage, float] = MappingProxyType({})


def frozen_counts(counts: Mapping[str, int]) -> Mapping[str, int]:
    """A read-only copy of a counter, for a record."""
    return MappingProxyType(dict(counts))


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfStats:
    """The runner's own statistics at the end of a cycle."""

    cycles: int = 0
    cycle_duration: float = 0.0  # sampling, record timestamps, evaluation and rendering
    # Seconds of each stage of the last cycle that sampled (empty before the first one).
    stages: Mapping[CycleStage, float] = field(default_factory=lambda: NO_STAGES)
    requests: int = 0  # Kafka requests of sampling, both libraries
    reports_requests: int = 0  # Kafka requests of the reports topic's tail
    errors: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # by stage, since start
    reports_received: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    reports_dropped: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    groups_at_rest: int = 0  # groups served again, not evaluated, in the last cycle (evaluate/rest.py)
    state: StateStats | None = None  # None: the state topic is not used (state.enabled false)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateStats:
    """The state topic's figures (exporter/state/sync.py)."""

    writable: bool | None  # None: nothing written yet
    written: int  # records written, since start
    dropped: Mapping[str, int]  # records not read back, by reason
    restored_groups: int  # groups whose judgement was restored (at start, and shards moved in)
    shards: int | None = None  # with replicas: the state partitions this replica judges
    all_shards: int | None = None  # with replicas: the state partitions all replicas divide
    refused: bool | None = None  # with replicas: it may not join, and judges every group


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterRecord:
    view: ClusterView
    stats: SelfStats
    exposition: Exposition  # the view families, rendered (exporter.expose.render.render_cluster)


def initial_record(cluster: str, compat: frozenset[str] = frozenset()) -> ClusterRecord:
    view = ClusterView(cluster=cluster, up=False, sampled_at=0.0, sample_duration=0.0, partitions={},
                       groups={}, last_error="not sampled yet")
    return ClusterRecord(view=view, stats=SelfStats(), exposition=render_cluster(view, compat))


class Store:
    def __init__(self, records: Iterable[ClusterRecord]) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, ClusterRecord] = {r.view.cluster: r for r in records}
        self._ready: set[str] = set()

    def publish(self, record: ClusterRecord) -> None:
        with self._lock:
            self._records[record.view.cluster] = record
            if record.view.up:
                self._ready.add(record.view.cluster)

    def records(self) -> list[ClusterRecord]:
        """The current record of every cluster (one consistent set for one scrape)."""
        with self._lock:
            return list(self._records.values())

    def record(self, cluster: str) -> ClusterRecord:
        with self._lock:
            return self._records[cluster]

    def views(self) -> list[ClusterView]:
        return [r.view for r in self.records()]

    def ready(self) -> bool:
        """Every cluster has produced at least one successful view."""
        with self._lock:
            return self._ready >= set(self._records)
