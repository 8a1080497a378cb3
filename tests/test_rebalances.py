"""Rebalances per group (exporter/evaluate/rebalances.py): the counting steps as row tables,
then the evaluator driven cycle by cycle (epoch jumps, a recreated group, a worker restart,
classic membership changes, the clients' own counters, the storm and livelock notes)."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.config import Thresholds
from exporter.contracts.reports import ConsumerReport
from exporter.contracts.snapshot import GroupSample, Member, PartitionOffsets, Snapshot
from exporter.contracts.status import Status
from exporter.contracts.view import GroupView
from exporter.evaluate.evaluator import Evaluator
from exporter.evaluate.rebalances import client_step, epoch_step, membership_step
from exporter.expose.api import group_summary
from exporter.expose.render import render_cluster
from exporter.expose.statuspage import render
from exporter.reports.decode import decode, encode

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

T0 = 1_800_000_000.0
TP = ("t", 0)


@pytest.mark.parametrize("epoch, last, want", [
    (7, None, 0),    # first sample: a baseline
    (7, 7, 0),       # nothing changed
    (8, 7, 1),       # one join or leave
    (12, 7, 5),      # five between two samples: all counted
    (1, 40, 0),      # went down: deleted and recreated, a new baseline
    (None, 7, 0),    # no epoch this cycle
])
def test_epoch_step(epoch: int | None, last: int | None, want: int) -> None:
    assert epoch_step(epoch, last) == want


@pytest.mark.parametrize("members, last, want", [
    ({"a"}, None, 0),             # first sample: a baseline
    ({"a", "b"}, {"a", "b"}, 0),  # same members
    ({"a", "b"}, {"a"}, 1),       # b joined
    ({"a"}, {"a", "b"}, 1),       # b left
    ({"c"}, {"a", "b"}, 1),       # several changes in one cycle: one (a lower bound)
    (set(), {"a"}, 1),            # the last member left
])
def test_membership_step(members: set[str], last: set[str] | None, want: int) -> None:
    assert membership_step(frozenset(members), None if last is None else frozenset(last)) == want


def _report(client: str, rebalances: int | None, host: str = "h", member: str = "m") -> ConsumerReport:
    return ConsumerReport("g", client, member, host, sent_at=T0, last_poll=T0, interval=5.0,
                          positions={}, committed={}, closed=False, received_at=T0,
                          rebalances=rebalances)


def test_client_step_takes_the_largest_rise_and_rebases_restarted_clients() -> None:
    counts: dict[str, int] = {}
    assert client_step(counts, [_report("a", 3), _report("b", 1)]) == 0  # baselines
    # Both took part in the same two rebalances: two, not four.
    assert client_step(counts, [_report("a", 5), _report("b", 3)]) == 2
    # b restarted (its count went down): a baseline; a saw one more.
    assert client_step(counts, [_report("a", 6), _report("b", 0)]) == 1
    assert client_step(counts, [_report("a", 6), _report("b", 2), _report("c", None)]) == 2
    assert counts == {"a@h#m": 6, "b@h#m": 2}


def test_client_step_keeps_a_members_earlier_reports_apart() -> None:
    """A consumer's report from before it joined (no member id, count 0) stays beside its
    current one until it expires; so does one under the member id it had before it was
    kicked out and rejoined. Neither may be read as the same member's count going down and
    up again, every cycle."""
    counts: dict[str, int] = {}
    old, new = _report("a", 0, member=""), _report("a", 1, member="m-1")
    assert [client_step(counts, [old, new]) for _ in range(3)] == [0, 0, 0]
    assert client_step(counts, [old, _report("a", 2, member="m-1")]) == 1
    rejoined = _report("a", 3, member="m-2")  # a new member id: a baseline
    before = _report("a", 2, member="m-1")
    assert [client_step(counts, [old, before, rejoined]) for _ in range(3)] == [0, 0, 0]
    # Two consumers sharing a client id on one host: two members, no flip-flop.
    twins = [_report("rdkafka", 5, member="x"), _report("rdkafka", 9, member="y")]
    assert [client_step(counts, twins) for _ in range(3)] == [0, 0, 0]
    # Two JVMs sharing a client id on one host (no member id): ambiguous, left out.
    jvms = [_report("consumer-g-1", 5, member=""), _report("consumer-g-1", 9, member="")]
    assert [client_step(counts, jvms) for _ in range(3)] == [0, 0, 0]
    assert client_step(counts, [_report("consumer-g-1", 9, member="")]) == 0  # one left: a baseline
    assert client_step(counts, [_report("consumer-g-1", 10, member="")]) == 1


def test_reports_carry_the_clients_count() -> None:
    raw = {"v": 1, "kind": "consumer", "group": "g", "client_id": "c", "member_id": "m",
           "host": "h", "sent_at": T0, "last_poll": T0, "partitions": []}
    assert decode(encode(raw), "prod", T0).rebalances is None  # older clients send none
    assert decode(encode({**raw, "rebalances": 4}), "prod", T0).rebalances == 4
    with pytest.raises(ValueError, match="rebalances"):
        decode(encode({**raw, "rebalances": -1}), "prod", T0)


# -- the evaluator, cycle by cycle ------------------------------------------------------

TH = Thresholds(stall_after=60, livelock_after=60, window=600, rebalance_storm=5,
                rebalance_window=600)


def _member(mid: str) -> Member:
    return Member(member_id=mid, client_id=f"c-{mid}", host="h", assignment=(TP,))


def _snap(at: float, group: GroupSample | None, ok: bool = True) -> Snapshot:
    return Snapshot(cluster="prod", taken_at=at, duration=0.1,
                    partitions={TP: PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0,
                                                     hw=100)},
                    groups={group.group_id: group} if group else {}, ok=ok)


def _group(members: tuple[str, ...], *, type_: str = "consumer", epoch: int | None = None,
           error: str | None = None) -> GroupSample:
    return GroupSample(group_id="g", type=type_, state="stable",  # type: ignore[arg-type]
                       members=tuple(_member(m) for m in members), committed={TP: 100},
                       epoch=epoch, error=error)


def _run(ev: Evaluator, cycles: list[tuple[GroupSample | None, bool]], start: float = T0,
         step: float = 5.0, reports: list[ConsumerReport] | None = None) -> list[GroupView | None]:
    out = []
    for i, (g, ok) in enumerate(cycles):
        view = ev.evaluate(_snap(start + i * step, g, ok), {"g": reports or []})
        out.append(view.groups.get("g"))
    return out


def _totals(views: list[GroupView | None]) -> list[int | None]:
    return [v.rebalances.total if v is not None and v.rebalances else None for v in views]


def test_epoch_jumps_are_counted_exactly_and_a_recreated_group_counts_from_its_new_base() -> None:
    ev = Evaluator("prod", TH, 5.0)
    views = _run(ev, [(_group(("a",), epoch=e), True) for e in (10, 11, 11, 14)]
                 + [(None, True)]  # deleted: its series vanish
                 + [(_group(("a",), epoch=e), True) for e in (2, 3)])
    assert _totals(views) == [0, 1, 1, 4, None, 0, 1]
    assert views[3] is not None and views[3].rebalances.source == "epoch"  # type: ignore[union-attr]
    # Recreated without a cycle in between: the epoch goes down, the counter does not.
    views = _run(ev, [(_group(("a",), epoch=e), True) for e in (20, 1, 2)], start=T0 + 100)
    assert _totals(views) == [18, 18, 19]


def test_a_worker_restart_or_an_unreadable_cycle_costs_no_count_and_counts_nothing_twice() -> None:
    ev = Evaluator("prod", TH, 5.0)
    views = _run(ev, [
        (_group(("a",), epoch=5), True),
        (_group(("a",), epoch=6), True),
        (None, False),                        # the Kafka worker crashed: no snapshot this cycle
        (_group(("a",), epoch=8), True),      # the restarted worker sees two more
        (_group(("a",), error="NOT_COORDINATOR"), True),  # last figures kept
        (_group(("a",), epoch=9), True),
        (_group(("a",), epoch=9), True),
    ])
    assert _totals(views) == [0, 1, 1, 3, 3, 4, 4]


def test_classic_groups_count_one_per_cycle_in_which_the_members_changed() -> None:
    ev = Evaluator("prod", TH, 5.0)
    members = [("a",), ("a", "b"), ("a", "b"), ("a", "b", "c"), ("a",), (), ()]
    views = _run(ev, [(_group(m, type_="classic"), True) for m in members])
    assert _totals(views) == [0, 1, 1, 2, 3, 4, 4]
    assert views[-1] is not None and views[-1].rebalances.source == "membership"  # type: ignore[union-attr]


def test_a_static_member_restarted_under_a_new_member_id_is_no_rebalance() -> None:
    """KIP-345: a static member back within session.timeout.ms gets a new member id and its
    old assignment, without a rebalance; a new instance joining is one."""
    def static(mid: str, instance: str) -> Member:
        return dataclasses.replace(_member(mid), instance_id=instance)

    ev = Evaluator("prod", TH, 5.0)
    cycles = [(static("a1", "pod-0"), static("b1", "pod-1")),
              (static("a2", "pod-0"), static("b1", "pod-1")),   # pod-0 restarted
              (static("a2", "pod-0"), static("b2", "pod-1")),   # pod-1 restarted
              (static("a2", "pod-0"), static("b2", "pod-1"), static("c1", "pod-2"))]  # a join
    groups = [GroupSample(group_id="g", type="classic", state="stable",  # type: ignore[arg-type]
                          members=ms, committed={TP: 100}) for ms in cycles]
    assert _totals(_run(ev, [(g, True) for g in groups])) == [0, 0, 0, 1]


def test_the_clients_counters_win_when_they_saw_more() -> None:
    ev = Evaluator("prod", TH, 5.0)
    cycles = [(_group(("a",), type_="classic"), True)]
    views = [_run(ev, cycles, start=T0 + i * 5, reports=[_report("c-a", n)])[0]
             for i, n in enumerate((1, 1, 4, 4))]
    # The member id never changed (a lower bound of 0) but the client rebalanced 3 times.
    assert _totals(views) == [0, 0, 3, 3]
    assert views[-1] is not None and views[-1].rebalances.source == "clients"  # type: ignore[union-attr]
    # The epoch of a KIP-848 group is exact: its members' own counts add nothing.
    ev = Evaluator("prod", TH, 5.0)
    epoch_views = [_run(ev, [(_group(("a",), epoch=7), True)], start=T0 + i * 5,
                        reports=[_report("c-a", n)])[0] for i, n in enumerate((1, 4))]
    assert _totals(epoch_views) == [0, 0]


def test_a_storm_is_a_note_that_leaves_the_status_alone_and_passes_with_the_window() -> None:
    ev = Evaluator("prod", TH, 30.0)
    epochs = [1, 3, 5, 7]  # 6 rebalances within 90 s
    views = _run(ev, [(_group(("a",), epoch=e), True) for e in epochs], step=30.0)
    last = views[-1]
    assert last is not None and last.rebalances is not None
    assert (last.rebalances.total, last.rebalances.recent, last.rebalances.storm) == (6, 6, True)
    assert last.status == Status.OK and last.reasons == ()
    assert last.notes == ("rebalance storm: 6 rebalances in the last 10 min (more than 5)",)
    doc = group_summary(last)
    assert doc["rebalances_total"] == 6 and doc["rebalance_storm"] is True
    assert doc["reasons"] == list(last.notes)
    # Served: the counter, and the storm on the page.
    view = ev.last_good
    assert view is not None
    text = b"".join(bytes(lines) for name, _h, lines in render_cluster(view)
                    if name == "kafka_consumergroup_rebalances_total")
    assert text == b'kafka_consumergroup_rebalances_total{cluster="prod",group="g"} 6\n'
    assert "<span class='down'>6 / 6</span>" in render([view], now=T0)
    # Ten minutes on, nothing new: the storm is over, the counter stays.
    later = _run(ev, [(_group(("a",), epoch=7), True)], start=T0 + 700)[0]
    assert later is not None and later.rebalances is not None
    assert (later.rebalances.total, later.rebalances.recent, later.rebalances.storm) == (6, 0, False)
    assert later.notes == ()


def test_the_storm_threshold_is_configured_per_group() -> None:
    from exporter.config import build_config

    cfg = build_config({"thresholds": {"rebalance_storm": 2, "rebalance_window": 120},
                        "group_thresholds": [{"match": "^calm", "thresholds": {"rebalance_storm": 50}}],
                        "clusters": [{"name": "prod", "bootstrap_servers": "k:9092"}]}, {})
    c = cfg.clusters[0]
    ev = Evaluator("prod", cfg.cluster_thresholds(c), 30.0, group_thresholds=c.group_thresholds)
    for i, e in enumerate((1, 2, 4)):
        snap = _snap(T0 + 30 * i, _group(("a",), epoch=e))
        calm = dataclasses.replace(_group(("a",), epoch=e), group_id="calm-g")
        view = ev.evaluate(dataclasses.replace(snap, groups={"g": snap.groups["g"], "calm-g": calm}), {})
    g, calm_v = view.groups["g"], view.groups["calm-g"]
    assert g.rebalances is not None and g.rebalances.storm
    assert g.notes == ("rebalance storm: 3 rebalances in the last 2 min (more than 2)",)
    assert calm_v.rebalances is not None and not calm_v.rebalances.storm and calm_v.notes == ()


def test_a_livelocked_rejoin_loop_says_how_many_rebalances_it_caused() -> None:
    """A KIP-848 member kicked out by max.poll.interval.ms rejoins with the same id: the
    epoch rises by two per round (it leaves, it joins) while the committed offset stays and
    records keep arriving."""
    ev = Evaluator("prod", TH, 30.0)
    views = []
    for i in range(6):
        snap = _snap(T0 + 30 * i, _group(("a",), epoch=10 + 2 * (i // 2)))
        hw = PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0, hw=100 + 10 * i)
        views.append(ev.evaluate(dataclasses.replace(snap, partitions={TP: hw}), {}).groups["g"])
    last = views[-1]
    assert last.status == Status.LIVELOCKED, last.reasons
    assert last.rebalances is not None and (last.rebalances.recent, last.rebalances.storm) == (4, False)
    assert last.notes[-1] == "4 rebalance(s) in the last 10 min while livelocked"
    assert any("rejoining" in r for r in last.reasons)  # the judgement's own reason stays


def test_spark_queries_have_no_rebalance_series() -> None:
    ev = Evaluator("prod", TH, 5.0)
    g = dataclasses.replace(_group(("run-1",), type_="spark"))
    views = _run(ev, [(g, True), (g, True)])
    assert views[-1] is not None and views[-1].rebalances is None
    assert group_summary(views[-1])["rebalances_total"] is None
