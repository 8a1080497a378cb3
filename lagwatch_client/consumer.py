"""One-line consumer instrumentation: replace ``Consumer(conf)`` by ``InstrumentedConsumer(conf)``.

Every few seconds a background thread publishes, to lagwatch's compacted
reports topic, the consumer's group, client id, member id, per-partition
position (librdkafka ``app_offset``) and committed offset, and the time of
its last ``poll``/``consume`` call. librdkafka heartbeats from its own
thread, so a consumer whose poll loop is wedged still looks healthy to Kafka;
its reports, sent from yet another thread, keep arriving with an ever older
last-poll time, and lagwatch calls it ``livelocked``.

The reporter can never break or slow the consumer: it has its own producer
with a small bounded queue, every error is swallowed and counted in
``instrumentation_errors``, and nothing it does blocks ``poll``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, Producer

from lagwatch_client.wire import (
    DEFAULT_REPORTS_TOPIC,
    VERSION,
    encode,
    ensure_reports_topic,
    report_key,
)

log = logging.getLogger("lagwatch.instrument")


class _Reporter(threading.Thread):
    def __init__(self, owner: InstrumentedConsumer, producer_conf: dict[str, Any], topic: str,
                 interval: float, cluster: str | None) -> None:
        super().__init__(name="lagwatch-reporter", daemon=True)
        self.owner = owner
        self.topic = topic
        self.interval = interval
        self.cluster = cluster
        self.producer_conf = producer_conf
        self.producer: Producer | None = None
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self.send()

    def send(self, closed: bool = False) -> None:
        try:
            if self.producer is None:
                ensure_reports_topic(self.producer_conf, self.topic)
                self.producer = Producer({**self.producer_conf, "queue.buffering.max.messages": 100,
                                          "message.timeout.ms": 30000, "linger.ms": 50})
            report = self.owner._report(closed)
            key = report_key("consumer", report["group"], report["member_id"] or report["client_id"])
            if self.cluster:
                report["cluster"] = self.cluster
            self.producer.produce(self.topic, key=key, value=encode(report))
            self.producer.poll(0)
        except Exception as e:  # noqa: BLE001 - never let reporting hurt the consumer
            n = self.owner._count_error()
            if n in (1, 10, 100) or n % 1000 == 0:
                log.warning("lagwatch report not sent (%d errors so far): %s", n, e)

    def close(self) -> None:
        self.stop_event.set()
        self.send(closed=True)
        if self.producer is not None:
            with contextlib.suppress(Exception):
                self.producer.flush(2)


class InstrumentedConsumer(Consumer):
    """A ``confluent_kafka.Consumer`` that reports its positions and last poll to lagwatch.

    Extra keyword arguments: ``report_interval`` (seconds, default 5),
    ``reports_topic``, ``reports_config`` (producer properties; default: the
    consumer's connection and security properties), ``cluster`` (lagwatch's
    name for the cluster, optional).
    """

    def __init__(self, conf: dict[str, Any], *, report_interval: float = 5.0,
                 reports_topic: str = DEFAULT_REPORTS_TOPIC,
                 reports_config: dict[str, Any] | None = None, cluster: str | None = None) -> None:
        conf = dict(conf)
        user_stats_cb: Callable[[str], None] | None = conf.pop("stats_cb", None)
        user_on_commit: Callable[[Any, Any], None] | None = conf.pop("on_commit", None)
        self._stats_lock = threading.Lock()
        self._partitions: dict[tuple[str, int], dict[str, int]] = {}
        self._user_stats_cb = user_stats_cb

        def stats_cb(raw: str) -> None:
            self._on_stats(raw)
            if user_stats_cb is not None:
                user_stats_cb(raw)

        def on_commit(err: Any, partitions: Any) -> None:
            if err is None:
                self._committed_now(partitions)
            if user_on_commit is not None:
                user_on_commit(err, partitions)

        conf["stats_cb"] = stats_cb
        conf["on_commit"] = on_commit
        conf.setdefault("statistics.interval.ms", int(max(1.0, report_interval / 2) * 1000))
        super().__init__(conf)
        self._errors = 0  # under _stats_lock: the polling, stats and reporter threads count
        self._group = str(conf.get("group.id", ""))
        self._client_id = str(conf.get("client.id", "rdkafka"))
        self._host = socket.gethostname()
        self._last_poll = time.time()
        self._in_poll = 0
        self._interval = report_interval
        self._member_id = ""
        self._positions: dict[tuple[str, int], int] = {}
        # Offsets this consumer committed (commit() and on_commit, automatic commits too):
        # librdkafka's statistics only catch up at their next interval, during a poll.
        self._committed: dict[tuple[str, int], int] = {}
        self._commit_mode = commit_mode(conf)
        self._snapshot_at = 0.0
        # Rebalances this member took part in: the assignments librdkafka handed it (see
        # subscribe); None until it subscribes (an assign()-only consumer has none).
        self._rebalances: int | None = None
        skip = ("group.id", "client.id", "stats_cb", "statistics.interval.ms", "enable.auto.commit",
                "auto.offset.reset", "group.protocol", "session.timeout.ms", "max.poll.interval.ms",
                "heartbeat.interval.ms", "on_commit", "error_cb", "logger", "isolation.level",
                "partition.assignment.strategy", "enable.auto.offset.store", "group.instance.id",
                "auto.commit.interval.ms", "enable.partition.eof", "fetch.min.bytes",
                "fetch.wait.max.ms", "max.partition.fetch.bytes", "fetch.max.bytes")
        pconf = reports_config or {k: v for k, v in conf.items() if k not in skip}
        pconf.setdefault("client.id", f"{self._client_id}-lagwatch")
        self._reporter = _Reporter(self, pconf, reports_topic, report_interval, cluster)
        self._reporter.start()

    def subscribe(self, topics: Any, on_assign: Callable[..., Any] | None = None,
                  **kwargs: Any) -> Any:
        """Subscribe, counting the rebalances this member takes part in: each one ends with
        an assignment (eager: the whole new one; cooperative and KIP-848: the increment,
        possibly empty). librdkafka's own ``cgrp.rebalance_cnt`` counts revocations as well,
        two per eager rebalance. The application's ``on_assign`` is still called, and when
        it assigns nothing itself confluent-kafka assigns as without a callback."""
        with self._stats_lock:
            self._rebalances = self._rebalances or 0

        def counting(consumer: Any, partitions: Any) -> None:
            with self._stats_lock:
                self._rebalances = (self._rebalances or 0) + 1
            if on_assign is not None:
                on_assign(consumer, partitions)

        return super().subscribe(topics, on_assign=counting, **kwargs)

    # -- poll tracking ---------------------------------------------------
    def poll(self, *args: Any, **kwargs: Any) -> Any:
        self._in_poll += 1
        self._last_poll = time.time()
        msg = None
        try:
            msg = super().poll(*args, **kwargs)
            return msg
        finally:
            self._in_poll -= 1
            self._last_poll = time.time()
            self._track((msg,) if msg is not None else ())

    def consume(self, *args: Any, **kwargs: Any) -> Any:
        self._in_poll += 1
        self._last_poll = time.time()
        msgs = None
        try:
            msgs = super().consume(*args, **kwargs)
            return msgs
        finally:
            self._in_poll -= 1
            self._last_poll = time.time()
            self._track(msgs or ())

    def _track(self, msgs: Any) -> None:
        """Positions and member id, kept by the polling thread itself.

        confluent-kafka (2.16) lets one thread at a time into a consumer: a reporter thread
        calling memberid() or position() would wait as long as the application keeps polling,
        and a busy consumer would never report. So every record handed out moves its
        partition's position (cheap), and a few times per report interval the member id and
        librdkafka's positions of the current assignment replace the lot (revocations, seeks).
        """
        if msgs:
            with self._stats_lock:
                for m in msgs:
                    if m.error() is None:
                        self._positions[(m.topic(), m.partition())] = m.offset() + 1
        now = time.monotonic()
        if now - self._snapshot_at < self._interval / 4:
            return
        self._snapshot_at = now
        try:
            member_id = self.memberid() or ""
            positions = {(tp.topic, tp.partition): tp.offset
                         for tp in self.position(self.assignment()) if tp.offset >= 0}
        except Exception:  # noqa: BLE001 - e.g. closed meanwhile: counted, never raised
            self._count_error()
            return
        with self._stats_lock:
            self._member_id, self._positions = member_id, positions
            # forget commits of partitions not assigned any more: another member commits them now
            self._committed = {tp: off for tp, off in self._committed.items() if tp in positions}

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        """``Consumer.commit``; a synchronous commit's offsets are reported at once."""
        result = super().commit(*args, **kwargs)
        if result:
            self._committed_now(result)
        return result

    def _committed_now(self, partitions: Any) -> None:
        try:
            with self._stats_lock:
                for tp in partitions or ():
                    if tp.error is None and tp.offset >= 0:
                        self._committed[(tp.topic, tp.partition)] = tp.offset
        except Exception:  # noqa: BLE001 - counted, never raised into the application
            self._count_error()

    def close(self, *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            self._reporter.close()
        return super().close(*args, **kwargs)

    @property
    def instrumentation_errors(self) -> int:
        """Errors the instrumentation swallowed (reports not sent, statistics unreadable)."""
        with self._stats_lock:
            return self._errors

    def _count_error(self) -> int:
        with self._stats_lock:
            self._errors += 1
            return self._errors

    # -- reporting -------------------------------------------------------
    def _on_stats(self, raw: str) -> None:
        try:
            stats = json.loads(raw)
            parts: dict[tuple[str, int], dict[str, int]] = {}
            for tname, t in stats.get("topics", {}).items():
                for pid, p in t.get("partitions", {}).items():
                    if int(pid) < 0 or p.get("fetch_state") in (None, "none"):
                        continue
                    parts[(tname, int(pid))] = {
                        "position": p.get("app_offset", OFFSET_INVALID),
                        "committed": p.get("committed_offset", OFFSET_INVALID)}
            with self._stats_lock:
                self._partitions = parts
        except Exception:  # noqa: BLE001 - malformed stats are skipped and counted
            self._count_error()

    def _report(self, closed: bool) -> dict[str, Any]:
        now = time.time()
        last_poll = now if self._in_poll else self._last_poll
        with self._stats_lock:
            parts = {tp: dict(v) for tp, v in self._partitions.items()}
            member_id, positions = self._member_id, dict(self._positions)
            rebalances = self._rebalances
            committed = dict(self._committed)
        # Positions as of the last poll (see _track): statistics lag behind, so a consumer
        # that wedges right after assignment would have none.
        for tp, off in positions.items():
            parts.setdefault(tp, {"position": OFFSET_INVALID, "committed": OFFSET_INVALID})["position"] = off
        for tp, off in committed.items():
            if tp in parts:
                parts[tp]["committed"] = off
        items = []
        for (t, p), offs in sorted(parts.items()):
            item: dict[str, Any] = {"topic": t, "partition": p}
            if offs["position"] >= 0:
                item["position"] = offs["position"]
            if offs["committed"] >= 0:
                item["committed"] = offs["committed"]
            items.append(item)
        report = {"v": VERSION, "kind": "consumer", "group": self._group, "client_id": self._client_id,
                  "member_id": member_id, "host": self._host, "sent_at": now, "last_poll": last_poll,
                  "interval": self._interval, "partitions": items, "closed": closed,
                  **self._commit_mode}
        if rebalances is not None:
            report["rebalances"] = rebalances
        return report


def _flag(v: Any, default: bool) -> bool:
    """A librdkafka boolean property as given: a bool, or "true"/"false" text."""
    if v is None:
        return default
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    return bool(v)


def commit_mode(conf: dict[str, Any]) -> dict[str, Any]:
    """The report's ``commit_mode`` fields from the consumer's own configuration:
    ``enable.auto.commit`` (librdkafka's default true) and ``auto.commit.interval.ms``
    (default 5000)."""
    if not _flag(conf.get("enable.auto.commit"), True):
        return {"commit_mode": "manual"}
    try:
        interval = float(conf.get("auto.commit.interval.ms", 5000)) / 1000
    except (TypeError, ValueError):
        return {"commit_mode": "auto"}
    return {"commit_mode": "auto", "auto_commit_interval": interval}
