"""Background delivery of listener reports: nothing here ever runs on a Spark callback thread.

Callbacks hand reports to a bounded :class:`queue.Queue` with ``put_nowait``
(a full queue drops the report and counts it). One daemon thread drains it,
keeps only the newest report per key (the topic is compacted, only the last
one matters) and sends each key at most once per ``min_interval`` seconds, so
a query running many batches a second neither floods the exporter (which
drops more than 20 reports per key in 10 s) nor the driver's network.

Everything Kafka-related (the ``confluent_kafka.Producer``, the AdminClient
that creates the compacted topic and, optionally, commits offsets to a
consumer group) is created lazily in that thread. When Kafka is unreachable
librdkafka keeps a small bounded buffer; reports older than
``message.timeout.ms`` are dropped, counted and logged (rate-limited).
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from lagwatch_client.wire import MAX_REPORT_BYTES, TOPIC_CONFIG, TOPIC_PARTITIONS, encode

log = logging.getLogger("lagwatch.spark")

TOPIC_RETRY = 30.0
WARN_EVERY = 60.0


class Counters:
    """Thread-safe named counters; ``snapshot()`` is what the listener exposes."""

    def __init__(self) -> None:
        self._c: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def inc(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._c[name] += n

    def get(self, name: str) -> int:
        with self._lock:
            return self._c[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._c)


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, every: float = WARN_EVERY) -> None:
        self.logger = logger
        self.every = every
        self._last: dict[str, float] = {}
        self._suppressed: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def warning(self, key: str, msg: str, *args: Any, exc_info: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.every:
                self._suppressed[key] += 1
                return
            self._last[key] = now
            n = self._suppressed.pop(key, 0)
        if n:
            msg += f" ({n} similar message(s) suppressed)"
        self.logger.warning(msg, *args, exc_info=exc_info)


class LibrdkafkaLog:
    """librdkafka's own log lines (connection refused...), capped at WARNING and rate-limited.

    confluent-kafka only needs a ``log(level, fmt, *args)`` method.
    """

    def __init__(self, warn: RateLimitedLog) -> None:
        self.warn = warn

    def log(self, level: int, fmt: str, *args: Any) -> None:
        if level < logging.WARNING:
            log.log(level, fmt, *args)
            return
        fac = str(args[0]) if args else ""
        self.warn.warning(f"rdkafka-{fac}", "lagwatch (librdkafka): " + fmt, *args)


def _shrink(report: dict[str, Any]) -> bytes | None:
    """Encode; past the exporter's size limit drop latest offsets, then give up."""
    value = encode(report)
    if len(value) <= MAX_REPORT_BYTES:
        return value
    value = encode({**report, "latest_offsets": {}})
    return value if len(value) <= MAX_REPORT_BYTES else None


class ReportSender:
    """Bounded queue + one daemon thread that produces reports (and optional commits)."""

    def __init__(self, client_conf: dict[str, Any], topic: str, counters: Counters, *,
                 queue_size: int = 1000, min_interval: float = 1.0, create_topic: bool = True,
                 producer_factory: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.client_conf = dict(client_conf)
        self.topic = topic
        self.counters = counters
        self.min_interval = min_interval
        self.create_topic = create_topic
        self.warn = RateLimitedLog(log)
        self._rdkafka_log = LibrdkafkaLog(self.warn)
        self._q: queue.Queue[tuple[str, Any, Any]] = queue.Queue(maxsize=queue_size)
        self._stop = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._producer: Any = None
        self._producer_factory = producer_factory
        self._admin: Any = None
        self._topic_ok = not create_topic
        self._topic_next_try = 0.0
        self._pending: dict[bytes, dict[str, Any]] = {}
        self._last_sent: dict[bytes, float] = {}
        self._commits: dict[str, dict[str, dict[str, int]]] = {}
        self._commit_inflight: set[str] = set()
        self._commit_done: dict[str, dict[str, dict[str, int]]] = {}

    # -- called from Spark callback / heartbeat threads: never blocks ---------------
    def submit(self, key: bytes, report: dict[str, Any]) -> bool:
        return self._put(("report", key, report))

    def submit_commit(self, group: str, offsets: dict[str, dict[str, int]]) -> bool:
        return self._put(("commit", group, offsets))

    def _put(self, item: tuple[str, Any, Any]) -> bool:
        if self._closed:
            self.counters.inc("reports_dropped_closed")
            return False
        self._start()
        try:
            self._q.put_nowait(item)
        except queue.Full:
            self.counters.inc("reports_dropped_queue_full")
            self.warn.warning("queue-full", "lagwatch: report queue full (%d); dropping reports",
                              self._q.maxsize)
            return False
        self.counters.inc("reports_queued")
        return True

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None and not self._closed:
                t = threading.Thread(target=self._run, name="lagwatch-spark-sender", daemon=True)
                t.start()
                self._thread = t

    def close(self, timeout: float = 5.0) -> None:
        """Send what is pending (bounded by ``timeout``) and stop the thread."""
        self._closed = True
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    @property
    def pending(self) -> int:
        return self._q.qsize() + len(self._pending)

    # -- the sender thread -----------------------------------------------------------
    def _run(self) -> None:
        while True:
            stopping = self._stop.is_set()
            try:
                self._drain(0.0 if stopping else self._wait_time())
                self._send_due(force=stopping)
                self._send_commits()
                if self._producer is not None:
                    self._producer.poll(0)
            except Exception:  # noqa: BLE001 - the sender must survive anything
                self.counters.inc("sender_errors")
                self.warn.warning("sender", "lagwatch: report sender error", exc_info=True)
                self._stop.wait(1.0)
            if stopping:
                break
        self._final_flush()

    def _wait_time(self) -> float:
        if not self._pending:
            return 0.5
        now = time.monotonic()
        due = min(self._last_sent.get(k, -1e18) + self.min_interval for k in self._pending)
        return max(0.0, min(0.5, due - now))

    def _drain(self, wait: float) -> None:
        try:
            item = self._q.get(timeout=wait) if wait > 0 else self._q.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, a, b = item
            if kind == "report":
                if a in self._pending:
                    self.counters.inc("reports_coalesced")
                self._pending[a] = b
            elif kind == "commit":
                self._commits[a] = b
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return

    def _ensure_producer(self) -> Any:
        if self._producer is None:
            conf = {
                "client.id": "lagwatch-spark-listener",
                "linger.ms": 50,
                "message.timeout.ms": 30000,
                "queue.buffering.max.messages": 1000,
                "socket.connection.setup.timeout.ms": 10000,
                "enable.idempotence": False,
                **self.client_conf,
                "logger": self._rdkafka_log,
                "error_cb": self._on_error,
            }
            if self._producer_factory is not None:
                self._producer = self._producer_factory(conf)
            else:
                from confluent_kafka import Producer

                self._producer = Producer(conf)
        return self._producer

    def _ensure_admin(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({**self.client_conf, "logger": self._rdkafka_log})
        return self._admin

    def _ensure_topic(self) -> None:
        if self._topic_ok or time.monotonic() < self._topic_next_try:
            return
        self._topic_next_try = time.monotonic() + TOPIC_RETRY
        from confluent_kafka.admin import NewTopic

        try:
            # create_topics first: a metadata request for a missing topic could make a broker
            # with auto.create.topics.enable create it, uncompacted and with default partitions.
            fut = self._ensure_admin().create_topics(
                [NewTopic(self.topic, num_partitions=TOPIC_PARTITIONS, replication_factor=-1,
                          config=TOPIC_CONFIG)], request_timeout=5)[self.topic]
            try:
                fut.result(10)
                log.info("lagwatch: created compacted reports topic %s", self.topic)
            except Exception as e:  # noqa: BLE001
                if "TOPIC_ALREADY_EXISTS" not in str(e) and "already exists" not in str(e):
                    raise
            self._topic_ok = True
        except Exception as e:  # noqa: BLE001 - reports are still produced; retried later
            self.counters.inc("topic_errors")
            self.warn.warning("topic", "lagwatch: cannot check/create reports topic %s (%s); "
                              "retrying in %.0fs", self.topic, e, TOPIC_RETRY)

    def _send_due(self, force: bool) -> None:
        if not self._pending:
            return
        now = time.monotonic()
        due = [k for k in self._pending
               if force or now - self._last_sent.get(k, -1e18) >= self.min_interval
               or self._pending[k].get("event") == "terminated"]
        if not due:
            return
        if self.create_topic:
            self._ensure_topic()
        producer = self._ensure_producer()
        for key in due:
            report = self._pending.pop(key)
            self._last_sent[key] = now
            value = _shrink({**report, "sent_at": round(time.time(), 3)})
            if value is None:
                self.counters.inc("reports_dropped_oversized")
                self.warn.warning("oversized", "lagwatch: report for %s exceeds %d bytes; dropped",
                                  key.decode(errors="replace"), MAX_REPORT_BYTES)
                continue
            try:
                producer.produce(self.topic, key=key, value=value, on_delivery=self._delivered)
                self.counters.inc("reports_produced")
            except BufferError:
                self.counters.inc("reports_dropped_buffer_full")
                self.warn.warning("buffer", "lagwatch: producer buffer full (Kafka unreachable?); "
                                  "dropping reports")
            except Exception as e:  # noqa: BLE001
                self.counters.inc("reports_dropped_produce_error")
                self.warn.warning("produce", "lagwatch: cannot produce report: %s", e)
        if len(self._last_sent) > 10_000:  # forget keys of long-gone queries
            cutoff = now - 3600
            self._last_sent = {k: t for k, t in self._last_sent.items() if t >= cutoff}

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.counters.inc("reports_delivered")
            return
        # Warn before counting: whoever sees the counter move finds the warning logged.
        self.warn.warning("delivery", "lagwatch: report to %s not delivered, dropped (%s); "
                          "is Kafka reachable?", self.topic, err)
        self.counters.inc("reports_failed")

    def _on_error(self, err: Any) -> None:
        self.counters.inc("kafka_errors")
        self.warn.warning("kafka-error", "lagwatch: Kafka client error: %s", err)

    # -- optional: offsets to a consumer group ------------------------------------
    def _send_commits(self) -> None:
        if not self._commits:
            return
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        for group in [g for g in self._commits if g not in self._commit_inflight]:
            offsets = self._commits.pop(group)
            if self._commit_done.get(group) == offsets:
                continue
            tps = [TopicPartition(t, int(p), off) for t, parts in sorted(offsets.items())
                   for p, off in sorted(parts.items(), key=lambda x: int(x[0]))]
            if not tps:
                continue
            try:
                futs = self._ensure_admin().alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group, tps)], request_timeout=10)
            except Exception as e:  # noqa: BLE001
                self.counters.inc("commit_errors")
                self.warn.warning("commit", "lagwatch: cannot commit offsets to group %s: %s",
                                  group, e)
                continue
            self._commit_inflight.add(group)
            for fut in futs.values():
                fut.add_done_callback(
                    lambda f, g=group, o=offsets: self._committed(g, o, f))

    def _committed(self, group: str, offsets: dict[str, dict[str, int]], fut: Any) -> None:
        self._commit_inflight.discard(group)
        try:
            fut.result(0)
        except Exception as e:  # noqa: BLE001
            self.counters.inc("commit_errors")
            self.warn.warning("commit", "lagwatch: committing offsets to group %s failed: %s",
                              group, e)
            return
        self._commit_done[group] = offsets
        self.counters.inc("commits")

    def _final_flush(self) -> None:
        try:
            if self._producer is not None:
                left = self._producer.flush(3.0)
                if left:
                    self.counters.inc("reports_failed", left)
                    log.warning("lagwatch: %d report(s) not delivered at close", left)
        except Exception:  # noqa: BLE001
            self.counters.inc("sender_errors")
