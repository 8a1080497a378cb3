"""The timestamp of the record at a committed offset, read in the Kafka worker.

The evaluator asks for it when a committed offset is older than its HW history can
interpolate (exporter start, a rewind), and for every lagging partition in ``exact`` mode.
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
        call). A wanted offset that holds no record any more (compaction, control
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
