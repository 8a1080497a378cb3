"""Kafka 4.2's group types on the shared broker and exporter: KIP-848 ``consumer`` groups
(livelock from the coordinator's epochs, scaling that stays ok), Kafka Streams groups
(KIP-1071) and share groups (KIP-932), each against Kafka's own tools.

Thresholds are the shared exporter's (interval 1 s, stall-after 8 s, livelock-after 8 s).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devenv.kafka import KafkaCluster
from tests.conftest import INTERVAL, STALL_AFTER, commit_offsets, create_topic, unique, wait_for
from tests.exporter_proc import ExporterProcess
from tests.scenarios import Recorder, Scenario, Workload, spawn


@pytest.fixture(scope="module")
def recorder(exporter: ExporterProcess) -> Iterator[Recorder]:
    rec = Recorder(exporter)
    rec.start()
    yield rec
    rec.stop_flag.set()


def _stop(*scs: Scenario) -> None:
    for s in scs:
        if s.proc and s.proc.poll() is None:
            s.proc.terminate()
    for s in scs:
        if s.proc:
            try:
                s.proc.wait(15)
            except subprocess.TimeoutExpired:
                s.proc.kill()


def test_kip848_max_poll_loop_is_livelocked(kafka: KafkaCluster, exporter: ExporterProcess,
                                            recorder: Recorder) -> None:
    """Every record outlasts max.poll.interval.ms: the member is fenced and rejoins with the
    same member id between two samples, so only the group epoch (+2 per loop) shows it."""
    sc = Scenario("kip848-maxpoll", unique("k848-maxpoll"), create_topic(kafka, unique("k848-mp")), 5)
    commit_offsets(kafka.bootstrap_servers, sc.group, sc.topic, {0: 0})
    work = Workload(kafka, [sc])
    work.start()
    spawn(kafka, sc, "maxpoll", "--protocol", "consumer")
    try:
        ready = sc.event("READY")
        t = recorder.first(sc.group, "livelocked", 60)
        assert t - ready <= STALL_AFTER + 2 * INTERVAL + 3, t - ready
        doc = exporter.api(f"clusters/test/groups/{sc.group}")
        assert doc["type"] == "consumer" and doc["group_epoch"] >= 3
        assert any("rejoining" in r and "maxpoll-consumer" in r for r in doc["reasons"]), doc["reasons"]
        assert [m["client_id"] for m in doc["members"]] == ["maxpoll-consumer"]
        seen = {s for _t, s in recorder.statuses(sc.group, ready)}
        assert "stopped" not in seen and "ok" not in {s for _t, s in recorder.statuses(sc.group, t)}
    finally:
        work.stop_flag.set()
        _stop(sc)


def test_kip848_group_scaling_1_3_1_never_leaves_ok(kafka: KafkaCluster, exporter: ExporterProcess,
                                                   recorder: Recorder) -> None:
    """Members join and leave (the group epoch moves with each) while the group keeps
    committing: no sample may be anything but ok."""
    group, topic = unique("k848-scale"), create_topic(kafka, unique("k848-scale"), partitions=3)
    first = Scenario("scale-1", group, topic, 30)
    extra = [Scenario(f"scale-{i}", group, topic, 0) for i in (2, 3)]
    work = Workload(kafka, [first])
    work.start()
    spawn(kafka, first, "healthy", "--protocol", "consumer", "--client-id", "scale-1")
    try:
        ready = first.event("READY")
        wait_for(lambda: exporter.api(f"clusters/test/groups/{group}")["partitions"], 30, "partitions")
        time.sleep(5)  # steady with one member: pacing the workload, not waiting for a result
        for sc in extra:
            spawn(kafka, sc, "healthy", "--protocol", "consumer", "--client-id", sc.name)
        wait_for(lambda: len(exporter.api(f"clusters/test/groups/{group}")["members"]) == 3, 30,
                 "three members")
        epoch3 = exporter.api(f"clusters/test/groups/{group}")["group_epoch"]
        time.sleep(STALL_AFTER + 4)  # three members for longer than every threshold
        _stop(*extra)
        wait_for(lambda: len(exporter.api(f"clusters/test/groups/{group}")["members"]) == 1, 30,
                 "back to one member")
        end = time.time() + STALL_AFTER + 4
        wait_for(lambda: recorder.statuses(group) and recorder.statuses(group)[-1][0] > end, 30,
                 "samples after scaling down")
        seen = [s for _t, s in recorder.statuses(group, ready + 2)]
        assert seen and set(seen) == {"ok"}, sorted(set(seen))
        assert exporter.api(f"clusters/test/groups/{group}")["group_epoch"] > epoch3
    finally:
        work.stop_flag.set()
        _stop(first, *extra)


def _group(exporter: ExporterProcess, group: str) -> dict[str, Any]:
    return exporter.api(f"clusters/test/groups/{group}")
