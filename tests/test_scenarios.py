"""Statuses of real consumer processes, end to end.

All scenarios run at the same time against the shared broker and exporter
(interval 1 s, stall-after 8 s, livelock-after 8 s); a recorder thread
scrapes /metrics every half second so each test can assert on the whole
timeline of its group, including that a healthy group was never anything but ok.
Time is bounded in exporter cycles (``Recorder.cycles_to``), with the wall clock only as
a hang guard: how many cycles a detection takes is proven exactly by the replay of this
module's recording (tests/test_replay.py); here the bounds leave room for what happens
outside the exporter (a consumer's start, its first fetch and commit).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from devenv.kafka import KafkaCluster
from tests.conftest import (
    LIVELOCK_AFTER,
    STALL_AFTER,
    commit_offsets,
    create_topic,
    cycles,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess, select
from tests.support.recorded import Fixture
from tests.support.scenarios import Recorder, Scenario, Workload, spawn, stop_all


@pytest.fixture(scope="module")
def world(kafka: KafkaCluster, exporter: ExporterProcess) -> Iterator[dict[str, Any]]:
    names = ["healthy", "slow", "nocommit", "blocked", "maxpoll", "killed", "rewind"]
    rates = {"healthy": 20, "slow": 20, "nocommit": 10, "blocked": 10, "maxpoll": 5, "killed": 10,
             "rewind": 0}
    scs = {n: Scenario(n, unique(f"sc-{n}"), create_topic(kafka, unique(f"sc-{n}"), partitions=1),
                       rates[n]) for n in names}
    for n in ("maxpoll", "rewind"):
        commit_offsets(kafka.bootstrap_servers, scs[n].group, scs[n].topic, {0: 0})
    rec = Recorder(exporter)
    rec.start()
    fx = Fixture("scenarios", [exporter.record])
    for n, sc in scs.items():
        fx.watch(n, sc.group, sc)
    work = Workload(kafka, list(scs.values()))
    work.start()
    spawn(kafka, scs["healthy"], "healthy")
    spawn(kafka, scs["slow"], "slow", "--delay", "0.25")
    spawn(kafka, scs["nocommit"], "nocommit")
    spawn(kafka, scs["blocked"], "blocked", "--after", "15", "--client-id", "wedged-worker-7")
    spawn(kafka, scs["maxpoll"], "maxpoll")
    spawn(kafka, scs["killed"], "healthy", "--client-id", "doomed")
    try:
        yield {"scenarios": scs, "recorder": rec, "exporter": exporter, "kafka": kafka,
               "started": time.time(), "fixture": fx}
        fx.close()
    finally:
        work.stop_flag.set()
        rec.stop_flag.set()
        stop_all(scs.values())


def _api_status(world: dict[str, Any], group: str) -> dict[str, Any]:
    return world["exporter"].api(f"clusters/test/groups/{group}")


def _timing(world: dict[str, Any], group: str, since: float) -> str:
    """What a timing failure needs to be understood: the exporter's cycle cost and load, and
    the group's timeline as the recorder saw it."""
    m = world["exporter"].metrics()
    own = {k[0]: round(v, 2) for k, v in m.items() if k[0] in ("lagwatch_cycle_duration_seconds",
                                                   "lagwatch_sample_duration_seconds")}
    groups = len({dict(lab)["group"] for (name, lab) in m if name == "kafka_consumergroup_status"})
    line = [(round(t - since, 1), s) for t, s in world["recorder"].statuses(group, since)]
    lags = world["recorder"].lag_line(group, since)
    return (f"; exporter {own}, {groups} groups watched; timeline since the event: {line[:40]}"
            f"; lag (seconds, offsets) since the event: {lags[:40]}")


def test_healthy_consumer_is_ok_all_along(world: dict[str, Any]) -> None:
    sc, rec = world["scenarios"]["healthy"], world["recorder"]
    ready = sc.event("READY")
    # Watch it for longer than every threshold.
    wait_for(lambda: len(rec.statuses(sc.group, ready + 2)) and
             rec.statuses(sc.group)[-1][0] > ready + STALL_AFTER + 12, 60, "a long healthy run")
    seen = {s for _t, s in rec.statuses(sc.group, ready + 2)}
    assert seen == {"ok"}, seen
    assert _api_status(world, sc.group)["status"] == "ok"


def test_slow_consumer_becomes_lagging_within_four_cycles(world: dict[str, Any]) -> None:
    sc, rec, exp = world["scenarios"]["slow"], world["recorder"], world["exporter"]
    ready = sc.event("READY")
    # Lag grows from the first commit (producer 20/s, consumer 4/s): lagging once it grew by
    # more than one commit gap + one interval, 4 cycles for this consumer counted from the
    # first cycle that saw its commits (the rules table).
    first_seen = wait_for(lambda: rec.statuses(sc.group), 60, "the group's first sample")[0][0]
    n = rec.cycles_to(sc.group, "lagging", first_seen, 60)
    assert n <= 4 + 2, f"{n} cycles" + _timing(world, sc.group, ready)
    doc = wait_for(lambda: (d := _api_status(world, sc.group))["status"] == "lagging" and d,
                   30, "the API to say lagging")
    assert "lag growing" in doc["reasons"][0] and sc.topic in doc["reasons"][0]
    assert doc["partitions"][0]["lag_offsets"] > 0
    assert any(lab for lab, v in select(exp.metrics(), "kafka_consumergroup_status", group=sc.group,
                                        status="lagging").items() if v == 1)


def test_polling_without_committing_becomes_stalled(world: dict[str, Any]) -> None:
    sc, rec = world["scenarios"]["nocommit"], world["recorder"]
    ready = sc.event("READY")
    t = rec.first(sc.group, "stalled", 60)
    assert t - ready >= STALL_AFTER - 1, f"stalled {t - ready:.1f}s after READY"  # never early
    n = rec.cycles_to(sc.group, "stalled", ready, 60)
    assert n <= cycles(STALL_AFTER) + 6, f"{n} cycles" + _timing(world, sc.group, ready)
    assert not {s for _t, s in rec.statuses(sc.group, ready)} & {"stopped", "livelocked"}
    doc = _api_status(world, sc.group)
    assert doc["status"] == "stalled"
    assert "frozen" in doc["reasons"][0] and "nocommit-consumer" in doc["reasons"][0]
    assert doc["partitions"][0]["stalled_seconds"] >= STALL_AFTER


def test_wedged_instrumented_consumer_is_livelocked_and_named(world: dict[str, Any]) -> None:
    sc, rec, exp = world["scenarios"]["blocked"], world["recorder"], world["exporter"]
    blocked = sc.event("BLOCKED")
    n = rec.cycles_to(sc.group, "livelocked", blocked, 60)
    assert n <= cycles(LIVELOCK_AFTER) + 4, f"{n} cycles" + _timing(world, sc.group, blocked)
    doc = _api_status(world, sc.group)
    assert doc["status"] == "livelocked"
    assert "wedged-worker-7" in doc["reasons"][0] and "last polled" in doc["reasons"][0]
    assert doc["members"][0]["client_id"] == "wedged-worker-7"  # still a member: heartbeating
    m = exp.metrics()
    pos = select(m, "kafka_consumergroup_position_offset", group=sc.group)
    assert list(pos.values()) == [15.0]  # reported by the consumer itself: 15 records consumed


def test_leave_rejoin_pattern_is_livelocked_not_stopped(world: dict[str, Any]) -> None:
    sc, rec = world["scenarios"]["maxpoll"], world["recorder"]
    sc.event("READY")
    t = rec.first(sc.group, "livelocked", 90)
    doc = _api_status(world, sc.group)
    reasons = " ".join(doc["reasons"])
    assert doc["status"] == "livelocked" or "rejoin" in reasons
    t_end = t + 6
    wait_for(lambda: rec.statuses(sc.group) and rec.statuses(sc.group)[-1][0] > t_end, 20, "more samples")
    after = [s for _t, s in rec.statuses(sc.group, t)]
    assert after.count("livelocked") >= len(after) * 0.8, after
    assert "ok" not in after


def test_killed_consumer_is_stopped_after_session_timeout(world: dict[str, Any]) -> None:
    sc, rec = world["scenarios"]["killed"], world["recorder"]
    sc.event("READY")
    wait_for(lambda: rec.statuses(sc.group) and rec.statuses(sc.group)[-1][1] == "ok", 30, "ok first")
    assert sc.proc is not None
    os.kill(sc.proc.pid, signal.SIGKILL)
    killed = time.time()
    world["fixture"].mark("killed", sc.group, "KILLED", killed)
    t = rec.first(sc.group, "stopped", 60)
    assert t - killed >= 3.0, t - killed  # not before the member's session could expire
    # session.timeout.ms = 6000, then `stopped` takes two cycles
    n = rec.cycles_to(sc.group, "stopped", killed, 60)
    assert n <= cycles(6.0) + 5, f"{n} cycles" + _timing(world, sc.group, killed)
    doc = _api_status(world, sc.group)
    assert doc["status"] == "stopped" and doc["members"] == []
    assert "no member owns" in doc["reasons"][0]
    assert "livelocked" not in {s for _t, s in rec.statuses(sc.group, killed)}


def test_offsets_reset_backwards_is_rewind(world: dict[str, Any]) -> None:
    sc, rec, kafka = world["scenarios"]["rewind"], world["recorder"], world["kafka"]
    p = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for _ in range(50):
        p.produce(sc.topic, value=b"r")
    p.flush(10)
    commit_offsets(kafka.bootstrap_servers, sc.group, sc.topic, {0: 50})
    wait_for(lambda: world["exporter"].api(f"clusters/test/groups/{sc.group}")["partitions"][0]
             ["committed_offset"] == 50, 20, "committed 50 seen")
    commit_offsets(kafka.bootstrap_servers, sc.group, sc.topic, {0: 10})
    world["fixture"].mark("rewind", sc.group, "REWOUND")
    rec.first(sc.group, "rewind", 60)
    doc = _api_status(world, sc.group)
    assert doc["status"] in ("rewind", "stopped")
    assert any("backwards" in r for r in doc["reasons"]) or doc["status"] == "stopped"
