"""Uninstrumented client shapes read as what the broker can show, live (issue 40's cases).

Two real consumers, neither instrumented, against the shared broker and exporter:

- ``hung``: a librdkafka consumer whose handler hangs while its background thread keeps
  heartbeating and ``max.poll.interval.ms`` is out of reach: the shape of a sarama or
  franz-go consumer, which have no poll timeout. The member never leaves: ``stalled``,
  and the reason says a hung handler and a consumer polling without committing look the
  same from the broker, and what would tell them apart.
- ``left``: a kafka-python consumer whose handler wedges; its heartbeat thread leaves the
  group on ``max_poll_interval_ms`` while the process lives: ``stopped``, and the reason
  names the member that left, how long ago, and that a crash looks the same.

With ``LAGWATCH_RECORD`` set (``make record``) the run is written to
tests/recordings/evidence.jsonl.xz, which tests/test_replay.py replays with the same
assertions on statuses and reason texts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from devenv.kafka import KafkaCluster
from devenv.poll_timeout_consumer import MAX_POLL_INTERVAL_MS
from tests.conftest import STALL_AFTER, create_topic, cycles, unique, wait_for
from tests.support.exporter_proc import ExporterProcess
from tests.support.recorded import Fixture
from tests.support.scenarios import Recorder, Scenario, Workload, spawn, stop_all

HUNG_CLIENT = "hung-handler"
LEFT_CLIENT = "poll-timeout-consumer"
# Cycles between a cause and the first cycle that can show it: the cause lands after the
# sample of a cycle already under way, the next cycle samples it, then publishes it; and the
# consumer's last commit before it blocks is still in flight for one more.
SEE = 3
IN_FLIGHT = 1
POLL_TIMEOUT = MAX_POLL_INTERVAL_MS / 1000  # the poll-timeout consumer's, in seconds


@pytest.fixture(scope="module")
def world(kafka: KafkaCluster, exporter: ExporterProcess) -> Iterator[dict[str, Any]]:
    scs = {n: Scenario(n, unique(f"ev-{n}"), create_topic(kafka, unique(f"ev-{n}"), partitions=1), 5)
           for n in ("hung", "left")}
    rec = Recorder(exporter)
    rec.start()
    fx = Fixture("evidence", [exporter.record])
    for n, sc in scs.items():
        fx.watch(n, sc.group, sc)
    work = Workload(kafka, list(scs.values()))
    work.start()
    spawn(kafka, scs["hung"], "hung", "--after", "10", "--client-id", HUNG_CLIENT)
    spawn(kafka, scs["left"], "", "--client-id", LEFT_CLIENT, "--after", "10",
          module="devenv.poll_timeout_consumer")
    try:
        yield {"scenarios": scs, "recorder": rec, "exporter": exporter}
        fx.close()
    finally:
        work.stop_flag.set()
        rec.stop_flag.set()
        stop_all(scs.values())


def _reason(world: dict[str, Any], group: str) -> str:
    doc = world["exporter"].api(f"clusters/test/groups/{group}")
    return doc["reasons"][0]


def test_a_hung_handler_that_keeps_heartbeating_is_stalled_and_says_what_it_cannot_tell(
        world: dict[str, Any]) -> None:
    sc, rec = world["scenarios"]["hung"], world["recorder"]
    blocked = sc.event("BLOCKED")
    t = rec.first(sc.group, "stalled", 60, blocked)
    assert t - blocked >= STALL_AFTER - 1, f"stalled {t - blocked:.1f}s after BLOCKED"  # never early
    n = rec.cycles_to(sc.group, "stalled", blocked, 60)
    assert n <= cycles(STALL_AFTER) + IN_FLIGHT + SEE, (n, rec.story(sc.group, blocked))
    reason = _reason(world, sc.group)
    assert f"owner {HUNG_CLIENT}@" in reason, reason
    assert ("a handler hung in a client that keeps heartbeating without a poll timeout "
            "(sarama, franz-go) and a consumer that polls without committing look the same; "
            "its own reports would tell them apart") in reason, reason
    # the member stays: never stopped, never livelocked (nothing shows it not polling)
    seen = rec.cycles_after(time.time())
    wait_for(lambda: rec.scrapes[-1][1] >= seen + 3, 30, "three more cycles")
    assert {s for _t, s in rec.statuses(sc.group, blocked)} <= {"ok", "stalled"}


def test_a_poll_timeout_leave_is_stopped_and_names_who_left_and_when(world: dict[str, Any]) -> None:
    sc, rec = world["scenarios"]["left"], world["recorder"]
    blocked = sc.event("BLOCKED")
    try:
        n = rec.cycles_to(sc.group, "stopped", blocked, 60)
    except AssertionError as e:  # the group's story is in e; what its consumer did
        raise AssertionError(f"{e}; reason now: {_reason(world, sc.group)!r}; {sc.said()}") from None
    # its poll timeout, then records waiting (the stall clock) before the empty group is judged
    assert n <= cycles(POLL_TIMEOUT + STALL_AFTER) + IN_FLIGHT + SEE, (
        n, rec.story(sc.group, blocked))
    reason = _reason(world, sc.group)
    assert f"(group empty; last owner {LEFT_CLIENT}@" in reason, reason
    assert "s ago); committed unchanged" in reason, reason
    assert ("a consumer that crashed or closed and one that left the group on its poll timeout "
            "(max.poll.interval.ms) while its process lives look the same") in reason, reason
    assert sc.proc is not None and sc.proc.poll() is None  # the process lives
