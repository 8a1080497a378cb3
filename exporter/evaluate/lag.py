"""Lag in seconds: the age of the oldest record a group has not consumed.

Default (``interpolate``): each partition keeps a bounded table of
(sample time, HW) points; the time the record at the committed offset C
became readable is interpolated between the two points whose HW brackets C.
It costs no requests and is accurate to one sampling interval. Runs of equal
HW keep only their first and last point, so an idle topic does not push its
history out, and a record written after a long idle gap gets the gap's end,
not its start (kafka-lag-exporter's idle-topic bug, seglo/kafka-lag-exporter#37 and #121).

When C is older than the table (exporter just started, or a group rewound to
reprocess) interpolation cannot know; instead of extrapolating absurd values we
read the record's own timestamp (:class:`RecordTimestamps`, cached per (tp, C)).
``exact`` mode uses that reader for every lagging partition.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from exporter.contracts.snapshot import TP
from exporter.kafka.readonly import NEVER_JOINS

log = logging.getLogger("lagwatch.lag")


class HwHistory:
    """Monotonic (time, HW) points of one partition, oldest first."""

    __slots__ = ("points", "limit")

    def __init__(self, limit: int = 120) -> None:
        self.points: list[tuple[float, int]] = []
        self.limit = limit

    def add(self, t: float, hw: int) -> None:
        pts = self.points
        if pts and hw < pts[-1][1]:
            pts.clear()  # topic recreated or truncated: older points are meaningless
        if len(pts) >= 2 and pts[-1][1] == hw and pts[-2][1] == hw:
            pts[-1] = (t, hw)  # extend a run of equal HW: keep its first and last point
        else:
            pts.append((t, hw))
        if len(pts) > self.limit:
            del pts[: len(pts) - self.limit]

    def readable_since(self, offset: int) -> float | None:
        """When the record at ``offset`` became readable (HW passed it); None if unknown."""
        pts = self.points
        if not pts or pts[-1][1] <= offset:
            return None
        if pts[0][1] > offset:
            return None  # older than the table
        lo, hi = 0, len(pts) - 1  # first index with hw > offset
        while lo < hi:
            mid = (lo + hi) // 2
            if pts[mid][1] > offset:
                hi = mid
            else:
                lo = mid + 1
        (t0, h0), (t1, h1) = pts[lo - 1], pts[lo]
        return t0 + (t1 - t0) * (offset + 1 - h0) / (h1 - h0)

    @property
    def oldest(self) -> float | None:
        return self.points[0][0] if self.points else None


def lag_seconds(now: float, committed: int, hw: int, history: HwHistory | None,
                exact_ts: float | None) -> float | None:
    """Never negative, never NaN; 0 when caught up; None when unknowable."""
    if committed >= hw:
        return 0.0
    if exact_ts is not None:
        return max(0.0, now - exact_ts)
    since = history.readable_since(committed) if history else None
    if since is None:
        return None
    return max(0.0, now - since)


class RecordTimestamps:
    """Reads the timestamp of the record at a given offset with an assigned consumer.

    ``group.id`` is mandatory for confluent-kafka's Consumer, but with assign()
    and commits disabled it is never joined or written: no group appears.
    """

    def __init__(self, conf: dict[str, Any], timeout: float, cache_size: int = 100_000) -> None:
        self.conf = {
            **conf,
            **NEVER_JOINS,
            "enable.partition.eof": True,
            "fetch.max.bytes": 1 << 20,
            "max.partition.fetch.bytes": 64 << 10,
            "queued.max.messages.kbytes": 1024,
            "isolation.level": "read_uncommitted",
        }
        self.timeout = timeout
        self.cache: dict[tuple[str, int, int], float] = {}
        self.cache_size = cache_size
        self._consumer: Consumer | None = None

    def _get_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self.conf)
        return self._consumer

    def lookup(self, wanted: Iterable[tuple[TP, int]], max_span: int = 5000
               ) -> dict[tuple[str, int, int], float]:
        """Timestamps (seconds) of the records at the wanted (tp, offset) pairs.

        Many groups often read one partition at different offsets: each partition is
        assigned once at its lowest wanted offset and read forward, picking up every
        wanted offset within ``max_span`` records of it (the rest wait for a later
        call). A wanted offset that no longer holds a record (compaction, control
        records) gets the timestamp of the next record: the oldest one not consumed.
        Keys of the result are (topic, partition, offset); unreadable ones are missing.
        """
        out: dict[tuple[str, int, int], float] = {}
        todo: dict[TP, list[int]] = {}
        for tp, off in wanted:
            key = (tp[0], tp[1], off)
            hit = self.cache.get(key)
            if hit is not None:
                out[key] = hit
            else:
                todo.setdefault(tp, []).append(off)
        if not todo:
            return out
        for offs in todo.values():
            offs.sort()
            del offs[sum(1 for o in offs if o - offs[0] <= max_span):]
        consumer = self._get_consumer()
        try:
            consumer.assign([TopicPartition(t, p, offs[0]) for (t, p), offs in todo.items()])
            deadline = time.monotonic() + self.timeout
            while todo and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=500, timeout=0.2):
                    tp = (msg.topic(), msg.partition())
                    offs = todo.get(tp)
                    if offs is None:
                        continue
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            del todo[tp]  # nothing at or after the remaining offsets
                        continue
                    _kind, ts_ms = msg.timestamp()
                    while offs and offs[0] <= msg.offset():
                        off = offs.pop(0)
                        if ts_ms > 0:
                            out[(tp[0], tp[1], off)] = ts_ms / 1000.0
                            self._remember(tp, off, ts_ms / 1000.0)
                    if not offs:
                        del todo[tp]
        finally:
            with contextlib.suppress(Exception):  # the next lookup reassigns anyway
                consumer.unassign()
        return out

    def _remember(self, tp: TP, off: int, ts: float) -> None:
        if len(self.cache) >= self.cache_size:
            for k in list(self.cache)[: self.cache_size // 4]:
                del self.cache[k]
        self.cache[(tp[0], tp[1], off)] = ts

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
