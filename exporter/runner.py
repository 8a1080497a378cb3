"""One background thread per cluster: sample -> evaluate -> render -> publish, on its own interval.

A slow or broken cluster only delays its own thread; scrapes never wait for
Kafka. Failures back off exponentially (capped) and recover by themselves.
Each cycle publishes one complete, immutable record (exporter/store.py).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType

from exporter.config import ClusterConfig, Config, LagMode, MetricsDetail
from exporter.contracts.errors import ErrorRecord, ErrorStage
from exporter.contracts.reports import SparkReport
from exporter.contracts.sampling import SamplerMemory
from exporter.contracts.snapshot import Snapshot
from exporter.contracts.view import ClusterView, GroupView
from exporter.contracts.worker import PartitionBodies, Shards
from exporter.evaluate.evaluator import Evaluator
from exporter.expose.metrics import CycleStage
from exporter.expose.render import Exposition, chunk_of, render_cluster
from exporter.kafka.worker import KafkaWorker, SampleReply, WorkerCrashed
from exporter.logs import TRANSITION
from exporter.recording import Writer, header
from exporter.state.placement import shard_of
from exporter.state.sync import StateSync
from exporter.store import (
    NO_STAGES,
    ClusterRecord,
    SelfStats,
    StateStats,
    Store,
    frozen_counts,
    initial_record,
)

log = logging.getLogger("lagwatch.runner")
MAX_BACKOFF = 60.0


def next_start(last_at: float, delay: float, sampled: float, now: float, ok: bool) -> float:
    """When the next cycle starts (monotonic seconds), the last one scheduled at ``last_at``,
    its sample taken at ``sampled``, ended at ``now``. While healthy it keeps the cadence,
    but never samples sooner than ``delay`` after the last sample: the judgement's clocks
    run on sample times, so a cycle that woke late is not followed by one closer than the
    interval. After a failure it backs off from now."""
    return max(last_at + delay, sampled + delay, now) if ok else now + delay


def _monotonic(wall: float) -> float:
    """A past wall-clock time (the worker's sample time) on this process's monotonic clock."""
    return time.monotonic() - max(0.0, time.time() - wall)


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
        # a copy kept here, each cycle's changes applied, so that a worker crash forgets
        # nothing (exporter/contracts/sampling.py).
        self.memory = SamplerMemory()
        self._worker_reports_requests = 0
        self._worker_gen = 0
        self.reports_received: Mapping[str, int] = {}
        self.reports_dropped: Mapping[str, int] = {}
        # The judgement's state in lagwatch's own topic (exporter/state/): read back before
        # the first judgement, written after each cycle is published.
        self.state = StateSync(cfg) if cfg.state_enabled else None
        self.shards: Shards | None = None  # with replicas: this replica's, as of the last cycle
        self._lost = False  # with replicas: this cycle's worker died, and its shards with it
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"sampler-{cfg.name}", daemon=True)
        # Numbers the cycles' partition lines: a cycle that raised leaves its chunks in the
        # worker, and the next one's number must differ (self.cycles counts only those done).
        self._feeds = itertools.count(1)
        # Seconds of each stage of the last cycle that sampled (lagwatch_cycle_stage_seconds).
        self._stages: Mapping[CycleStage, float] = NO_STAGES
        self._failures = 0
        # When the last cycle's sample was taken, on the monotonic clock: the next cycle
        # starts no sooner than an interval after it (:meth:`_run`).
        self._sampled = 0.0
        self.recorder: Writer | None = None
        if config.record_dir:
            self.recorder = Writer(os.path.join(config.record_dir, f"{cfg.name}.jsonl"),
                                   header(cfg.name, config.cluster_thresholds(cfg), cfg.interval,
                                          config.history_points, config.max_group_partitions,
                                          cfg.group_thresholds))

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Prompt shutdown: the worker holds nothing worth waiting for, kill it first. A
        replica first writes its groups and leaves the coordination group, so that the
        others take its shards now, not after the session timeout."""
        self._stop.set()
        if self.cfg.state_replicas and self.thread.is_alive():  # its cycle ends, then it leaves
            self.thread.join(timeout=self.cfg.request_timeout * 3)
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
            next_at = next_start(next_at, delay, self._sampled, time.monotonic(), ok)
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        if self.cfg.state_replicas:  # here: the worker dies with the thread that started it
            self._leave()

    def cycle(self) -> bool:
        """Run one cycle and publish its record; never raises. Returns whether the
        cluster could be read."""
        t0 = time.monotonic()
        self._lost = False
        try:
            try:
                res: SampleReply | None = self.worker.sample(self.memory)
                crash = ""
            except WorkerCrashed as e:
                if self._stop.is_set():  # killed by our own shutdown: nothing to report
                    return False
                res, crash = None, str(e)
                self._lose_shards()
            if res is None:
                snap = Snapshot(cluster=self.cfg.name, taken_at=time.time(),
                                duration=time.monotonic() - t0, partitions={}, groups={},
                                errors=(ErrorRecord(stage=ErrorStage.WORKER_CRASH, message=crash),), ok=False)
                consumer_reports, spark_reports = {}, {}
            else:
                snap = res.snapshot
                self._sampled = _monotonic(snap.taken_at)
                consumer_reports, spark_reports = res.consumer_reports, res.spark_reports
                self._count(res)
                if res.memory_changes is not None:
                    self.memory.apply(res.memory_changes)
            clock = _StageClock(t0, CycleStage.SAMPLE)
            self.errors.update(e.stage for e in snap.errors)
            exact_ts: dict[tuple[str, int, int], float] = {}
            if snap.ok:
                exact_ts = self._exact_timestamps(snap, spark_reports)
            if self.recorder is not None:
                self.recorder.cycle(snap, consumer_reports, spark_reports, exact_ts, snap.taken_at)
            clock.done(CycleStage.RECORD_TIMESTAMPS)
            if self.state is not None and snap.ok and not self._lost:  # a dead worker's shards are lost
                self._restore(res, snap.taken_at)
            clock.done(CycleStage.STATE_RESTORE)
            feed = _LinesFeed(self, next(self._feeds)) if snap.ok else None
            view = self.evaluator.evaluate(snap, consumer_reports, spark_reports, exact_ts,
                                           judged=feed.send if feed else None)
            clock.done(CycleStage.EVALUATION)
            # The sample (every group's offsets) is freed before the render takes its buffers.
            ok, errors = snap.ok, snap.errors
            del snap, res
            self.cycles += 1
            self._say(ok, view, crash, errors)
            # The render is part of the cycle: the record is complete before anyone sees it.
            exposition = render_cluster(view, self.compat, self.bounded,
                                        feed.collector(view) if feed else None)
            clock.done(CycleStage.RENDER)
            if ok:
                self._stages = MappingProxyType(clock.spent)
            self._publish(view, exposition, t0, ok)
            return ok
        except Exception:  # noqa: BLE001 - the thread must survive anything
            self.errors[ErrorStage.CYCLE] += 1
            log.exception("cluster %s: sampling cycle failed", self.cfg.name)
            with contextlib.suppress(Exception):  # serve the count with the last record
                self.store.publish(replace(self.store.record(self.cfg.name), stats=self._stats(t0)))
            return False

    def _publish(self, view: ClusterView, exposition: Exposition, t0: float, ok: bool) -> None:
        """The cycle's record served, then (a cycle read, its worker alive) its state written."""
        record = ClusterRecord(view=view, stats=self._stats(t0), exposition=exposition)
        if self._lost:  # the worker died during this cycle
            record = self._withdrawn(view, record.stats)
        self.store.publish(record)
        if ok and self.state is not None and not self._lost:
            self._write_state(view)

    def _say(self, ok: bool, view: ClusterView, crash: str, errors: tuple[ErrorRecord, ...]) -> None:
        """The cycle's outcome in the log: a failure, a recovery, the errors of a cycle read."""
        if not ok:
            if self._failures == 0:
                log.error("cluster %s: cannot sample: %s", self.cfg.name, view.last_error,
                          extra=TRANSITION)
            elif crash:  # every death, with its exit code: never held back as a repeat
                log.error("cluster %s: %s", self.cfg.name, crash, extra=TRANSITION)
        elif self._failures:
            log.info("cluster %s: sampling recovered", self.cfg.name)
        for e in errors if ok else ():
            log.warning("cluster %s: %s: %s", self.cfg.name, e.stage, e.message)

    def _worker_crashed(self, e: WorkerCrashed) -> None:
        """A Kafka worker that died outside sampling: counted, and logged every time (its
        exit code tells a SIGKILL from a segfault: the log's repeat filter, which reads
        numbers as the same, must not hold it back); nothing when our own stop killed it."""
        if self._stop.is_set():
            return
        self.errors[ErrorStage.WORKER_CRASH] += 1
        log.error("cluster %s: %s", self.cfg.name, e, extra=TRANSITION)
        self._lose_shards()

    def _lose_shards(self) -> None:
        """A replica's coordination member lives in its Kafka worker: with the worker dead,
        its shards are lost (the coordinator gives them to the others once the member's
        session ends, maybe before a new worker joins), so their groups are served no more,
        at once, and not written: the new worker's assignment says which come back."""
        sh = self.shards
        if not self.cfg.state_replicas or sh is None or sh.refused is not None:
            return
        self._lost = True
        if sh.owned:
            log.warning("cluster %s: shard(s) %s lost with the Kafka worker; their groups are "
                        "served again once a replica is assigned them", self.cfg.name, sorted(sh.owned))
        none = frozenset[int]()
        self.shards = replace(sh, owned=none, restored=none, revoking=none)
        with contextlib.suppress(Exception):  # the record of a cycle that already ended
            last = self.store.record(self.cfg.name)
            if last.view.groups:
                self.store.publish(self._withdrawn(last.view, last.stats))

    def _withdrawn(self, view: ClusterView, stats: SelfStats) -> ClusterRecord:
        """``view`` without its groups, for a replica whose shards were lost."""
        view = replace(view, groups={})
        state = stats.state if stats.state is None else replace(stats.state, shards=0)
        return ClusterRecord(view=view, stats=replace(stats, state=state),
                             exposition=render_cluster(view, self.compat, self.bounded, None))

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
            self._worker_crashed(e)
        except Exception as e:  # noqa: BLE001 - lag seconds fall back to interpolation
            self.errors[ErrorStage.EXACT_LAG] += 1
            log.warning("cluster %s: reading record timestamps failed: %s", self.cfg.name, e)
        return {}

    def _restore(self, res: SampleReply | None, now: float) -> None:
        """The state topic read back into the evaluator, before its first judgement; with
        replicas, the shards newly assigned (read with the sample) before their first."""
        assert self.state is not None
        if self.cfg.state_replicas:
            if res is not None and res.shards is not None:
                self._reshard(res.shards)
                self.state.loaded = True  # nothing to write before this replica's shards are known
                if res.state is not None:
                    self.state.restore(self.evaluator, res.state, now, res.shards)
                self._adopt(res)
            return
        if self.state.loaded:
            return
        try:
            self.state.restore(self.evaluator, self.worker.load_state(), now)
        except WorkerCrashed as e:  # the next cycle starts a new worker and tries again
            self._worker_crashed(e)

    def _adopt(self, res: SampleReply) -> None:
        """The groups of shards newly assigned that no state record restored: new to this
        replica, not to the cluster (the evaluator must not take them for just created)."""
        sh = res.shards
        if sh is None or not sh.restored:
            return
        ev = self.evaluator
        ev.adopted = {g for g in res.snapshot.groups if g not in ev.groups
                      and shard_of(g, sh.offsets_partitions, sh.partitions) in sh.restored}

    def _reshard(self, shards: Shards) -> None:
        """This replica's shards as of this cycle; a change said in the log."""
        was = self.shards
        self.shards = shards
        if shards.refused is None and (was is None or was.owned != shards.owned):
            log.info("cluster %s: this replica judges the groups of %d of the %d shard(s) of %s: %s",
                     self.cfg.name, len(shards.owned), shards.partitions, self.cfg.state_topic,
                     sorted(shards.owned))

    def _write_state(self, view: ClusterView, everything: bool = False) -> None:
        """This cycle's state records written (after the record is published: no scrape
        waits for it); a failure is counted and the next cycle writes again."""
        assert self.state is not None
        shards = self.shards if self.cfg.state_replicas else None
        records = self.state.records(self.evaluator, view, self.cycles, view.sampled_at, shards, everything)
        release = shards.revoking if shards is not None else frozenset()
        if not records and not release:
            return
        try:
            reply = self.worker.write_state(records, release)
        except WorkerCrashed as e:
            self._worker_crashed(e)
            return
        if reply.denied is None and (reply.error is not None or reply.failed):
            # a refusal is said once and served as lagwatch_state_writable 0, not counted
            self.errors[ErrorStage.STATE_WRITE] += 1
        self.state.wrote(reply)

    def _leave(self) -> None:
        """This replica's groups written, then the coordination group left."""
        last = self.store.record(self.cfg.name).view
        try:
            if self.state is not None and self.shards is not None and last.up:
                self.shards = dataclasses.replace(self.shards, revoking=self.shards.owned)
                self._write_state(last, everything=True)
            self.worker.leave()
        except Exception as e:  # noqa: BLE001 - a shutdown: the session timeout moves the shards
            log.warning("cluster %s: could not leave the coordination group: %s", self.cfg.name, e)

    def _stats(self, t0: float) -> SelfStats:
        st = self.state
        sh = self.shards
        state = None if st is None else StateStats(
            writable=st.writable, written=st.written, dropped=frozen_counts(st.dropped),
            restored_groups=st.restored_groups,
            shards=None if sh is None else (sh.partitions if sh.refused else len(sh.owned)),
            all_shards=None if sh is None else sh.partitions,
            refused=None if sh is None else sh.refused is not None)
        return SelfStats(cycles=self.cycles, requests=self.requests,
                         reports_requests=self.reports_requests,
                         cycle_duration=time.monotonic() - t0, stages=self._stages,
                         errors=frozen_counts(self.errors),
                         reports_received=self.reports_received, reports_dropped=self.reports_dropped,
                         groups_at_rest=self.evaluator.served_at_rest, state=state)

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


class _StageClock:
    """Where a cycle's time goes: each stage's seconds, measured from the end of the one
    before it (the first from the cycle's start)."""

    def __init__(self, t0: float, first: CycleStage) -> None:
        self._at = t0
        self.spent: dict[CycleStage, float] = {}
        self.done(first)

    def done(self, stage: CycleStage) -> None:
        now = time.monotonic()
        self.spent[stage] = now - self._at
        self._at = now


class _LinesFeed:
    """One cycle's per-partition lines, rendered by the Kafka worker beside the evaluation
    (exporter/expose/partition_lines.py): each judged chunk sent as it is done, the
    bodies collected at the end of the render. Whatever did not go, or came back
    without lines, the render makes in this process instead."""

    def __init__(self, runner: ClusterRunner, cycle: int) -> None:
        self.runner, self.cycle = runner, cycle
        self.sent = True  # every chunk so far went to the worker

    def send(self, views: list[GroupView]) -> None:
        if not self.sent:
            return
        r = self.runner
        try:
            self.sent = r.worker.send_lines(chunk_of(self.cycle, r.cfg.name, views, r.bounded))
        except WorkerCrashed as e:  # the next cycle starts a new worker
            self.sent = False
            r._worker_crashed(e)

    def collector(self, view: ClusterView) -> Callable[[], PartitionBodies | None]:
        return lambda: self._collect(view)

    def _collect(self, view: ClusterView) -> PartitionBodies | None:
        if not self.sent:
            return None
        r = self.runner
        try:
            reply = r.worker.partition_lines(self.cycle)
        except WorkerCrashed as e:
            r._worker_crashed(e)
            return None
        if reply is not None and reply.error is not None:
            log.warning("cluster %s: the Kafka worker could not render the partition lines "
                        "(rendered here instead): %s", r.cfg.name, reply.error)
        # A view capped after its chunks went (max_group_partitions) serves fewer groups.
        if reply is None or view.dropped_group_partitions:
            return None
        return reply.bodies


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
