"""Tail the reports topic and keep the latest valid report per consumer member / Spark query.

Read with ``assign()`` from the beginning of every partition: no group is
joined and nothing is committed. The topic is compacted, so after a restart
the exporter rebuilds the last state of every reporter (a hung Spark query is
known again at once). A report's age is measured from its Kafka timestamp,
not from when we happened to read it, so a replayed report of a dead consumer
does not look fresh.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from exporter.config import ClusterConfig, Thresholds
from exporter.contracts.reports import ConsumerReport, SparkReport
from exporter.kafka.readonly import NEVER_JOINS
from exporter.kafka.sampler import client_config, tokens_ready
from exporter.reports.decode import ReportError, decode

log = logging.getLogger("lagwatch.reports")
MAX_KEYS = 50_000
FLOOD_PER_KEY = 20  # reports per key per FLOOD_WINDOW seconds
FLOOD_WINDOW = 10.0


class ReportReader:
    def __init__(self, cfg: ClusterConfig, thresholds: Thresholds) -> None:
        self.cfg = cfg
        self.th = thresholds
        self.received: dict[str, int] = collections.Counter()
        self.dropped: dict[str, int] = collections.Counter()
        # Kafka requests the tail has sent (librdkafka's statistics; Fetch mostly), counted
        # apart from the sampler's (lagwatch_reports_kafka_requests_total).
        self.requests = 0
        self._consumers: dict[tuple[str, str], ConsumerReport] = {}
        self._spark: dict[tuple[str, str], SparkReport] = {}
        self._rate: dict[bytes, collections.deque[float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._assigned: set[int] = set()
        # Set once every partition present at start has been read to its end (or there is no
        # topic): the first sample waits for it, so a restart knows old reports at once.
        self.caught_up = threading.Event()
        self._replaying: set[int] | None = None
        self._warned_missing = False
        self.thread = threading.Thread(target=self._run, name=f"reports-{cfg.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)

    # -- what the evaluator reads ------------------------------------------
    def current(self, now: float | None = None
                ) -> tuple[dict[str, list[ConsumerReport]], dict[str, SparkReport]]:
        now = time.time() if now is None else now
        expiry = self.th.report_expiry
        with self._lock:
            for k in [k for k, r in self._consumers.items() if now - r.received_at > expiry]:
                del self._consumers[k]
            for k in [k for k, r in self._spark.items() if now - r.received_at > expiry]:
                del self._spark[k]
            # The cluster's group filter applies to reported groups and Spark queries too.
            group_ok = self.cfg.filters.group_ok
            consumers: dict[str, list[ConsumerReport]] = {}
            for r in self._consumers.values():
                if group_ok(r.group):
                    consumers.setdefault(r.group, []).append(r)
            spark: dict[str, SparkReport] = {}
            for r in sorted(self._spark.values(), key=lambda r: r.received_at):
                if group_ok(r.group):
                    spark[r.group] = r  # latest run of a query name wins
            return consumers, spark

    # -- ingestion ---------------------------------------------------------
    def ingest(self, key: bytes | None, value: bytes | None, msg_ts: float | None,
               now: float | None = None) -> None:
        """Validate and store one record; public so unit tests can feed real shapes."""
        now = time.time() if now is None else now
        received_at = min(now, msg_ts) if msg_ts else now
        # The flood window runs on the records' own timestamps: a restart replays a reporter's
        # history from the compacted topic in one burst, which is no flood (the newest must win).
        t = received_at
        k = key or b""
        q = self._rate.get(k)
        if q is None:
            if len(self._rate) >= MAX_KEYS:
                self._forget_idle_keys(t)
            if len(self._rate) >= MAX_KEYS:
                self._drop("flood")
                return
            q = self._rate[k] = collections.deque()
        while q and q[0] < t - FLOOD_WINDOW:
            q.popleft()
        if len(q) >= FLOOD_PER_KEY:
            self._drop("flood")
            return
        q.append(t)
        try:
            rep = decode(value, self.cfg.name, received_at)
        except ReportError as e:
            self._drop(e.reason)
            return
        with self._lock:
            if isinstance(rep, ConsumerReport):
                # Without a member id (JVM interceptors) the record key tells reporters apart:
                # it names client id, host and process, and every JVM defaults to the same
                # client id (consumer-<group>-1).
                ck = (rep.group, rep.member_id or (k.decode("utf-8", "replace") or rep.client_id))
                old = self._consumers.get(ck)
                if old is None or old.sent_at <= rep.sent_at:
                    self._consumers[ck] = rep
                self.received["consumer"] += 1
            else:
                sk = (rep.group, rep.query_id)
                old_s = self._spark.get(sk)
                if old_s is None or old_s.sent_at <= rep.sent_at:
                    self._spark[sk] = rep
                self.received["spark"] += 1

    _pruned_at = 0.0

    def _forget_idle_keys(self, t: float) -> None:
        """Keys of departed reporters (every consumer restart is a new member id) leave the
        table, so it never fills for good; at most once a second, it is a full scan."""
        if abs(t - self._pruned_at) < 1.0:
            return
        self._pruned_at = t
        for k in [k for k, q in self._rate.items() if not q or q[-1] < t - FLOOD_WINDOW]:
            del self._rate[k]

    def _drop(self, reason: str) -> None:
        with self._lock:
            self.dropped[reason] += 1
            n = self.dropped[reason]
        if n == 1 or n % 1000 == 0:
            log.warning("cluster %s: dropped report(s) from %s: %s (total %d)",
                        self.cfg.name, self.cfg.reports_topic, reason, n)

    def _run(self) -> None:
        consumer: Consumer | None = None
        next_meta = 0.0
        while not self._stop.is_set():
            try:
                if consumer is None and not tokens_ready(self.cfg):
                    self._stop.wait(1.0)  # the sampler's cycle error says why
                    continue
                if consumer is None:
                    consumer = Consumer(client_config(
                        self.cfg, **NEVER_JOINS, **{"enable.partition.eof": True,
                                     "client.id": f"lagwatch-{self.cfg.name}-reports",
                                     "statistics.interval.ms": 1000, "stats_cb": self._on_stats}))
                if time.monotonic() >= next_meta:
                    self._refresh_assignment(consumer)
                    next_meta = time.monotonic() + 30.0 if self._assigned else time.monotonic() + 2
                if not self._assigned:
                    self._stop.wait(0.5)
                    continue
                for msg in consumer.consume(num_messages=1000, timeout=0.5):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            self._replayed(msg.partition())
                        else:
                            log.debug("reports topic: %s", err)
                        continue
                    _kind, ts_ms = msg.timestamp()
                    self.ingest(msg.key(), msg.value(), ts_ms / 1000.0 if ts_ms > 0 else None)
            except Exception as e:  # noqa: BLE001 - keep tailing whatever happens
                log.warning("cluster %s: reading reports failed: %s", self.cfg.name, e)
                self._stop.wait(2.0)
        if consumer is not None:
            consumer.close()

    def _on_stats(self, raw: str) -> None:
        try:
            stats = json.loads(raw)
            self.requests = sum(b.get("tx", 0) for b in stats.get("brokers", {}).values())
        except (ValueError, AttributeError):
            return

    def _replayed(self, partition: int) -> None:
        if self._replaying is not None and partition in self._replaying:
            self._replaying.discard(partition)
            if not self._replaying:
                self.caught_up.set()

    def _refresh_assignment(self, consumer: Consumer) -> None:
        md = consumer.list_topics(self.cfg.reports_topic, timeout=self.cfg.request_timeout)
        t = md.topics.get(self.cfg.reports_topic)
        if t is None or t.error is not None or not t.partitions:
            if not self._warned_missing:
                log.info("cluster %s: reports topic %s does not exist yet; instrumented consumers "
                         "and the Spark listener create it", self.cfg.name, self.cfg.reports_topic)
                self._warned_missing = True
            self.caught_up.set()  # nothing to replay
            return
        new = set(t.partitions) - self._assigned
        if self._replaying is None:
            self._replaying = set(new)
        if new:
            consumer.incremental_assign(
                [TopicPartition(self.cfg.reports_topic, p, OFFSET_BEGINNING) for p in sorted(new)])
            self._assigned |= new
