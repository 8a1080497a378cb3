"""The evaluator's memory as plain data (exporter/contracts/state.py) and back.

The one module that knows both how the evaluator keeps its memory and the state
contract: :meth:`Evaluator.export_group` / :meth:`Evaluator.import_group` and the topic
pair call these. A group at rest (exporter/evaluate/rest.py) is exported settled, as it
would be when woken; it is imported awake, and its first evaluation after the import
judges it as the rest would have (rest changes nothing that is judged or served).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Protocol

from exporter.config import Thresholds
from exporter.contracts.snapshot import TP, Member, PartitionOffsets
from exporter.contracts.state import (
    PartitionRow,
    RatesState,
    RebalanceState,
    SavedGroup,
    SavedTopic,
)
from exporter.contracts.view import ClusterView, GroupProgress, GroupRebalances, GroupView
from exporter.evaluate.cadence import new_gaps
from exporter.evaluate.columns import PartitionTable
from exporter.evaluate.constants import MAX_JOINS, OUTSIDE_GAPS
from exporter.evaluate.departures import MAX_DEPARTURES, Departure
from exporter.evaluate.group_memories import GroupMemories, MemoriesByGroup
from exporter.evaluate.lag import HwHistory
from exporter.evaluate.latest import Latest
from exporter.evaluate.memory import GroupMemory, PartitionMemory
from exporter.evaluate.progress import RatesMemory
from exporter.evaluate.rates import Points, RateTable
from exporter.evaluate.rebalances import MAX_EVENTS, RebalanceMemory
from exporter.evaluate.rest import settle
from exporter.evaluate.unread import UnreadOffsets
from exporter.state.plain import from_plain, to_plain


class Evaluator(Protocol):
    """What of an evaluator (exporter/evaluate/evaluator.py) this module reads and writes:
    named here, so that the evaluator imports this module and not the other way round."""

    cluster: str
    groups: MemoriesByGroup
    history_points: int
    hw_history: dict[TP, HwHistory]
    last_good: ClusterView | None
    unread: UnreadOffsets

    def thresholds_of(self, gid: str) -> Thresholds: ...


def _row(tp: TP, m: PartitionMemory) -> PartitionRow:
    """(topic, partition, *PARTITION_FIELDS): the memory's tuple with its Rewind and
    Ownership flattened."""
    return (tp[0], tp[1], *m[:11], *m[11], m[12], *m[13:22], *m[22], m[23])


def _table(rows: tuple[PartitionRow, ...]) -> PartitionTable:
    """The partition memory of restored rows, in the columns the evaluator judges in."""
    ordered = sorted(rows, key=lambda r: (r[0], r[1]))
    return PartitionTable.of_plain([(r[0], r[1]) for r in ordered], [r[2:] for r in ordered])


def _rows(parts: MutableMapping[TP, PartitionMemory]) -> tuple[PartitionRow, ...]:
    if isinstance(parts, PartitionTable):  # straight from the columns: no memory decoded
        return tuple((tp[0], tp[1], *v) for tp, v in zip(parts.tps, parts.plain(), strict=True))
    return tuple(_row(tp, m) for tp, m in parts.items())


def _flat_points(points: Mapping[TP, Points]) -> Iterator[tuple[TP, tuple[float, ...]]]:
    if isinstance(points, RateTable):  # straight from the columns: no Points built
        return points.flat_items()
    return ((tp, pts.flat()) for tp, pts in points.items())


def export_group(ev: Evaluator, gid: str) -> SavedGroup | None:
    rec = ev.groups.get(gid)
    if rec is None:
        return None
    st, pm, rm, r = rec.memory, rec.rates, rec.rebalances, rec.rest
    parts, points, last_view = st.parts, pm.parts if pm is not None else None, st.last_view
    if r is not None and pm is not None:  # settled on copies: the rest goes on as it was
        # (in columns when the group's memory is: nothing decoded a partition at a time)
        st2 = GroupMemory(parts=st.parts.copy() if isinstance(st.parts, PartitionTable) else dict(st.parts),
                          last_view=st.last_view)
        pm2 = RatesMemory(parts=RateTable() if isinstance(pm.parts, RateTable) and not len(pm.parts)
                          else dict(pm.parts))
        settle(r, st2, pm2)
        parts, points, last_view = st2.parts, pm2.parts, st2.last_view
    gaps = rec.gaps
    return SavedGroup(
        group=gid, members=tuple(sorted(st.members)), epoch=st.epoch, joins=tuple(st.joins),
        seen_once=st.seen_once, unreadable_since=st.unreadable_since,
        acknowledged_at=st.acknowledged_at, outside_at=st.outside_at,
        outside_gaps=tuple(st.outside_gaps),
        uncommitted=tuple((t, p, *v) for (t, p), v in st.uncommitted.items()),
        partitions=_rows(parts),
        commit_gaps=None if gaps is None else tuple(gaps),
        rebalances=None if rm is None else RebalanceState(
            broker=rm.broker, clients=rm.clients, total=rm.total, epoch=rm.epoch,
            members=None if rm.members is None else tuple(sorted(rm.members)),
            client_counts=tuple(rm.client_counts.items()), events=tuple(rm.events)),
        rates=None if pm is None or points is None else RatesState(
            points=tuple((t, p, flat) for (t, p), flat in _flat_points(points)),
            counted=tuple((t, p, n) for (t, p), n in pm.counted.items()),
            lost=tuple((t, p, n) for (t, p), n in pm.lost.items()), lost_total=pm.lost_total),
        last_view=None if last_view is None else to_plain(last_view),
        last_progress=None if pm is None or pm.last is None else to_plain(pm.last),
        last_rebalances=None if rm is None or rm.last is None else to_plain(rm.last),
        seen=tuple(to_plain(m) for m in st.seen.values()),
        departed=tuple(to_plain(d) for d in st.departed), committed_after=st.committed_after)


def import_group(ev: Evaluator, s: SavedGroup) -> None:
    """The group's memory replaced by ``s``; :class:`~exporter.state.plain.PlainError`
    (a ValueError) before anything changes when ``s`` does not fit."""
    view = None if s.last_view is None else from_plain(GroupView, s.last_view)
    progress = None if s.last_progress is None else from_plain(GroupProgress, s.last_progress)
    rebalances = None if s.last_rebalances is None else from_plain(GroupRebalances, s.last_rebalances)
    gid = s.group
    memory = GroupMemory(
        members=set(s.members), epoch=s.epoch, joins=Latest(s.joins, maxlen=MAX_JOINS),
        seen_once=s.seen_once, parts=_table(s.partitions),
        last_view=view, unreadable_since=s.unreadable_since, acknowledged_at=s.acknowledged_at,
        outside_at=s.outside_at, outside_gaps=Latest(s.outside_gaps, maxlen=OUTSIDE_GAPS),
        committed_after=s.committed_after,
        uncommitted={(u[0], u[1]): (u[2], u[3], u[4], u[5]) for u in s.uncommitted},
        seen={m.member_id: m for m in (from_plain(Member, v) for v in s.seen)},
        departed=Latest((from_plain(Departure, v) for v in s.departed), maxlen=MAX_DEPARTURES))
    rec = GroupMemories(memory, ev.thresholds_of(gid))  # replaces all the group's memories
    if s.commit_gaps is not None:
        rec.gaps = new_gaps()
        rec.gaps.extend(s.commit_gaps)
    if s.rebalances is not None:
        b = s.rebalances
        rec.rebalances = RebalanceMemory(
            broker=b.broker, clients=b.clients, total=b.total, epoch=b.epoch,
            members=None if b.members is None else frozenset(b.members),
            client_counts=dict(b.client_counts),
            events=Latest(b.events, maxlen=MAX_EVENTS), last=rebalances)
    if s.rates is not None:
        q = s.rates
        rec.rates = RatesMemory(
            parts=RateTable({(t, p): Points.from_flat(f) for t, p, f in q.points}),
            counted={(t, p): n for t, p, n in q.counted}, lost={(t, p): n for t, p, n in q.lost},
            lost_total=q.lost_total, last=progress)
    ev.groups[gid] = rec
    if view is not None:
        served = dataclasses.replace(view, progress=progress or view.progress,
                                     rebalances=rebalances or view.rebalances)
        _restored_view(ev).groups[gid] = served


def _restored_view(ev: Evaluator) -> ClusterView:
    """The last good view a restored evaluator starts from (what the first cycle compares
    with, and serves if the cluster cannot be read), filled as groups and topics are
    imported."""
    if ev.last_good is None:
        ev.last_good = ClusterView(cluster=ev.cluster, up=True, sampled_at=0.0, sample_duration=0.0,
                                   partitions={}, groups={})
    return ev.last_good


def export_topics(ev: Evaluator) -> list[SavedTopic]:
    """Every topic the last good cycle read: its partitions' offsets and HW history."""
    if ev.last_good is None:
        return []
    by_topic: dict[str, list[tuple]] = {}
    for (t, p), po in ev.last_good.partitions.items():
        h = ev.hw_history.get((t, p))
        flat = tuple(x for pt in h.points for x in pt) if h is not None else ()
        by_topic.setdefault(t, []).append(
            (p, po.leader, po.replicas, po.isr, po.log_start, po.hw, po.lso, po.leo, flat,
             ev.unread.since.get((t, p))))
    return [SavedTopic(topic=t, partitions=tuple(rows)) for t, rows in by_topic.items()]


def import_topic(ev: Evaluator, s: SavedTopic, sampled_at: float) -> None:
    last = _restored_view(ev)
    if sampled_at > last.sampled_at:
        ev.last_good = last = dataclasses.replace(last, sampled_at=sampled_at)
    for p, leader, replicas, isr, log_start, hw, lso, leo, flat, since in s.partitions:
        tp = (s.topic, p)
        last.partitions[tp] = PartitionOffsets(leader=leader, replicas=replicas, isr=isr,
                                               log_start=log_start, hw=hw, lso=lso, leo=leo)
        h = ev.hw_history[tp] = HwHistory(ev.history_points)
        h.points = [(flat[i], flat[i + 1]) for i in range(0, len(flat) - 1, 2)]
        if since is None:
            ev.unread.since.pop(tp, None)
        else:
            ev.unread.since[tp] = since
