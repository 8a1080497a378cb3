"""This replica's membership of lagwatch's coordination group, in the Kafka worker process.

With ``state.replicas`` each replica joins the coordination group (``state.group``, the
only group lagwatch ever joins) subscribed to the state topic: Kafka's group protocol
(classic, cooperative-sticky assignor) hands each replica some of the topic's partitions,
its shards, and moves them when a replica joins, leaves or dies (after the session
timeout). The consumer fetches nothing (its partitions are paused) and commits nothing:
only its assignment is used. A watched group belongs to the shard its state record lands
in (exporter/state/placement.py).

- **Assigned.** A new shard is read back from the state topic (the whole topic, to its
  end: topic records are placed by topic name, not by shard) before its groups are
  judged, as Kafka Streams restores a task from its changelog; the records travel with
  that cycle's sample and the runner imports them first.
- **Revoked.** The rebalance callback waits (at most :attr:`Coordinator.wait_bound`) until
  the runner has judged and written the shard's groups once more and released it: the
  next owner then reads what this replica last knew. A shard *lost* (this replica missed
  its session) goes at once: another may already own it.
- **Refused.** A coordination group or state topic that lagwatch may not use
  (authorization) is said once; this replica then judges every group alone, as without
  replicas (docs/design.md#replicas says why).
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from exporter.config import ClusterConfig
from exporter.contracts.worker import Shards, StateLoadReply
from exporter.kafka.sampler import client_config
from exporter.state.topic import DENIED, StateTopic

log = logging.getLogger("lagwatch.state")
LOAD_ATTEMPTS = 3  # cycles that try to read a new shard back before judging it without


def heartbeat_ms(cfg: ClusterConfig) -> int:
    """The coordination consumer's heartbeat interval: a third of the session timeout (the
    group protocol's rule), at most 1 s, at most a quarter of the cycle interval; 100 ms
    at least."""
    session = int(cfg.state_session_timeout * 1000)
    return max(100, min(session // 3, 1000, int(cfg.interval * 250)))


class Coordinator:
    def __init__(self, cfg: ClusterConfig, topic: StateTopic) -> None:
        self.cfg, self.topic = cfg, topic
        self._cv = threading.Condition()
        self.owned: set[int] = set()  # assigned and read back: judged by this replica
        self.fresh: set[int] = set()  # assigned, still to be read back
        self.revoking: set[int] = set()  # owned, waiting in the revoke callback
        self.released: set[int] = set()  # written by the runner: the callback may return
        self.refused: str | None = None
        self.assignments = 0  # assignments received (the first one ends the start's wait)
        self._consumer: Consumer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._attempts = 0
        # Long enough for the runner's next cycle: sample, judge, publish, write.
        self.wait_bound = 2 * cfg.interval + 3 * cfg.request_timeout + 5

    # -- the membership, in its own thread -------------------------------------------
    def _join(self) -> None:
        denied = self.topic.ensure()
        if denied is not None:
            self._refuse(denied)
            return
        session = int(self.cfg.state_session_timeout * 1000)
        c = Consumer(client_config(self.cfg, **{
            "group.id": self.cfg.coordination_group, "client.id": f"lagwatch-{self.cfg.name}-coordination",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "latest", "partition.assignment.strategy": "cooperative-sticky",
            # A heartbeat is how a member learns of a rebalance: at most 1 s and a quarter
            # interval apart, so that a dead replica's shards reach the others within the
            # cycle its session expires in (docs/design.md#replicas counts the cycles).
            "session.timeout.ms": session, "heartbeat.interval.ms": heartbeat_ms(self.cfg),
            # the revoke callback waits for the runner's write: within the rebalance timeout
            "max.poll.interval.ms": max(300_000, int(self.wait_bound * 2000)),
            "error_cb": self._on_error}))
        c.subscribe([self.cfg.state_topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                    on_lost=self._on_lost)
        self._consumer = c
        self._thread = threading.Thread(target=self._poll, name=f"coordination-{self.cfg.name}",
                                        daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        c = self._consumer
        assert c is not None
        while not self._stopping:
            try:
                msg = c.poll(0.2)
            except KafkaException as e:
                self._on_error(e.args[0])
                continue
            if msg is not None and msg.error() is not None:
                self._on_error(msg.error())

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in DENIED and self.refused is None:
            self._refuse(err.str())

    def _refuse(self, why: str) -> None:
        with self._cv:
            self.refused = why
            self.assignments += 1
            self._cv.notify_all()
        log.warning("cluster %s: lagwatch may not join its coordination group %s on %s, so this "
                    "replica judges and serves every group alone (lagwatch_coordination_refused 1; "
                    "docs/security.md lists the ACLs): %s", self.cfg.name, self.cfg.coordination_group,
                    self.cfg.state_topic, why)
        self._stopping = True

    def _on_assign(self, c: Consumer, parts: list[TopicPartition]) -> None:
        # Nothing is fetched: the assignment is all that is used (from the end, paused).
        c.incremental_assign([TopicPartition(p.topic, p.partition, OFFSET_END) for p in parts])
        if parts:
            c.pause(parts)
        with self._cv:
            self.fresh |= {p.partition for p in parts}
            self.assignments += 1
            self._cv.notify_all()
        if parts:
            log.info("cluster %s: shard(s) %s of %s assigned to this replica", self.cfg.name,
                     sorted(p.partition for p in parts), self.cfg.state_topic)

    def _on_revoke(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        gone = {p.partition for p in parts}
        deadline = time.monotonic() + self.wait_bound
        with self._cv:
            self.fresh -= gone
            self.revoking |= gone & self.owned
            self._cv.notify_all()
            while (self.revoking & gone) - self.released and not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("cluster %s: shard(s) %s handed on before the runner wrote them "
                                "(it did not within %.0f s)", self.cfg.name,
                                sorted((self.revoking & gone) - self.released), self.wait_bound)
                    break
                self._cv.wait(left)
            self._drop(gone)
        log.info("cluster %s: shard(s) %s revoked from this replica", self.cfg.name, sorted(gone))

    def _on_lost(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        with self._cv:
            self._drop({p.partition for p in parts})
        log.warning("cluster %s: shard(s) %s lost (this replica missed its session)", self.cfg.name,
                    sorted(p.partition for p in parts))

    def _drop(self, gone: set[int]) -> None:
        self.owned -= gone
        self.fresh -= gone
        self.revoking -= gone
        self.released -= gone

    # -- the worker's side, once per cycle ----------------------------------------------
    def cycle(self) -> tuple[Shards, StateLoadReply | None]:
        """This cycle's shards, and the state topic read back when new shards came."""
        if self._consumer is None and self.refused is None:
            try:
                self._join()
            except KafkaException as e:  # the cluster not reachable: the next cycle tries again
                log.warning("cluster %s: cannot join the coordination group %s yet: %s",
                            self.cfg.name, self.cfg.coordination_group, e.args[0] if e.args else e)
            with self._cv:  # the first assignment, so a start judges its shards at once
                self._cv.wait_for(lambda: self.assignments > 0 or self._consumer is None,
                                  self.cfg.state_session_timeout + self.cfg.request_timeout)
        with self._cv:
            fresh = set(self.fresh)
        load, restored = None, set()
        if fresh:
            load = self.topic.load()
            self._attempts = self._attempts + 1 if load.error is not None else 0
            if load.error is None or self._attempts >= LOAD_ATTEMPTS:
                self._attempts = 0
                with self._cv:
                    restored = self.fresh & fresh  # those revoked meanwhile are not
                    self.owned |= restored
                    self.fresh -= restored
        with self._cv:
            return Shards(owned=frozenset(self.owned), restored=frozenset(restored),
                          revoking=frozenset(self.revoking), partitions=self.topic.partitions,
                          offsets_partitions=self.topic.offsets_partitions,
                          refused=self.refused), load if restored else None

    def release(self, shards: frozenset[int]) -> None:
        """The runner wrote these shards' groups: their revocation may go on."""
        with self._cv:
            self.released |= shards & self.revoking
            self._cv.notify_all()

    def close(self) -> None:
        """Leave the group (its shards move at once, not after the session timeout)."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(5)
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
