"""JVM consumers with lagwatch's ConsumerInterceptor (clients/java), set up from configuration alone.

Real programs (devenv/jvm): plain KafkaConsumers on kafka-clients 4.2.1 (classic and KIP-848
protocols) and 3.9.2, and a Kafka Streams application, against the shared broker and exporter
(interval 1 s, livelock-after 8 s). They run at the same time; a recorder scrapes the exporter
every half second, so a test can assert on its group's whole timeline; detection is bounded
in exporter cycles (``Recorder.cycles_to``) and proven exactly by the replay of this module's
recording (tests/test_replay.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer

from devenv.jvm_apps import INTERCEPTOR, JvmApp
from devenv.kafka import KafkaCluster, free_port
from tests.conftest import LIVELOCK_AFTER, create_topic, cycles, unique, wait_for
from tests.support.exporter_proc import ExporterProcess
from tests.support.recorded import Fixture
from tests.support.scenarios import Recorder

REPORTING = (f"prop.interceptor.classes={INTERCEPTOR}", "prop.lagwatch.report.interval.ms=1000")
# livelocked within the threshold + 2 cycles, + 2 for the report's own interval
LIVELOCK_CYCLES = cycles(LIVELOCK_AFTER) + 4


def _drain(kafka: KafkaCluster, topic: str, records: int, *extra: str, **kw: Any) -> JvmApp:
    return JvmApp("LagConsumer", "mode=drain", f"bootstrap={kafka.bootstrap_servers}",
                  f"group={unique('drain')}", f"topic={topic}", f"count={records}", "linger=6",
                  *extra, **kw)


def test_unreachable_reports_cluster_costs_no_speed_and_counts_errors(kafka: KafkaCluster) -> None:
    """Both consumers drain the same backlog at once; only one has an interceptor, whose
    reports go to a port nobody listens on."""
    n = 300_000
    topic = create_topic(kafka, unique("jvm-drain"), partitions=1)
    p = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 50,
                  "queue.buffering.max.messages": n})
    for _ in range(n):
        p.produce(topic, b"x" * 100, partition=0)
    assert p.flush(60) == 0
    plain = _drain(kafka, topic, n)
    dead = _drain(kafka, topic, n, *REPORTING, "prop.lagwatch.report.interval.ms=500",
                  f"prop.lagwatch.bootstrap.servers=127.0.0.1:{free_port()}",
                  jvm_opts=("-Dorg.apache.logging.log4j.level=WARN",))  # log4j2's default: stdout
    try:
        plain_s, dead_s = float(plain.event("DRAINED", 120)[0]), float(dead.event("DRAINED", 120)[0])
        assert plain.event("EXIT", 30) == [str(n), "0", "0"]
        dead_exit = dead.event("EXIT", 30)
    finally:
        plain.stop()
        dead.stop()
    assert int(dead_exit[0]) == n and int(dead_exit[2]) == 0  # all consumed, no report sent
    assert dead_s <= 1.5 * plain_s + 1.0, (dead_s, plain_s)
    # the error counter keeps growing after the drain (one dropped report per interval)
    errors_after_drain = next(int(s[2]) for s in dead.stats() if int(s[1]) == n)
    errors = int(dead_exit[1])
    assert errors >= 3 and errors > errors_after_drain, (errors_after_drain, errors)
    ours = [line for _t, line in dead.lines if "lagwatch interceptor:" in line]
    # one log line per distinct problem per minute, while the counter counts every drop
    assert len(ours) in (1, 2) and errors > 2, (ours, errors)


@dataclass
class Feed:
    topic: str
    rate: float
    paused: tuple[float, float] = (0.0, 0.0)  # no records between these times


class Workload(threading.Thread):
    def __init__(self, kafka: KafkaCluster, feeds: list[Feed]) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 10})
        self.feeds = feeds
        self.stop_flag = threading.Event()

    def run(self) -> None:
        tick = 0.1
        credit = [0.0] * len(self.feeds)
        while not self.stop_flag.wait(tick):
            now = time.time()
            for i, f in enumerate(self.feeds):
                if f.paused[0] <= now < f.paused[1]:
                    continue
                credit[i] += f.rate * tick
                while credit[i] >= 1:
                    self.producer.produce(f.topic, b"x" * 100)
                    credit[i] -= 1
            self.producer.poll(0)
        self.producer.flush(10)


# Quotes, non-ASCII and the characters that make JMX quote a name: the report's JSON, the
# consumer-metrics lookup and the match on client id all have to get it right.
HEALTHY_CLIENT_ID = 'jvm-healthy "ü*,=x"'
BLOCKED = {  # variant: (kafka-clients version, extra consumer properties)
    "clients-4.2.1": ("4.2.1", ()),
    "clients-4.2.1-kip848": ("4.2.1", ("prop.group.protocol=consumer",)),
    "clients-3.9.2": ("3.9.2", ()),
}


@pytest.fixture(scope="module")
def jvm_world(kafka: KafkaCluster, exporter: ExporterProcess) -> Iterator[dict[str, Any]]:
    boot = f"bootstrap={kafka.bootstrap_servers}"
    feeds: dict[str, Feed] = {}
    groups: dict[str, str] = {}
    apps: dict[str, JvmApp] = {}
    rec = Recorder(exporter)
    rec.start()
    fx = Fixture("jvm-interceptor", [exporter.record])
    first = Fixture("jvm-first-batch", [exporter.record])  # recorded on its own
    try:
        for name in [*BLOCKED, "healthy", "streams", "first-batch"]:
            groups[name] = unique(f"jvm-{name}")
            feeds[name] = Feed(create_topic(kafka, unique(f"jvm-{name}"), partitions=1), 10)
        work = Workload(kafka, list(feeds.values()))
        work.start()
        for name, (version, extra) in BLOCKED.items():
            apps[name] = JvmApp("LagConsumer", "mode=blocked", boot, f"group={groups[name]}",
                                f"topic={feeds[name].topic}", "after=40", *REPORTING,
                                f"prop.client.id=jvm-wedged-{name}", *extra, kafka_version=version)
        apps["healthy"] = JvmApp("LagConsumer", "mode=healthy", boot, f"group={groups['healthy']}",
                                 f"topic={feeds['healthy'].topic}", *REPORTING,
                                 f"prop.client.id={HEALTHY_CLIENT_ID}")
        # wedged on its first record, before any commit (automatic commits, the first one a
        # minute away): the partition it owns has no committed offset
        apps["first-batch"] = JvmApp(
            "LagConsumer", "mode=blocked", boot, f"group={groups['first-batch']}",
            f"topic={feeds['first-batch'].topic}", "after=1", "precommit=false", *REPORTING,
            "prop.auto.offset.reset=latest", "prop.enable.auto.commit=true",
            "prop.auto.commit.interval.ms=60000", "prop.client.id=jvm-first-batch")
        apps["streams"] = JvmApp(
            "StreamsApp", boot, f"app={groups['streams']}", f"topic={feeds['streams'].topic}", "after=40",
            f"prop.main.consumer.interceptor.classes={INTERCEPTOR}",
            "prop.main.consumer.lagwatch.report.interval.ms=1000", streams=True)
        for name, app in apps.items():
            (first if name == "first-batch" else fx).watch(name, groups[name], app)
        yield {"apps": apps, "groups": groups, "feeds": feeds, "recorder": rec, "exporter": exporter}
        fx.close()
        first.close()
    finally:
        rec.stop_flag.set()
        if "work" in locals():
            work.stop_flag.set()
        for app in apps.values():
            app.stop()


def _group(world: dict[str, Any], name: str) -> dict[str, Any]:
    return world["exporter"].api(f"clusters/test/groups/{world['groups'][name]}")


@pytest.mark.parametrize("variant", list(BLOCKED))
def test_wedged_plain_consumer_is_livelocked_and_named(jvm_world: dict[str, Any], variant: str) -> None:
    app, rec, group = jvm_world["apps"][variant], jvm_world["recorder"], jvm_world["groups"][variant]
    app.event("READY", 120)
    t_blocked, position = app.event("BLOCKED", 120)
    n = rec.cycles_to(group, "livelocked", float(t_blocked), 90)
    assert n <= LIVELOCK_CYCLES, (n, rec.story(group, float(t_blocked) - 5))
    assert "livelocked" not in {s for ts, s in rec.statuses(group) if ts < float(t_blocked)}
    doc = _group(jvm_world, variant)
    assert doc["status"] == "livelocked"
    member = doc["members"][0]  # still a member: its heartbeat thread carries on
    assert member["client_id"] == f"jvm-wedged-{variant}"
    assert member["last_poll_age_seconds"] >= LIVELOCK_AFTER  # the report matched the member
    reason = doc["reasons"][0]
    assert f"jvm-wedged-{variant}@" in reason and member["member_id"] in reason
    assert "last polled" in reason
    # the position the consumer reported is the one it had when it wedged
    assert doc["partitions"][0]["position_offset"] == int(position)


def test_consumer_wedged_before_its_first_commit_is_livelocked(jvm_world: dict[str, Any]) -> None:
    """Owned, never committed, records arriving: livelocked by its own reports (the last
    poll), named, with the position it reported and no committed offset; never anything
    but ok before it wedged."""
    app, rec, group = (jvm_world["apps"]["first-batch"], jvm_world["recorder"],
                       jvm_world["groups"]["first-batch"])
    app.event("READY", 120)
    t_blocked, position = app.event("BLOCKED", 120)
    n = rec.cycles_to(group, "livelocked", float(t_blocked), 90)
    assert n <= LIVELOCK_CYCLES, (n, rec.story(group, float(t_blocked) - 5))
    assert {s for ts, s in rec.statuses(group) if ts < float(t_blocked)} <= {"ok"}
    doc = _group(jvm_world, "first-batch")
    assert doc["status"] == "livelocked" and doc["members"][0]["client_id"] == "jvm-first-batch"
    (row,) = doc["partitions"]
    assert row["committed_offset"] is None and row["position_offset"] == int(position)
    assert row["lag_offsets"] is not None and row["lag_offsets"] > 0
    assert "jvm-first-batch@" in row["reason"] and "last polled" in row["reason"]


def test_wedged_kafka_streams_processor_is_livelocked_and_named(jvm_world: dict[str, Any]) -> None:
    app, rec, group = jvm_world["apps"]["streams"], jvm_world["recorder"], jvm_world["groups"]["streams"]
    app.event("READY", 120)
    t_blocked = float(app.event("BLOCKED", 120)[0])
    n = rec.cycles_to(group, "livelocked", t_blocked, 90)
    assert n <= LIVELOCK_CYCLES, (n, rec.story(group, t_blocked - 5))
    doc = _group(jvm_world, "streams")
    assert doc["status"] == "livelocked"
    client_id = doc["members"][0]["client_id"]
    assert client_id.startswith(group) and client_id.endswith("-StreamThread-1-consumer")
    assert f"{client_id}@" in doc["reasons"][0] and "last polled" in doc["reasons"][0]


def test_healthy_consumer_stays_ok_through_an_idle_spell(jvm_world: dict[str, Any]) -> None:
    """No records for longer than the livelock threshold: polls that return nothing still count
    (the consumer's own last-poll metric), so it is never livelocked, not even as records resume."""
    app, rec, group = jvm_world["apps"]["healthy"], jvm_world["recorder"], jvm_world["groups"]["healthy"]
    feed = jvm_world["feeds"]["healthy"]
    ready = float(app.event("READY", 120)[0])
    pause_from = max(time.time(), ready) + 4
    feed.paused = (pause_from, pause_from + LIVELOCK_AFTER + 4)
    wait_for(lambda: time.time() > feed.paused[1] - 1, 60, "the end of the idle spell")
    idle = _group(jvm_world, "healthy")
    assert idle["members"][0]["client_id"] == HEALTHY_CLIENT_ID
    assert idle["members"][0]["last_poll_age_seconds"] < LIVELOCK_AFTER, idle["members"]
    end = feed.paused[1] + LIVELOCK_AFTER
    wait_for(lambda: rec.statuses(group) and rec.statuses(group)[-1][0] > end, 60, "a long healthy run")
    seen = {s for _t, s in rec.statuses(group, ready + 2)}
    assert seen == {"ok"}, seen
    doc = _group(jvm_world, "healthy")
    assert doc["status"] == "ok" and doc["partitions"][0]["position_offset"] is not None
