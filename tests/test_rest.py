"""Groups at rest are skipped (exporter/evaluate/rest.py) and nothing served or judged changes.

Every recording of tests/recordings/ and a synthetic run of many groups (idle and moving
topics, groups with and without members, commits, rewinds, members joining and leaving,
unreadable groups and cycles, deleted groups) go through two evaluators: one that skips
groups at rest and one that never does. Every view of every cycle is equal, and so is the
memory of every group evaluated in a cycle (a group woken from rest has settled what its
skipped cycles moved). Each run also shows that groups were skipped, so the comparison
is not between two evaluators that never skip.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from exporter import recording
from exporter.config import Thresholds
from exporter.contracts.snapshot import GroupSample, GroupType, Member, PartitionOffsets, Snapshot
from exporter.evaluate import rest
from exporter.evaluate.evaluator import Evaluator
from exporter.evaluate.memory import PartitionMemory, settle_rest
from exporter.evaluate.rates import Points
from exporter.evaluate.rest import changed_topics

pytestmark = pytest.mark.unit

RECORDINGS = sorted((Path(__file__).resolve().parent / "recordings").glob("*.jsonl.xz"))


def _memory(ev: Evaluator, gid: str) -> tuple:
    """What the evaluator and its trackers remember of one group."""
    rec = ev.groups.get(gid)
    st, pm, rm = (None, None, None) if rec is None else (rec.memory, rec.rates, rec.rebalances)
    return (None if st is None else (st.parts, st.members, st.epoch, list(st.joins), st.uncommitted,
                                     st.outside_at, list(st.outside_gaps), st.acknowledged_at,
                                     st.seen, list(st.departed)),
            None if pm is None else ({tp: list(p) for tp, p in pm.parts.items()}, pm.counted,
                                     pm.lost, pm.lost_total),
            None if rm is None else (rm.total, rm.epoch, rm.members, list(rm.events)),
            list(() if rec is None or rec.gaps is None else rec.gaps))


def _compare(cycles, make) -> tuple[int, int, int, int]:  # noqa: ANN001
    """Feed (snapshot, reports, spark, exact_ts, now) cycles to a skipping and a never
    skipping evaluator; assert equal views and memories, and equal exported states in the
    cycle a group wakes (its memory settled) and every tenth; return the group-cycles
    skipped, the times a group woke from rest, the group-cycles skipped at rest
    ``stopped``, and the times a group's rates became known at rest (not woken)."""
    skip, full = make(True), make(False)
    skipped = woken = stopped = 0
    was: set[str] = set()
    for i, (snap, consumer, spark, exact_ts, now) in enumerate(cycles):
        a = skip.evaluate(snap, consumer, spark, exact_ts, now=now)
        b = full.evaluate(snap, consumer, spark, exact_ts, now=now)
        assert a == b, f"cycle {i}: the views differ"
        resting = skip.resting()
        skipped += sum(1 for r in resting.values() if r.last == now)
        stopped += sum(1 for r in resting.values() if r.last == now and r.clocks is not None)
        woke = {gid for gid in was if gid not in resting and gid in b.groups}
        woken += len(woke)
        was = set(resting) if snap.ok else was
        for gid in b.groups if snap.ok else ():
            if gid not in resting:  # evaluated this cycle, and not at rest: the same memory
                assert _memory(skip, gid) == _memory(full, gid), f"cycle {i}: {gid}'s memory differs"
                if gid in woke or i % 10 == 0:  # its saved state: as it woke, and now and then
                    assert skip.export_group(gid) == full.export_group(gid), f"cycle {i}: {gid}'s state"
    return skipped, woken, stopped, skip.known_at_rest


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name.split(".")[0])
def test_a_recording_replays_the_same_with_groups_skipped_at_rest(path: Path) -> None:
    rec = recording.load(path)
    head = rec.header

    def make(skip: bool) -> Evaluator:
        return Evaluator(head["cluster"], rec.thresholds, rec.interval, int(head["history_points"]),
                         int(head["max_group_partitions"]), rec.group_thresholds, skip_at_rest=skip)

    cycles = [(c.snap, c.consumer, c.spark, c.exact_ts, c.now) for c in rec.cycles]
    skipped, _woken, _stopped, _known = _compare(cycles, make)
    if path.name.startswith(("group-types", "membership.", "spark")):
        assert skipped > 0  # runs with groups idle for long enough


class _Run:
    """A synthetic cluster: topics idle or produced to, groups committing, resting, joining,
    leaving, rewinding; one cycle per :meth:`cycle`."""

    def __init__(self, seed: int, groups: int = 24, parts: int = 3, bursts: bool = False) -> None:
        self.rnd = random.Random(seed)
        self.parts = parts
        # bursts: the idle topics written now and then, which leaves the groups without
        # members behind and stopped for a while, and record timestamps read for two of
        # them (a read failing now and then), as the Kafka worker reads them
        self.bursts = bursts
        self.topics = [f"t{i}" for i in range(8)]
        self.hw = {(t, p): 1000 for t in self.topics for p in range(parts)}
        self.groups: dict[str, dict] = {}
        for g in range(groups):
            self.groups[f"g{g:03d}"] = self._new_group(g)

    def _new_group(self, g: int) -> dict:
        topic = self.topics[g % len(self.topics)]
        kind = (GroupType.CLASSIC, GroupType.CONSUMER)[g % 2]
        behind = g % 7 if self.bursts and g % 3 == 0 else 0  # left behind, nobody consuming
        return {"topic": topic, "type": kind, "members": g % 3 != 0, "epoch": 1,
                "committed": {(topic, p): 1000 - behind for p in range(self.parts)}, "gen": 0}

    def _step(self, i: int, interval: float) -> None:
        rnd = self.rnd
        for t in self.topics[:3]:  # three produced topics, now and then
            if rnd.random() < 0.1:
                tp = (t, rnd.randrange(self.parts))
                self.hw[tp] += rnd.randint(1, 5)
        for t in self.topics[3:] if self.bursts else ():
            if rnd.random() < interval / 3000:  # about once an hour a topic
                for p in range(self.parts):
                    self.hw[t, p] += rnd.randint(0, 4)
        for g in self.groups.values():
            r = rnd.random()
            if r < 0.004:  # catch up
                g["committed"] = {tp: self.hw[tp] for tp in g["committed"]}
            elif r < 0.005:  # a rewind, or a late commit landing
                tp = next(iter(g["committed"]))
                g["committed"] = {**g["committed"], tp: max(0, g["committed"][tp] - rnd.randint(1, 3))}
            elif r < 0.006:  # a member joins or leaves
                g["members"] = not g["members"]
                g["epoch"] += 1
                g["gen"] += 1
        if i % 97 == 50:  # a group deleted and recreated
            gid = rnd.choice(sorted(self.groups))
            self.groups[gid] = self._new_group(int(gid[1:]))

    def _sample(self, gid: str, g: dict) -> GroupSample:
        if self.rnd.random() < 0.002:
            return GroupSample(group_id=gid, type=g["type"], state="unknown",
                               error="COORDINATOR_NOT_AVAILABLE")
        members = ()
        if g["members"]:
            members = (Member(member_id=f"{gid}-m{g['gen']}", client_id="c", host="/10.0.0.1",
                              assignment=tuple(sorted(g["committed"]))),)
        epoch = g["epoch"] if g["type"] == GroupType.CONSUMER else None
        return GroupSample(group_id=gid, type=g["type"], state="stable" if members else "empty",
                           members=members, committed=dict(g["committed"]), epoch=epoch)

    def cycle(self, i: int, now: float, interval: float = 1.0) -> tuple:
        self._step(i, interval)
        ok = self.rnd.random() > 0.005
        parts = {tp: PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0, hw=hw, leo=hw)
                 for tp, hw in self.hw.items()}
        snap = Snapshot(cluster="syn", taken_at=now, duration=0.1, partitions=parts if ok else {},
                        groups={gid: self._sample(gid, g) for gid, g in self.groups.items()} if ok else {},
                        ok=ok)
        exact: dict[tuple[str, int, int], float] = {}
        if self.bursts and self.rnd.random() > 0.05:
            exact = {(t, p, c): 1_767_225_000.0 + c for g in self.groups.values()
                     for (t, p), c in g["committed"].items() if t in ("t3", "t4") and c < self.hw[t, p]}
        return snap, {}, {}, exact, now


@pytest.mark.parametrize(("seed", "interval", "cycles"), [(1, 1.0, 800), (2, 7.0, 300), (3, 15.0, 200)])
def test_a_synthetic_cluster_runs_the_same_with_groups_skipped_at_rest(seed: int, interval: float,
                                                                        cycles: int) -> None:
    run = _Run(seed)
    th = Thresholds(stall_after=30, livelock_after=30, lag_seconds=600, window=600, report_stale_after=30)
    rnd = random.Random(seed)
    now, timeline = 1_767_225_600.0, []
    for i in range(cycles):
        now += interval * rnd.uniform(0.9, 1.3)  # cycles are never evenly spaced
        timeline.append(run.cycle(i, now))

    def make(skip: bool) -> Evaluator:
        return Evaluator("syn", th, interval, skip_at_rest=skip)

    skipped, woken, _stopped, known = _compare(timeline, make)
    assert skipped > cycles * len(run.groups) // 10  # the idle groups were skipped for a while
    assert woken >= 10  # and woke again, their memories then equal
    assert known >= 3  # their rates became known while they rested


@pytest.mark.parametrize(("seed", "interval", "cycles"), [(5, 1.0, 700), (6, 7.0, 300), (7, 15.0, 250)])
def test_groups_stopped_at_rest_run_the_same_with_their_clocks_moved(seed: int, interval: float,
                                                                     cycles: int) -> None:
    """Groups left behind with nobody owning their partitions rest ``stopped``: their lag
    and stalled seconds, their reasons' ages (last owners that left so long ago) and the
    span of their idle note move with time alone, as the evaluator that never skips
    writes them, through record timestamps read or not and rates becoming known."""
    run = _Run(seed, bursts=True)
    th = Thresholds(stall_after=30, livelock_after=30, lag_seconds=600, window=600, report_stale_after=30)
    rnd = random.Random(seed)
    now, timeline = 1_767_225_600.0, []
    for i in range(cycles):
        now += interval * rnd.uniform(0.9, 1.3)
        timeline.append(run.cycle(i, now, interval))

    def make(skip: bool) -> Evaluator:
        return Evaluator("syn", th, interval, skip_at_rest=skip)

    _skipped, woken, stopped, known = _compare(timeline, make)
    assert stopped > cycles // 2  # groups were skipped stopped
    assert woken >= 10
    assert known >= 3


def _rests(timeline: list[tuple], interval: float) -> list[list[tuple]]:
    """Each cycle's groups at rest, and what each rest holds, through a skipping evaluator."""
    th = Thresholds(stall_after=30, livelock_after=30, lag_seconds=600, window=600, report_stale_after=30)
    ev, out = Evaluator("syn", th, interval), []
    for snap, consumer, spark, exact_ts, now in timeline:
        ev.evaluate(snap, consumer, spark, exact_ts, now=now)
        out.append(sorted((gid, r.wake_at, r.keys, list(r.offsets), r.rates_known, sorted(r.floors),
                           [t.flat() for t in r.times], r.which) for gid, r in ev.resting().items()))
    return out


def test_a_rest_entered_from_columns_is_the_one_entered_partition_by_partition(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a group enters rest, and the rest it enters, decided from its memories'
    columns (no partition decoded) or one partition at a time: the same in every cycle of
    a synthetic run (members joining and leaving, rewinds, unreadable groups)."""
    run, rnd = _Run(4, groups=40), random.Random(4)
    now, timeline = 1_767_225_600.0, []
    for i in range(300):
        now += 5.0 * rnd.uniform(0.9, 1.3)
        timeline.append(run.cycle(i, now))
    taken = []
    in_columns = rest._in_columns
    monkeypatch.setattr(rest, "_in_columns", lambda *a: taken.append(in_columns(*a)) or taken[-1])
    from_columns = _rests(timeline, 5.0)
    assert sum(taken) > 100  # the columns' way was taken
    monkeypatch.setattr(rest, "_in_columns", lambda *a: False)
    assert _rests(timeline, 5.0) == from_columns


def test_settling_a_rest_is_the_rest_step_repeated() -> None:
    """``settle_rest`` for k cycles, with the floor rolled as often as ``floor_rolls``
    says, equals k rest steps (owned and unowned, past the 64 shared unowned counts)."""
    from exporter.evaluate.memory import floor_rolls, rest_step, rolled_floor

    for owned in (True, False):
        mem = rest_step(PartitionMemory.first(10, 0.0), owned, "m1" if owned else None, 1.0)
        stepped, at, rolls = mem, mem.floor.at, 0
        for k in range(1, 400):
            t = 1.0 + k * 0.7
            stepped = rest_step(stepped, owned, "m1" if owned else None, t)
            if floor_rolls(at, t):
                at, rolls = t, rolls + 1
            floor = rolled_floor(mem.floor, mem.followed, rolls, at)
            assert settle_rest(mem, k, t, floor) == stepped
        assert rolls > 2 and stepped.ownership.unowned == (0 if owned else 400)


def test_a_group_s_point_times_advance_as_each_partition_s_points() -> None:
    """One set of times at offsets 0, advanced each skipped cycle and filled with a
    partition's offsets, is that partition's points advanced with its constant offsets."""
    rnd = random.Random(5)
    pts = Points()
    t = 0.0
    while t < 200:
        t += rnd.uniform(5, 20)
        pts.add(t, 7, 9, 600.0)
    assert pts.constant(7, 9) and not pts.constant(7, 10)
    times = pts.filled(0, 0)
    for _ in range(300):  # past appends and the drops of a full window
        t += rnd.uniform(5, 20)
        pts.add(t, 7, 9, 600.0)
        times.add(t, 0, 0, 600.0)
        assert list(times.filled(7, 9)) == list(pts)
    assert times.times() == pts.times()


def test_changed_topics_names_moved_unknown_new_and_gone_partitions() -> None:
    def po(hw: int | None, ls: int = 0) -> PartitionOffsets:
        return PartitionOffsets(leader=1, replicas=1, isr=1, log_start=ls, hw=hw)

    before = {("a", 0): po(5), ("b", 0): po(5), ("c", 0): po(5), ("d", 0): po(5), ("e", 0): po(5)}
    now = {("a", 0): po(5), ("b", 0): po(6), ("c", 0): po(None), ("d", 0): po(5, 1), ("f", 0): po(5)}
    assert changed_topics(before, now) == {"b", "c", "d", "e", "f"}
    assert changed_topics(now, now) == {"c"}  # an unknown HW is never at rest
