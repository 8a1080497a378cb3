"""The state topic's Kafka I/O, in the Kafka worker process (the main process stays Kafka-free).

Created if missing: compacted (only each key's last record matters), a bounded segment
size and a segment time so that compaction runs even on a quiet cluster, records up to
:data:`MAX_RECORD_BYTES` (one group's state grows with its partitions). Read whole with
``assign()`` from the beginning of every partition to its end, no group joined, nothing
committed (exporter/kafka/readonly.py), exactly as the reports topic is tailed.

Where a record goes: a group's key lands in partition ``P mod N`` of the state topic,
``P`` being the group's ``__consumer_offsets`` partition (Kafka's own placement,
``abs(javaHashCode(group id)) mod offsets.topic.num.partitions``: KIP-848's group
coordinator and the classic one share it) and ``N`` the state topic's partition count.
All groups of one coordinator partition share a state partition: the unit that replicas
sharing the work would own (docs/design.md#state). A topic's record lands by the same hash
of its name.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from exporter.config import ClusterConfig
from exporter.contracts.worker import StateLoadReply, StateWriteReply
from exporter.kafka.readonly import NEVER_JOINS
from exporter.kafka.sampler import client_config
from exporter.state.placement import java_hash, offsets_partition, state_partition

log = logging.getLogger("lagwatch.state")
__all__ = ["StateTopic", "java_hash", "offsets_partition", "state_partition"]

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions' default
MAX_RECORD_BYTES = 16 * 1024 * 1024
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(64 * 1024 * 1024),
    "segment.ms": str(3600 * 1000),  # a quiet topic's segment still rolls, and compacts
    "max.message.bytes": str(MAX_RECORD_BYTES),
}
DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
           KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


# Seconds a write waits for its deliveries before the worker goes back to sampling.
WRITE_WAIT = 1.0


class StateTopic:
    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self.topic = cfg.state_topic
        self.admin = AdminClient(client_config(cfg, **{"client.id": f"lagwatch-{cfg.name}-state"}))
        self.producer: Producer | None = None
        self.partitions = 0  # the state topic's, once known
        self.offsets_partitions = DEFAULT_OFFSETS_PARTITIONS
        self.cluster_id: str | None = None
        self._results: list[KafkaError | None] = []  # deliveries answered since the last write

    def _metadata(self) -> None:
        md = self.admin.list_topics(timeout=self.cfg.request_timeout)
        self.cluster_id = md.cluster_id
        t = md.topics.get(self.topic)
        if t is not None and t.error is None and t.partitions:
            self.partitions = len(t.partitions)
        o = md.topics.get(OFFSETS_TOPIC)
        if o is not None and o.error is None and o.partitions:
            self.offsets_partitions = len(o.partitions)

    def load(self) -> StateLoadReply:
        """Every partition from its beginning to its end as of now."""
        try:
            self._metadata()
            if not self.partitions:
                return StateLoadReply(self.cluster_id, {})
            return StateLoadReply(self.cluster_id, self._read_all())
        except KafkaException as e:
            return StateLoadReply(self.cluster_id, {}, error=str(e.args[0] if e.args else e))

    def _bounds(self) -> dict[int, tuple[int, int]]:
        """Each partition's log start and end (its HW), in one ListOffsets per leader for
        each: asked partition by partition, a topic of 50 would cost 50 round trips before
        the first record."""
        parts = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        asked = [self.admin.list_offsets({tp: spec for tp in parts}, request_timeout=self.cfg.request_timeout)
                 for spec in (OffsetSpec.earliest(), OffsetSpec.latest())]
        starts, ends = ({tp.partition: fut.result().offset for tp, fut in got.items()} for got in asked)
        return {p: (starts[p], ends[p]) for p in ends}

    def _read_all(self) -> dict[bytes, tuple[bytes | None, float]]:
        c = Consumer(client_config(self.cfg, **NEVER_JOINS, **{
            "client.id": f"lagwatch-{self.cfg.name}-state", "enable.partition.eof": True,
            "fetch.message.max.bytes": MAX_RECORD_BYTES, "auto.offset.reset": "earliest"}))
        try:
            bounds = self._bounds()
            todo = {p for p, (lo, hi) in bounds.items() if hi > lo}
            # at the log start itself: assigned OFFSET_BEGINNING, the consumer looks the
            # offset up first, and its first fetch comes about half a second later
            c.assign([TopicPartition(self.topic, p, bounds[p][0]) for p in sorted(todo)])
            out: dict[bytes, tuple[bytes | None, float]] = {}
            deadline = time.monotonic() + max(60.0, 6 * self.cfg.request_timeout)
            while todo and time.monotonic() < deadline:
                # a batch call waits out its timeout unless it fills: short, so that the
                # last partial batch of a read does not wait half a second
                for msg in c.consume(num_messages=1000, timeout=0.05):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            todo.discard(msg.partition())
                        continue
                    if msg.offset() + 1 >= bounds[msg.partition()][1]:
                        todo.discard(msg.partition())
                    _kind, ts = msg.timestamp()
                    out[msg.key() or b""] = (msg.value(), ts / 1000.0)
            if todo:
                raise KafkaException(f"state topic not read to its end in time (partitions {sorted(todo)})")
            return out
        finally:
            c.close()

    def ensure(self) -> str | None:
        """The topic exists (created here if missing); why not, when it cannot."""
        if self.partitions:
            return None
        self._metadata()
        if self.partitions:
            return None
        n = min(self.cfg.state_partitions, self.offsets_partitions)
        fut = self.admin.create_topics([NewTopic(self.topic, num_partitions=n, replication_factor=-1,
                                                 config=TOPIC_CONFIG)],
                                       request_timeout=self.cfg.request_timeout)[self.topic]
        try:
            fut.result()
        except KafkaException as e:
            err = e.args[0]
            if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                if err.code() in DENIED:
                    return f"cannot create {self.topic}: {err.str()}"
                raise
        log.info("cluster %s: created the state topic %s (%d partitions, compacted)",
                 self.cfg.name, self.topic, n)
        # A topic just created can be missing from the next metadata answer for a moment:
        # that is no refusal (the write or join is tried again), only not yet.
        deadline = time.monotonic() + self.cfg.request_timeout
        while True:
            self._metadata()
            if self.partitions:
                return None
            if time.monotonic() > deadline:
                raise KafkaException(f"{self.topic} not in the metadata after its creation")
            time.sleep(0.2)

    def write(self, records: list[tuple[bytes, bytes | None, str]]) -> StateWriteReply:
        """Produce (key, value or None for a tombstone, the name that places it); the reply
        counts the deliveries answered within :data:`WRITE_WAIT` (this write's and the
        earlier ones' that were still in flight)."""
        try:
            denied = self.ensure()
        except KafkaException as e:
            return StateWriteReply(0, len(records), error=str(e.args[0] if e.args else e),
                                   cluster_id=self.cluster_id)
        if denied:
            return StateWriteReply(0, len(records), denied=denied, cluster_id=self.cluster_id)
        if self.producer is None:
            self.producer = Producer(client_config(self.cfg, **{
                "client.id": f"lagwatch-{self.cfg.name}-state", "linger.ms": 20,
                "message.max.bytes": MAX_RECORD_BYTES + 4096, "compression.type": "none"}))
        for key, value, name in records:
            p = state_partition(name, self.offsets_partitions, self.partitions)
            refused = self._produce(key, value, p, self._delivered)
            if refused is not None:  # too large for a record, or the queue full: counted
                self._results.append(refused)
        # A short wait: the worker samples next. A broker that does not acknowledge (paused,
        # or out of the ISR) delays no cycle; its records are answered at a later write.
        self.producer.flush(min(WRITE_WAIT, self.cfg.request_timeout))
        results, self._results = self._results, []
        errs = [e for e in results if e is not None]
        if any(e.code() in DENIED for e in errs):
            return StateWriteReply(len(results) - len(errs), len(errs), denied=errs[0].str(),
                                   cluster_id=self.cluster_id)
        return StateWriteReply(len(results) - len(errs), len(errs), error=errs[0].str() if errs else None,
                               cluster_id=self.cluster_id)

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        self._results.append(err)

    def _produce(self, key: bytes, value: bytes | None, partition: int, done: object
                 ) -> KafkaError | None:
        """One record queued; the error when the client refuses it at once."""
        assert self.producer is not None
        deadline = time.monotonic() + WRITE_WAIT
        while True:
            try:
                self.producer.produce(self.topic, value=value, key=key, partition=partition,
                                      on_delivery=done)
                return None
            except BufferError:  # the local queue is full: let deliveries drain it, a while
                if time.monotonic() > deadline:
                    return KafkaError(KafkaError._QUEUE_FULL)
                self.producer.poll(0.1)
            except KafkaException as e:
                return e.args[0]

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` for the deliveries in flight; how many are left."""
        return 0 if self.producer is None else self.producer.flush(timeout)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(1.0)
