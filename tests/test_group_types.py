"""Kafka 4.2's group types on the shared broker and exporter: KIP-848 ``consumer`` groups
(livelock from the coordinator's epochs, scaling that stays ok), Kafka Streams groups
(KIP-1071) and share groups (KIP-932), each against Kafka's own tools.

Thresholds are the shared exporter's (interval 1 s, stall-after 8 s, livelock-after 8 s).
Where a detection depends on the exporter alone it is bounded in exporter cycles
(``Recorder.cycles_to``); where it also waits on the JVM applications (their start, their
rebalance loops) only the eventual status and the order are asserted, with the wall clock as
a hang guard. How many cycles each detection takes is proven by the replay of this module's
recording (tests/test_replay.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient

from devenv.groups_tool import (
    describe_share_group,
    describe_streams_group,
    describe_streams_members,
    set_share_auto_offset_reset_earliest,
)
from devenv.jvm_apps import JvmApp
from devenv.kafka import KafkaCluster
from exporter.kafka.broker_requests import BrokerRequests
from tests.conftest import INTERVAL, STALL_AFTER, commit_offsets, create_topic, cycles, unique, wait_for
from tests.support.exporter_proc import ExporterProcess
from tests.support.recorded import Fixture
from tests.support.scenarios import CommitWatch, Recorder, Scenario, Workload, spawn, stop_all


@pytest.fixture(scope="module")
def fixture(exporter: ExporterProcess) -> Iterator[Fixture]:
    fx = Fixture("group-types", [exporter.record])
    yield fx
    fx.close()


@pytest.fixture(scope="module")
def recorder(exporter: ExporterProcess, fixture: Fixture) -> Iterator[Recorder]:
    rec = Recorder(exporter)
    rec.start()
    yield rec
    rec.stop_flag.set()


def _stop(*scs: Scenario) -> None:
    stop_all(scs)


def test_kip848_max_poll_loop_is_livelocked(kafka: KafkaCluster, exporter: ExporterProcess,
                                            recorder: Recorder, fixture: Fixture) -> None:
    """Every record outlasts max.poll.interval.ms: the member is fenced and rejoins with the
    same member id between two samples, so only the group epoch (+2 per loop) shows it."""
    sc = Scenario("kip848-maxpoll", unique("k848-maxpoll"), create_topic(kafka, unique("k848-mp")), 5)
    commit_offsets(kafka.bootstrap_servers, sc.group, sc.topic, {0: 0})
    work = Workload(kafka, [sc])
    work.start()
    spawn(kafka, sc, "maxpoll", "--protocol", "consumer")
    fixture.watch("kip848-maxpoll", sc.group, sc)
    try:
        ready = sc.event("READY")
        # The rule needs two rejoins since the freeze, each loop the record's 3 s plus a
        # KIP-848 rejoin: the consumer's pace, so only the eventual status is asserted here.
        t = recorder.first(sc.group, "livelocked", 90)

        def names_its_owner() -> dict[str, Any] | None:
            # The member owns nothing while it rejoins (its reason then says "owner
            # unknown"): the reason names it from a cycle that sampled it owning the partition.
            doc = exporter.api(f"clusters/test/groups/{sc.group}")
            named = doc["status"] == "livelocked" and any(
                "rejoining" in r and "maxpoll-consumer" in r for r in doc["reasons"])
            return doc if named else None

        doc = wait_for(names_its_owner, 60, "a livelocked reason naming the rejoining owner")
        assert doc["type"] == "consumer" and doc["group_epoch"] >= 3
        assert [m["client_id"] for m in doc["members"]] == ["maxpoll-consumer"]
        seen = {s for _t, s in recorder.statuses(sc.group, ready)}
        assert "stopped" not in seen and "ok" not in {s for _t, s in recorder.statuses(sc.group, t)}
    finally:
        fixture.end("kip848-maxpoll")
        work.stop_flag.set()
        _stop(sc)


def test_kip848_group_scaling_1_3_1_never_leaves_ok(kafka: KafkaCluster, exporter: ExporterProcess,
                                                   recorder: Recorder, fixture: Fixture) -> None:
    """Members join and leave (the group epoch moves with each) while the group keeps
    committing: no sample may be anything but ok."""
    group, topic = unique("k848-scale"), create_topic(kafka, unique("k848-scale"), partitions=3)
    first = Scenario("scale-1", group, topic, 30)
    extra = [Scenario(f"scale-{i}", group, topic, 0) for i in (2, 3)]
    work = Workload(kafka, [first])
    work.start()
    spawn(kafka, first, "healthy", "--protocol", "consumer", "--client-id", "scale-1")
    fixture.watch("kip848-scaling", group, first)
    try:
        ready = first.event("READY")
        wait_for(lambda: exporter.api(f"clusters/test/groups/{group}")["partitions"], 30, "partitions")
        time.sleep(5)  # steady with one member: pacing the workload, not waiting for a result
        fixture.mark("kip848-scaling", group, "SCALE_OUT")
        for sc in extra:
            spawn(kafka, sc, "healthy", "--protocol", "consumer", "--client-id", sc.name)
        wait_for(lambda: len(exporter.api(f"clusters/test/groups/{group}")["members"]) == 3, 30,
                 "three members")
        epoch3 = exporter.api(f"clusters/test/groups/{group}")["group_epoch"]
        time.sleep(STALL_AFTER + 4)  # three members for longer than every threshold
        _stop(*extra)
        fixture.mark("kip848-scaling", group, "SCALE_IN")
        wait_for(lambda: len(exporter.api(f"clusters/test/groups/{group}")["members"]) == 1, 30,
                 "back to one member")
        end = time.time() + STALL_AFTER + 4
        wait_for(lambda: recorder.statuses(group) and recorder.statuses(group)[-1][0] > end, 30,
                 "samples after scaling down")
        seen = [s for _t, s in recorder.statuses(group, ready + 2)]
        assert seen and set(seen) == {"ok"}, sorted(set(seen))
        assert exporter.api(f"clusters/test/groups/{group}")["group_epoch"] > epoch3
    finally:
        fixture.end("kip848-scaling")
        work.stop_flag.set()
        _stop(first, *extra)


def _group(exporter: ExporterProcess, group: str) -> dict[str, Any]:
    return exporter.api(f"clusters/test/groups/{group}")


# -- Kafka Streams (KIP-1071) and share groups (KIP-932), with Kafka's own tools as truth -------

def _per_partition(doc: dict[str, Any], field: str) -> dict[int, Any]:
    return {p["partition"]: p[field] for p in doc["partitions"]}


def _caught_up(exporter: ExporterProcess, group: str) -> dict[str, Any] | None:
    """The group's document once it has a member and three partitions, all without lag."""
    d = _group(exporter, group)  # not known yet: 404, which wait_for retries
    lags = _per_partition(d, "lag_offsets")
    return d if d["members"] and len(lags) == 3 and sum(lags.values()) == 0 else None


def _fill(kafka: KafkaCluster, topic: str, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for part in range(3):
        for _ in range(per_partition):
            p.produce(topic, value=b"x" * 50, partition=part)
    assert p.flush(30) == 0


def test_streams_group_seen_judged_and_equal_to_kafka_tool(kafka: KafkaCluster, exporter: ExporterProcess,
                                                          recorder: Recorder, fixture: Fixture) -> None:
    """A Kafka Streams application on the streams rebalance protocol: listed as type streams
    with its member (client id, process id, the partitions of its active tasks), ok while it
    keeps up, stalled once its processor wedges while records keep coming, lag equal to
    kafka-streams-groups --describe, stopped once killed."""
    app, topic = unique("streams-app"), create_topic(kafka, unique("streams-in"), partitions=3)
    _fill(kafka, topic, 10)
    sa = JvmApp("StreamsApp", f"bootstrap={kafka.bootstrap_servers}", f"app={app}", f"topic={topic}",
                "after=45", "prop.group.protocol=streams", streams=True)
    sc = Scenario("streams", app, topic, 5)
    work = Workload(kafka, [sc])
    fixture.watch("streams-wedged", app, sa)
    try:
        sa.event("READY", 90)
        doc = wait_for(lambda: _caught_up(exporter, app), 60, "the streams group caught up")
        assert doc["type"] == "streams" and doc["status"] == "ok" and doc["group_epoch"] >= 1
        (member,) = doc["members"]
        (tool_member,) = describe_streams_members(kafka, app)
        assert member["member_id"] == tool_member.member_id and member["partitions"] == 3
        assert member["process_id"] == tool_member.process_id and member["client_id"] == tool_member.client_id
        work.start()
        blocked = float(sa.event("BLOCKED", 60)[0])
        n = recorder.cycles_to(app, "stalled", blocked, 60)
        assert n <= cycles(STALL_AFTER) + 6, (n, recorder.story(app, blocked - 5))
        t = recorder.first(app, "stalled", 60, blocked)
        assert "ok" not in {s for _t, s in recorder.statuses(app, t)}
        doc = _group(exporter, app)
        assert any(member["client_id"] in r for r in doc["reasons"]), doc["reasons"]
        work.stop_flag.set()
        work.join(15)

        def equal_to_tool() -> dict | None:
            tool = {r.partition: (r.current_offset, r.lag) for r in describe_streams_group(kafka, app)}
            d = _group(exporter, app)
            ours = {p["partition"]: (p["committed_offset"], p["lag_offsets"]) for p in d["partitions"]}
            return tool if tool == ours and sum(lag for _c, lag in ours.values()) > 0 else None
        wait_for(equal_to_tool, 60, "lagwatch's committed offsets and lag equal kafka-streams-groups'")
        sa.proc.kill()
        killed = time.time()
        fixture.mark("streams-wedged", app, "KILLED", killed)
        # group.streams.session.timeout.ms 6 s, then `stopped` takes two cycles
        n = recorder.cycles_to(app, "stopped", killed, 60)
        assert n <= cycles(6.0) + 8, (n, recorder.story(app, killed - 5))
    finally:
        fixture.end("streams-wedged")
        work.stop_flag.set()
        sa.stop()


def test_share_group_seen_judged_and_equal_to_kafka_tool(kafka: KafkaCluster, exporter: ExporterProcess,
                                                        recorder: Recorder, fixture: Fixture) -> None:
    """A KafkaShareConsumer group: type share, its start offsets where committed offsets stand
    and the broker's lag, ok while it keeps up, stalled once its consumer wedges while records
    keep coming, start offset and lag equal to kafka-share-groups --describe, stopped once
    killed."""
    group, topic = unique("share-grp"), create_topic(kafka, unique("share-in"), partitions=3)
    set_share_auto_offset_reset_earliest(kafka, group)
    _fill(kafka, topic, 10)
    app = JvmApp("ShareApp", f"bootstrap={kafka.bootstrap_servers}", f"group={group}", f"topic={topic}",
                 "mode=wedged", "after=45", "client=share-worker-1")
    sc = Scenario("share", group, topic, 5)
    work = Workload(kafka, [sc])
    fixture.watch("share-wedged", group, app)
    try:
        app.event("READY", 90)
        doc = wait_for(lambda: _caught_up(exporter, group), 60, "the share group caught up")
        assert doc["type"] == "share" and doc["status"] == "ok"
        assert [m["client_id"] for m in doc["members"]] == ["share-worker-1"]
        work.start()
        blocked = float(app.event("BLOCKED", 60)[0])
        n = recorder.cycles_to(group, "stalled", blocked, 60)
        assert n <= cycles(STALL_AFTER) + 6, (n, recorder.story(group, blocked - 5))
        work.stop_flag.set()
        work.join(15)

        def equal_to_tool() -> dict | None:
            tool = {r.partition: (r.start_offset, r.lag) for r in describe_share_group(kafka, group)}
            d = _group(exporter, group)
            ours = {p["partition"]: (p["committed_offset"], p["lag_offsets"]) for p in d["partitions"]}
            return tool if tool == ours and sum(lag for _c, lag in ours.values()) > 0 else None
        wait_for(equal_to_tool, 60, "lagwatch's start offsets and lag equal kafka-share-groups'")
        app.proc.kill()
        killed = time.time()
        fixture.mark("share-wedged", group, "KILLED", killed)
        # group.share.session.timeout.ms 6 s, then `stopped` takes two cycles
        n = recorder.cycles_to(group, "stopped", killed, 60)
        assert n <= cycles(6.0) + 8, (n, recorder.story(group, killed - 5))
    finally:
        fixture.end("share-wedged")
        work.stop_flag.set()
        app.stop()


def _read_committed(kafka: KafkaCluster, group: str, share: bool) -> Callable[[], dict[int, int]]:
    """A reader of the group's committed offsets (a share group's start offsets), apart from
    the exporter's process: confluent-kafka's OffsetFetch, or a DescribeShareGroupOffsets."""
    if share:
        req = BrokerRequests({}, kafka.bootstrap_servers, 5.0, "test-commit-watch")
        return lambda: {p: o for (_t, p), o in req.share_offsets([group])[group].start.items()}
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})

    def read() -> dict[int, int]:
        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(5)
        return {tp.partition: tp.offset for tp in res.topic_partitions if tp.offset >= 0}
    return read


def _unfounded_stalls(recorder: Recorder, watch: CommitWatch, group: str, since: float) -> list[Any]:
    """The group's ``stalled`` readings since ``since`` that Kafka contradicts: none of its
    partitions with a stall clock of ``stall_after`` kept its committed offset over that clock.
    A slow app on a starved machine can truly go ``stall_after`` without a commit; then
    ``stalled`` is the right verdict, not an error."""
    wrong = []
    for t, status in recorder.statuses(group, since):
        if status != "stalled":
            continue
        sampled, clocks = recorder.stall_clock(group, t)
        # A clock starts at the sample time of the cycle that saw the offset move, the
        # start of its sampling: the commit may come as late as that cycle's OffsetFetch,
        # up to a sampling's length after (the slowest seen, and half a second more).
        after = recorder.slowest_sample + 0.5
        moved = {p: watch.moved_within(p, sampled - sec + after, sampled - 1)
                 for p, sec in clocks.items() if sec >= STALL_AFTER - INTERVAL}
        if not moved or all(moved.values()):
            wrong.append((round(t - since, 1), clocks, moved))
    return wrong


def test_slow_streams_and_share_groups_are_lagging_healthy_ones_stay_ok(
        kafka: KafkaCluster, exporter: ExporterProcess, recorder: Recorder, fixture: Fixture) -> None:
    """A slow Streams processor and a slow share consumer (100 ms per record, 20 records/s
    arriving) fall behind while they keep committing/acknowledging: lagging within a few
    commits, and lagging they stay; ``stalled`` only while Kafka shows a partition's commits
    truly stood for ``stall_after`` (a starved JVM). Healthy ones of both types (10 records/s)
    stay ok."""
    names = ("streams-ok", "streams-slow", "share-ok", "share-slow")
    scs = {n: Scenario(n, unique(n), create_topic(kafka, unique(n)), 20 if "slow" in n else 10)
           for n in names}
    for n in ("share-ok", "share-slow"):
        set_share_auto_offset_reset_earliest(kafka, scs[n].group)
    bs = kafka.bootstrap_servers
    apps = {
        "streams-ok": JvmApp("StreamsApp", f"bootstrap={bs}", f"app={scs['streams-ok'].group}",
                             f"topic={scs['streams-ok'].topic}", "after=1000000000",
                             "prop.group.protocol=streams", streams=True),
        "streams-slow": JvmApp("StreamsApp", f"bootstrap={bs}", f"app={scs['streams-slow'].group}",
                               f"topic={scs['streams-slow'].topic}", "after=1000000000", "delay=100",
                               "prop.group.protocol=streams", streams=True),
        "share-ok": JvmApp("ShareApp", f"bootstrap={bs}", f"group={scs['share-ok'].group}",
                           f"topic={scs['share-ok'].topic}", "mode=healthy"),
        "share-slow": JvmApp("ShareApp", f"bootstrap={bs}", f"group={scs['share-slow'].group}",
                             f"topic={scs['share-slow'].topic}", "mode=slow", "delay=100"),
    }
    for n, a in apps.items():
        fixture.watch(n, scs[n].group, a)
    watches = {n: CommitWatch(_read_committed(kafka, scs[n].group, n.startswith("share")))
               for n in ("streams-slow", "share-slow")}
    work = Workload(kafka, list(scs.values()))
    work.start()
    for w in watches.values():
        w.start()
    try:
        ready = {n: a.event("READY", 120) for n, a in apps.items()}
        # Lagging once the lag grew over three commits: the JVMs' pace, so the eventual status
        # here; falling behind, they are never taken for stuck while they keep committing or
        # acknowledging, judged from when they turned lagging.
        behind = {n: recorder.first(scs[n].group, "lagging", 90) for n in ("streams-slow", "share-slow")}
        until = time.time() + STALL_AFTER + 5
        for n in ("streams-slow", "share-slow"):
            g = scs[n].group
            wait_for(lambda g=g: recorder.statuses(g) and recorder.statuses(g)[-1][0] > until, 60,
                     f"{n} watched past every threshold")
            seen = {s for _t, s in recorder.statuses(g, behind[n])}
            story = recorder.story(g, float(ready[n][0]))
            assert seen <= {"ok", "lagging", "stalled"}, f"{n}: {sorted(seen)}; {story}"
            assert watches[n].reads, f"{n}: Kafka never answered the commit watch"
            wrong = _unfounded_stalls(recorder, watches[n], g, behind[n])
            assert not wrong, f"{n}: stalled while committing: {wrong[:3]}; {story}"
        for n in ("streams-ok", "share-ok"):
            g = scs[n].group
            wait_for(lambda g=g: recorder.statuses(g) and recorder.statuses(g)[-1][0] > until, 60,
                     f"{n} watched past every threshold")
            timeline = [(round(t - float(ready[n][0]), 1), s)
                        for t, s in recorder.statuses(g, float(ready[n][0]) + 2 * INTERVAL)]
            assert {s for _t, s in timeline} == {"ok"}, (n, [x for x in timeline if x[1] != "ok"])
            assert _group(exporter, g)["type"] == ("streams" if n.startswith("streams") else "share")
    finally:
        fixture.end(*names)
        work.stop_flag.set()
        for w in watches.values():
            w.stop_flag.set()
        for a in apps.values():
            a.stop()
