"""One background thread per cluster: sample -> evaluate -> publish, on its own interval.

A slow or broken cluster only delays its own thread; scrapes never wait for
Kafka. Failures back off exponentially (capped) and recover by themselves.
"""

from __future__ import annotations

import logging
import threading
import time

from exporter.config import ClusterConfig, Config
from exporter.evaluator import Evaluator
from exporter.kafka_worker import KafkaWorker, SampleResult, WorkerCrashed
from exporter.metrics import SelfStats, ViewText
from exporter.snapshot import Snapshot
from exporter.state import Store

log = logging.getLogger("lagwatch.runner")
MAX_BACKOFF = 60.0


class ClusterRunner:
    def __init__(self, cfg: ClusterConfig, config: Config, store: Store, view_text: ViewText) -> None:
        self.cfg = cfg
        self.store = store
        self.view_text = view_text
        self.evaluator = Evaluator(cfg.name, config.thresholds, cfg.interval,
                                   config.history_points, config.max_group_partitions)
        self.worker = KafkaWorker(cfg, config.thresholds, config.log_level)
        self.cycles = 0
        self.requests = 0  # Kafka requests over all worker lifetimes
        self._worker_requests = 0  # the current worker's own (cumulative) count
        self._worker_gen = 0
        self.reports_received: dict[str, int] | None = None
        self.reports_dropped: dict[str, int] | None = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"sampler-{cfg.name}", daemon=True)
        self._failures = 0

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Prompt shutdown: the worker holds nothing worth waiting for, kill it first."""
        self._stop.set()
        self.worker.kill()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            ok = self.cycle()
            if ok:
                self._failures = 0
                delay = self.cfg.interval
            else:
                self._failures += 1
                delay = min(MAX_BACKOFF, self.cfg.interval * 2 ** min(self._failures - 1, 6))
            # keep the cadence while healthy; after a failure, back off from now
            next_at = max(next_at + delay, time.monotonic()) if ok else time.monotonic() + delay
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def cycle(self) -> bool:
        """Run one cycle; never raises. Returns whether the cluster could be read."""
        t0 = time.monotonic()
        try:
            try:
                res = self.worker.sample()
            except WorkerCrashed as e:
                self.evaluator.errors_by_stage["worker_crash"] += 1
                log.error("cluster %s: %s", self.cfg.name, e)
                res = None
            if res is None:
                snap = Snapshot(self.cfg.name, time.time(), time.monotonic() - t0, {}, {},
                                (("worker_crash", "Kafka worker process failed"),), ok=False)
                consumer_reports: dict = {}
                spark_reports: dict = {}
            else:
                snap = res.snapshot
                consumer_reports, spark_reports = res.consumer_reports, res.spark_reports
                self._count(res)
            exact_ts: dict[tuple[str, int, int], float] = {}
            if snap.ok:
                want = self.evaluator.lag_inputs(snap, self.cfg.lag_mode)
                want += [(tp, off) for r in spark_reports.values()
                         for tp, off in r.end_offsets.items()
                         if self.cfg.lag_mode == "exact"]
                if want:
                    try:
                        exact_ts = self.worker.timestamps(want)
                    except Exception as e:  # noqa: BLE001 - lag seconds fall back to interpolation
                        self.evaluator.errors_by_stage["exact_lag"] += 1
                        log.warning("cluster %s: reading record timestamps failed: %s",
                                    self.cfg.name, e)
            view = self.evaluator.evaluate(snap, consumer_reports, spark_reports, exact_ts)
            self.cycles += 1
            if not snap.ok:
                if self._failures == 0:
                    log.error("cluster %s: cannot sample: %s", self.cfg.name, view.last_error)
            elif self._failures:
                log.info("cluster %s: sampling recovered", self.cfg.name)
            for stage, msg in snap.errors if snap.ok else ():
                log.warning("cluster %s: %s: %s", self.cfg.name, stage, msg)
            stats = SelfStats(cycles=self.cycles, requests=self.requests,
                              cycle_duration=time.monotonic() - t0,
                              reports_received=self.reports_received,
                              reports_dropped=self.reports_dropped)
            self.store.publish(view, stats)
            # Render right after publishing (scrapes wait for it rather than render twice);
            # the render is part of the cycle, so the published duration is updated in place.
            self.view_text.prerender(view)
            stats.cycle_duration = time.monotonic() - t0
            return snap.ok
        except Exception:  # noqa: BLE001 - the thread must survive anything
            self.evaluator.errors_by_stage["cycle"] += 1
            log.exception("cluster %s: sampling cycle failed", self.cfg.name)
            return False

    def _count(self, res: SampleResult) -> None:
        """Keep the counters, not the result (its snapshot would stay alive for a cycle).
        A restarted worker counts requests from 0 again: the total stays monotonic."""
        if self._worker_gen != self.worker.restarts:  # a new worker process
            self._worker_gen, self._worker_requests = self.worker.restarts, 0
        self.requests += res.requests_total - self._worker_requests
        self._worker_requests = res.requests_total
        self.reports_received, self.reports_dropped = res.reports_received, res.reports_dropped


class Exporter:
    """All cluster runners plus the shared store."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.store = Store([c.name for c in config.clusters])
        self.view_text = ViewText(self.store, config.compat)
        self.runners = [ClusterRunner(c, config, self.store, self.view_text) for c in config.clusters]

    def start(self) -> None:
        for r in self.runners:
            r.start()

    def stop(self) -> None:
        for r in self.runners:
            r._stop.set()
        for r in self.runners:
            r.stop()
