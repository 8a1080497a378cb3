"""Faults against real brokers: failover, a paused broker, partitions added.

Every test of the 3-broker cluster is here, so that one test worker starts it (make test
runs pytest-xdist with --dist loadfile). A broker down at start is in
tests/test_broker_down.py: it starts a broker of its own, so it runs on another worker."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from devenv.groups_tool import describe_group
from devenv.kafka import KafkaCluster
from exporter.kafka.broker_requests import BrokerRequests
from tests.conftest import (
    admin_for,
    commit_offsets,
    create_topic,
    cycles_until,
    exporter_config,
    exporter_cycles,
    groups_on_two_brokers,
    produce,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess, group_offsets, value
from tests.support.scenarios import Recorder
from tests.test_exporter_core import PollingConsumer


@pytest.mark.cluster3
def test_leader_and_coordinator_failover_keeps_metrics_right(kafka3: KafkaCluster, tmp_path: Any) -> None:
    topic = create_topic(kafka3, unique("failover"), partitions=3, rf=3)
    produce(kafka3, topic, {0: 40, 1: 40, 2: 40}, acks="all")
    live, idle = unique("fo-live"), unique("fo-idle")
    commit_offsets(kafka3.bootstrap_servers, idle, topic, {0: 40, 1: 40, 2: 40})  # caught up
    consumer = PollingConsumer(kafka3.bootstrap_servers, live, topic, {0: 40, 1: 40, 2: 40})
    consumer.start()
    cfg = exporter_config(tmp_path, kafka3.bootstrap_servers, request_timeout=3)
    try:
        assert consumer.committed.wait(60)
        with ExporterProcess(None, config=cfg) as exp:
            exp.wait_ready()
            rec = Recorder(exp)
            rec.start()
            try:
                wait_for(lambda: value(exp.metrics(), "kafka_consumergroup_lag_offsets_sum", group=live)
                         == 0, 30, "live group caught up")
                admin = admin_for(kafka3)
                leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
                coord = admin.describe_consumer_groups([live])[live].result(10).coordinator.id
                killed_at = time.time()
                # One at a time: killing two of three KRaft voters would lose the quorum.
                for victim in sorted({leader, coord}):
                    b = next(x for x in kafka3.brokers if x.node_id == victim)
                    kafka3.stop_broker(b, kill=True)

                    def moved(victim: int = victim) -> bool:
                        a = admin_for(kafka3)
                        md = a.list_topics(topic, timeout=5).topics[topic].partitions[0]
                        c = a.describe_consumer_groups([live])[live].result(5).coordinator.id
                        return md.leader not in (victim, -1) and c != victim
                    wait_for(moved, 60, f"leadership and coordination to leave broker {victim}")
                    kafka3.restart_broker(b)
                truth = {(r.topic, r.partition): float(r.current_offset)
                         for r in describe_group(kafka3, live) if r.current_offset is not None}
                n = cycles_until(exp, lambda: group_offsets(
                    exp.metrics(), live, "kafka_consumergroup_committed_offset") == truth,
                    30, "committed offsets right again")
                # the next cycle, or the one after a worker restart (librdkafka#5040)
                assert n <= 4, f"{n} cycles"
                for g in (live, idle):
                    seen = {s for _t, s in rec.statuses(g, killed_at)}
                    assert not seen & {"stopped", "rewind"}, (g, seen)
                wait_for(lambda: value(exp.metrics(), "lagwatch_up", cluster="test") == 1, 20,
                         "lagwatch_up 1 after the failover")
                # No librdkafka admin request is left in the sampling cycle: neither the
                # segfault on a moved coordinator (librdkafka#5040) nor the abort on a late
                # answer (#4605) can end the Kafka worker here any more.
                assert value(exp.metrics(), "lagwatch_errors_total", cluster="test",
                             stage="worker_crash") == 0
                assert value(exp.metrics(), "kafka_partition_in_sync_replicas", topic=topic,
                             partition="0") in (2, 3)
            finally:
                rec.stop_flag.set()
    finally:
        consumer.stop()


@pytest.mark.cluster3
def test_paused_broker_scrapes_stay_fast_and_data_age_shows(kafka3: KafkaCluster, tmp_path: Any) -> None:
    topic = create_topic(kafka3, unique("paused"), partitions=3, rf=3)
    produce(kafka3, topic, {0: 5, 1: 5, 2: 5}, acks="all")
    group = unique("paused")
    commit_offsets(kafka3.bootstrap_servers, group, topic, {0: 1, 1: 1, 2: 1})
    cfg = exporter_config(tmp_path, kafka3.bootstrap_servers, request_timeout=2)
    with ExporterProcess(None, config=cfg) as exp:
        exp.wait_ready()
        wait_for(lambda: group_offsets(exp.metrics(), group, "kafka_consumergroup_lag_offsets")
                 == {(topic, p): 4.0 for p in range(3)}, 30, "group visible")
        errors_before = sum(v for (n, _l), v in exp.metrics().items() if n == "lagwatch_errors_total")
        admin = admin_for(kafka3)
        coord = admin.describe_consumer_groups([group])[group].result(10).coordinator.id
        victim = next(b for b in kafka3.brokers if b.node_id == coord)
        victim.pause()
        try:
            slowest = 0.0
            deadline = time.monotonic() + 20
            ages = []
            while time.monotonic() < deadline:
                t = time.monotonic()
                code, _body, _h = exp.get("/metrics", timeout=5)
                slowest = max(slowest, time.monotonic() - t)
                assert code == 200
                m = exp.metrics()
                ages.append(value(m, "lagwatch_data_age_seconds", cluster="test") or 0)
                errors = sum(v for (n, _l), v in m.items() if n == "lagwatch_errors_total")
                if errors > errors_before and max(ages) > 2:
                    break
                time.sleep(0.3)
            # a scrape waiting on Kafka would take a request timeout (2 s) or more
            assert slowest < 2.0, slowest
            assert errors > errors_before, "sampler timeouts were not counted"
        finally:
            victim.resume()
        wait_for(lambda: (value(exp.metrics(), "lagwatch_data_age_seconds", cluster="test") or 99) < 3,
                 60, "fresh data again after resume")


def test_partitions_added_appear(kafka: KafkaCluster, exporter: ExporterProcess) -> None:
    topic = create_topic(kafka, unique("grow"), partitions=1)
    produce(kafka, topic, {0: 3})
    group = unique("grow")
    commit_offsets(kafka.bootstrap_servers, group, topic, {0: 3})
    wait_for(lambda: value(exporter.metrics(), "kafka_partition_high_watermark_offset", topic=topic,
                           partition="0") == 3, 20, "partition 0")
    admin = admin_for(kafka)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    # a producer that has not yet seen the new partitions refuses records for them
    wait_for(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3, 20,
             "the new partitions in the metadata")
    produce(kafka, topic, {1: 4, 2: 5})
    wait_for(lambda: value(exporter.metrics(), "kafka_partition_high_watermark_offset", topic=topic,
                           partition="2") == 5, 20, "new partitions' series")
    commit_offsets(kafka.bootstrap_servers, group, topic, {1: 1, 2: 5})
    wait_for(lambda: group_offsets(exporter.metrics(), group, "kafka_consumergroup_lag_offsets")
             == {(topic, 0): 0.0, (topic, 1): 3.0, (topic, 2): 0.0}, 20, "group lag on new partitions")


@pytest.mark.cluster3
def test_metadata_asks_one_broker_and_the_others_when_it_hangs(kafka3: KafkaCluster) -> None:
    """A cycle's Metadata goes to the broker that answered last, alone; when that broker
    hangs (SIGSTOP) the others are asked too, one of them answers, and the next cycle asks
    that one alone. Counted in requests sent, not timed."""
    req = BrokerRequests({}, kafka3.bootstrap_servers, 5.0, "lagwatch-test-metadata")
    try:
        req.metadata()  # connects; the broker that answers is remembered
        sent = req.requests
        assert len(req.metadata().brokers) == 3
        assert req.requests - sent == 1, "a healthy cycle asks one broker"
        answered = req._metadata_from
        victim = next(b for b in kafka3.brokers if b.node_id == answered)
        victim.pause()
        try:
            req.begin_cycle()
            sent = req.requests
            assert len(req.metadata().brokers) == 3
            assert req.requests - sent == 3, "the hung broker, then the two others"
            assert req._metadata_from != answered
            req.begin_cycle()
            sent = req.requests
            req.metadata()
            assert req.requests - sent == 1, "the next cycle asks the broker that answered"
        finally:
            victim.resume()
    finally:
        req.close()


@pytest.mark.cluster3
def test_three_broker_cluster_starts(kafka3: KafkaCluster) -> None:
    """The session's 3-broker cluster answers (its stop is checked by the kafka3 fixture)."""
    md = admin_for(kafka3).list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    pids = [b.proc.pid for b in kafka3.brokers if b.proc and b.proc.poll() is None]
    assert len(pids) == 3


@pytest.mark.cluster3
def test_leo_ahead_of_hw_while_follower_paused(kafka3: KafkaCluster, tmp_path: Any) -> None:
    topic = create_topic(kafka3, unique("leo"), partitions=1, rf=3)
    admin = admin_for(kafka3)
    # The earlier tests of this cluster kill and pause brokers, which can leave every
    # __consumer_offsets partition led by one broker (Kafka moves leaders back only at its
    # periodic preferred-leader check): if that broker is the follower paused below, every
    # group is coordinated there. Electing the preferred leaders spreads coordinators again.
    admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
    md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    controller = admin.describe_cluster(request_timeout=10).result().controller.id
    followers = [r for r in md.replicas if r != md.leader]
    follower_id = next((r for r in followers if r != controller), followers[0])
    follower = next(b for b in kafka3.brokers if b.node_id == follower_id)
    leader = next(b for b in kafka3.brokers if b.node_id == md.leader)
    produce(kafka3, topic, {0: 10}, acks="all")
    # A group whose coordinator is not the paused follower: this test is about LEO and HW
    # (with its coordinator paused too the group is unreadable until the broker is fenced).
    # Fail loudly if no group lands elsewhere rather than go on with a deleted group, whose
    # topic is then never sampled.
    for _ in range(20):
        group = unique("leo")
        commit_offsets(kafka3.bootstrap_servers, group, topic, {0: 10})
        desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
        if desc.coordinator.id != follower_id:
            break
        admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    else:
        raise AssertionError(f"20 groups all coordinated by broker {follower_id}, the follower to pause")
    cfg = exporter_config(tmp_path, kafka3.bootstrap_servers, interval=0.5, request_timeout=2)
    with ExporterProcess(None, config=cfg) as exp:
        exp.wait_ready()

        def offsets() -> tuple[float | None, float | None]:
            m = exp.metrics()
            return (value(m, "kafka_partition_log_end_offset", topic=topic),
                    value(m, "kafka_partition_high_watermark_offset", topic=topic))

        seen: list[Any] = []

        def settled() -> bool:
            seen[:] = [offsets(), exp.api("clusters")]  # what a failure needs to be understood
            return seen[0] == (10, 10)

        try:
            wait_for(settled, 20, "LEO == HW == 10 before the pause")
        except AssertionError as e:
            raise AssertionError(f"{e}; (LEO, HW) and clusters last seen: {seen}") from None
        follower.pause()
        try:
            # From the leader alone: a producer bootstrapped from every broker may ask the
            # paused one for metadata first and wait out its timeout before the others.
            produce(kafka3, topic, {0: 25}, **{"acks": 1, "bootstrap.servers": leader.address})
            leo, hw = wait_for(lambda: (o := offsets())[0] is not None and o[1] is not None
                               and o[0] > o[1] and o, 15, "LEO > HW while a follower is paused")
            assert leo == 35 and hw < 35
        finally:
            follower.resume()
        wait_for(lambda: offsets() == (35, 35), 60, "LEO == HW again after the follower resumed")


@pytest.mark.cluster3
def test_a_paused_broker_costs_only_its_own_groups(kafka3: KafkaCluster, tmp_path: Any) -> None:
    """One broker of three SIGSTOPped (issue 25): every cycle completes, a group coordinated
    elsewhere is fresh within two cycles, and the paused broker's group keeps its last
    judgement with the error in its reasons (until the documented grace ends)."""
    admin = admin_for(kafka3)
    admin.elect_leaders(ElectionType.PREFERRED, None).result(30)  # spread coordinators
    topic = create_topic(kafka3, unique("costs"), partitions=1, rf=3)
    produce(kafka3, topic, {0: 50}, acks="all")
    victim_id, paused_group, _other, live_group = groups_on_two_brokers(kafka3, topic, "costs", 10, tries=40)
    victim = next(b for b in kafka3.brokers if b.node_id == victim_id)
    interval, timeout = 1.0, 2.0
    cfg = exporter_config(tmp_path, kafka3.bootstrap_servers, interval=interval, request_timeout=timeout)
    with ExporterProcess(None, config=cfg) as exp:
        exp.wait_ready()
        for g in (paused_group, live_group):
            wait_for(lambda g=g: group_offsets(exp.metrics(), g, "kafka_consumergroup_committed_offset")
                     == {(topic, 0): 10.0}, 30, f"{g} read")
        victim.pause()
        try:
            # Until the controller fences the paused broker (9 s session timeout) and its
            # groups move, they cannot be read: their last judgement stands, with the error.
            wait_for(lambda: any("could not be read" in r for r in exp.api(
                f"clusters/test/groups/{paused_group}")["reasons"]), 8, "the paused group's error")
            commit_offsets(kafka3.bootstrap_servers, live_group, topic, {0: 20})
            c0 = value(exp.metrics(), "lagwatch_cycles_total", cluster="test") or 0
            # Fresh within two cycles of a paused-broker cycle (one request timeout each).
            n = cycles_until(exp, lambda: group_offsets(
                exp.metrics(), live_group, "kafka_consumergroup_committed_offset") == {(topic, 0): 20.0},
                2 * (interval + timeout) + 10, "the live group's new commit")
            assert n <= 3, f"{n} cycles"
            seen = (value(exp.metrics(), "lagwatch_cycles_total", cluster="test") or 0) - c0
            # every cycle completes, in about one interval plus one request timeout (counted
            # in cycles; the wall clock is the hang guard)
            wait_for(lambda: (value(exp.metrics(), "lagwatch_cycles_total", cluster="test") or 0)
                     - c0 - seen >= 3, 4 * (interval + timeout), "three more cycles, the broker paused")
            m = exp.metrics()
            assert value(m, "lagwatch_up", cluster="test") == 1
            assert value(m, "lagwatch_errors_total", cluster="test", stage="worker_crash") == 0
        finally:
            victim.resume()


def _create_on(admin: AdminClient, topic: str, node_id: int) -> None:
    """A topic of one partition whose only replica is on ``node_id``. A broker an earlier
    test of the module stopped or paused may still be fenced for a while after it is back
    (it re-registers with the controller at its next heartbeat, later on a loaded
    machine): the controller refuses the assignment meanwhile, so it is asked again."""
    deadline = time.monotonic() + 120  # a hang guard
    while True:
        new = NewTopic(topic, num_partitions=1, replica_assignment=[[node_id]])
        try:
            admin.create_topics([new])[topic].result(30)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError.INVALID_REPLICA_ASSIGNMENT or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


@pytest.mark.cluster3
def test_a_partition_whose_leader_is_paused_keeps_its_groups_judgement(kafka3: KafkaCluster,
                                                                        tmp_path: Any) -> None:
    """The only replica of a partition SIGSTOPped: its HW cannot be read (the ListOffsets
    times out, then the partition has no leader). Its `stopped` group, coordinated
    elsewhere, stays `stopped` with the lag of the last HW read, every failure counted;
    it never reads `ok` (before the unreadable grace ends it cannot read `error` either:
    exporter/evaluate/unread.py)."""
    admin = admin_for(kafka3)
    controller = admin.describe_cluster(request_timeout=10).result().controller.id
    victim = next(b for b in kafka3.brokers if b.node_id != controller)
    topic = unique("offline")
    _create_on(admin, topic, victim.node_id)
    produce(kafka3, topic, {0: 50}, acks="all")
    for _ in range(40):
        group = unique("offline")
        commit_offsets(kafka3.bootstrap_servers, group, topic, {0: 10})
        coord = admin.describe_consumer_groups([group], request_timeout=10)[group].result().coordinator.id
        if coord != victim.node_id:
            break
    assert coord != victim.node_id
    cfg = exporter_config(tmp_path, kafka3.bootstrap_servers, interval=1.0, request_timeout=2.0)
    with ExporterProcess(None, config=cfg) as exp:
        exp.wait_ready()
        rec = Recorder(exp)
        rec.start()
        try:
            rec.first(group, "stopped", 60, 0.0)

            def failures() -> float:
                m = exp.metrics()
                return value(m, "lagwatch_errors_total", cluster="test", stage="list_offsets") or 0

            before, paused_at = failures(), time.time()
            victim.pause()
            try:
                # Three cycles whose HW read failed: the request timing out while the
                # controller still names the paused broker, then no leader at all.
                wait_for(lambda: failures() >= before + 3, 60, "three failed HW reads")
                c0 = exporter_cycles(exp)
                wait_for(lambda: exporter_cycles(exp) >= c0 + 1, 20, "a cycle after them")
            finally:
                victim.resume()
            seen = {s for _t, s in rec.statuses(group, paused_at)}
            assert seen <= {"stopped", "error"} and "stopped" in seen, rec.story(group, paused_at)
            assert {o for _t, _s, o in rec.lag_line(group, paused_at)} == {40}, rec.story(group, paused_at)
        finally:
            rec.stop_flag.set()
