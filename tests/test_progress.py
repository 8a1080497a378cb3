"""Rates, time to catch up and records lost to retention (exporter/evaluate/{rates,retention,
progress}.py): pure functions as row tables, then the evaluator driven cycle by cycle."""

from __future__ import annotations

import numpy as np
import pytest

from exporter.config import Thresholds
from exporter.contracts.snapshot import GroupSample, Member, PartitionOffsets, Snapshot
from exporter.evaluate.evaluator import Evaluator
from exporter.evaluate.rates import (
    Points,
    RateTable,
    add_point,
    catchup_seconds,
    caught_up,
    common_rates,
    fmt_duration,
    min_span,
    rates,
    step_together,
)
from exporter.evaluate.retention import lost_step
from exporter.expose.render import render_cluster
from exporter.expose.scrape import body_of
from tests.support.exporter_proc import parse_metrics, value

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

T0 = 1_800_000_000.0


# -- rates.py ------------------------------------------------------------------------------

@pytest.mark.parametrize("lag, consume, produce, want", [
    (1200, 50.0, 20.0, 40.0),      # gains 30 records/s on 1200
    (1200, 20.0, 50.0, None),      # slower than production: never
    (1200, 20.0, 20.0, None),      # as fast as production: never
    (1200, 0.0, 0.0, None),        # nothing moves: never
    (0, 0.0, 0.0, 0.0),            # no lag: nothing to catch up
    (2**63, 1e-300, 0.0, None),    # would be +Inf: left out, never served
])
def test_catchup_seconds(lag: int, consume: float, produce: float, want: float | None) -> None:
    assert catchup_seconds(lag, consume, produce) == want


@pytest.mark.parametrize("lag, consume, settle, want", [
    (0, None, 60, True),       # no lag
    (50, 1.0, 60, True),       # less than a minute of consumption in flight
    (61, 1.0, 60, False),      # more than that: a backlog
    (50, None, 60, False),     # rate unknown: a backlog until shown otherwise
    (50, 0.0, 60, False),      # nothing consumed: a backlog
])
def test_caught_up(lag: int, consume: float | None, settle: float, want: bool) -> None:
    assert caught_up(lag, consume, settle) is want


def test_points_stay_few_and_span_the_window() -> None:
    pts: list = []
    for i in range(0, 1201):  # one sample per second for 20 minutes, window 10 minutes
        add_point(pts, (T0 + i, 10 * i, 30 * i), 600)
    assert len(pts) <= 12
    assert pts[-1] == (T0 + 1200, 12000, 36000)  # the newest sample is always kept
    assert 540 <= pts[-1][0] - pts[0][0] <= 600
    r = rates(pts, min_span(600, 1))
    assert r is not None and r.consume == pytest.approx(10) and r.produce == pytest.approx(30)


def test_rates_wait_for_a_quarter_window_and_restart_after_a_rewind() -> None:
    pts: list = []
    for i in range(0, 20):
        add_point(pts, (T0 + i, 5 * i, 10 * i), 60)
    assert min_span(60, 1) == 15
    assert rates(pts, 15) is not None
    add_point(pts, (T0 + 20, 3, 200), 60)  # committed offset moved backwards: a rewind
    assert pts == [(T0 + 20, 3, 200)]
    assert rates(pts, 15) is None
    assert min_span(600, 30) == 150 and min_span(60, 30) == 60 and min_span(10, 1) == 3


def test_summed_rates_use_a_span_common_to_the_partitions() -> None:
    # A consumer at 60 records/s drains partition 0 (1004 records, done at ~17 s), then
    # turns to partition 1, which has a committed offset only from 18 s on. Each own rate
    # (30/s over 33 s, 60/s over 15 s) sums to 90/s; over the common 15 s it is 60/s.
    p0: list = []
    p1: list = []
    for t in range(34):
        add_point(p0, (T0 + t, min(60 * t, 1004), 1000 + 10 * t), 60)
        if t >= 18:
            add_point(p1, (T0 + t, 34 + 60 * (t - 18), 1000 + 10 * t), 60)
    own = [rates(p, 15) for p in (p0, p1)]
    assert sum(r.consume for r in own if r) == pytest.approx(90, abs=1)
    both = common_rates([p0, p1], 15)
    assert both is not None and both.span == 15
    # within 5 %: partition 0's offset at 18 s is interpolated between points a tenth of
    # the window apart, across the moment it was drained
    assert both.consume == pytest.approx(60, rel=0.05) and both.produce == pytest.approx(20)
    assert common_rates([p0, p1[-2:]], 15) is None  # the common span is only 5 s


@pytest.mark.parametrize("seconds, text", [(12, "12 s"), (240, "4 min"), (9000, "2.5 h"),
                                           (3 * 86400, "3 days")])
def test_fmt_duration(seconds: float, text: str) -> None:
    assert fmt_duration(seconds) == text


# -- retention.py ----------------------------------------------------------------------------

@pytest.mark.parametrize("consumed, log_start, counted_to, first, want", [
    (60, 100, None, False, (40, 100)),    # log start passed the committed offset: 40 lost
    (60, 100, None, True, (0, 100)),      # already so at first sight: baseline, not counted
    (60, 130, 100, False, (30, 130)),     # more deleted, still not consumed: only the new 30
    (60, 100, 100, False, (0, 100)),      # nothing new: the counter stays
    (140, 150, 100, False, (10, 150)),    # consumed past the last loss, then lost again: 10
    (100, 50, None, False, (0, None)),    # deleted below the committed offset: nothing lost
    (100, 100, None, False, (0, None)),   # log start exactly at the committed offset
    (5, 20, 500, False, (15, 20)),        # log start went backwards: topic recreated, afresh
])
def test_lost_step(consumed: int, log_start: int, counted_to: int | None, first: bool,
                   want: tuple[int, int | None]) -> None:
    assert lost_step(consumed, log_start, counted_to, first) == want


# -- the evaluator, cycle by cycle -----------------------------------------------------------

TH = Thresholds(stall_after=30, livelock_after=20, lag_seconds=3600, window=60, report_stale_after=30)
MEMBER = Member(member_id="m-1", client_id="c", host="/h", assignment=(("t", 0), ("t", 1)))
# One member per partition: each has its own pace.
SPLIT = (Member(member_id="m-1", client_id="c1", host="/h1", assignment=(("t", 0),)),
         Member(member_id="m-2", client_id="c2", host="/h2", assignment=(("t", 1),)))


def _snap(t: float, parts: dict[int, tuple[int, int, int]], group: str = "g",
          members: tuple[Member, ...] = (MEMBER,)) -> Snapshot:
    """parts: partition -> (log start, HW, committed)."""
    po = {("t", p): PartitionOffsets(leader=1, replicas=1, isr=1, log_start=ls, hw=hw, lso=hw, leo=hw)
          for p, (ls, hw, _c) in parts.items()}
    g = GroupSample(group_id=group, type="classic", state="stable", members=members, coordinator=1,
                    committed={("t", p): c for p, (_ls, _hw, c) in parts.items()})
    return Snapshot(cluster="c", taken_at=t, duration=0.01, partitions=po, groups={group: g})


def _drive(consume: tuple[float, float], produce: tuple[float, float], backlog: int, seconds: int,
           members: tuple[Member, ...] = (MEMBER,)):
    """Two partitions, each starting ``backlog`` behind, consumed and produced at per-partition
    rates (records/s), one cycle a second. Returns the group's progress at each cycle."""
    ev = Evaluator("c", TH, interval=1.0)
    out = []
    for i in range(seconds + 1):
        parts = {p: (0, backlog + int(produce[p] * i), min(backlog + int(produce[p] * i),
                                                             int(consume[p] * i)))
                 for p in (0, 1)}
        out.append(ev.evaluate(_snap(T0 + i, parts, members=members)).groups["g"].progress)
    return out


def test_estimate_matches_the_arithmetic_and_counts_down() -> None:
    # 600 behind on each partition; consumes 30/s, produced 10/s per partition: 20/s gained
    # per partition, 40/s for the group: (1200 - 40 t) / 40 s left at t.
    prog = _drive((30, 30), (10, 10), 600, 40)
    assert all(p.catchup_seconds is None for p in prog[:15])  # until a quarter of the window
    at20 = prog[20]
    assert at20.consume_rate == pytest.approx(60) and at20.produce_rate == pytest.approx(20)
    assert at20.catchup_seconds == pytest.approx((1200 - 40 * 20) / 40, abs=0.2)  # 10 s left
    assert at20.partitions[("t", 0)].catchup_seconds == pytest.approx(10, abs=0.2)
    assert not at20.falling_behind
    assert at20.notes == ("caught up in about 10 s at current rates "
                          "(consumes 60.0 records/s, 20.0/s produced)",)
    assert prog[30].catchup_seconds is None and not prog[30].falling_behind  # caught up at t=30


def test_slower_consumer_falls_behind_with_no_estimate() -> None:
    prog = _drive((8, 8), (20, 20), 600, 30)
    last = prog[-1]
    assert last.catchup_seconds is None and last.falling_behind
    assert last.consume_rate == pytest.approx(16) and last.produce_rate == pytest.approx(40)
    assert last.notes[0].startswith("falling behind by 24.0 records/s")


def test_one_member_falling_behind_blocks_the_group_estimate() -> None:
    # Two members. Partition 0's gains fast, partition 1's loses: the group as a whole
    # gains (45 > 30), but it will never be caught up on partition 1.
    prog = _drive((40, 5), (10, 20), 1200, 30, SPLIT)
    last = prog[-1]
    assert last.consume_rate == pytest.approx(45) and last.produce_rate == pytest.approx(30)
    assert last.catchup_seconds is None and last.falling_behind
    assert last.partitions[("t", 1)].catchup_seconds is None
    assert last.partitions[("t", 0)].catchup_seconds == pytest.approx((1200 + 300 - 1200) / 30, abs=0.2)
    assert last.notes[0].startswith("c2@/h2 (m-2): falling behind by 15.0 records/s")
    # The same rates, one consumer owning both: its time moves to partition 1 once it has
    # caught up on partition 0, so the group does catch up, at the difference of the sums.
    one = _drive((40, 5), (10, 20), 1200, 30)[-1]
    assert one.catchup_seconds == pytest.approx((2 * 1200 + 30 * 30 - 45 * 30) / 15, abs=0.5)
    assert not one.falling_behind


def test_the_slowest_member_decides_when_the_group_has_caught_up() -> None:
    prog = _drive((30, 15), (10, 10), 600, 20, SPLIT)  # gains 20/s and 5/s on 600 each
    at20 = prog[20]
    assert at20.partitions[("t", 0)].catchup_seconds == pytest.approx((600 - 20 * 20) / 20, abs=0.2)
    assert at20.partitions[("t", 1)].catchup_seconds == pytest.approx((600 - 5 * 20) / 5, abs=0.2)
    assert at20.catchup_seconds == at20.partitions[("t", 1)].catchup_seconds


def test_a_consumer_draining_its_partitions_one_after_the_other() -> None:
    # librdkafka may hand one partition's whole backlog over before the next's: partition 1
    # gains nothing while partition 0 drains, yet the consumer catches up on both in
    # (total lag) / (consume - produce).
    ev = Evaluator("c", TH, interval=1.0)
    got = None
    for i in range(17):  # consumes 60/s: partition 0 until it is caught up (at 12 s), then 1
        hw = 600 + 10 * i
        done0 = min(hw, 60 * i)
        parts = {0: (0, hw, done0), 1: (0, hw, 60 * i - done0)}
        got = ev.evaluate(_snap(T0 + i, parts)).groups["g"].progress
    assert got is not None and not got.falling_behind
    assert got.partitions[("t", 1)].consume_rate == pytest.approx(200 / 16)  # slower than produced
    assert got.catchup_seconds == pytest.approx((2 * 760 - 960) / 40, abs=0.2)  # 14 s


def test_records_lost_count_only_new_losses() -> None:
    ev = Evaluator("c", TH, interval=1.0)
    steps = [  # partition -> (log start, HW, committed)
        {0: (0, 100, 60), 1: (0, 100, 100)},     # first sight
        {0: (100, 100, 60), 1: (50, 100, 100)},  # p0: 40 deleted unread; p1: below committed
        {0: (100, 100, 60), 1: (50, 100, 100)},  # nothing new
        {0: (130, 150, 60), 1: (50, 100, 100)},  # 30 more
        {0: (130, 150, 140), 1: (50, 100, 100)},  # the group moves past the log start
        {0: (150, 150, 140), 1: (50, 100, 100)},  # 10 more from where it stood
    ]
    got = []
    for i, parts in enumerate(steps):
        pr = ev.evaluate(_snap(T0 + i, parts)).groups["g"].progress
        got.append((pr.records_lost_total, pr.below_log_start, pr.partitions[("t", 0)].lost_total,
                    pr.partitions[("t", 1)].lost_total))
    assert got == [(0, 0, 0, 0), (40, 40, 40, 0), (40, 40, 40, 0), (70, 70, 70, 0), (70, 0, 70, 0),
                   (80, 10, 80, 0)]
    notes = ev.evaluate(_snap(T0 + 9, steps[-1])).groups["g"].progress.notes
    assert "t[0]: 10 records deleted by retention before the group read them " \
           "(committed 140 < log start 150)" in notes


@pytest.mark.parametrize("columns", [True, False], ids=["columns", "one-at-a-time"])
def test_one_record_deleted_unread_is_one_lost(columns: bool) -> None:
    # The log start passes the committed offset by one record: the smallest loss there is.
    ev = Evaluator("c", TH, interval=1.0, columns=columns)
    steps = [{0: (0, 100, 60), 1: (0, 100, 100)}, {0: (61, 100, 60), 1: (0, 100, 100)}]
    pr = [ev.evaluate(_snap(T0 + i, parts)).groups["g"].progress for i, parts in enumerate(steps)][-1]
    assert (pr.records_lost_total, pr.below_log_start, pr.partitions[("t", 0)].lost_total) == (1, 1, 1)


def test_retained_position_is_where_the_committed_offset_sits_in_the_retained_log() -> None:
    """The lowest (committed - log start) / (HW - log start) over the partitions with lag
    on a trimmed, non-empty log: what the near-retention alert reads."""
    ev = Evaluator("c", TH, interval=1.0)
    steps = (
        {0: (0, 100, 60), 1: (0, 100, 100)},      # never trimmed: no position
        {0: (40, 140, 90), 1: (20, 100, 100)},    # p0 half way; p1 no lag
        {0: (40, 140, 90), 1: (80, 100, 82)},     # p1 near the log start: 2 / 20
        {0: (100, 100, 90), 1: (80, 100, 82)},    # p0's log empty (HW = log start): skipped
        {0: (100, 150, 90), 1: (80, 100, 100)},   # p0 below the log start: negative
    )
    pos = [ev.evaluate(_snap(T0 + i, parts)).groups["g"].progress.retained_position
           for i, parts in enumerate(steps)]
    assert pos == [None, 0.5, 0.1, 0.1, -0.2]


def test_loss_before_first_sight_is_not_counted_but_named() -> None:
    ev = Evaluator("c", TH, interval=1.0)
    pr = ev.evaluate(_snap(T0, {0: (100, 150, 60)})).groups["g"].progress
    assert pr.records_lost_total == 0 and pr.below_log_start == 40
    assert any("40 records deleted by retention" in n for n in pr.notes)


@pytest.mark.parametrize("bounded", [False, True])
def test_a_loss_before_first_sight_is_served_at_once_and_never_counted(bounded: bool) -> None:
    """/metrics of each cycle: the gauge serves the 40 records already below the log start
    from the first cycle, the counter stays 0 until a new deletion passes the committed
    offset (30 more), and bounded mode serves both for the group."""
    ev = Evaluator("c", TH, interval=1.0)
    steps = [{0: (100, 150, 60), 1: (0, 150, 150)}] * 3 + [{0: (130, 150, 60), 1: (0, 150, 150)}]
    got = []
    for i, parts in enumerate(steps):
        fams = render_cluster(ev.evaluate(_snap(T0 + i, parts)), bounded=bounded)
        m = parse_metrics(body_of([c for _n, header, body in fams for c in (header, body)]).decode())
        got.append((value(m, "kafka_consumergroup_records_below_log_start", group="g", partition="0"),
                    value(m, "kafka_consumergroup_records_below_log_start", group="g", partition="1"),
                    value(m, "kafka_consumergroup_group_records_below_log_start", group="g"),
                    value(m, "kafka_consumergroup_records_lost_total", group="g")))
    assert got == [(40, None, 40, 0)] * 3 + [(70, None, 70, 30)]


def test_judgement_is_untouched_and_an_unreadable_group_keeps_its_figures() -> None:
    ev = Evaluator("c", TH, interval=1.0)
    v = ev.evaluate(_snap(T0, {0: (0, 100, 60)})).groups["g"]
    v = ev.evaluate(_snap(T0 + 1, {0: (100, 100, 60)})).groups["g"]
    assert v.progress is not None and v.progress.records_lost_total == 40
    assert not any("retention" in r for r in v.reasons)  # notes live beside the reasons
    offsets = _snap(T0, {0: (100, 100, 60)}).partitions
    unreadable = GroupSample(group_id="g", type="classic", state="unknown", error="timed out")
    bad = Snapshot(cluster="c", taken_at=T0 + 2, duration=0.01, partitions=offsets, groups={"g": unreadable})
    v2 = ev.evaluate(bad).groups["g"]
    assert v2.progress is not None and v2.progress.records_lost_total == 40
    ev.evaluate(Snapshot(cluster="c", taken_at=T0 + 3, duration=0.01, partitions={}, groups={}))
    assert "g" not in ev.groups  # deleted group: its memories gone, its rates with them


def test_a_topic_nobody_subscribes_to_loses_nothing_for_the_group() -> None:
    # The member subscribes to "t2" only: "t" is a topic the group moved away from.
    member = Member(member_id="m-1", client_id="c", host="/h", assignment=(("t2", 0),),
                    subscribed=("t2",))

    def snap(t: float, log_start: int) -> Snapshot:
        po = {("t", 0): PartitionOffsets(leader=1, replicas=1, isr=1, log_start=log_start, hw=100,
                                         lso=100, leo=100),
              ("t2", 0): PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0, hw=10, lso=10, leo=10)}
        g = GroupSample(group_id="g", type="classic", state="stable", members=(member,), coordinator=1,
                        committed={("t", 0): 60, ("t2", 0): 10})
        return Snapshot(cluster="c", taken_at=t, duration=0.01, partitions=po, groups={"g": g})
    ev = Evaluator("c", TH, interval=1.0)
    ev.evaluate(snap(T0, 0))
    v = ev.evaluate(snap(T0 + 1, 100)).groups["g"]
    assert [p.unsubscribed for p in v.partitions] == [True, False]
    assert v.progress is not None and v.progress.records_lost_total == 0 and v.progress.notes == ()


def test_a_group_standing_still_keeps_one_array_a_column_in_its_rate_table() -> None:
    """Points at offsets that did not move share the newest point's arrays (a stopped group
    keeps its lag for days: a full window's points held 30 MB of arrays at 100k); the
    points read the same as one Points per partition, added one at a time."""
    table, exact = RateTable(), {("t", 0): Points(), ("t", 1): Points()}
    table.start(list(exact))
    for c in range(60):
        t, consumed, hw = 1000.0 + 15 * c, [5, 7], [9, 9 + (c >= 50)]
        assert table.step(t, np.array(consumed, float), np.array(hw, float), 600.0)
        for i, points in enumerate(exact.values()):
            points.add(t, consumed[i], hw[i], 600.0)
    assert len(table.times) > 10  # a full window of points
    # never moved: one array of the oldest point's, one byte a partition between points
    steps = table.consumed.steps
    assert steps is not None and steps.dtype == np.uint8 and not steps.any()
    assert table.consumed.oldest is table.consumed.newest
    assert table.hw.steps is not None and int(table.hw.steps.any(axis=1).sum()) == 1  # moved once
    assert dict(table.items()) == exact
    # a lookup's row index lives until the next step: a table in use keeps none between cycles
    assert table._index is not None and table.step(2000.0, np.array([5.0, 7.0]), np.array([9.0, 10.0]), 600.0)
    assert table._index is None


@pytest.mark.parametrize("seed", range(4))
def test_a_rate_tables_points_read_back_exactly_whatever_the_increase(seed: int) -> None:
    """Increases between points kept in 1, 2 or 4 bytes a row, or as float64 past 2**32:
    every partition's points read back equal to one Points each, added one at a time,
    through steps that replace the newest point and drop the oldest."""
    rng = np.random.default_rng(seed)
    tps = [("t", p) for p in range(6)]
    table, exact = RateTable(), {tp: Points() for tp in tps}
    table.start(tps)
    consumed, hw = np.zeros(6), np.full(6, 2.0**52)
    t = 1000.0
    widths = set()
    for _ in range(80):
        t += float(rng.choice([5.0, 15.0, 40.0]))
        top = float(rng.choice([0, 200, 60_000, 4_000_000_000, 2.0**40]))
        consumed = consumed + rng.integers(0, top + 1, 6).astype(float)
        hw = hw + rng.integers(0, 300, 6).astype(float)
        assert table.step(t, consumed, hw, 600.0)
        for i, points in enumerate(exact.values()):
            points.add(t, int(consumed[i]), int(hw[i]), 600.0)
        if table.consumed.steps is not None:
            widths.add(table.consumed.steps.dtype)
        assert dict(table.items()) == exact
    assert dict(table.flat_items()) == {tp: p.flat() for tp, p in exact.items()}
    assert np.dtype(np.float64) in widths and widths & {np.dtype(t) for t in (np.uint8, np.uint16, np.uint32)}


@pytest.mark.parametrize("seed", range(4))
def test_tables_stepped_together_hold_what_each_stepped_alone_holds(seed: int) -> None:
    """step_together (tables at the same times, at once) against RateTable.step of each:
    the same points, the same arrays kept where a table stood still, the same widths of
    the increases (1, 2, 4 bytes or float64), and a table with a row moved backwards left
    as its own step leaves it (unchanged, False); it restarts, and steps with the tables at
    its times from then on, as the progress tracker groups them."""
    rng = np.random.default_rng(seed)
    sizes = [3, 1, 5, 2]
    tps = [[(f"t{k}", p) for p in range(n)] for k, n in enumerate(sizes)]
    together, alone = [RateTable() for _ in sizes], [RateTable() for _ in sizes]
    consumed = [np.full(n, 1000.0) for n in sizes]
    hw = [np.full(n, 2.0**40) for n in sizes]
    t, refused, kept, widths = 1000.0, 0, 0, set()
    for c in range(90):
        t += float(rng.choice([5.0, 15.0, 40.0]))
        was, hw_was = consumed[2][1], hw[0][0]
        for k, n in enumerate(sizes):
            if k == 1 and c % 7 == 0:
                continue  # stands still: its arrays stay
            top = float(rng.choice([0, 200, 60_000, 4_000_000_000, 2.0**40]))
            consumed[k] = consumed[k] + rng.integers(0, top + 1, n).astype(float)
            hw[k] = hw[k] + rng.integers(0, 300, n).astype(float)
        if c % 11 == 5:  # a rewind in the third table
            consumed[2] = consumed[2].copy()
            consumed[2][1] = was - 1
        if c % 13 == 7:  # an HW moved backwards in the first (a truncated log)
            hw[0] = hw[0].copy()
            hw[0][0] = hw_was - 1
        cohorts: dict[tuple[float, ...], list[int]] = {}
        for k, tb in enumerate(together):
            if not tb.times:  # its first point, alone (as the tracker does)
                for table in (tb, alone[k]):
                    table.start(tps[k])
                    assert table.step(t, consumed[k], hw[k], 600.0)
            else:
                cohorts.setdefault(tuple(tb.times), []).append(k)
        for ks in cohorts.values():
            before = [(together[k].consumed.newest, together[k].hw.newest) for k in ks]
            got = step_together([together[k] for k in ks], t, np.concatenate([consumed[k] for k in ks]),
                                np.concatenate([hw[k] for k in ks]), 600.0)
            want = [alone[k].step(t, consumed[k], hw[k], 600.0) for k in ks]
            assert got == want
            for k, ok, (c_was, h_was) in zip(ks, want, before, strict=True):
                a, b = together[k], alone[k]
                if not ok:  # unchanged; both restart at the next cycle
                    assert a.consumed.newest is c_was and a.hw.newest is h_was
                    refused += 1
                    a.start([]), b.start([])
                    a.times.clear(), b.times.clear()
                    continue
                assert a.times == b.times and dict(a.flat_items()) == dict(b.flat_items())
                if a.consumed.steps is not None:
                    assert b.consumed.steps is not None and a.consumed.steps.dtype == b.consumed.steps.dtype
                    widths.add(a.consumed.steps.dtype)
                if k == 1 and c % 7 == 0 and len(a.times) > 1:
                    assert a.consumed.newest is c_was  # stood still: the same array
                    kept += 1
    assert refused > 10 and kept > 0 and np.dtype(np.float64) in widths and np.dtype(np.uint8) in widths
