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
        self._last_result: SampleResult | None = None
        self._requests_base = self._requests_seen = 0
        self._requests_worker: tuple[int | None, int] = (None, 0)
        self.thresholds = config.thresholds
        self.cycles = 0
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
            next_at = max(next_at + delay, time.monotonic() + min(delay, 0.05))
            if not ok:
                next_at = time.monotonic() + delay
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
                # keep only the counters: holding the snapshot would keep a second copy alive
                self._last_result = SampleResult(None, {}, {}, res.requests_total,  # type: ignore[arg-type]
                                                 res.reports_received, res.reports_dropped)
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
            last = self._last_result
            stats = SelfStats(cycles=self.cycles, requests=self._requests(last),
                              cycle_duration=time.monotonic() - t0,
                              reports_received=last.reports_received if last else None,
                              reports_dropped=last.reports_dropped if last else None)
            self.store.publish(view, stats)
            self.view_text.prerender(view)  # render here, not in the scrape
            stats.cycle_duration = time.monotonic() - t0  # the render is part of the cycle
            self.store.set_stats(self.cfg.name, stats)
            return snap.ok
        except Exception:  # noqa: BLE001 - the thread must survive anything
            self.evaluator.errors_by_stage["cycle"] += 1
            log.exception("cluster %s: sampling cycle failed", self.cfg.name)
            return False

    def _requests(self, last: SampleResult | None) -> int:
        """Monotonic across worker restarts: a new child starts its counters at 0."""
        if last is None:
            return self._requests_base
        if self._requests_worker != (self.worker.pid, self.worker.restarts):
            self._requests_base = self._requests_seen
            self._requests_worker = (self.worker.pid, self.worker.restarts)
        self._requests_seen = self._requests_base + last.requests_total
        return self._requests_seen


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
