"""A restart of lagwatch against a real broker: every clock continues from the state topic.

Real consumers (separate processes) make one group `stalled` (polls, never commits), one
`stopped` (SIGKILLed with records waiting), one `livelocked` (kicked out by
max.poll.interval.ms and rejoining without progress) and keep one `ok`. lagwatch is
stopped with SIGTERM, started again, then SIGKILLed and started again, on the same port
under a real Prometheus with the shipped alert rules. From the new process's first served
cycle on, for as many cycles as ``stall_after`` spans and more, every scrape shows each
troubled group in the status it had before, the stalled group's ``stalled_seconds`` at
least what it was before the restart plus the time it was down, and the healthy group
`ok`; no alert firing before the restart resolves. Without the state topic the stalled
group read `ok` for ``stall_after`` after every restart (issue 39).
"""

from __future__ import annotations

import os
import signal
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from devenv.kafka import KafkaCluster, free_port
from exporter.config import ClusterConfig
from exporter.contracts.state import SavedGroup
from exporter.state import codec
from exporter.state.topic import StateTopic
from tests.conftest import (
    STALL_AFTER,
    commit_offsets,
    create_topic,
    cycles,
    exporter_config,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess, Samples, select, value
from tests.support.prometheus_proc import PrometheusProcess, fast_rules, firing_evaluations
from tests.support.scenarios import Scenario, Workload, spawn, stop_all

TROUBLED = {"nocommit": "stalled", "killed": "stopped", "maxpoll": "livelocked"}
# Cycles watched after each restart: past stall_after, when a reset clock would show again.
WATCHED = cycles(STALL_AFTER) + 4


def _statuses(m: Samples) -> dict[str, str]:
    return {dict(lab)["group"]: dict(lab)["status"]
            for lab, v in select(m, "kafka_consumergroup_status").items() if v == 1}


def _stalled_seconds(m: Samples, group: str) -> float:
    return max(select(m, "kafka_consumergroup_stalled_seconds", group=group).values(), default=-1.0)


@pytest.fixture(scope="module")
def world(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    rates = {"healthy": 10, "nocommit": 10, "killed": 10, "maxpoll": 5}
    scs = {n: Scenario(n, unique(f"rs-{n}"), create_topic(kafka, unique(f"rs-{n}"), partitions=1), r)
           for n, r in rates.items()}
    commit_offsets(kafka.bootstrap_servers, scs["maxpoll"].group, scs["maxpoll"].topic, {0: 0})
    state_topic = unique("__lagwatch_state_test")
    cfg = exporter_config(tmp_path_factory.mktemp("state"), kafka.bootstrap_servers,
                          clusters=[{"name": "test", "bootstrap_servers": kafka.bootstrap_servers,
                                     "state": {"topic": state_topic, "write_every": 3},
                                     "groups": {"allow": "^rs-"}}])
    work = Workload(kafka, list(scs.values()))
    work.start()
    spawn(kafka, scs["healthy"], "healthy")
    spawn(kafka, scs["nocommit"], "nocommit")
    spawn(kafka, scs["maxpoll"], "maxpoll")
    spawn(kafka, scs["killed"], "healthy", "--client-id", "doomed")
    try:
        yield {"scenarios": scs, "config": cfg, "kafka": kafka, "state_topic": state_topic}
    finally:
        work.stop_flag.set()
        stop_all(scs.values())


@pytest.fixture(scope="module")
def written(world: dict[str, Any]) -> dict[str, Any]:
    """The world once a lagwatch run has written its state topic: the restart tests do
    (they run first); a test run without them gets a run of its own."""
    if not world.get("written"):
        _kill_the_doomed_consumer(world["scenarios"]["killed"])
        with ExporterProcess(None, config=world["config"]) as first:
            first.wait_ready()
            _troubled(first, {n: sc.group for n, sc in world["scenarios"].items()})
            _next_cycle(first)
        world["written"] = True
    return world


def _next_cycle(exp: ExporterProcess) -> Samples:
    """The scrape of the cycle after the current one: one that has written its state
    (counted, not slept)."""
    seen = value(exp.metrics(), "lagwatch_cycles_total", cluster="test") or 0

    def later() -> Samples | None:
        m = exp.metrics()
        return m if (value(m, "lagwatch_cycles_total", cluster="test") or 0) > seen else None
    return wait_for(later, 10, "the cycle after this one")


def _troubled(exp: ExporterProcess, groups: dict[str, str]) -> Samples:
    """The first scrape at which every troubled group has its status (and the stalled group
    has been stalled for a few cycles): the state a restart must keep."""
    want = {groups[n]: s for n, s in TROUBLED.items()}

    def check() -> Samples | None:
        m = exp.metrics()
        got = _statuses(m)
        ok = all(got.get(g) == s for g, s in want.items()) and got.get(groups["healthy"]) == "ok"
        return m if ok and _stalled_seconds(m, groups["nocommit"]) >= STALL_AFTER + 3 else None
    return wait_for(check, 120, f"every troubled group in its status {want}")


def _after_restart(exp: ExporterProcess, groups: dict[str, str], before: Samples, down: float) -> int:
    """Every scrape of the new process from its first served cycle for WATCHED cycles: the
    same statuses, the stall clock continued. Returns the scrapes checked."""
    want = {groups[n]: s for n, s in TROUBLED.items()} | {groups["healthy"]: "ok"}
    stalled_before = _stalled_seconds(before, groups["nocommit"])
    deadline = time.monotonic() + 120  # a hang guard only: the bound is in cycles
    checked, cycle = 0, 0
    while cycle < WATCHED and time.monotonic() < deadline:
        m = exp.metrics()
        cycle = int(value(m, "lagwatch_cycles_total", cluster="test") or 0)
        if cycle < 1:
            time.sleep(0.1)
            continue
        got = {g: _statuses(m).get(g) for g in want}
        assert got == want, f"cycle {cycle} of the new process: {got}, before the restart {want}"
        stalled = _stalled_seconds(m, groups["nocommit"])
        assert stalled >= stalled_before + down - 1.0, (
            f"cycle {cycle}: stalled_seconds {stalled}, {stalled_before} before a restart {down:.1f} s long")
        if checked == 0:
            assert value(m, "lagwatch_state_restored_groups", cluster="test") == len(want)
        checked += 1
        time.sleep(0.3)
    assert cycle >= WATCHED, "the new process did not serve enough cycles in time"
    return checked


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_restart_keeps_every_status_and_continues_the_stall_clock(world: dict[str, Any], sig: int,
                                                                    tmp_path: Path) -> None:
    """... and with the shipped alert rules in a real Prometheus (``for: 0s``, everything
    else as shipped), every alert firing when lagwatch went down fires at every evaluation
    until the new process has served WATCHED cycles: none resolves because of the restart."""
    scs = world["scenarios"]
    groups = {n: sc.group for n, sc in scs.items()}
    _kill_the_doomed_consumer(scs["killed"])
    port = free_port()  # both processes listen here: Prometheus scrapes one target
    with PrometheusProcess(tmp_path / "prometheus", targets={"lagwatch": [f"127.0.0.1:{port}"]},
                           rule_files=[fast_rules(tmp_path / "fast.rules.yml")]) as prom:
        prom.wait_ready()
        before, down_at = _troubled_then_stopped(world["config"], port, groups, prom, sig)
        world["written"] = True
        with ExporterProcess(None, config=world["config"], port=port) as second:
            second.wait_listening()
            down = time.time() - down_at
            checked = _after_restart(second, groups, before, down)
            assert checked >= WATCHED // 2
            m = second.metrics()
            assert value(m, "lagwatch_state_writable", cluster="test") == 1
            assert sum(select(m, "lagwatch_state_records_dropped_total").values()) == 0
            fired = firing_evaluations(prom, down_at, time.time())
        at_down = firing_evaluations(prom, down_at, down_at)
        assert ("KafkaConsumerGroupStalled", groups["nocommit"]) in at_down, at_down
        assert all(fired.get(a) == max(fired.values()) for a in at_down), (at_down, fired)


def _kill_the_doomed_consumer(killed: Scenario) -> None:
    if killed.proc is not None and killed.proc.poll() is None:
        killed.event("READY")
        time.sleep(3)  # a few commits first: then records wait behind a committed offset
        os.kill(killed.proc.pid, signal.SIGKILL)


def _troubled_then_stopped(config: str, port: int, groups: dict[str, str], prom: PrometheusProcess,
                           sig: int) -> tuple[Samples, float]:
    """A first lagwatch run until every troubled group has its status, the stalled group's
    alert fires and a cycle after that has written its state; then stopped with ``sig``.
    Returns its last scrape and when it went down."""
    with ExporterProcess(None, config=config, port=port) as first:
        first.wait_ready()
        _troubled(first, groups)
        wait_for(lambda: prom.query(f'ALERTS{{alertstate="firing", group="{groups["nocommit"]}"}}'), 30,
                 "the stalled group's alert firing in Prometheus")
        before = _next_cycle(first)
        assert _statuses(before)[groups["nocommit"]] == "stalled"
        down_at = time.time()
        first.proc.send_signal(sig)
        first.proc.wait(20)
    return before, down_at


def test_the_state_topic_is_compacted_and_holds_a_key_per_group(written: dict[str, Any]) -> None:
    world = written
    admin = AdminClient({"bootstrap.servers": world["kafka"].bootstrap_servers})
    res = ConfigResource(ConfigResource.Type.TOPIC, world["state_topic"])
    conf = wait_for(lambda: admin.describe_configs([res])[res].result(10), 30, "the state topic")
    assert conf["cleanup.policy"].value == "compact"


def _empty_state(group: str) -> SavedGroup:
    return SavedGroup(group=group, members=(), epoch=None, joins=(), seen_once=True,
                      unreadable_since=None, acknowledged_at=None, outside_at=None, outside_gaps=(),
                      uncommitted=(), partitions=(), commit_gaps=None, rebalances=None, rates=None,
                      last_view=None, last_progress=None, last_rebalances=None)


def test_foreign_and_broken_records_are_counted_and_the_rest_restored(written: dict[str, Any]) -> None:
    """Records a restart must refuse, written among the real ones: each is counted under its
    reason, the real groups are restored all the same, the exporter serves its cycles."""
    world = written
    kafka, topic = world["kafka"], world["state_topic"]
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})  # outlives its future
    cid = admin.describe_cluster(request_timeout=10).result().cluster_id
    now = time.time()
    fake = unique("rs-fake")
    good = codec.encode(_empty_state(fake), cid, now)
    bad = {
        "corrupt": b"\x01not zlib at all",
        "bad_version": b"\x07" + good[1:],
        "foreign_cluster": codec.encode(_empty_state(fake), "another-cluster-id", now),
        "stale": codec.encode(_empty_state(fake), cid, now - 7200),
        "malformed": good[:1] + zlib.compress(b'{"cluster_id": "%s", "at": %f, "state": [1, 2]}'
                                              % (cid.encode(), now)),
    }
    p = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for reason, raw in bad.items():
        p.produce(topic, key=codec.key_of("test", codec.GROUP, f"{fake}-{reason}"), value=raw)
    p.produce(topic, key=b"another-deployment/g/x", value=b"whatever")  # not ours: skipped
    assert p.flush(10) == 0
    with ExporterProcess(None, config=world["config"]) as exp:
        exp.wait_ready()

        def three_cycles() -> Samples | None:
            m = exp.metrics()
            return m if (value(m, "lagwatch_cycles_total", cluster="test") or 0) >= 3 else None
        m = wait_for(three_cycles, 60, "3 cycles")
        dropped = {dict(lab)["reason"]: v
                   for lab, v in select(m, "lagwatch_state_records_dropped_total").items()}
        assert dropped == dict.fromkeys(bad, 1.0), dropped
        assert value(m, "lagwatch_state_restored_groups", cluster="test") == 4
        assert value(m, "lagwatch_up", cluster="test") == 1
        log = exp.output()
        for reason in bad:
            assert log.count(f"({reason}; lagwatch_state_records_dropped_total") == 1, reason


def test_a_read_back_starts_at_each_partitions_log_start(kafka: KafkaCluster) -> None:
    """The read-back assigns each partition at its log start, as ListOffsets gives it: a
    partition whose first records were deleted reads from there, and an empty one and one
    with every record deleted are not waited for. (An operator's own state topic may be
    ``compact,delete``: retention then moves its log start; DeleteRecords does so here.)"""
    cfg = ClusterConfig(name="test", bootstrap_servers=kafka.bootstrap_servers,
                        state_topic=unique("__lagwatch_state_start"))
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(cfg.state_topic, 3, 1, config={"cleanup.policy": "compact,delete"})]
                        )[cfg.state_topic].result(10)
    topic = StateTopic(cfg)
    assert topic.ensure() is None and topic.partitions == 3
    p = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for key, part in (("a", 0), ("b", 0), ("c", 0), ("d", 2)):
        p.produce(cfg.state_topic, key=key.encode(), value=b"v-" + key.encode(), partition=part)
    assert p.flush(10) == 0
    cut = admin.delete_records([TopicPartition(cfg.state_topic, 0, 1), TopicPartition(cfg.state_topic, 2, 1)],
                               request_timeout=10)
    for fut in cut.values():
        fut.result()
    load = topic.load()
    assert load.error is None, load.error
    assert {k: v for k, (v, _ts) in load.records.items()} == {b"b": b"v-b", b"c": b"v-c"}
