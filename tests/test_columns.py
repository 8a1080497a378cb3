"""Judging partitions in columns (exporter/evaluate/columns.py) changes nothing served or
remembered: the oracle is the same evaluator judging every partition one at a time.

Every recording of tests/recordings/, the synthetic cluster of tests/test_rest.py and a
livelier one (every topic written, groups committing, lagging, stalling, stopping,
rebalancing, rewinding, unreadable, deleted, partitions added, unread HWs, uneven cycle
times) go through both; every view of every cycle is equal, and so is every group's
memory. Each run also shows that partitions were judged in columns, so the comparison is
not between two evaluators judging one at a time."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.footprint import live_snapshot, snapshot
from exporter import recording
from exporter.config import Thresholds
from exporter.contracts.snapshot import TP, GroupSample, GroupType, Member, PartitionOffsets, Snapshot
from exporter.contracts.status import Status
from exporter.contracts.view import PartitionRows, PartitionView
from exporter.evaluate.columns import COLUMN_RULES, Columns, PartitionTable, RowStep, alike_runs, first_rules
from exporter.evaluate.evaluator import Evaluator
from exporter.evaluate.memory import Floor, NewData, Ownership, PartitionMemory, Rewind, Run, Trend
from exporter.evaluate.rules import (
    NEEDS,
    RULES,
    PartitionFacts,
    broker_evidence,
    classify,
    evidence_text,
    status_of,
)
from tests.test_rest import _memory, _Run

pytestmark = pytest.mark.unit

RECORDINGS = sorted((Path(__file__).resolve().parent / "recordings").glob("*.jsonl.xz"))


def _compare(cycles, make, seen: set[Status | str] | None = None) -> tuple[int, int]:  # noqa: ANN001
    """Feed cycles to an evaluator judging in columns and one judging one partition at a
    time; assert equal views and memories; return the partitions judged in columns and the
    groups whose rate points stepped together with others' (summed over the cycles). The
    groups' statuses seen are added to ``seen``, and "lost" once a group lost records."""
    cols, one = make(True), make(False)
    in_columns = together = 0
    for i, (snap, consumer, spark, exact_ts, now) in enumerate(cycles):
        a = cols.evaluate(snap, consumer, spark, exact_ts, now=now)
        b = one.evaluate(snap, consumer, spark, exact_ts, now=now)
        assert a == b, f"cycle {i}: the views differ"
        if seen is not None:
            seen |= {v.status for v in b.groups.values()}
            seen |= {"lost" for v in b.groups.values() if v.progress and v.progress.records_lost_total}
        in_columns += cols.judged_in_columns
        together += cols.progress.stepped_together
        assert one.judged_in_columns == 0 and one.progress.stepped_together == 0
        cols_resting, one_resting = cols.resting(), one.resting()
        for gid in b.groups if snap.ok else ():
            if (gid in cols_resting) == (gid in one_resting):
                assert _memory(cols, gid) == _memory(one, gid), f"cycle {i}: {gid}'s memory differs"
            else:  # at rest stopped in columns only (its reasons are kept unwritten): settled
                assert cols.export_group(gid) == one.export_group(gid), f"cycle {i}: {gid}'s state differs"
    return in_columns, together


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name.split(".")[0])
def test_a_recording_replays_the_same_judged_in_columns(path: Path) -> None:
    rec = recording.load(path)
    head = rec.header

    def make(columns: bool) -> Evaluator:
        return Evaluator(head["cluster"], rec.thresholds, rec.interval, int(head["history_points"]),
                         int(head["max_group_partitions"]), rec.group_thresholds, columns=columns)

    in_columns, _ = _compare([(c.snap, c.consumer, c.spark, c.exact_ts, c.now) for c in rec.cycles], make)
    if not path.name.startswith(("spark", "jvm")):  # every group there reports or is a query
        assert in_columns > 0, path.name


def test_the_resting_cluster_of_test_rest_runs_the_same_judged_in_columns() -> None:
    run = _Run(1)
    th = Thresholds(stall_after=30, livelock_after=30, lag_seconds=600, window=600, report_stale_after=30)
    now, timeline = 1_767_225_600.0, []
    rnd = random.Random(1)
    for i in range(300):
        now += rnd.uniform(0.9, 1.3)
        timeline.append(run.cycle(i, now))
    in_columns, together = _compare(timeline, lambda columns: Evaluator("syn", th, 1.0, columns=columns))
    assert in_columns > 0 and together > 0


class _LiveRun:
    """A cluster in use: every topic written most cycles; groups of every kind of health
    (keeping up, slower than the producers, polling without committing, gone, committing
    from outside group membership), members moving between partitions, rewinds, late
    commits, unreadable groups, HWs not read, partitions added, groups deleted."""

    KINDS = ("keeps_up", "slow", "stalls", "stops", "outside", "batchy")

    def __init__(self, seed: int, groups: int = 30, parts: int = 4) -> None:
        self.rnd = random.Random(seed)
        self.topics = {f"t{i}": parts for i in range(6)}
        self.hw = {(t, p): 500 for t, n in self.topics.items() for p in range(n)}
        self.log_start: dict[TP, int] = {}
        self.retention = random.Random(seed + 100)  # its own stream: the fleet's is unchanged
        self.groups = {f"g{g:03d}": self._new_group(g) for g in range(groups)}

    def _new_group(self, g: int) -> dict:
        topic = f"t{g % len(self.topics)}"
        return {"topic": topic, "type": (GroupType.CLASSIC, GroupType.CONSUMER, GroupType.STREAMS)[g % 3],
                "kind": self.KINDS[g % len(self.KINDS)], "gen": 0, "epoch": 1,
                "committed": {(topic, p): 480 for p in range(self.topics[topic])}}

    def _produce(self, i: int) -> None:
        rnd = self.rnd
        for tp in self.hw:
            if rnd.random() < (0.9 if i % 40 < 30 else 0.1):  # now and then the producers pause
                self.hw[tp] += rnd.randint(1, 8)
        if i == 60:  # a topic grows a partition
            self.topics["t0"] += 1
            self.hw[("t0", self.topics["t0"] - 1)] = 0
        self._retain(i)

    def _retain(self, i: int) -> None:
        """Retention deletes records now and then, under slow and stopped groups too (losses),
        and a topic is recreated once (its log start falls below where losses were counted)."""
        rnd = self.retention
        for tp, hw in self.hw.items():
            if rnd.random() < 0.05:
                self.log_start[tp] = max(self.log_start.get(tp, 0), hw - rnd.randint(20, 200))
        if i == 120:  # its groups start again from the beginning (auto.offset.reset)
            for tp in [tp for tp in self.hw if tp[0] == "t2"]:
                self.hw[tp], self.log_start[tp] = 0, 0
            for g in self.groups.values():
                g["committed"] = {tp: 0 if tp[0] == "t2" else c for tp, c in g["committed"].items()}

    def _consume(self, g: dict, i: int) -> None:
        rnd, kind = self.rnd, g["kind"]
        topic = g["topic"]
        for p in range(self.topics[topic]):
            tp = (topic, p)
            at = g["committed"].get(tp)
            if kind in ("keeps_up", "outside") or (kind == "batchy" and i % 5 == 0):
                g["committed"][tp] = max(at or 0, self.hw[tp] - rnd.randint(0, 3))
            elif kind == "slow" and at is not None:
                g["committed"][tp] = min(self.hw[tp], at + rnd.randint(0, 4))
            elif kind == "stalls" and at is not None and i % 80 > 50:
                g["committed"][tp] = self.hw[tp]
        r = rnd.random()
        if r < 0.01:  # a rewind (an offset reset), or a late commit landing
            tp = next(iter(g["committed"]))
            g["committed"][tp] = max(0, g["committed"][tp] - rnd.randint(1, 30))
        elif r < 0.03:  # a rebalance: members change
            g["gen"] += 1
            g["epoch"] += 1
        elif r < 0.035:
            g["kind"] = rnd.choice(self.KINDS)

    def _sample(self, gid: str, g: dict) -> GroupSample:
        if self.rnd.random() < 0.01:
            return GroupSample(group_id=gid, type=g["type"], state="unknown",
                               error="COORDINATOR_NOT_AVAILABLE")
        tps = sorted(g["committed"])
        members: tuple[Member, ...] = ()
        if g["kind"] not in ("stops", "outside"):
            half = len(tps) // 2 + g["gen"] % 2
            members = tuple(Member(member_id=f"{gid}-m{g['gen']}-{k}", client_id=f"c{k}", host="/10.0.0.1",
                                   assignment=tuple(part)) for k, part in enumerate((tps[:half], tps[half:])))
        state = ("stable" if self.rnd.random() > 0.05 else "preparingrebalance") if members else "empty"
        epoch = g["epoch"] if g["type"] != GroupType.CLASSIC else None
        return GroupSample(group_id=gid, type=g["type"], state=state, members=members,
                           committed=dict(g["committed"]), epoch=epoch)

    def cycle(self, i: int, now: float) -> tuple:
        self._produce(i)
        for g in self.groups.values():
            self._consume(g, i)
        if i % 53 == 40:  # a group deleted and recreated
            gid = self.rnd.choice(sorted(self.groups))
            self.groups[gid] = self._new_group(int(gid[1:]))
        ok = self.rnd.random() > 0.01
        parts = {tp: PartitionOffsets(leader=1, replicas=1, isr=1, log_start=self.log_start.get(tp, 0),
                                      hw=None if self.rnd.random() < 0.01 else hw, leo=hw)
                 for tp, hw in self.hw.items()}
        snap = Snapshot(cluster="live", taken_at=now, duration=0.1, partitions=parts if ok else {},
                        groups={gid: self._sample(gid, g) for gid, g in self.groups.items()} if ok else {},
                        ok=ok)
        return snap, {}, {}, {}, now


@pytest.mark.parametrize(("seed", "interval", "cycles"), [(1, 1.0, 250), (2, 5.0, 200), (3, 15.0, 150)])
def test_a_cluster_in_use_runs_the_same_judged_in_columns(seed: int, interval: float, cycles: int) -> None:
    run = _LiveRun(seed)
    th = Thresholds(stall_after=20, livelock_after=20, lag_seconds=120, window=300, report_stale_after=20)
    rnd = random.Random(seed)
    now, timeline, statuses = 1_767_225_600.0, [], set[Status | str]()
    for i in range(cycles):
        now += interval * rnd.uniform(0.7, 1.6)  # cycles are never evenly spaced
        timeline.append(run.cycle(i, now))
    def make(columns: bool) -> Evaluator:
        return Evaluator("live", th, interval, columns=columns)

    in_columns, together = _compare(timeline, make, statuses)
    # the run shows every status a cluster without reports or Spark can show, and losses
    assert {Status.OK, Status.LAGGING, Status.STALLED, Status.STOPPED, Status.REWIND, "lost"} <= statuses
    assert in_columns > cycles * 30  # most partitions, most cycles
    assert together > cycles * 5  # and the rate points of many groups, stepped together


@pytest.mark.parametrize("live", [True, False], ids=["live", "behind"])
def test_the_benchmark_shapes_are_judged_in_columns(live: bool) -> None:
    th = Thresholds()
    cols, one = Evaluator("bench", th, 15.0), Evaluator("bench", th, 15.0, columns=False)
    for c in range(8):
        snap = snapshot(40, 10, c, 1_000_000.0 + 15 * c, live=live)
        assert cols.evaluate(snap) == one.evaluate(snap)
        assert cols.judged_in_columns == 400  # every partition of every cycle, the first too
    assert cols.progress.stepped_together == 40  # and every group's rate points, together
    assert live_snapshot(2, 2, 1, 0.0).groups  # the live shape has groups


def _first_shapes(cycle: int, t: float) -> Snapshot:
    """The benchmark's behind shape with what a new group's first figures can meet: a log
    start above some groups' committed offsets (records lost), and a second topic whose
    one partition's HW is unknown, read by one group."""
    snap = snapshot(6, 5, cycle, t)
    parts = dict(snap.partitions)
    tp1 = next(tp for tp in parts if tp[1] == 1)
    parts[tp1] = replace(parts[tp1], log_start=53)
    parts[("other", 0)] = PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0, hw=40, lso=40, leo=40)
    parts[("other", 1)] = PartitionOffsets(leader=1, replicas=1, isr=1)
    groups = dict(snap.groups)
    gid = sorted(groups)[1]
    groups[gid] = replace(groups[gid], committed={**groups[gid].committed, ("other", 0): 30, ("other", 1): 7})
    return replace(snap, partitions=parts, groups=groups)


def test_groups_new_to_the_tracker_take_their_first_figures_together() -> None:
    """A chunk's new groups start their rate points together; each figure equals the one
    taken a partition at a time, whether read over the chunk, per group (records lost) or
    alone (an offset not known)."""
    th = Thresholds()
    cols, one = Evaluator("bench", th, 15.0), Evaluator("bench", th, 15.0, columns=False)
    for c in range(4):
        snap = _first_shapes(c, 1_000_000.0 + 15 * c)
        assert cols.evaluate(snap) == one.evaluate(snap), f"cycle {c}"
        if c == 0:
            assert cols.progress.stepped_together >= 5, cols.progress.stepped_together
        for gid in snap.groups:
            assert _memory(cols, gid) == _memory(one, gid), f"cycle {c}: {gid}"


def test_a_partition_memory_is_kept_whole_in_its_row() -> None:
    table = PartitionTable()
    full = PartitionMemory(
        followed=41, changed_at=12.5, data=NewData(40, 11.0, 12.0, None, 10.5, 12.25),
        floor=Floor(-1, 41, 3.0), rewind=Rewind(19.0, 44), lag_since=None,
        trend=Trend(Run(1.0, None, 3, 2.5, 12.0, 41, 7.5, 50), True),
        ownership=Ownership("member-1", 2), above_from=8.0)
    bare = PartitionMemory.first(7, 100.0)
    table[("t", 1)], table[("t", 0)] = full, bare
    assert table[("t", 1)] == full and table[("t", 0)] == bare
    cols = Columns(*table.rows)
    assert cols.rewind_pending[0] == 44 and np.isnan(cols.rewind_pending[1])
    assert np.isnan(cols.run_n[1])  # no run: every element of it None
    assert table.aligned([("t", 0), ("t", 1)]) and table.tps == [("t", 0), ("t", 1)]
    assert table[("t", 1)] == full
    del table[("t", 0)]
    assert dict(table) == {("t", 1): full} and not table.aligned([("t", 0)])
    # a step of the rows drops the lookups' index (a group judged in columns keeps none
    # between cycles); the next lookup makes it again
    table[("t", 2)] = bare
    table.step(slice(0, 2), table.rows[:, ::-1].copy())
    assert table._index is None
    assert dict(table) == {("t", 1): bare, ("t", 2): full} and table._index is not None
    del table[("t", 1)]
    table[("t", 3)] = full
    assert list(table) == [("t", 2), ("t", 3)] and table[("t", 3)] == full == table[("t", 2)]


def test_partitions_seen_first_take_their_first_memory_in_their_rows() -> None:
    table = PartitionTable()
    table[("t", 5)] = PartitionMemory.first(3, 50.0)
    table.add_first([("t", 1), ("u", 0)], [9, 0], 60.0)
    assert dict(table) == {("t", 5): PartitionMemory.first(3, 50.0), ("t", 1): PartitionMemory.first(9, 60.0),
                           ("u", 0): PartitionMemory.first(0, 60.0)}


def test_rows_made_one_at_a_time_keep_the_keys_they_are_given() -> None:
    views = [PartitionView("t", p, 5, None, 1, 2.0, 0.0, Status.OK, "", "") for p in range(3)]
    keys = [("t", 0), ("t", 1), ("t", 2)]
    rows = PartitionRows.of(views, keys)
    assert rows.tps is keys and rows == PartitionRows.of(views) == views


def test_the_column_rules_are_the_table_s_rules_a_plain_row_can_meet() -> None:
    """first_rules mirrors RULES for rows without a Spark query or reports, committed and
    subscribed: the same rules in the same order (never_committed needs no committed
    offset), each status's evidence the brokers' alone."""
    assert tuple(name for name, _status, _p in RULES
                                 if name not in NEEDS and name != "never_committed") == COLUMN_RULES
    for rule in COLUMN_RULES:
        f = PartitionFacts(topic="t", partition=0, committed=1, hw=9, lag_offsets=8, lag_seconds=1.0,
                           stalled_seconds=0.0, frozen_seconds=0.0, lagging=False, rewinding=False,
                           owned=True, unowned_confirmed=False)
        assert broker_evidence(status_of(rule)) == evidence_text(rule, f)


def test_first_rules_agree_with_classify_at_every_threshold_s_edge() -> None:
    """Each row one fact away from a threshold (equal, just below, just above): the rule
    first_rules names is the one classify names for the same facts."""
    th = Thresholds(stall_after=30, lag_seconds=60, livelock_after=20)
    rows = []
    for stalled in (29.999, 30.0, 30.001):
        for nd in (None, 29.999, 30.0, 31.0):
            for lag_s in (59.999, 60.0, 60.001, None):
                for unowned, rewinding, lagging, rejoins, outside, allowance in (
                        (False, False, False, 0, False, 0.0), (True, False, False, 0, False, 0.0),
                        (True, False, False, 2, False, 0.0), (True, True, False, 0, False, 0.0),
                        (True, False, False, 0, True, 45.0), (False, False, True, 0, False, 0.0),
                        (False, False, False, 1, True, 30.0), (False, False, False, 3, False, 0.0)):
                    rows.append((stalled, nd, lag_s, unowned, rewinding, lagging, rejoins, outside,
                                 allowance))
    for stalled, nd, lag_s, unowned, rewinding, lagging, rejoins, outside, allowance in rows:
        step = RowStep(np.array([stalled]), np.array([np.nan if nd is None else nd]), np.array([rewinding]),
                       np.array([unowned]), np.array([lagging]))
        got = first_rules(step, np.array([np.nan if lag_s is None else lag_s]), np.array([rejoins]), outside,
                          allowance, th.stall_after, th.lag_seconds)[0]
        f = PartitionFacts(topic="t", partition=0, committed=1, hw=9, lag_offsets=8, lag_seconds=lag_s,
                           stalled_seconds=stalled, frozen_seconds=stalled, new_data_seconds=nd,
                           lagging=lagging, rewinding=rewinding, owned=not unowned,
                           unowned_confirmed=unowned, rejoins=rejoins, outside=outside,
                           stall_allowance=allowance)
        _status, rule = classify(f, th)
        assert (COLUMN_RULES[got] if got >= 0 else None) == rule, (stalled, nd, lag_s, unowned, rewinding,
                                                                   lagging, rejoins, outside, allowance)


def test_runs_alike_are_found_for_every_run_at_once() -> None:
    nan = np.nan
    # runs: [0, 1], [2], [3, 4, 5], [6, 7], [8, 9]
    starts = np.array([0, 2, 3, 6, 8])
    a = np.array([1.0, 1.0, 5.0, 2.0, 2.0, 2.0, nan, nan, 3.0, 3.0])
    b = np.array([0, 0, 9, 1, 1, 2, 4, 4, nan, 3.0])
    assert alike_runs(starts, a).tolist() == [True, True, True, True, True]
    assert alike_runs(starts, a, b).tolist() == [True, True, False, True, False]
    assert alike_runs(starts, np.array([True, True, False, True, True, True, False, True, False, False])
                      ).tolist() == [True, True, True, False, True]
    # each run against a direct comparison of its rows, on random runs with NaN
    rng = np.random.default_rng(3)
    for _ in range(50):
        sizes = rng.integers(1, 5, 8)
        starts = np.cumsum([0, *sizes[:-1]])
        col = rng.choice([0.0, 1.0, nan], int(sizes.sum()), p=[0.6, 0.2, 0.2])
        want = [len({"nan" if v != v else v for v in col[lo:lo + n].tolist()}) == 1
                for lo, n in zip(starts.tolist(), sizes.tolist(), strict=True)]
        assert alike_runs(starts, col).tolist() == want
