"""Exporter core against real brokers: offsets, HW, LEO, lag, read-only, series lifecycle."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from devenv.groups_tool import describe_group, list_groups
from devenv.kafka import KafkaCluster
from tests.conftest import (
    admin_for,
    commit_offsets,
    create_topic,
    cycles_until,
    exporter_config,
    produce,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess, group_offsets, select, value


class PollingConsumer(threading.Thread):
    """A live group member that commits chosen offsets once assigned, then just keeps polling."""

    def __init__(self, bootstrap: str, group: str, topic: str, commit: dict[int, int],
                 protocol: str = "classic") -> None:
        super().__init__(daemon=True)
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                "client.id": f"{group}-client"}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf["session.timeout.ms"] = 6000
        self.consumer = Consumer(conf)
        self.topic, self.commit_offsets = topic, commit
        self.committed = threading.Event()
        self.stop_flag = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        while not self.stop_flag.is_set():
            self.consumer.poll(0.2)
            if not self.committed.is_set() and len(self.consumer.assignment()) == len(self.commit_offsets):
                self.consumer.commit(offsets=[TopicPartition(self.topic, p, o)
                                              for p, o in self.commit_offsets.items()],
                                     asynchronous=False)
                self.committed.set()
        self.consumer.close()

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(15)


def assert_matches_tool(cluster: KafkaCluster, exp: ExporterProcess, group: str, topic: str,
                        cluster_name: str = "test") -> None:
    """lagwatch's committed offset, HW and lag equal kafka-consumer-groups' for every partition."""
    truth = {(r.topic, r.partition): r for r in describe_group(cluster, group) if r.topic == topic}
    assert truth, "kafka-consumer-groups shows nothing"

    def same() -> bool | tuple:
        m = exp.metrics()
        committed = group_offsets(m, group, "kafka_consumergroup_committed_offset", [topic])
        lag = group_offsets(m, group, "kafka_consumergroup_lag_offsets", [topic])
        hw = {(dict(lab)["topic"], int(dict(lab)["partition"])): v for lab, v in
              select(m, "kafka_partition_high_watermark_offset", cluster=cluster_name,
                     topic=topic).items() if (topic, int(dict(lab)["partition"])) in truth}
        want_c = {tp: float(r.current_offset) for tp, r in truth.items() if r.current_offset is not None}
        want_hw = {tp: float(r.log_end_offset) for tp, r in truth.items()}
        want_lag = {tp: float(r.lag) for tp, r in truth.items() if r.lag is not None}
        ok = committed == want_c and hw == want_hw and lag == want_lag
        return ok or (committed, want_c, hw, want_hw, lag, want_lag)

    last: list[Any] = []

    def check() -> bool:
        r = same()
        last[:] = [r]
        return r is True

    try:
        wait_for(check, 20, f"lagwatch to match kafka-consumer-groups for {group}")
    except AssertionError as e:
        raise AssertionError(f"{e}\n(lagwatch committed, tool, lagwatch HW, tool, lagwatch lag, tool) = "
                             f"{last}") from None


@pytest.fixture()
def topic3(kafka: KafkaCluster) -> str:
    t = create_topic(kafka, unique("core"), partitions=3)
    produce(kafka, t, {0: 120, 1: 45, 2: 9})
    return t


def test_classic_kip848_and_memberless_groups_match_kafka_tool(
        kafka: KafkaCluster, exporter: ExporterProcess, topic3: str) -> None:
    live, kip848, empty = unique("live"), unique("kip848"), unique("empty")
    consumers = [
        PollingConsumer(kafka.bootstrap_servers, live, topic3, {0: 100, 1: 45, 2: 3}),
        PollingConsumer(kafka.bootstrap_servers, kip848, topic3, {0: 7, 1: 40, 2: 9}, "consumer"),
    ]
    for c in consumers:
        c.start()
    try:
        for c in consumers:
            assert c.committed.wait(60), "consumer never got its assignment"
        commit_offsets(kafka.bootstrap_servers, empty, topic3, {0: 1, 1: 2})
        for g in (live, kip848, empty):
            assert_matches_tool(kafka, exporter, g, topic3)
        m = exporter.metrics()
        assert value(m, "kafka_consumergroup_info", group=live, type="classic", state="stable") == 1
        assert value(m, "kafka_consumergroup_info", group=kip848, type="consumer") == 1
        assert value(m, "kafka_consumergroup_members", group=live) == 1
        assert value(m, "kafka_consumergroup_members", group=kip848) == 1
        assert value(m, "kafka_consumergroup_members", group=empty) == 0
        # LEO equals HW on a quiet single-replica partition, and LSO too (no transactions).
        for p, n in ((0, 120), (1, 45), (2, 9)):
            for fam in ("kafka_partition_log_end_offset", "kafka_partition_high_watermark_offset",
                        "kafka_partition_last_stable_offset"):
                assert value(m, fam, topic=topic3, partition=str(p)) == n, fam
            assert value(m, "kafka_partition_log_start_offset", topic=topic3, partition=str(p)) == 0
        doc = exporter.api(f"clusters/test/groups/{live}")
        assert {p["partition"]: p["lag_offsets"] for p in doc["partitions"]} == {0: 20, 1: 0, 2: 6}
        assert doc["members"][0]["client_id"] == f"{live}-client"
    finally:
        for c in consumers:
            c.stop()


def test_exporter_never_creates_groups_or_moves_offsets(kafka: KafkaCluster, tmp_path: Any,
                                                        topic3: str) -> None:
    group = unique("readonly")
    commit_offsets(kafka.bootstrap_servers, group, topic3, {0: 5, 1: 6, 2: 7})
    before_groups = set(list_groups(kafka))
    before = {(r.topic, r.partition): r.current_offset for r in describe_group(kafka, group)}
    # exact mode also exercises the record-timestamp reader (an assigned consumer)
    cfg = exporter_config(tmp_path, kafka.bootstrap_servers, lag_mode="exact")
    with ExporterProcess(None, config=cfg) as exp:
        exp.wait_ready()
        wait_for(lambda: value(exp.metrics(), "lagwatch_cycles_total") >= 5, 30, "5 cycles")
        m = exp.metrics()
        lag_s = group_offsets(m, group, "kafka_consumergroup_lag_seconds")
        assert len(lag_s) == 3 and all(v > 0 for v in lag_s.values())
        # the cycle's stages, each measured from the end of the one before: they add up to
        # no more than the whole cycle they were measured in
        stages = {dict(lab)["stage"]: v for (name, lab), v in m.items()
                  if name == "lagwatch_cycle_stage_seconds"}
        assert set(stages) == {"sample", "record_timestamps", "state_restore", "evaluation", "render"}
        assert all(v >= 0 for v in stages.values()) and stages["sample"] > 0
        assert sum(stages.values()) <= value(m, "lagwatch_cycle_duration_seconds") + 1e-6
    after_groups = set(list_groups(kafka))
    after = {(r.topic, r.partition): r.current_offset for r in describe_group(kafka, group)}
    # No group created (lagwatch's own included). Groups may go: the session broker deletes
    # an earlier test's empty group without offsets at its own cleanup interval.
    assert after_groups <= before_groups, f"created: {after_groups - before_groups}"
    assert after == before == {(topic3, 0): 5, (topic3, 1): 6, (topic3, 2): 7}


def test_deleted_group_and_topic_series_disappear(kafka: KafkaCluster, exporter: ExporterProcess) -> None:
    t1 = create_topic(kafka, unique("gone"), partitions=2)
    t2 = create_topic(kafka, unique("stays"), partitions=1)
    produce(kafka, t1, {0: 5, 1: 5})
    produce(kafka, t2, {0: 5})
    g1, g2 = unique("deleted"), unique("survivor")
    commit_offsets(kafka.bootstrap_servers, g1, t1, {0: 1})
    commit_offsets(kafka.bootstrap_servers, g2, t1, {0: 2, 1: 2})
    commit_offsets(kafka.bootstrap_servers, g2, t2, {0: 3})
    wait_for(lambda: len(group_offsets(exporter.metrics(), g2, "kafka_consumergroup_lag_offsets")) == 3,
             20, "survivor group visible")
    wait_for(lambda: value(exporter.metrics(), "kafka_consumergroup_members", group=g1) == 0, 20,
             "deleted-to-be group visible")

    admin = admin_for(kafka)
    admin.delete_consumer_groups([g1])[g1].result(30)
    def vanished() -> bool:
        return not any(dict(lab).get("group") == g1 for (_, lab) in exporter.metrics())

    n = cycles_until(exporter, vanished, 10, "series of the deleted group to vanish")
    assert n <= 3, f"{n} cycles"  # the next cycles' describe finds it gone (no listing grace)

    admin.delete_topics([t1])[t1].result(30)
    wait_for(lambda: not any(dict(lab).get("topic") == t1 for (_, lab) in exporter.metrics()), 15,
             "series of the deleted topic to vanish")
    m = exporter.metrics()
    assert group_offsets(m, g2, "kafka_consumergroup_committed_offset") == {(t2, 0): 3.0}


class SampleTimes(threading.Thread):
    """The exporter's sample times (lagwatch_last_sample_timestamp_seconds), looked at every
    0.1 s until stopped."""

    def __init__(self, exp: ExporterProcess) -> None:
        super().__init__(daemon=True)
        self.exp, self.stop_flag = exp, threading.Event()
        self.times: set[float] = set()

    def run(self) -> None:
        while not self.stop_flag.wait(0.1):
            at = value(self.exp.metrics(), "lagwatch_last_sample_timestamp_seconds")
            if at is not None:
                self.times.add(at)

    def widest_gap(self) -> float:
        """The longest time between two samples in a row: one cycle on a quiet machine."""
        self.stop_flag.set()
        self.join(10)
        times = sorted(self.times)
        return max(b - a for a, b in zip(times, times[1:], strict=False))


def test_lag_seconds_tracks_true_record_age(kafka: KafkaCluster, exporter: ExporterProcess,
                                            tmp_path: Any) -> None:
    """Records written one per second at known times; lag_seconds within one cycle of truth
    (interpolated between the high watermarks of two samples in a row: the time between
    them, one interval on a quiet machine, measured here), exact mode within 0.25 s."""
    topic = create_topic(kafka, unique("age"), partitions=1)
    group = unique("age")
    commit_offsets(kafka.bootstrap_servers, group, topic, {0: 0})
    wait_for(lambda: value(exporter.metrics(), "kafka_consumergroup_lag_offsets", group=group) == 0,
             20, "group tracked")
    written: dict[int, float] = {}
    p = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 0})

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None
        written[msg.offset()] = msg.timestamp()[1] / 1000.0

    samples = SampleTimes(exporter)
    samples.start()
    for i in range(8):
        p.produce(topic, value=f"r{i}".encode(), on_delivery=on_delivery)
        p.flush(10)
        time.sleep(1.0)  # the workload itself: one record per second, not a wait for a condition
    cycle = samples.widest_gap()
    commit_offsets(kafka.bootstrap_servers, group, topic, {0: 3})

    cfg = exporter_config(tmp_path, kafka.bootstrap_servers, lag_mode="exact")
    with ExporterProcess(None, config=cfg) as exact:
        exact.wait_ready()
        for exp, tolerance in ((exporter, cycle + 0.25), (exact, 0.25)):
            def check(exp: ExporterProcess = exp) -> tuple[float, float] | None:
                m = exp.metrics()
                if value(m, "kafka_consumergroup_committed_offset", group=group) != 3:
                    return None
                lag = value(m, "kafka_consumergroup_lag_seconds", group=group)
                sampled = value(m, "lagwatch_last_sample_timestamp_seconds")
                assert lag is not None and sampled is not None
                return lag, sampled - written[3]
            lag, truth = wait_for(check, 20, "committed offset 3 seen")
            assert abs(lag - truth) <= tolerance, (lag, truth, tolerance)

        # Idle topic: nothing new is written, the oldest unconsumed record keeps ageing.
        first = wait_for(lambda: value(exporter.metrics(), "kafka_consumergroup_lag_seconds",
                                       group=group), 5, "lag")
        wait_for(lambda: value(exporter.metrics(), "kafka_consumergroup_lag_seconds",
                               group=group) >= first + 2, 10, "lag seconds to keep growing while idle")

        # Caught up means 0, not a stale value.
        commit_offsets(kafka.bootstrap_servers, group, topic, {0: 8})
        wait_for(lambda: value(exporter.metrics(), "kafka_consumergroup_lag_seconds", group=group) == 0,
                 10, "lag seconds 0 once caught up")


@pytest.fixture(scope="module")
def kafka39() -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(brokers_count=1, version="3.9.2")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_kafka_3_9_classic_groups_match_kafka_tool(kafka39: KafkaCluster, tmp_path: Any) -> None:
    topic = create_topic(kafka39, unique("k39"), partitions=3)
    produce(kafka39, topic, {0: 30, 1: 12, 2: 4})
    live, empty = unique("live39"), unique("empty39")
    c = PollingConsumer(kafka39.bootstrap_servers, live, topic, {0: 10, 1: 12, 2: 0})
    c.start()
    try:
        assert c.committed.wait(60)
        commit_offsets(kafka39.bootstrap_servers, empty, topic, {0: 29, 2: 4})
        cfg = exporter_config(tmp_path, kafka39.bootstrap_servers)
        with ExporterProcess(None, config=cfg) as exp:
            exp.wait_ready()
            for g in (live, empty):
                assert_matches_tool(kafka39, exp, g, topic)
            m = exp.metrics()
            assert value(m, "kafka_consumergroup_members", group=live) == 1
            assert value(m, "kafka_partition_log_end_offset", topic=topic, partition="0") == 30
            # No streams or share group APIs before Kafka 4: one line at start, no error
            # counted for them, however many cycles run.
            cycles = value(m, "lagwatch_cycles_total")
            wait_for(lambda: (value(exp.metrics(), "lagwatch_cycles_total") or 0) >= (cycles or 0) + 3,
                     30, "three more cycles")
            errors = {dict(lab)["stage"]: v
                      for lab, v in select(exp.metrics(), "lagwatch_errors_total").items()}
            assert set(errors.values()) == {0.0}, errors
            assert exp.output().count("no streams or share group APIs") == 1, exp.output()[-3000:]
    finally:
        c.stop()
