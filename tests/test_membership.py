"""Membership models against a real broker and a real exporter (docs/statuses.md,
"Membership models"): a group that moved to a new topic, whose members' subscriptions
lagwatch reads from the broker, and a client committing outside group membership
(assign(), as Flink's Kafka source does at each checkpoint). Timing bounds are counted in
exporter cycles; wall-clock waits are hang guards only, and "ok at every look" spans the
group's own threshold or cadence. The workloads that need a learnt cadence or a trend
start before the first test (``early``), so that their learning overlaps the other
tests. With ``LAGWATCH_RECORD`` set the module's run is recorded for the replay tests
(tests/support/recorded.py, tests/test_replay.py)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from devenv.kafka import KafkaCluster
from exporter.config import ClusterConfig
from exporter.kafka.sampler import Sampler
from lagwatch_client import InstrumentedConsumer
from tests.conftest import (
    LIVELOCK_AFTER,
    STALL_AFTER,
    commit_offsets,
    create_topic,
    cycles,
    cycles_until,
    produce,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess, parse_metrics, select
from tests.support.recorded import Fixture
from tests.support.scenarios import Recorder
from tests.test_exporter_core import PollingConsumer


@pytest.fixture(scope="module")
def fx(exporter: ExporterProcess) -> Iterator[Fixture]:
    """The module's recording (written only with LAGWATCH_RECORD set)."""
    f = Fixture("membership", [exporter.record])
    yield f
    f.close()


class SteadyProducer(threading.Thread):
    """About 20 records a second to partition 0 until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.stop_flag = topic, threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            self.p.produce(self.topic, value=b"v", partition=0)
            self.p.poll(0)
            time.sleep(0.05)
        self.p.flush(10)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(15)


class CheckpointingClient(threading.Thread):
    """assign() without group membership, committing its position to the group every
    ``every`` seconds (a checkpoint), as Flink's Kafka source does; with ``rate``, it reads
    at most that many records a second (a slow job)."""

    def __init__(self, bootstrap: str, group: str, topic: str, every: float,
                 rate: float | None = None) -> None:
        super().__init__(daemon=True)
        self.rate = rate
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                           "auto.offset.reset": "earliest"})
        self.topic, self.every, self.stop_flag = topic, every, threading.Event()
        self.commits: list[float] = []  # the time of each checkpoint

    def run(self) -> None:
        self.c.assign([TopicPartition(self.topic, 0)])
        last = time.monotonic()
        while not self.stop_flag.is_set():
            if self.c.poll(0.1) is not None and self.rate:
                time.sleep(1 / self.rate)
            if time.monotonic() - last >= self.every:
                pos = self.c.position([TopicPartition(self.topic, 0)])
                if pos[0].offset >= 0:
                    self.c.commit(offsets=pos, asynchronous=False)
                    self.commits.append(time.time())
                last = time.monotonic()
        self.c.close()  # killed: no final commit, no group to leave

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(15)


class SlowCommitter(threading.Thread):
    """A group member polling all the time and committing its position every ``every``
    seconds (a batch committer); after :meth:`halt`, its next commit is its last
    (``halted_at``) and it keeps polling: records wait, the offset stays."""

    def __init__(self, bootstrap: str, group: str, topic: str, every: float) -> None:
        super().__init__(daemon=True)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                           "auto.offset.reset": "earliest", "client.id": "slow-committer",
                           "session.timeout.ms": 6000})
        self.topic, self.every = topic, every
        self.stop_flag, self.halt_flag = threading.Event(), threading.Event()
        self.commits: list[float] = []  # the time of each commit
        self.halted_at = 0.0

    def run(self) -> None:
        self.c.subscribe([self.topic])
        last = time.monotonic()
        while not self.stop_flag.is_set():
            self.c.poll(0.1)
            if self.halted_at or time.monotonic() - last < self.every or not self.c.assignment():
                continue
            pos = self.c.position(self.c.assignment())
            if all(tp.offset >= 0 for tp in pos):
                self.c.commit(offsets=pos, asynchronous=False)
                self.commits.append(time.time())
                if self.halt_flag.is_set():
                    self.halted_at = time.time()
            last = time.monotonic()
        self.c.close()

    def halt(self) -> float:
        self.halt_flag.set()
        wait_for(lambda: self.halted_at, 2 * self.every + 10, "the slow committer's last commit")
        return self.halted_at

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(15)


def _group(exporter: ExporterProcess, gid: str) -> dict[str, Any] | None:
    code, _body, _ = exporter.get(f"/api/v1/clusters/test/groups/{gid}")
    return exporter.api(f"clusters/test/groups/{gid}") if code == 200 else None


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_that_moved_to_a_new_topic_stays_ok(kafka: KafkaCluster, exporter: ExporterProcess,
                                                   fx: Fixture, protocol: str) -> None:
    old, new, gid = unique("orders-v1"), unique("orders-v2"), unique("moved")
    fx.watch(f"moved-{protocol}", gid)
    create_topic(kafka, old, partitions=1)
    create_topic(kafka, new, partitions=1)
    commit_offsets(kafka.bootstrap_servers, gid, old, {0: 0})
    produce(kafka, old, {0: 50})
    member = PollingConsumer(kafka.bootstrap_servers, gid, new, {0: 0}, protocol)
    member.start()
    producer = SteadyProducer(kafka.bootstrap_servers, old)
    producer.start()
    try:
        wait_for(member.committed.is_set, 30, "the member's commit on the new topic")

        def shown() -> dict[str, Any] | None:
            doc = _group(exporter, gid)
            rows = doc and [p for p in doc["partitions"] if p["topic"] == old]
            return doc if rows and rows[0]["subscribed"] is False else None
        doc = wait_for(shown, 30, f"{old} shown as no longer subscribed")
        # the members' real subscriptions, read from the broker
        sample = Sampler(ClusterConfig(name="t", bootstrap_servers=kafka.bootstrap_servers, client={}))
        try:
            def subscribed() -> tuple[str, ...] | None:
                g = sample.sample().groups.get(gid)
                return g.members[0].subscribed if g and g.members else None
            got = wait_for(subscribed, 10, "the member's subscription")
        finally:
            sample.close()
        assert got == (new,)
        # ok at every look for stall_after and a few cycles more, records arriving on the old topic
        seen, doc = _watch(exporter, gid, STALL_AFTER + 4)
        assert seen == {"ok"}, doc
        (row,) = [p for p in doc["partitions"] if p["topic"] == old]
        assert row["committed_offset"] == 0 and row["lag_offsets"] >= 50 and row["status"] == "ok"
        assert f"no member subscribes to {old} any more" in row["reason"]
        assert doc["membership"] == "members" and doc["lag_offsets"] == 0
        # the metric the alerts tell an abandoned topic by: the old topic only
        samples = parse_metrics(exporter.get("/metrics")[1].decode())
        left = select(samples, "kafka_consumergroup_topic_unsubscribed", group=gid)
        assert [dict(lab)["topic"] for lab in left] == [old] and list(left.values()) == [1.0]
        fx.end(f"moved-{protocol}")
    finally:
        producer.stop()
        member.stop()


def _watch(exporter: ExporterProcess, gid: str, seconds: float) -> tuple[set[str], dict[str, Any]]:
    """The group's statuses at every look (every half second) for ``seconds``, and its last
    document."""
    seen: set[str] = set()
    doc: dict[str, Any] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        doc = _group(exporter, gid)
        assert doc is not None
        seen.add(doc["status"])
        time.sleep(0.5)
    return seen, doc


def test_consumer_wedged_before_its_first_commit_is_stalled(kafka: KafkaCluster,
                                                            exporter: ExporterProcess,
                                                            fx: Fixture) -> None:
    """A real consumer assigned its partition, wedged before its first commit (it stops
    polling; librdkafka's background thread keeps it in the group), records arriving:
    stalled ("never committed") within stall_after + 3 cycles of the first record."""
    topic, gid = unique("poison"), unique("wedged")
    fx.watch("never-committed", gid)
    create_topic(kafka, topic, partitions=1)
    c = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": gid,
                  "auto.offset.reset": "latest", "client.id": "wedged-client"})
    c.subscribe([topic])
    try:
        wait_for(lambda: c.poll(0.2) is None and c.assignment(), 30, "the partition assigned")

        def owned() -> bool:
            doc = _group(exporter, gid)
            return bool(doc and doc["members"] and doc["members"][0]["partitions"] == 1)
        wait_for(owned, 30, "the member's assignment seen")
        doc = _group(exporter, gid)
        # shown though never committed; no record yet: nothing to judge
        assert doc["status"] == "ok" and [p["committed_offset"] for p in doc["partitions"]] == [None]
        producer = SteadyProducer(kafka.bootstrap_servers, topic)
        producer.start()
        fx.mark("never-committed", gid, "RECORDS")
        try:
            n = cycles_until(exporter, lambda: (_group(exporter, gid) or {}).get("status") == "stalled",
                             STALL_AFTER + 10, "stalled, never committed")
            assert n <= cycles(STALL_AFTER) + 3, n
            (row,) = _group(exporter, gid)["partitions"]
            assert row["committed_offset"] is None and row["lag_offsets"] is None
            assert "no offset committed since the member was assigned this partition" in row["reason"]
            assert "wedged-client" in row["reason"]
            fx.end("never-committed")
        finally:
            producer.stop()
    finally:
        c.close()


def test_instrumented_consumer_wedged_before_its_first_commit_is_livelocked(
        kafka: KafkaCluster, exporter: ExporterProcess, fx: Fixture) -> None:
    """An instrumented consumer that commits by hand, wedged on its very first record (it
    stops polling; librdkafka keeps it in the group), records arriving: livelocked naming
    its client within livelock_after + its report interval + 3 cycles, its row without a
    committed offset."""
    topic, gid = unique("poison-py"), unique("wedged-py")
    fx.watch("never-committed-instrumented", gid)
    create_topic(kafka, topic, partitions=1)
    c = InstrumentedConsumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": gid,
                              "enable.auto.commit": False, "auto.offset.reset": "latest",
                              "client.id": "py-first-batch"}, report_interval=1.0)
    c.subscribe([topic])
    producer = None
    try:
        wait_for(lambda: c.poll(0.2) is None and c.assignment(), 30, "the partition assigned")
        end = time.monotonic() + 3  # a few statistics rounds: its reports know the assignment
        while time.monotonic() < end:
            c.poll(0.2)
        producer = SteadyProducer(kafka.bootstrap_servers, topic)
        producer.start()
        wait_for(lambda: (m := c.poll(0.2)) is not None and m.error() is None, 30, "its first record")
        blocked = time.time()  # wedged: it never polls again
        fx.mark("never-committed-instrumented", gid, "BLOCKED", at=blocked)
        n = cycles_until(exporter, lambda: (_group(exporter, gid) or {}).get("status") == "livelocked",
                         LIVELOCK_AFTER + 20, "livelocked, never committed")
        assert time.time() - blocked >= LIVELOCK_AFTER - 2, "livelocked before its threshold"
        assert n <= cycles(LIVELOCK_AFTER) + cycles(1.0) + 3, n
        (row,) = _group(exporter, gid)["partitions"]
        assert row["committed_offset"] is None and row["status"] == "livelocked"
        assert "py-first-batch@" in row["reason"] and "last polled" in row["reason"]
        fx.end("never-committed-instrumented")
    finally:
        if producer is not None:
            producer.stop()
        c.close()


@dataclass
class Early:
    """The workloads whose verdicts need a learnt cadence (commits 12 s apart) or a trend,
    started before the module's first test so that their learning overlaps the others."""

    outside: tuple[str, CheckpointingClient]  # checkpoints every 3 s
    outside_slow: tuple[str, CheckpointingClient]  # every 12 s
    lagging: tuple[str, CheckpointingClient]  # every 3 s, reading 5 of the 20 records a second
    slow_commits: tuple[str, SlowCommitter]  # a member committing every 12 s
    looks: Recorder  # every group's status at every scrape (every half second)


@pytest.fixture(scope="module", autouse=True)
def early(kafka: KafkaCluster, exporter: ExporterProcess, fx: Fixture) -> Iterator[Early]:
    bootstrap = kafka.bootstrap_servers
    looks = Recorder(exporter)
    looks.start()
    kinds: dict[str, tuple[str, Callable[[str, str], CheckpointingClient | SlowCommitter]]] = {
        "outside": ("flink-job", lambda g, t: CheckpointingClient(bootstrap, g, t, every=3.0)),
        "outside-slow": ("flink-job", lambda g, t: CheckpointingClient(bootstrap, g, t, every=12.0)),
        "outside-lagging": ("flink-slow",
                            lambda g, t: CheckpointingClient(bootstrap, g, t, every=3.0, rate=5.0)),
        "slow-commits": ("slow-commits", lambda g, t: SlowCommitter(bootstrap, g, t, every=12)),
    }
    # The checkpoints are plain commits, not retried: the broker's group coordinators must
    # be loaded first (a session broker started a moment ago may still be loading them).
    commit_offsets(bootstrap, unique("warm-up"), create_topic(kafka, unique("warm-up"), partitions=1), {0: 0})
    producers, started = [], {}
    for role, (prefix, make) in kinds.items():
        topic, gid = create_topic(kafka, unique("flink-src"), partitions=1), unique(prefix)
        producers.append(SteadyProducer(bootstrap, topic))
        producers[-1].start()
        started[role] = (gid, make(gid, topic))
        started[role][1].start()
        fx.watch(role, gid)
    try:
        yield Early(started["outside"], started["outside-slow"], started["outside-lagging"],
                    started["slow-commits"], looks)
    finally:
        for _gid, member in started.values():
            member.stop()
        for p in producers:
            p.stop()
        looks.stop_flag.set()


def _ok_over(looks: Recorder, gid: str, since: float, seconds: float,
             commits: list[float] | None = None) -> None:
    """The group's status was ok at every look from ``since`` for ``seconds`` (waiting for
    the looks to pass its end). A failure tells the group's status changes, lag line and
    (``commits``) its committer's commit times, all in seconds from ``since``."""
    wait_for(lambda: looks.statuses(gid, since + seconds), seconds + 10, f"{gid} watched {seconds} s")
    seen = [(round(t - since, 1), st) for t, st in looks.statuses(gid, since) if t <= since + seconds]
    assert seen, f"{gid}: no look in {seconds} s"
    assert {st for _t, st in seen} == {"ok"}, (
        f"{gid}: {looks.story(gid, since)}; commits at "
        f"{[round(c - since, 1) for c in commits or []]}")


def test_client_committing_outside_group_membership(exporter: ExporterProcess, fx: Fixture,
                                                    early: Early) -> None:
    """Two assign()-mode clients committing at each checkpoint, records arriving: one every
    3 s (shorter than stall_after), one every 12 s (longer: ok by its learnt cadence). The
    first killed: stopped within stall_after + 3 cycles; the second stays ok throughout."""
    (gid, client), (slow_gid, slow) = early.outside, early.outside_slow

    def outside() -> bool:
        doc = _group(exporter, gid)
        if doc and doc["membership"] == "outside" and any("every ~" in r for r in doc["reasons"]):
            return True
        raise AssertionError(f"{doc}; checkpoints at {client.commits}")
    wait_for(outside, 20, "the group read as committed outside group membership, cadence learnt")
    seen, doc = _watch(exporter, gid, STALL_AFTER + 4)
    assert seen == {"ok"}, doc
    client.stop()  # killed; records keep arriving
    fx.mark("outside", gid, "KILLED")
    n = cycles_until(exporter, lambda: (_group(exporter, gid) or {}).get("status") == "stopped",
                     STALL_AFTER + 10, "stopped once its commits stopped")
    # its allowance is stall_after (its cadence, 3 s, is shorter), plus two cycles
    assert n <= cycles(STALL_AFTER) + 3, n
    doc = _group(exporter, gid)
    assert doc["membership"] == "none" and any("last committed" in r for r in doc["reasons"]), doc
    fx.end("outside")
    # the slow one: three of its commits learnt, then ok at every look over two more
    wait_for(lambda: len(slow.commits) >= 4, 60, "four checkpoints of the slow client")
    _ok_over(early.looks, slow_gid, slow.commits[3], 26, slow.commits)
    doc = _group(exporter, slow_gid)
    assert doc["status"] == "ok" and doc["membership"] == "outside", doc
    assert any(re.search(r"every ~1[23] s", r) for r in doc["reasons"]), doc
    fx.end("outside-slow")


def test_slow_client_committing_outside_group_membership_is_lagging(
        exporter: ExporterProcess, fx: Fixture, early: Early) -> None:
    """An assign()-mode client checkpointing every 3 s but reading 5 records a second while
    about 20 arrive: its lag grows at every checkpoint, so it reads `lagging` (not `stopped`:
    it commits), and nothing worse on the way."""
    gid, client = early.lagging
    wait_for(lambda: client.commits, 30, "the slow client's first checkpoint")
    # the trend needs a few checkpoints whose lag grew beyond the noise; the client runs
    # in this process, so its pace is not bounded in exporter cycles: eventual status only
    at = early.looks.first(gid, "lagging", 120, client.commits[0])
    seen = {st for t, st in early.looks.statuses(gid) if t <= at}
    assert seen <= {"ok", "lagging"}, seen
    doc = _group(exporter, gid)
    assert doc["membership"] == "outside" and doc["lag_offsets"] > 0, doc
    fx.end("outside-lagging")


def test_member_committing_slower_than_stall_after(exporter: ExporterProcess, fx: Fixture,
                                                   early: Early) -> None:
    """A member committing every 12 s (stall_after 8) while records arrive: once its cadence
    is shown (its first gaps), ok at every look over two more cadences; its commits stopped
    (it keeps polling), stalled within its cadence + 2 cycles + 3 cycles of its last commit
    (its gaps are measured from the cycle before the one that saw a commit)."""
    gid, member = early.slow_commits
    wait_for(lambda: len(member.commits) >= 3, 60, "three commits of the slow committer")
    fx.mark("slow-commits", gid, "LEARNT", at=member.commits[2])
    _ok_over(early.looks, gid, member.commits[2], 26, member.commits)
    last = member.halt()
    fx.mark("slow-commits", gid, "HALTED", at=last)
    n = cycles_until(exporter, lambda: (_group(exporter, gid) or {}).get("status") == "stalled",
                     40, "stalled once its commits stopped")
    assert time.time() - last >= 12 - 2, "stalled before its cadence passed"
    assert n <= cycles(12 + 2) + 3, n
    fx.end("slow-commits")
