"""Three lagwatch replicas share one cluster's groups through their coordination group.

Against a real broker: 20 commit-only groups (two in each of the 10 ``__consumer_offsets``
partitions, each with its own lag) and one real consumer that polls and never commits
(`stalled`). Three replicas with ``state.replicas`` and one plain process (the reference)
watch them. The union of the replicas' series equals the reference's exposition (every
group's status and lag), no group is served by two replicas, and each serves only its
shards' groups: about a third of the groups and group-partitions each, in as many
sampling requests per cycle as one process sends. Then the Kafka worker of the replica
serving the stalled group is SIGKILLed: its member dies with it, so the replica serves
none of its groups until its new worker is assigned shards; no group is served twice,
and every group is served again, the stalled group's clock continued. Then the
replica serving the stalled group is SIGKILLed: another replica serves its groups, the
stalled group `stalled` from its first served cycle with ``stalled_seconds`` continuing
(not restarted). Both moves wait for Kafka (the dead member's session timeout, then the
rebalance: the broker's wall clock and pace, read from its log) and then take lagwatch
a few of the cycles each replica starts after the broker's new assignment. Last the new
owner is stopped with SIGTERM: it leaves the group, and the last replica serves
everything within a few cycles, the clock continued.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from devenv.kafka import KafkaCluster
from devenv.procs import children
from exporter.state.placement import offsets_partition, shard_of
from tests.conftest import (
    INTERVAL,
    STALL_AFTER,
    commit_offsets,
    create_topic,
    cycles,
    exporter_config,
    produce,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess, Samples, group_offsets, select, value
from tests.support.prometheus_proc import PrometheusProcess, fast_rules, firing_evaluations
from tests.support.scenarios import Scenario, Workload, spawn, stop_all

# The coordination group's session timeout in the test (seconds): long enough that a
# drained replica's shards moving within a few cycles shows it left the group.
SESSION = 6.0
HEARTBEAT = min(SESSION / 3, 1.0, INTERVAL / 4)  # exporter/state/coordination.py heartbeat_ms
COORDINATION = "lagwatch-test"  # the replicas' coordination group: lagwatch-<cluster name>
# Cycles a replica starts, after the broker assigned it a dead member's shards, up to the
# first serving their groups: the one that reads them back and serves them, one more in
# case the assignment came as a cycle's sample was taken, and one for the read-back.
MOVE_CYCLES = 3
OFFSETS_PARTITIONS = 10  # offsets.topic.num.partitions of the test brokers (devenv/kafka.py)
SHARDS = 10
PER_PARTITION = 2
# Cycles the new owner is watched: a clock restarted at the move would read `ok` (and a
# stalled_seconds below the gap) from the first of them.
WATCHED = 3


def _statuses(m: Samples) -> dict[str, str]:
    return {dict(lab)["group"]: dict(lab)["status"]
            for lab, v in select(m, "kafka_consumergroup_status").items() if v == 1}


def _lags(m: Samples) -> dict[str, tuple]:
    """Per group its lag summed and per partition (offsets)."""
    out: dict[str, tuple] = {}
    for lab, v in select(m, "kafka_consumergroup_lag_offsets_sum").items():
        g = dict(lab)["group"]
        out[g] = (v, tuple(sorted(group_offsets(m, g, "kafka_consumergroup_lag_offsets").items())))
    return out


def _hws(m: Samples, topic: str) -> dict[str, float]:
    return {dict(lab)["partition"]: v
            for lab, v in select(m, "kafka_partition_high_watermark_offset", topic=topic).items()}


def _stalled_seconds(m: Samples, group: str) -> float:
    return max(select(m, "kafka_consumergroup_stalled_seconds", group=group).values(), default=-1.0)


def _spread_groups(prefix: str) -> list[str]:
    """PER_PARTITION group ids in each __consumer_offsets partition: every shard has groups."""
    by_p: dict[int, list[str]] = {}
    i = 0
    while any(len(by_p.get(p, [])) < PER_PARTITION for p in range(OFFSETS_PARTITIONS)):
        g = f"{prefix}-{i}"
        i += 1
        got = by_p.setdefault(offsets_partition(g, OFFSETS_PARTITIONS), [])
        if len(got) < PER_PARTITION:
            got.append(g)
    return sorted(g for gs in by_p.values() for g in gs)


@pytest.fixture(scope="module")
def world(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    run = unique("rp")
    stall = Scenario("nocommit", f"{run}-stalled", create_topic(kafka, f"{run}-stall", partitions=1), 10)
    work = Workload(kafka, [stall])
    work.start()
    spawn(kafka, stall, "nocommit")
    static = create_topic(kafka, f"{run}-static", partitions=2)
    produce(kafka, static, {0: 60, 1: 60})
    groups = _spread_groups(f"{run}-g")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda ig: commit_offsets(kafka.bootstrap_servers, ig[1], static,
                                                {0: ig[0] % 7 * 5, 1: 60}), enumerate(groups)))
    tmp = tmp_path_factory.mktemp("replicas")
    cluster = {"name": "test", "bootstrap_servers": kafka.bootstrap_servers, "groups": {"allow": f"^{run}-"}}
    state = {"topic": unique("__lagwatch_state_rp"), "partitions": SHARDS, "write_every": 3,
             "replicas": True, "session_timeout": SESSION}
    try:
        yield {"groups": groups, "stalled": stall.group, "stall": stall, "static": static,
               "replica": exporter_config(tmp, kafka.bootstrap_servers,
                                          clusters=[{**cluster, "state": state}]),
               "single": exporter_config(tmp, kafka.bootstrap_servers,
                                         clusters=[{**cluster, "state": {"enabled": False}}])}
    finally:
        work.stop_flag.set()
        stop_all([stall])


def _cycles(m: Samples) -> float:
    return value(m, "lagwatch_cycles_total", cluster="test") or 0


def _sampled_at(m: Samples) -> float:
    return value(m, "lagwatch_last_sample_timestamp_seconds", cluster="test") or 0


class _Stalled(NamedTuple):
    """The replica serving the stalled group, and its clock there before a fault."""

    replica: ExporterProcess
    status: str
    clock: float
    sampled_at: float


def _stalled_at(reps: list[ExporterProcess], stalled: str) -> _Stalled:
    (replica,) = [r for r, m in zip(reps, _served(reps), strict=True) if stalled in _statuses(m)]
    before = replica.metrics()
    return _Stalled(replica, _statuses(before)[stalled], _stalled_seconds(before, stalled),
                    _sampled_at(before))


def _cycles_taken(last_miss: list[float], start: list[float]) -> float:
    """Cycles from a fault to the first scrapes serving every group: a lower bound (counted
    to the cycle after the last scrape that missed some), the most of any replica."""
    return max(miss + 1 - s for miss, s in zip(last_miss, start, strict=True))


class _Seen(NamedTuple):
    """One scrape of a replica: its cycles, its sample's time, the groups it serves."""

    cycles: float
    sampled_at: float
    served: frozenset[str]

    @classmethod
    def of(cls, m: Samples) -> _Seen:
        return cls(_cycles(m), _sampled_at(m), frozenset(_statuses(m)))


def _cycles_started(seen: list[list[_Seen]], fault_at: float) -> float:
    """Cycles a replica starts after a fault up to the first serving every group it serves
    at its last scrape, the most of any replica that took groups on. A lower bound: counted
    from the first cycle seen sampled after the fault to the cycle after the last scrape
    that missed some, so a test process starved on a busy machine can only make it smaller.
    Unlike :func:`_cycles_taken` it leaves out the cycle in progress at the fault (begun
    before it, on the shards of then) and the phase of another replica's cycles."""
    took = 0.0
    for scrapes in seen:
        final = scrapes[-1].served
        missed = [s.cycles for s in scrapes if not final <= s.served]
        after = [s.cycles for s in scrapes if s.sampled_at >= fault_at]
        if missed and after:
            took = max(took, max(missed) + 1 - min(after) + 1)
    return took


_BROKER_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] INFO (.*)$")


def _reassigned_at(kafka: KafkaCluster, group: str, since: float) -> float:
    """When the broker gave ``group`` (the coordination group) its first assignment after
    removing a member that missed its session after ``since`` (Unix time, from the broker's
    log, in the machine's local time as the JVM writes it). What Kafka takes ends there:
    the session timeout and the rebalance, both the broker's wall clock and its pace; what
    lagwatch takes (reading the shards back, judging, serving) is counted in cycles from it."""
    failed = f" in group {group} has failed, removing it from the group."
    assigned = f" for group {group} for generation "
    removed = False
    for line in kafka.brokers[0].log_file.read_text(errors="replace").splitlines():
        m = _BROKER_LINE.match(line)
        if m is None:
            continue
        at = time.mktime(time.strptime(m[1], "%Y-%m-%d %H:%M:%S")) + int(m[2]) / 1000
        if at < since:
            continue
        if failed in m[3]:
            removed = True
        elif removed and assigned in m[3] and m[3].startswith("[GroupCoordinator"):
            return at
    raise AssertionError(f"the broker's log shows no member of {group} removed and the group "
                         f"assigned again since {since}:\n{kafka.brokers[0].log_tail(20)}")


def _served(reps: list[ExporterProcess]) -> list[Samples]:
    return [r.metrics() for r in reps]


def _union(ms: list[Samples]) -> tuple[dict[str, str], dict[str, float], list[str]]:
    """The replicas' statuses and lags together, and every group served twice."""
    statuses: dict[str, str] = {}
    lags: dict[str, float] = {}
    twice = []
    for m in ms:
        s = _statuses(m)
        twice += [g for g in s if g in statuses]
        statuses |= s
        lags |= _lags(m)
    return statuses, lags, twice


def test_replicas_share_the_groups_and_a_killed_ones_move_with_their_clocks(
        kafka: KafkaCluster, world: dict[str, Any], tmp_path: Path) -> None:
    groups, stalled = world["groups"], world["stalled"]
    every = {*groups, stalled}
    with ExitStack() as stack:
        single = stack.enter_context(ExporterProcess(None, config=world["single"]))
        reps = [stack.enter_context(ExporterProcess(None, config=world["replica"])) for _ in range(3)]
        prom = stack.enter_context(PrometheusProcess(
            tmp_path / "prometheus", targets={"lagwatch": [f"127.0.0.1:{r.port}" for r in reps]},
            rule_files=[fast_rules(tmp_path / "fast.rules.yml")]))
        for p in (single, *reps):
            p.wait_ready()
        prom.wait_ready()

        def equal() -> tuple[list[Samples], Samples]:
            ms = _served(reps)
            ref = single.metrics()
            owned = [value(m, "lagwatch_shards_owned", cluster="test") or 0 for m in ms]
            statuses, lags, twice = _union(ms)
            assert not twice, f"served by two replicas: {twice}"
            want = _statuses(ref)
            # lags of the static groups only: the stalled group's topic is written all along
            diff = {g: (statuses.get(g), want.get(g), lags.get(g), _lags(ref).get(g)) for g in every
                    if statuses.get(g) != want.get(g) or (g in groups and lags.get(g) != _lags(ref).get(g))}
            # raised, not returned: wait_for reports the last difference if it never goes
            assert sum(owned) == SHARDS and min(owned) > 0, f"shards owned {owned}"
            assert not diff and want.get(stalled) == "stalled", f"(replicas, one process): {diff}"
            # a topic's partitions from every replica whose groups read it, all alike
            hws = [_hws(m, world["static"]) for m in ms]
            assert [h for h in hws if h] and all(h == _hws(ref, world["static"]) for h in hws if h), hws
            return ms, ref
        ms, ref = wait_for(equal, 30, "the replicas' union equal to one process's exposition")
        _settled_in_shares(reps, ms, ref, every)
        wait_for(lambda: prom.query(f'ALERTS{{alertstate="firing", group="{stalled}"}}'), 20,
                 "the stalled group's alert firing in Prometheus")
        moves_from = time.time()
        # The Kafka worker of the stalled group's replica crashes, and its member with it:
        # the replica serves none of its groups until a new worker joins and is assigned
        # shards; the others are given the dead member's once its session ends.
        _crash_the_stalled_groups_worker(reps, stalled, every, kafka)
        # Killed: its member expires at most SESSION after the kill (after its last
        # heartbeat), the others learn of the rebalance at their next heartbeat, a quarter
        # cycle later at most, and the broker assigns them its shards: Kafka's part, its
        # wall clock. Then lagwatch's part, counted in the cycles each survivor starts after
        # that assignment: the next one reads the shards back and serves them.
        survivors = _stop_the_stalled_groups_replica(reps, stalled, every, signal.SIGKILL,
                                                     MOVE_CYCLES, kafka=kafka)
        # Drained (SIGTERM): it ends its cycle, writes its groups and leaves the group at
        # once, no session timeout.
        _stop_the_stalled_groups_replica(survivors, stalled, every, signal.SIGTERM, cycles(HEARTBEAT) + 4)
        # Every group alert firing before the moves fires at every evaluation across them:
        # the rules aggregate by (cluster, group), not by the replica that serves it, and
        # keep_firing_for bridges the gap while a shard moves (StoppedWithLag, without it,
        # resolved for 2 to 8 of 16 evaluations here).
        firing = firing_evaluations(prom, moves_from, time.time())
        at_start = firing_evaluations(prom, moves_from, moves_from)
        assert at_start and all(firing.get(a) == max(firing.values()) for a in at_start), firing
        assert ("KafkaConsumerGroupStalled", stalled) in at_start
        # Shards nobody judged while they moved (the crashed worker's, the killed
        # replica's: at least the session timeout each) raised KafkaConsumerLagShardsUnowned
        # (``for: 0s`` here), and it resolved once every shard had an owner again.
        unowned = 'ALERTS{alertname="KafkaConsumerLagShardsUnowned", alertstate="firing"}'
        assert prom.query_range(unowned, moves_from, time.time()), "no unowned shard seen"
        wait_for(lambda: not prom.query(unowned), 30, "KafkaConsumerLagShardsUnowned resolved")


def _settled_in_shares(reps: list[ExporterProcess], ms: list[Samples], ref: Samples,
                       every: set[str]) -> None:
    """Every group served once, scrape after scrape; each replica its share of the groups
    (``ms``, scraped when their union first equalled the reference ``ref``)."""
    for _ in range(3):
        time.sleep(INTERVAL)
        statuses, _lags_now, twice = _union(_served(reps))
        assert not twice and set(statuses) == every, (twice, every - set(statuses))
    per_replica = [set(_statuses(m)) for m in ms]
    assert all(0 < len(s) <= len(every) // 2 for s in per_replica), [len(s) for s in per_replica]
    _requests_per_cycle(ms, ref)
    _each_samples_a_third(ms, ref, every)


def _requests_per_cycle(ms: list[Samples], ref: Samples) -> None:
    """Sharding adds no sampling request: a replica asks at most what one process does per
    cycle (each request carries only its shards' groups and topics)."""
    def rate(m: Samples) -> float:
        return (value(m, "lagwatch_kafka_requests_total", cluster="test") or 0) / max(
            1.0, _cycles(m))
    assert all(rate(m) <= rate(ref) * 1.25 for m in ms), ([rate(m) for m in ms], rate(ref))


def _each_samples_a_third(ms: list[Samples], ref: Samples, every: set[str]) -> None:
    """Each replica samples only its shards' groups (the listing leaves out the others
    before DescribeGroups and OffsetFetch): the groups it serves are exactly those of
    ``lagwatch_shards_owned`` shards, the shards are balanced, and its group-partitions are
    about a third of one process's. On one broker the request count cannot divide (one per
    broker and coordinator each cycle, :func:`_requests_per_cycle`); what each carries does."""
    owned = [value(m, "lagwatch_shards_owned", cluster="test") or 0 for m in ms]
    assert max(owned) - min(owned) <= 1, f"shards owned {owned}"
    assert all(value(m, "lagwatch_shards", cluster="test") == SHARDS for m in ms)
    for m, n in zip(ms, owned, strict=True):
        served = set(_statuses(m))
        shards = {shard_of(g, OFFSETS_PARTITIONS, SHARDS) for g in served}
        assert len(shards) == n, (sorted(shards), n)
        assert served == {g for g in every if shard_of(g, OFFSETS_PARTITIONS, SHARDS) in shards}
    per_replica = [len(select(m, "kafka_consumergroup_lag_offsets")) for m in ms]
    total = len(select(ref, "kafka_consumergroup_lag_offsets"))
    assert sum(per_replica) == total, (per_replica, total)
    third = total / len(ms)
    assert all(third / 1.5 <= n <= third * 1.5 for n in per_replica), (per_replica, total)


def _stop_the_stalled_groups_replica(reps: list[ExporterProcess], stalled: str, every: set[str], sig: int,
                                     bound: int, kafka: KafkaCluster | None = None) -> list[ExporterProcess]:
    """``sig`` to the replica serving the stalled group: the others serve all its groups
    within ``bound`` of their cycles (with ``kafka``, where its member misses its session:
    of the cycles they start after the broker assigned them its shards, :func:`_reassigned_at`
    and :func:`_cycles_started`; else of their cycles after the signal, :func:`_cycles_taken`),
    the stalled group's clock continued. The survivors."""
    was = _stalled_at(reps, stalled)
    assert was.status == "stalled" and was.clock >= STALL_AFTER
    survivors = [r for r in reps if r is not was.replica]
    before = _served(survivors)
    start_cycles = [_cycles(m) for m in before]
    seen = [[_Seen.of(m)] for m in before]
    was.replica.proc.send_signal(sig)
    sent_at = time.time()  # after the signal: a cycle sampled before this counts as begun before it
    was.replica.proc.wait(30)
    last_miss = list(start_cycles)

    def moved() -> list[Samples] | None:
        got = _served(survivors)
        for scrapes, m in zip(seen, got, strict=True):
            scrapes.append(_Seen.of(m))
        if _union(got)[0].keys() != every:
            last_miss[:] = [_cycles(m) for m in got]
            return None
        return got
    ms = wait_for(moved, SESSION + 10 * INTERVAL,
                  f"the groups of the replica sent {sig!r} served by the others")
    took = (_cycles_started(seen, _reassigned_at(kafka, COORDINATION, sent_at)) if kafka is not None
            else _cycles_taken(last_miss, start_cycles))
    assert took <= bound, f"{took} cycles to move the shards of the replica sent {sig!r}"
    _stalled_continues(survivors, ms, stalled, was)
    return survivors


def _crash_the_stalled_groups_worker(reps: list[ExporterProcess], stalled: str, every: set[str],
                                     kafka: KafkaCluster) -> None:
    """SIGKILL to the Kafka worker of the replica serving the stalled group: the replica
    lives on and serves none of its groups (its member died with the worker), no group is
    served twice at any scrape, every group is served again within MOVE_CYCLES of the
    cycles each replica starts after the broker removed the dead member and assigned its
    shards, and wherever the stalled group is served it is `stalled` with its clock
    continued. Then the replica's new worker joins and is given its share (its start may
    take longer than the session: a busy machine starts a Python process slowly)."""
    was = _stalled_at(reps, stalled)
    (worker,) = wait_for(lambda: children(was.replica.proc.pid), 30, "the replica's Kafka worker")
    os.kill(worker, signal.SIGKILL)
    crashed_at = time.time()
    seen: list[list[_Seen]] = [[] for _ in reps]
    served_stalled, withdrawn = [0], [0]

    def whole() -> list[Samples] | None:
        got = _served(reps)
        statuses, _lags_now, twice = _union(got)
        assert not twice, f"served by two replicas after the worker crash: {twice}"
        for scrapes, m in zip(seen, got, strict=True):
            scrapes.append(_Seen.of(m))
            if stalled in _statuses(m):
                _assert_continued(m, stalled, was)
                served_stalled[0] += 1
        mine = got[reps.index(was.replica)]
        crashes = value(mine, "lagwatch_errors_total", cluster="test", stage="worker_crash")
        # from the crash seen to its new worker's first assignment (at least the failed
        # cycle's back-off and a new process's start): no shard, no group served
        withdrawn[0] += bool(crashes) and not _statuses(mine) and not value(
            mine, "lagwatch_shards_owned", cluster="test")
        return got if statuses.keys() == every and crashes else None
    wait_for(whole, SESSION + 10 * INTERVAL, "every group served again after the worker crash")
    assert withdrawn[0], "the replica whose worker died went on serving its groups"
    # wait_for retries while _reassigned_at raises (the broker's log not written yet)
    moved_at = wait_for(lambda: _reassigned_at(kafka, COORDINATION, crashed_at), 30,
                        "the dead member's removal in the broker's log")
    took = _cycles_started(seen, moved_at)
    assert took <= MOVE_CYCLES, f"{took} cycles to serve every group after the worker crash"
    assert was.replica.proc.poll() is None, "the replica died with its worker"

    def settled() -> bool:
        owned = [value(m, "lagwatch_shards_owned", cluster="test") or 0 for m in _served(reps)]
        return whole() is not None and min(owned) > 0 and served_stalled[0] >= WATCHED * 3
    # a hang guard: the new worker's start is the machine's pace, its join Kafka's
    wait_for(settled, 60, "the new worker given its share, every group served once")


def _assert_continued(m: Samples, stalled: str, was: _Stalled) -> None:
    """`stalled` in the scrape ``m``, its clock gone on over the gap since ``was`` sampled
    it (restarted, it would be at most the time since the move)."""
    assert _statuses(m).get(stalled) == "stalled", _statuses(m).get(stalled)
    clock = _stalled_seconds(m, stalled)
    gap = _sampled_at(m) - was.sampled_at
    assert clock >= was.clock + gap - INTERVAL, (
        f"stalled_seconds {clock}; {was.clock} in a sample {gap:.1f} s earlier")


def _stalled_continues(survivors: list[ExporterProcess], ms: list[Samples], stalled: str,
                       was: _Stalled) -> None:
    """From the new owner's first served cycle on: `stalled`, its clock continued."""
    (owner,) = [r for r, m in zip(survivors, ms, strict=True) if stalled in _statuses(m)]
    first = _cycles(owner.metrics())
    deadline = time.monotonic() + 60  # a hang guard: the bound is in cycles
    cycle = first
    while cycle < first + WATCHED and time.monotonic() < deadline:
        m = owner.metrics()
        cycle = _cycles(m)
        _assert_continued(m, stalled, was)
        time.sleep(0.3)
    assert cycle >= first + WATCHED, "the new owner did not serve enough cycles"
    assert (value(m, "lagwatch_state_restored_groups", cluster="test") or 0) > 0
