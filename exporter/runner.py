"""One background thread per cluster: sample -> evaluate -> render -> publish, on its own interval.

A slow or broken cluster only delays its own thread; scrapes never wait for
Kafka. Failures back off exponentially (capped) and recover by themselves.
Each cycle publishes one complete, immutable record (exporter/store.py).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import replace

from exporter.config import ClusterConfig, Config, LagMode, MetricsDetail
from exporter.contracts.errors import ErrorRecord, ErrorStage
from exporter.contracts.reports import SparkReport
from exporter.contracts.sampling import SamplerMemory
from exporter.contracts.snapshot import Snapshot
from exporter.contracts.view import ClusterView
from exporter.evaluate.evaluator import Evaluator
from exporter.expose.render import render_cluster
from exporter.kafka.worker import KafkaWorker, SampleReply, WorkerCrashed
from exporter.logs import TRANSITION
from exporter.recording import Writer, header
from exporter.state.sync import StateSync
from exporter.store import ClusterRecord, SelfStats, StateStats, Store, frozen_counts, initial_record

log = logging.getLogger("lagwatch.runner")
MAX_BACKOFF = 60.0


class ClusterRunner:
    def __init__(self, cfg: ClusterConfig, config: Config, store: Store) -> None:
        self.cfg = cfg
        self.store = store
        self.compat = config.compat
        self.bounded = config.metrics_detail == MetricsDetail.BOUNDED
        self.evaluator = Evaluator(cfg.name, config.cluster_thresholds(cfg), cfg.interval,
                                   config.history_points, config.max_group_partitions,
                                   cfg.group_thresholds)
        self.worker = KafkaWorker(cfg, config.thresholds, config.log_level)
        self.cycles = 0
        # lagwatch_errors_total: every error is counted here and only here, whether it
        # comes in the worker's snapshot (Kafka requests, sample_exception) or from the
        # runner itself (worker_crash, exact_lag, cycle).
        self.errors: collections.Counter[ErrorStage] = collections.Counter()
        self.requests = 0  # Kafka requests over all worker lifetimes
        self._worker_requests = 0  # the current worker's own (cumulative) count
        self.reports_requests = 0  # the reports tail's, over all worker lifetimes
        # The sampler's memory between cycles (listing grace, group topics, coordinators):
        # kept here, not in the worker, so that a worker crash forgets nothing.
        self.memory = SamplerMemory()
        self._worker_reports_requests = 0
        self._worker_gen = 0
        self.reports_received: Mapping[str, int] = {}
        self.reports_dropped: Mapping[str, int] = {}
        # The judgement's state in lagwatch's own topic (exporter/state/): read back before
        # the first judgement, written after each cycle is published.
        self.state = StateSync(cfg) if cfg.state_enabled else None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"sampler-{cfg.name}", daemon=True)
        self._failures = 0
        self.recorder: Writer | None = None
        if config.record_dir:
            self.recorder = Writer(os.path.join(config.record_dir, f"{cfg.name}.jsonl"),
                                   header(cfg.name, config.cluster_thresholds(cfg), cfg.interval,
                                          config.history_points, config.max_group_partitions,
                                          cfg.group_thresholds))

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Prompt shutdown: the worker holds nothing worth waiting for, kill it first."""
        self._stop.set()
        self.worker.kill()
        self.thread.join(timeout=5)
        if self.recorder is not None:
            self.recorder.close()

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
        """Run one cycle and publish its record; never raises. Returns whether the
        cluster could be read."""
        t0 = time.monotonic()
        try:
            try:
                res: SampleReply | None = self.worker.sample(self.memory)
                crash = ""
            except WorkerCrashed as e:
                if self._stop.is_set():  # killed by our own shutdown: nothing to report
                    return False
                res, crash = None, str(e)
            if res is None:
                snap = Snapshot(cluster=self.cfg.name, taken_at=time.time(),
                                duration=time.monotonic() - t0, partitions={}, groups={},
                                errors=(ErrorRecord(stage=ErrorStage.WORKER_CRASH, message=crash),), ok=False)
                consumer_reports: dict = {}
                spark_reports: dict = {}
            else:
                snap = res.snapshot
                consumer_reports, spark_reports = res.consumer_reports, res.spark_reports
                self._count(res)
                if res.memory is not None:
                    self.memory = res.memory
            self.errors.update(e.stage for e in snap.errors)
            exact_ts: dict[tuple[str, int, int], float] = {}
            if snap.ok:
                exact_ts = self._exact_timestamps(snap, spark_reports)
            if self.recorder is not None:
                self.recorder.cycle(snap, consumer_reports, spark_reports, exact_ts, snap.taken_at)
            if self.state is not None and not self.state.loaded and snap.ok:
                self._restore(snap.taken_at)
            view = self.evaluator.evaluate(snap, consumer_reports, spark_reports, exact_ts)
            # The sample (every group's offsets) is freed before the render takes its buffers.
            ok, errors = snap.ok, snap.errors
            del snap, res
            self.cycles += 1
            if not ok:
                if self._failures == 0:
                    log.error("cluster %s: cannot sample: %s", self.cfg.name, view.last_error,
                              extra=TRANSITION)
                elif crash:
                    log.error("cluster %s: %s", self.cfg.name, crash)
            elif self._failures:
                log.info("cluster %s: sampling recovered", self.cfg.name)
            for e in errors if ok else ():
                log.warning("cluster %s: %s: %s", self.cfg.name, e.stage, e.message)
            # The render is part of the cycle: the record is complete before anyone sees it.
            exposition = render_cluster(view, self.compat, self.bounded)
            self.store.publish(ClusterRecord(view=view, stats=self._stats(t0), exposition=exposition))
            if ok and self.state is not None:
                self._write_state(view)
            return ok
        except Exception:  # noqa: BLE001 - the thread must survive anything
            self.errors[ErrorStage.CYCLE] += 1
            log.exception("cluster %s: sampling cycle failed", self.cfg.name)
            with contextlib.suppress(Exception):  # serve the count with the last record
                self.store.publish(replace(self.store.record(self.cfg.name), stats=self._stats(t0)))
            return False

    def _exact_timestamps(self, snap: Snapshot, spark_reports: dict[str, SparkReport]
                          ) -> dict[tuple[str, int, int], float]:
        want = self.evaluator.lag_inputs(snap, self.cfg.lag_mode)
        want += [(tp, off) for r in spark_reports.values() for tp, off in r.end_offsets.items()
                 if self.cfg.lag_mode == LagMode.EXACT]
        if not want:
            return {}
        try:
            return self.worker.timestamps(want)
        except WorkerCrashed as e:  # the next cycle starts a new worker
            if not self._stop.is_set():
                self.errors[ErrorStage.WORKER_CRASH] += 1
                log.error("cluster %s: %s", self.cfg.name, e)
        except Exception as e:  # noqa: BLE001 - lag seconds fall back to interpolation
            self.errors[ErrorStage.EXACT_LAG] += 1
            log.warning("cluster %s: reading record timestamps failed: %s", self.cfg.name, e)
        return {}

    def _restore(self, now: float) -> None:
        """The state topic read back into the evaluator, before its first judgement."""
        assert self.state is not None
        try:
            self.state.restore(self.evaluator, self.worker.load_state(), now)
        except WorkerCrashed as e:  # the next cycle starts a new worker and tries again
            if not self._stop.is_set():
                self.errors[ErrorStage.WORKER_CRASH] += 1
                log.error("cluster %s: %s", self.cfg.name, e)

    def _write_state(self, view: ClusterView) -> None:
        """This cycle's state records written (after the record is published: no scrape
        waits for it); a failure is counted and the next cycle writes again."""
        assert self.state is not None
        records = self.state.records(self.evaluator, view, self.cycles, view.sampled_at)
        if not records:
            return
        try:
            reply = self.worker.write_state(records)
        except WorkerCrashed as e:
            if not self._stop.is_set():
                self.errors[ErrorStage.WORKER_CRASH] += 1
                log.error("cluster %s: %s", self.cfg.name, e)
            return
        if reply.denied is None and (reply.error is not None or reply.failed):
            # a refusal is said once and served as lagwatch_state_writable 0, not counted
            self.errors[ErrorStage.STATE_WRITE] += 1
        self.state.wrote(reply)

    def _stats(self, t0: float) -> SelfStats:
        st = self.state
        state = None if st is None else StateStats(
            writable=st.writable, written=st.written, dropped=frozen_counts(st.dropped),
            restored_groups=st.restored_groups)
        return SelfStats(cycles=self.cycles, requests=self.requests,
                         reports_requests=self.reports_requests,
                         cycle_duration=time.monotonic() - t0, errors=frozen_counts(self.errors),
                         reports_received=self.reports_received, reports_dropped=self.reports_dropped,
                         state=state)

    def _count(self, res: SampleReply) -> None:
        """Keep the counters, not the result (its snapshot would stay alive for a cycle).
        A restarted worker counts requests from 0 again: the total stays monotonic."""
        if self._worker_gen != self.worker.restarts:  # a new worker process
            self._worker_gen, self._worker_requests = self.worker.restarts, 0
            self._worker_reports_requests = 0
        c = res.counters
        self.requests += c.requests_total - self._worker_requests
        self._worker_requests = c.requests_total
        self.reports_requests += max(0, c.reports_requests - self._worker_reports_requests)
        self._worker_reports_requests = c.reports_requests
        self.reports_received = frozen_counts(c.reports_received)
        self.reports_dropped = frozen_counts(c.reports_dropped)


class Exporter:
    """All cluster runners plus the shared store."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.store = Store(initial_record(c.name, config.compat) for c in config.clusters)
        self.runners = [ClusterRunner(c, config, self.store) for c in config.clusters]

    def start(self) -> None:
        for r in self.runners:
            r.start()

    def stop(self) -> None:
        for r in self.runners:
            r._stop.set()
        for r in self.runners:
            r.stop()
