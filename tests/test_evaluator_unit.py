"""Pure logic: lag interpolation and status rules, driven cycle by cycle with real data shapes."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.config import LagMode, Thresholds
from exporter.contracts.reports import ConsumerReport, SparkReport
from exporter.contracts.snapshot import GroupSample, Member, PartitionOffsets, Snapshot
from exporter.evaluate.evaluator import Evaluator
from exporter.evaluate.lag import HwHistory, lag_seconds

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

T0 = 1_800_000_000.0
TP = ("orders", 3)


def _offsets(replicas: int, hw: int) -> PartitionOffsets:
    return PartitionOffsets(leader=1, replicas=replicas, isr=replicas, log_start=0, hw=hw, lso=hw, leo=hw)


def test_interpolation_brackets_the_record_and_survives_idle_gaps() -> None:
    h = HwHistory(limit=10)
    for t, hw in ((0, 100), (10, 100), (20, 100), (1000, 100), (1030, 200)):
        h.add(T0 + t, hw)
    assert [p[1] for p in h.points] == [100, 100, 200]  # the idle run kept only its ends
    # record 150 became readable between t=1000 (HW 100) and t=1030 (HW 200)
    since = h.readable_since(150)
    assert since is not None and abs(since - (T0 + 1000 + 30 * 51 / 100)) < 1e-6
    assert abs(lag_seconds(T0 + 1030, 150, 200, h, None) - (30 - 30 * 51 / 100)) < 1e-3  # type: ignore[operator]
    assert lag_seconds(T0 + 1030, 200, 200, h, None) == 0.0  # caught up
    assert lag_seconds(T0 + 1030, 250, 200, h, None) == 0.0  # committed ahead of HW read earlier
    assert h.readable_since(50) is None  # older than the table: unknown, not extrapolated
    assert lag_seconds(T0 + 1030, 50, 200, h, T0 + 5) == 1025.0  # record timestamp wins


def test_history_resets_when_hw_goes_backwards() -> None:
    h = HwHistory()
    h.add(T0, 500)
    h.add(T0 + 1, 600)
    h.add(T0 + 2, 10)  # topic re-created
    assert h.points == [(T0 + 2, 10)]


def _snap(t: float, committed: int, hw: int, members: tuple[Member, ...] = (),
          state: str = "stable", group: str = "g") -> Snapshot:
    return Snapshot(cluster="c", taken_at=t, duration=0.01, partitions={TP: _offsets(3, hw)},
                    groups={group: GroupSample(group_id=group, type="classic", state=state, members=members,
                                               coordinator=1, committed={TP: committed})})


MEMBER = Member(member_id="m-1", client_id="billing-7", host="/10.0.0.5", assignment=(TP,))
TH = Thresholds(stall_after=30, livelock_after=20, lag_seconds=3600, window=300, report_stale_after=30)


def _run(ev: Evaluator, steps: list[tuple[int, int, tuple[Member, ...]]], start: float = T0,
         reports: dict | None = None) -> list[str]:
    out = []
    for i, (committed, hw, members) in enumerate(steps):
        v = ev.evaluate(_snap(start + i * 10, committed, hw, members,
                              "stable" if members else "empty"), reports)
        out.append(v.groups["g"].status)
    return out


def test_healthy_then_stalled_then_caught_up() -> None:
    ev = Evaluator("c", TH, interval=10)
    steps = [(100 + 10 * i, 110 + 10 * i, (MEMBER,)) for i in range(5)]  # keeps committing
    steps += [(150, 160 + 10 * i, (MEMBER,)) for i in range(5)]  # frozen for 40 s with lag
    steps += [(300, 300, (MEMBER,))]
    got = _run(ev, steps)
    assert got[:5] == ["ok"] * 5
    assert got[5:8] == ["ok", "ok", "ok"]  # frozen 0, 10, 20 s: below stall_after
    assert got[8:10] == ["stalled", "stalled"]
    assert got[10] == "ok"
    v = ev.last_good
    assert v is not None and v.groups["g"].partitions[0].stalled_seconds == 0


def test_stall_clock_starts_when_the_first_unconsumed_record_arrived() -> None:
    """Caught up at t=40 (lag 0), then it stops committing while 10 records/s arrive: the
    lag dates from the record at offset 150 (about t=40), not from the sample at t=50 that
    first saw it, so it is stalled at t=70, 25 s after the freeze plus one interval."""
    ev = Evaluator("c", Thresholds(stall_after=25, livelock_after=20, lag_seconds=3600, window=300,
                                   report_stale_after=30), interval=10)
    steps = [(110 + 10 * i, 110 + 10 * i, (MEMBER,)) for i in range(5)]  # caught up, t=0..40
    steps += [(150, 250 + 100 * i, (MEMBER,)) for i in range(4)]  # frozen from t=40
    got = _run(ev, steps)
    assert got == ["ok"] * 7 + ["stalled", "stalled"], got
    v = ev.last_good
    assert v is not None
    assert v.groups["g"].partitions[0].stalled_seconds == pytest.approx(39.9, abs=0.2)


def test_stalled_reason_names_partition_numbers_and_owner() -> None:
    ev = Evaluator("c", TH, interval=10)
    _run(ev, [(150, 200 + i, (MEMBER,)) for i in range(5)])
    g = ev.last_good.groups["g"]  # type: ignore[union-attr]
    assert g.status == "stalled"
    r = g.reasons[0]
    assert "orders[3]" in r and "committed 150" in r and "billing-7@/10.0.0.5" in r and "m-1" in r


def test_no_members_with_lag_is_stopped_and_rejoin_churn_is_livelocked() -> None:
    ev = Evaluator("c", TH, interval=10)
    # one empty cycle may be a rebalance or coordinator failover: stopped needs two
    assert _run(ev, [(100, 150, ())] * 3) == ["ok", "stopped", "stopped"]
    ev = Evaluator("c", TH, interval=10)
    churn = [(100, 150 + i,
              (Member(member_id=f"m-{i}", client_id="w", host="h", assignment=(TP,)),) if i % 2 else ())
             for i in range(8)]
    got = _run(ev, churn)
    assert got[-1] == "livelocked", got
    assert "leaving and rejoining" in ev.last_good.groups["g"].reasons[0]  # type: ignore[union-attr]


def test_report_with_old_last_poll_is_livelocked_before_stall_threshold() -> None:
    ev = Evaluator("c", TH, interval=10)
    statuses = []
    for i in range(5):
        now = T0 + i * 10
        rep = ConsumerReport("g", "billing-7", "m-1", "host-a", sent_at=now, last_poll=T0,
                             interval=5, positions={TP: 160}, committed={TP: 150}, closed=False,
                             received_at=now)
        v = ev.evaluate(_snap(now, 150, 200, (MEMBER,)), {"g": [rep]})
        statuses.append(v.groups["g"].status)
    assert statuses == ["ok", "ok", "livelocked", "livelocked", "livelocked"]
    p = ev.last_good.groups["g"].partitions[0]  # type: ignore[union-attr]
    assert p.position == 160 and "last polled 40s ago" in p.reason


def test_rewind_is_reported_once_confirmed_then_held_for_a_few_cycles() -> None:
    """An offset reset stays below where the offset was at the next sample: rewind (held five
    cycles), and the empty group it needs is not called stopped meanwhile."""
    ev = Evaluator("c", TH, interval=10)
    got = _run(ev, [(500, 500, ())] + [(100, 500, ())] * 7)
    assert got == ["ok", "ok"] + ["rewind"] * 5 + ["stopped"]


def test_a_stale_commit_overtaken_at_the_next_sample_is_no_rewind() -> None:
    """A partition moving between members: the old owner's last commit lands after the new
    owner's, and the new owner's next commit is past both."""
    ev = Evaluator("c", TH, interval=10)
    got = _run(ev, [(500, 520, (MEMBER,)), (490, 540, (MEMBER,)), (530, 560, (MEMBER,)),
                    (550, 570, (MEMBER,))])
    assert got == ["ok"] * 4


def test_a_members_commit_landing_late_is_no_rewind() -> None:
    """The fleet's KIP-848 groups under a slow coordinator: the broker acknowledged a
    member's commit of 177 after its commit of 227, and the later commits climbed back
    through the retried ones; no record was delivered twice (the consumer's own log)."""
    ev = Evaluator("c", TH, interval=10)
    got = _run(ev, [(100, 110, (MEMBER,)), (150, 160, (MEMBER,)), (200, 210, (MEMBER,)),
                    (227, 260, (MEMBER,)), (177, 300, (MEMBER,)), (190, 330, (MEMBER,)),
                    (215, 350, (MEMBER,)), (260, 370, (MEMBER,)), (380, 390, (MEMBER,))])
    assert got == ["ok"] * 9


def test_a_member_seeking_back_further_than_a_minute_is_rewind() -> None:
    """A consumer that seeks back and commits there, below where its group stood a minute
    and more ago, rewinds even though it owns the partition."""
    ev = Evaluator("c", TH, interval=10)
    steps = [(100 * i, 100 * i + 10, (MEMBER,)) for i in range(15)]  # 140 s of commits
    steps += [(450, 1500, (MEMBER,)), (460, 1510, (MEMBER,)), (470, 1520, (MEMBER,))]
    got = _run(ev, steps)
    assert got[:16] == ["ok"] * 16 and got[16:] == ["rewind"] * 2


OTHER = Member(member_id="m-2", client_id="billing-8", host="/10.0.0.6", assignment=(TP,))


def _every_3s(steps: list[tuple[int, int, Member]]) -> list[str]:
    """Statuses of (committed, HW, owner) samples taken every 3 s (the fleet's interval)."""
    ev = Evaluator("c", Thresholds(stall_after=30, livelock_after=30, lag_seconds=600, window=600,
                                   report_stale_after=30), interval=3)
    return [ev.evaluate(_snap(T0 + 3 * i, c, hw, (m,))).groups["g"].status
            for i, (c, hw, m) in enumerate(steps)]


def test_a_new_owner_committing_the_old_owners_tail_is_not_lagging() -> None:
    """A group scaling in on a quiet topic (the fleet's coop-scale-tail read `lagging` for
    one cycle): the old owner read a burst and committed in batches, leaving its tail
    uncommitted; the new owner re-reads it and commits part of it 40 s later, at that old
    tail's age. Lag seconds grew from commit to commit, but across two consumers."""
    steps = [(0, 0, MEMBER), (1, 17, MEMBER), (1, 41, MEMBER), (1, 65, MEMBER), (42, 65, MEMBER)]
    steps += [(42, 69, MEMBER)] * 11 + [(42, 69, OTHER)] + [(58, 69, OTHER)] * 4
    assert _every_3s(steps) == ["ok"] * len(steps)


def test_a_clumpy_producers_last_clump_after_a_commit_is_a_tail_not_new_data() -> None:
    """Records were arriving as the consumer committed (HW 53 -> 63), one cycle passed
    without records, then the burst's last clump (HW 93): the consumer read it and commits
    with the next records. A pause of one cycle inside a burst is not the end of one."""
    steps = [(0, 0, MEMBER), (1, 11, MEMBER), (1, 53, MEMBER), (54, 63, MEMBER), (54, 63, MEMBER)]
    steps += [(54, 93, MEMBER)] * 25
    assert _every_3s(steps) == ["ok"] * len(steps)


def test_a_stuck_consumer_is_stalled_through_a_clumpy_producers_pauses() -> None:
    """The same picture with the clumps still coming (pauses of one cycle): stalled once the
    records have kept coming for stall_after after the commit."""
    steps = [(0, 0, MEMBER), (1, 11, MEMBER), (1, 53, MEMBER), (54, 63, MEMBER)]
    hw = 63
    for i in range(16):
        hw += 20 if i % 2 else 0  # a clump every other cycle
        steps.append((54, hw, MEMBER))
    got = _every_3s(steps)
    assert got[:12] == ["ok"] * 12 and got[-4:] == ["stalled"] * 4, got


def test_a_members_first_commit_landing_late_in_lagwatchs_first_minute_is_no_rewind() -> None:
    """The fleet's KIP-848 start: lagwatch first saw the partition at 150; 15 s later the
    broker acknowledged the member's very first commit (1) after its later ones."""
    steps = [(150, 200, MEMBER), (170, 210, MEMBER), (176, 220, MEMBER), (1, 230, MEMBER),
             (158, 240, MEMBER), (200, 250, MEMBER), (240, 260, MEMBER)]
    assert _every_3s(steps) == ["ok"] * len(steps)


def test_slow_consumer_is_lagging_when_lag_grows_while_committing() -> None:
    ev = Evaluator("c", TH, interval=1)
    got = []
    for i in range(8):  # produce 100/s, consume 20/s
        v = ev.evaluate(_snap(T0 + i, 20 * i, 100 * i + 100, (MEMBER,)))
        got.append(v.groups["g"].status)
    assert "lagging" in got[:5], got
    assert got[-1] == "lagging"


def test_lagging_ends_when_records_stop_arriving() -> None:
    """A lag that only ages (no record arrived for half of stall_after) is not growing."""
    ev = Evaluator("c", TH, interval=1)
    got = [ev.evaluate(_snap(T0 + i, 20 * i, 100 * i + 100, (MEMBER,))).groups["g"].status
           for i in range(8)]
    assert got[-1] == "lagging"
    got = [ev.evaluate(_snap(T0 + i, 140, 800, (MEMBER,))).groups["g"].status for i in range(8, 26)]
    # the last record arrived at 7 s: still lagging up to 21 s, ok from 22 s (15 s quiet)
    assert got == ["lagging"] * 14 + ["ok"] * 4, got


# the scenario tests' thresholds (stall_after 8 s), at 1 s cycles
TH_8S = Thresholds(stall_after=8, livelock_after=8, lag_seconds=600, window=300, report_stale_after=30)


def _slow_consumer(pauses: set[int], cycles: int) -> list[str]:
    """A consumer reading 4 records/s of 20/s, committing every record, sampled every
    second; the producer pauses at the given cycles (stall_after 8 s, as in the tests)."""
    ev = Evaluator("c", TH_8S, interval=1)
    hw, out = 0, []
    for i in range(cycles):
        hw += 0 if i in pauses else 20
        out.append(ev.evaluate(_snap(T0 + i, 4 * i, hw, (MEMBER,))).groups["g"].status)
    return out


def test_a_slow_consumer_stays_lagging_through_a_producers_pause() -> None:
    """A producer's pause of one or two cycles shrinks the offsets, and reading past that
    pause later shrinks the lag seconds: neither ends a slow consumer's `lagging`."""
    got = _slow_consumer({20, 21}, 110)
    assert got[:3] == ["ok"] * 3 and got[3:] == ["lagging"] * 107, \
        [i for i, s in enumerate(got) if s != "lagging"]


def test_lagging_ends_once_the_producer_paused_for_half_of_stall_after() -> None:
    got = _slow_consumer(set(range(20, 25)), 30)
    assert got[3:23] == ["lagging"] * 20 and got[23] == "ok", got  # quiet since 19 s


def test_lagging_ends_when_the_consumer_catches_up() -> None:
    """Faster than the producer: the lag shrinks in seconds and in offsets."""
    ev = Evaluator("c", TH_8S, interval=1)
    got, committed = [], 0
    for i in range(40):
        committed += 4 if i < 20 else 40
        got.append(ev.evaluate(_snap(T0 + i, committed, 20 * (i + 1), (MEMBER,))).groups["g"].status)
    assert got[19] == "lagging" and got[20] == "ok", got


def test_spark_hung_batch_is_livelocked_and_terminated_query_stopped() -> None:
    th = TH
    ev = Evaluator("c", th, interval=10)

    def rep(now: float, event: str, batch_started: float | None) -> SparkReport:
        return SparkReport("q", "qid", "rid", "q", sent_at=now, event=event, batch_id=7,
                           batch_started=batch_started, last_progress=T0, batch_duration_ms=900.0,
                           input_rows_per_second=10.0, processed_rows_per_second=12.0, interval=5,
                           end_offsets={TP: 150}, latest_offsets={TP: 160}, exception=None,
                           received_at=now)

    snap = Snapshot(cluster="c", taken_at=T0 + 30, duration=0.01, partitions={TP: _offsets(1, 400)},
                    groups={})
    v = ev.evaluate(snap, spark_reports={"q": rep(T0 + 30, "heartbeat", T0)})
    g = v.groups["q"]
    assert g.type == "spark" and g.status == "livelocked"
    assert "has been running for 30 seconds" in g.reasons[0]
    snap = Snapshot(cluster="c", taken_at=T0 + 40, duration=0.01, partitions=snap.partitions, groups={})
    v = ev.evaluate(snap, spark_reports={"q": rep(T0 + 40, "terminated", None)})
    assert v.groups["q"].status == "stopped"


def test_unreadable_group_keeps_last_values_then_turns_error() -> None:
    """A coordinator failover makes a group unreadable for a few cycles: its last judgement
    stands for UNREADABLE_GRACE_CYCLES cycles (4), then it is `error`, values kept."""
    ev = Evaluator("c", TH, interval=20)
    ev.evaluate(_snap(T0, 100, 150, (MEMBER,)))

    def bad(i: int) -> Snapshot:
        return Snapshot(cluster="c", taken_at=T0 + 20 * i, duration=0.01,
                        partitions={TP: _offsets(3, 160)},
                        groups={"g": GroupSample(group_id="g", type="classic", state="unknown",
                                                 error="offset fetch: timed out")})
    got = [ev.evaluate(bad(i)).groups["g"] for i in range(1, 6)]
    assert [g.status for g in got] == ["ok"] * 4 + ["error"]
    assert "timed out (last values kept)" in got[0].reasons[-1]
    assert "timed out" in got[-1].reasons[0]
    assert got[-1].partitions[0].committed == 100  # what we knew is not lost
    # readable again: judged afresh, and a later failure gets its grace again
    assert ev.evaluate(_snap(T0 + 120, 110, 170, (MEMBER,))).groups["g"].status == "ok"
    assert ev.evaluate(bad(7)).groups["g"].status == "ok"


def test_unreadable_grace_is_at_least_a_coordinator_failover() -> None:
    """At a short interval the grace is UNREADABLE_GRACE_SECONDS (60 s), not 4 cycles: a
    SIGKILLed coordinator's groups stay unreadable for 20-30 s while the controller fences
    its broker and the new coordinator loads the offsets."""
    ev = Evaluator("c", TH, interval=2)
    ev.evaluate(_snap(T0, 100, 150, (MEMBER,)))

    def bad(t: float) -> Snapshot:
        return Snapshot(cluster="c", taken_at=T0 + t, duration=0.01,
                        partitions={TP: _offsets(3, 160)},
                        groups={"g": GroupSample(group_id="g", type="classic", state="unknown",
                                                 error="offset fetch: NOT_COORDINATOR")})
    got = [ev.evaluate(bad(t)).groups["g"].status for t in range(2, 64, 2)]
    # unreadable from t=2: ok while less than 60 s have passed (t < 62), then error
    assert got == ["ok"] * 30 + ["error"], got


def _unread_hw(snap: Snapshot) -> Snapshot:
    """``snap`` as a cycle whose ListOffsets failed: the partitions known, their offsets not."""
    return dataclasses.replace(snap, partitions={tp: dataclasses.replace(
        po, log_start=None, hw=None, lso=None, leo=None) for tp, po in snap.partitions.items()})


def test_a_stalled_partition_stays_stalled_while_its_hw_cannot_be_read_then_is_error() -> None:
    """A failed ListOffsets (or a leaderless partition while its broker restarts) must not
    turn a stalled group `ok` for the cycle: the last HW stands in for the grace (60 s at
    10 s cycles), lag and stall going on from it; past the grace the partition is `error`;
    read again, it is stalled again, its stall counted through the gap."""
    ev = Evaluator("c", TH, interval=10)
    steps = [(100 + 10 * i, 110 + 10 * i, (MEMBER,)) for i in range(3)]
    steps += [(120, 130 + 10 * i, (MEMBER,)) for i in range(5)]  # frozen from t=20, lag growing
    assert _run(ev, steps)[-1] == "stalled"
    t = T0 + 10 * len(steps)  # t=80; last HW read 170, at t=70
    views = [ev.evaluate(_unread_hw(_snap(t + 10 * i, 120, 999, (MEMBER,)))) for i in range(8)]
    got = [(v.groups["g"].status, v.groups["g"].partitions[0].lag_offsets) for v in views]
    # unread from t=80: the last reading stands while less than 60 s have passed (t < 140)
    assert got == [("stalled", 50)] * 6 + [("error", None)] * 2, got
    assert views[0].partitions[TP].hw == 170  # the series stand at the last reading too
    assert [v.groups["g"].partitions[0].stalled_seconds for v in views[:6]] == [60, 70, 80, 90, 100, 110]
    assert "orders[3]: high watermark not read for 60s" in views[6].groups["g"].reasons[0]
    assert TP not in views[6].partitions or views[6].partitions[TP].hw is None
    v = ev.evaluate(_snap(t + 80, 120, 260, (MEMBER,)))
    p = v.groups["g"].partitions[0]
    assert (v.groups["g"].status, p.lag_offsets, p.stalled_seconds) == ("stalled", 140, 140)


def test_a_hw_never_read_is_unknown_lag_then_error() -> None:
    """Nothing to stand in for a HW never read: its lag is unknown (the partition has no
    lag series), the partition `ok` within the grace and `error` past it."""
    ev = Evaluator("c", TH, interval=10)
    views = [ev.evaluate(_unread_hw(_snap(T0 + 10 * i, 100, 150, (MEMBER,)))) for i in range(8)]
    got = [(v.groups["g"].status, v.groups["g"].partitions[0].lag_offsets) for v in views]
    assert got == [("ok", None)] * 6 + [("error", None)] * 2, got
    assert ev.evaluate(_snap(T0 + 80, 100, 150, (MEMBER,))).groups["g"].partitions[0].lag_offsets == 50


def test_a_cycle_that_read_every_hw_is_not_copied() -> None:
    """Standing in costs nothing while every HW is read: the snapshot's map is used as is."""
    ev = Evaluator("c", TH, interval=10)
    snap = _snap(T0, 100, 150, (MEMBER,))
    assert ev.evaluate(snap).partitions is snap.partitions
    assert not ev.unread.since


def test_cardinality_cap_keeps_worst_groups() -> None:
    ev = Evaluator("c", TH, interval=10, max_group_partitions=1)
    parts = {TP: _offsets(1, 100)}
    snap = Snapshot(cluster="c", taken_at=T0, duration=0.01, partitions=parts, groups={
        "a-ok": GroupSample(group_id="a-ok", type="classic", state="empty", coordinator=1,
                            committed={TP: 100}),
        "z-stopped": GroupSample(group_id="z-stopped", type="classic", state="empty", coordinator=1,
                                 committed={TP: 10}),
    })
    ev.evaluate(snap)
    v = ev.evaluate(Snapshot(cluster="c", taken_at=T0 + 10, duration=0.01, partitions=parts,
                                groups=snap.groups))
    assert list(v.groups) == ["z-stopped"] and v.dropped_group_partitions == 1


@pytest.mark.unit
def test_share_group_follows_the_brokers_lag_not_its_lazily_persisted_start_offset() -> None:
    """A share group's start offset can stay at 0 while every record is acknowledged (the
    coordinator persists it lazily): progress is HW - reported lag. A healthy queue stays ok;
    one whose consumer stopped acknowledging is stalled; released records are no rewind."""
    ev = Evaluator("c", TH, interval=10)

    def share(t: float, hw: int, lag: int) -> str:
        snap = Snapshot(cluster="c", taken_at=t, duration=0.01, partitions={TP: _offsets(1, hw)},
                        groups={"q": GroupSample(group_id="q", type="share", state="stable",
                                                 members=(MEMBER,), committed={TP: 0},
                                                 reported_lag={TP: lag}, epoch=4)})
        v = ev.evaluate(snap).groups["q"]
        assert v.partitions[0].committed == 0  # the start offset, as the broker reports it
        return f"{v.status}:{v.partitions[0].lag_offsets}"

    healthy = [share(T0 + 10 * i, 100 * (i + 1), 5) for i in range(6)]  # acknowledges all but 5
    assert healthy == ["ok:5"] * 6
    wedged = [share(T0 + 60 + 10 * i, 700 + 20 * i, 5 + 20 * i) for i in range(5)]  # nothing acked
    assert wedged[:3] == ["ok:5", "ok:25", "ok:45"] and wedged[4] == "stalled:85", wedged
    assert share(T0 + 110, 800, 200) == "stalled:200"  # locks expired, records back: no rewind


@pytest.mark.unit
def test_share_partition_waiting_its_turn_is_not_stalled_while_the_queue_progresses() -> None:
    """Members of a share group fetch from every partition, and under a backlog a fetch is
    served by one partition at a time in rotation: a partition can wait longer than
    ``stall_after`` for its turn while the group acknowledges records elsewhere. Not stuck;
    once no partition progresses for ``stall_after``, every lagging partition is stalled."""
    ev = Evaluator("c", TH, interval=10)
    a, b = ("jobs", 0), ("jobs", 1)
    member = Member(member_id="m-1", client_id="worker-1", host="/10.0.0.7", assignment=(a, b))

    def cycle(i: int, acked: dict[tuple[str, int], int]) -> dict[int, str]:
        hw = 1000 + 50 * i  # records keep arriving on both partitions
        snap = Snapshot(cluster="c", taken_at=T0 + 10 * i, duration=0.01,
                        partitions={tp: _offsets(1, hw) for tp in (a, b)},
                        groups={"q": GroupSample(group_id="q", type="share", state="stable",
                                                 members=(member,), committed={a: 0, b: 0},
                                                 reported_lag={tp: hw - acked[tp] for tp in (a, b)},
                                                 epoch=3)})
        return {p.partition: p.status for p in ev.evaluate(snap).groups["q"].partitions}

    acked = {a: 950, b: 950}
    turns = []
    for i in range(12):  # partition 0 is served for 40 s, then partition 1 for 40 s, ...
        served = a if (i // 4) % 2 == 0 else b
        acked[served] = min(1000 + 50 * i, acked[served] + 100)  # keeping up on average
        turns.append(cycle(i, acked))
    assert all(s == {0: "ok", 1: "ok"} for s in turns), turns  # each waits 40 s > stall_after
    frozen = [cycle(12 + i, acked) for i in range(5)]  # the queue stops: nothing acknowledged
    assert frozen[1] == {0: "ok", 1: "ok"} and frozen[4] == {0: "stalled", 1: "stalled"}, frozen


@pytest.mark.unit
def test_wedged_share_group_is_stalled_although_the_brokers_lag_trails_our_hw() -> None:
    """The broker computes a share group's lag against its HW when it answers, before our
    HW sample of the same cycle: with records arriving, ``HW - lag`` creeps up although
    nothing is acknowledged. A wedged queue must still be stalled after ``stall_after``, and
    never read as committing; a healthy one under the same skew stays ok."""
    ev = Evaluator("c", TH, interval=10)

    def cycle(i: int, acked: int, skew: int = 30) -> tuple[str, str]:
        hw = 1000 + 50 * i
        lag = (hw - skew) - acked  # the broker's HW was ``skew`` records behind ours
        snap = Snapshot(cluster="c", taken_at=T0 + 10 * i, duration=0.01, partitions={TP: _offsets(1, hw)},
                        groups={"q": GroupSample(group_id="q", type="share", state="stable",
                                                 members=(MEMBER,), committed={TP: 0},
                                                 reported_lag={TP: lag}, epoch=2)})
        v = ev.evaluate(snap).groups["q"]
        return v.status, v.reasons[0] if v.reasons else ""

    # keeps up, 40 records behind; the skew varies between samples
    healthy = [cycle(i, 1000 + 50 * i - 40, (20, 10, 20, 10, 20)[i]) for i in range(5)]
    assert {st for st, _ in healthy} == {"ok"}, healthy
    # acknowledges nothing from now on; the skew keeps setting new highs (as records arrive
    # in bursts): HW - lag read at our HW would creep up and look like commits
    wedged = [cycle(5 + i, 1160, skew) for i, skew in enumerate((5, 12, 20, 30, 38, 45, 49))]
    assert [st for st, _ in wedged] == ["ok", "ok"] + ["stalled"] * 5, wedged
    assert all("frozen" in r for _, r in wedged[2:]), wedged


def test_lag_inputs_name_the_offsets_interpolation_cannot_place() -> None:
    """Exact mode wants every committed offset below the HW; interpolation only those older
    than the partition's HW history (or all of a partition with none yet), each once."""
    ev = Evaluator("c", TH, 10.0)
    first = Snapshot(cluster="c", taken_at=T0, duration=0.01, partitions={TP: _offsets(3, 100)},
                     groups={"a": GroupSample(group_id="a", type="classic", state="empty", members=(),
                                              coordinator=1, committed={TP: 40})})
    assert ev.lag_inputs(first, LagMode.INTERPOLATE) == [(TP, 40)]  # no history yet
    ev.evaluate(first, now=T0)  # the history starts at HW 100
    groups = {gid: GroupSample(group_id=gid, type="classic", state="empty", members=(), coordinator=1,
                               committed={TP: off})
              for gid, off in (("older", 99), ("same", 99), ("at_history", 100), ("newer", 120),
                               ("at_hw", 150))}
    snap = Snapshot(cluster="c", taken_at=T0 + 10, duration=0.01, partitions={TP: _offsets(3, 150)},
                    groups=groups)
    assert ev.lag_inputs(snap, LagMode.INTERPOLATE) == [(TP, 99)]
    assert ev.lag_inputs(snap, LagMode.EXACT) == [(TP, 99), (TP, 100), (TP, 120)]


def test_a_view_given_its_figures_keeps_every_other_field() -> None:
    """The evaluator's copy of a group view with its progress and rebalances carries every
    other field over (a field added to GroupView and not to the copy fails here)."""
    from exporter.contracts.view import GroupView, PartitionRows
    from exporter.evaluate.evaluator import _with_figures

    fields = [f.name for f in dataclasses.fields(GroupView)]
    given = {name: object() for name in fields}
    given["partitions"] = PartitionRows.of([])
    v = GroupView(**given)
    progress, rebalances = object(), object()
    out = _with_figures(v, progress, rebalances)  # type: ignore[arg-type]
    want = {**given, "progress": progress, "rebalances": rebalances}
    assert [name for name in fields if getattr(out, name) is not want[name]] == []
