"""The state store: latest evaluated view per cluster, swapped atomically."""

from __future__ import annotations

import threading

from exporter.metrics import SelfStats
from exporter.view import ClusterView


class Store:
    def __init__(self, clusters: list[str]) -> None:
        self._lock = threading.Lock()
        self._views: dict[str, ClusterView] = {
            c: ClusterView(c, False, 0.0, 0.0, {}, {}, last_error="not sampled yet") for c in clusters
        }
        self._stats: dict[str, SelfStats] = {c: SelfStats() for c in clusters}
        self._ready: set[str] = set()

    def publish(self, view: ClusterView, stats: SelfStats) -> None:
        with self._lock:
            self._views[view.cluster] = view
            self._stats[view.cluster] = stats
            if view.up:
                self._ready.add(view.cluster)

    def views(self) -> list[ClusterView]:
        with self._lock:
            return list(self._views.values())

    def self_stats(self, cluster: str) -> SelfStats:
        with self._lock:
            return self._stats.get(cluster, SelfStats())

    def ready(self) -> bool:
        """Every cluster has produced at least one successful view."""
        with self._lock:
            return self._ready >= set(self._views)
