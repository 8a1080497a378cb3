"""Reports without a member id (JVM interceptors) matched to group members by client id and host.

Reports are decoded from the JSON the interceptor publishes; members have the
shape the sampler builds from DescribeGroups (host as the broker gives it).
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from exporter.config import ClusterConfig, Thresholds
from exporter.contracts.reports import ConsumerReport
from exporter.contracts.snapshot import GroupSample, Member, PartitionOffsets, Snapshot
from exporter.evaluate.evaluator import Evaluator
from exporter.reports.decode import decode, encode, report_key
from exporter.reports.match import host_address, match_reports, same_host
from exporter.reports.reader import ReportReader

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

T0 = 1_800_000_000.0


def _offsets(replicas: int, hw: int) -> PartitionOffsets:
    return PartitionOffsets(leader=1, replicas=replicas, isr=replicas, log_start=0, hw=hw, lso=hw, leo=hw)


def jvm_report(client_id: str, host: str, parts: dict[tuple[str, int], int], *,
               last_poll: float = T0, received_at: float = T0, interval: float = 5.0) -> ConsumerReport:
    raw: dict[str, Any] = {
        "v": 1, "kind": "consumer", "group": "g", "client_id": client_id, "member_id": "",
        "host": host, "sent_at": received_at, "last_poll": last_poll, "interval": interval,
        "partitions": [{"topic": t, "partition": p, "position": off, "committed": off}
                       for (t, p), off in parts.items()],
        "closed": False}
    return decode(encode(raw), "c", received_at)


def member(mid: str, client_id: str, host: str, *tps: tuple[str, int]) -> Member:
    return Member(member_id=mid, client_id=client_id, host=host, assignment=tuple(tps))


A0, A1, A2, A3 = ("orders", 0), ("orders", 1), ("orders", 2), ("orders", 3)


def test_host_forms_compare_as_addresses() -> None:
    assert host_address("/10.0.0.5") == ipaddress.ip_address("10.0.0.5")
    assert host_address("billing-7.prod/10.0.0.5") == ipaddress.ip_address("10.0.0.5")
    assert same_host("/0:0:0:0:0:0:0:1", "billing-7/::1")  # Java writes IPv6 in full
    assert same_host("/fe80:0:0:0:1:2:3:4%eth0", "h/fe80::1:2:3:4%2")
    assert same_host("/10.0.0.5", "h/::ffff:10.0.0.5")
    assert same_host("/10.0.0.5", "[10.0.0.5]")
    assert not same_host("/10.0.0.5", "billing-7/10.0.0.6")
    assert not same_host("/10.0.0.5", "billing-7")  # a host name is no address
    assert not same_host("", "")
    assert host_address("billing-7") is None


def test_member_id_reports_match_as_before_and_memberless_by_client_id_and_host() -> None:
    py = decode(encode({"v": 1, "kind": "consumer", "group": "g", "client_id": "py", "member_id": "m-py",
                        "host": "worker-3", "sent_at": T0, "last_poll": T0, "partitions": []}),
                "c", T0)
    jvm = jvm_report("consumer-g-1", "app-1/10.0.0.5", {A1: 7})
    other_host = jvm_report("consumer-g-1", "app-2/10.0.0.6", {A2: 9})
    members = [member("m-py", "py", "/10.0.0.9", A0),
               member("consumer-g-1-aaa", "consumer-g-1", "/10.0.0.5", A1),
               member("consumer-g-2-bbb", "consumer-g-2", "/10.0.0.5", A3)]  # another client id
    got = match_reports(members, [py, jvm, other_host])
    assert set(got) == {"m-py", "consumer-g-1-aaa"}
    assert got["m-py"] is py
    # the matched report speaks for the member the broker knows
    assert got["consumer-g-1-aaa"].member_id == "consumer-g-1-aaa"
    assert got["consumer-g-1-aaa"].positions == {A1: 7}


def test_same_client_id_on_two_hosts_each_gets_its_own() -> None:
    r5 = jvm_report("consumer-g-1", "app-1/10.0.0.5", {A0: 1})
    r6 = jvm_report("consumer-g-1", "app-2/10.0.0.6", {A1: 2})
    members = [member("m5", "consumer-g-1", "/10.0.0.5", A0),
               member("m6", "consumer-g-1", "/10.0.0.6", A1)]
    got = match_reports(members, [r6, r5])
    assert got["m5"].positions == {A0: 1} and got["m6"].positions == {A1: 2}


def test_same_client_id_on_one_host_told_apart_by_partitions_or_left_unmatched() -> None:
    ra = jvm_report("consumer-g-1", "h/10.0.0.5", {A0: 1, A1: 1})
    rb = jvm_report("consumer-g-1", "h/10.0.0.5", {A2: 2})
    members = [member("ma", "consumer-g-1", "/10.0.0.5", A0, A1),
               member("mb", "consumer-g-1", "/10.0.0.5", A2, A3)]
    got = match_reports(members, [ra, rb])
    assert got["ma"].positions == ra.positions and got["mb"].positions == rb.positions
    # Neither report has seen records yet: nothing tells them apart, so neither is guessed.
    empty_a = jvm_report("consumer-g-1", "h/10.0.0.5", {})
    empty_b = jvm_report("consumer-g-1", "h/10.0.0.5", {})
    assert match_reports(members, [empty_a, empty_b]) == {}
    # Equal overlap is no better.
    both = jvm_report("consumer-g-1", "h/10.0.0.5", {A0: 1, A2: 1})
    assert match_reports(members, [both, jvm_report("consumer-g-1", "h/10.0.0.5", {A1: 1, A3: 1})]) == {}


def test_report_of_a_gone_process_on_the_same_host_is_ignored() -> None:
    # The container restarted on the same address: the old process's last report lingers.
    old = jvm_report("consumer-g-1", "h/10.0.0.5", {A0: 1}, received_at=T0 - 60)
    new = jvm_report("consumer-g-1", "h/10.0.0.5", {A0: 5}, received_at=T0)
    got = match_reports([member("m", "consumer-g-1", "/10.0.0.5", A0)], [old, new])
    assert got["m"].positions == {A0: 5}


def test_reader_keeps_memberless_reporters_apart_by_record_key() -> None:
    """Two JVMs on one host, both ``consumer-g-1``: the record key (client id, host, pid) separates them."""
    r = ReportReader(ClusterConfig(name="c", bootstrap_servers="127.0.0.1:9"), Thresholds())
    for pid, off in ((101, 1), (202, 2)):
        rep = jvm_report("consumer-g-1", "h/10.0.0.5", {A0: off})
        raw = encode({"v": 1, "kind": "consumer", "group": "g", "client_id": rep.client_id,
                      "member_id": "", "host": rep.host, "sent_at": T0, "last_poll": T0,
                      "partitions": [{"topic": "orders", "partition": 0, "position": off}]})
        r.ingest(report_key("consumer", "g", f"consumer-g-1@h/10.0.0.5#{pid}"), raw, T0, T0)
    consumers, _ = r.current(T0)
    assert sorted(c.positions[A0] for c in consumers["g"]) == [1, 2]


def _snap(now: float, committed: dict[tuple[str, int], int], hw: int,
          members: tuple[Member, ...]) -> Snapshot:
    parts = {tp: _offsets(1, hw) for tp in committed}
    return Snapshot(cluster="c", taken_at=now, duration=0.01, partitions=parts, groups={
        "g": GroupSample(group_id="g", type="classic", state="stable", members=members, coordinator=1,
                         committed=dict(committed))})


def test_wedged_jvm_member_is_livelocked_on_every_partition_it_owns_and_named() -> None:
    """The JVM consumer got records from orders[0] only, then wedged; it also owns orders[1].

    Only the member match can tell that orders[1]'s owner is the wedged JVM: no report
    names orders[1].
    """
    th = Thresholds(stall_after=300, livelock_after=20, lag_seconds=3600, window=300,
                    report_stale_after=30)
    ev = Evaluator("c", th, interval=10)
    m = member("consumer-billing-1-4f2e", "consumer-billing-1", "/10.0.0.5", A0, A1)
    for i in range(4):
        now = T0 + 10 * i
        rep = jvm_report("consumer-billing-1", "billing-7/10.0.0.5", {A0: 100}, last_poll=T0,
                         received_at=now)
        v = ev.evaluate(_snap(now, {A0: 100, A1: 50}, 200, (m,)), {"g": [rep]})
    g = v.groups["g"]
    assert g.status == "livelocked"
    assert [p.status for p in g.partitions] == ["livelocked", "livelocked"]
    reason = g.partitions[1].reason
    assert "orders[1]" in reason and "consumer-billing-1@billing-7/10.0.0.5" in reason
    assert "(consumer-billing-1-4f2e)" in reason and "last polled 30s ago" in reason
    assert g.members[0].last_poll_age == 30.0
