"""Groups at rest: not evaluated again while nothing about them changes.

Most groups of a large cluster are caught up on idle topics most of the time. A group
whose last evaluation found it entirely at rest, and whose sample this cycle equals that
evaluation's, is skipped: the evaluator, the progress and rebalance trackers do nothing
for it and its last view is served again, the span of its rates moved on. At rest means:

- a group that owns or commits partitions (classic, consumer, streams), readable, with
  no consumer report this cycle (a report's poll age moves every cycle);
- status ``ok`` with no reason and no note; every partition committed, with no lag and
  no stall, subscribed, and its memory at rest (:func:`~exporter.evaluate.memory.at_rest`);
  nothing owned and never committed, no client committing from outside group membership;
- every rate point of every partition at the same offsets (its rates are zero however
  long they span);
- this cycle: the same committed offsets, members, state, epoch and type, and no HW or
  log start moved (and no partition came or went) on the group's topics.

A skipped cycle still moves a few clocks. Each is settled in closed form when the group
wakes, or the group wakes at the cycle it would move (its ``due`` time), so skipping
changes nothing that is served or judged (``tests/test_rest.py`` runs recordings and
synthetic runs through a skipping evaluator and one that never skips, and compares every
view of every cycle):

- settled when it wakes: the quiet HW's time (``NewData.quiet_at``) is the last skipped
  cycle's, a partition nobody owns was unowned that many cycles more
  (:func:`~exporter.evaluate.memory.settle_rest`), each rate series' newest point moves to
  the last skipped cycle (:meth:`~exporter.evaluate.rates.Points.touch`);
- due: the late-commit floor's next roll, a rate point to append or drop, rates becoming
  known (partition or group), joins and rebalances ageing out of their windows;
- served each skipped cycle: the group's rate span (``window_seconds``), ``now`` minus the
  oldest time common to its rate points.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Mapping
from dataclasses import dataclass

from exporter.contracts.snapshot import COMMITTING_TYPES, TP, GroupSample, PartitionOffsets
from exporter.contracts.status import Status
from exporter.contracts.view import GroupView, PartitionView
from exporter.evaluate.memory import GroupMemory, at_rest, rest_due, settle_rest
from exporter.evaluate.progress import GroupMemo
from exporter.evaluate.rates import POINTS_PER_WINDOW
from exporter.evaluate.rebalances import RebalanceMemo


@dataclass(slots=True)
class Resting:
    """A group skipped while its sample stays ``sample``."""

    # What it was last evaluated on: its sample but for the committed offsets, which are
    # kept as their keys (the snapshot's shared tuples) and an array of their values (a
    # tenth of the sample's dict).
    sample: GroupSample
    keys: tuple[TP, ...]
    offsets: array[int]
    topics: frozenset[str]  # the topics of its committed partitions
    view: GroupView  # its last view, as served (annotated)
    due: float  # a memory clock moves at the first cycle at or after this: :func:`tend`
    wake_at: float  # its view would change: evaluated again at the first cycle at or after
    t0: float | None  # oldest time common to its rate points (rates known); else None
    skipped: int = 0  # cycles skipped since it was last evaluated or tended
    last: float = 0.0  # the last skipped cycle's time


def changed_topics(before: Mapping[TP, PartitionOffsets], now: Mapping[TP, PartitionOffsets]
                   ) -> set[str]:
    """Topics on which a partition's HW or log start moved since ``before`` (the last
    evaluated snapshot), a HW is unknown, or a partition came or went."""
    out: set[str] = set()
    for tp, po in now.items():
        old = before.get(tp)
        if old is None or po.hw is None or po.hw != old.hw or po.log_start != old.log_start:
            out.add(tp[0])
    if len(before) != len(now) or out:
        out.update(tp[0] for tp in before.keys() - now.keys())
    return out


def still(r: Resting, g: GroupSample, changed: set[str], reported: bool, now: float) -> bool:
    """The group may be skipped this cycle: nothing it was evaluated on changed and its
    view would not change."""
    s = r.sample
    return (now < r.wake_at and not reported and g.error is None and r.topics.isdisjoint(changed)
            and g.members == s.members and g.state == s.state and g.epoch == s.epoch
            and g.type == s.type and not g.reported_lag and tuple(g.committed) == r.keys
            and array("q", g.committed.values()) == r.offsets)


def served(r: Resting, st: GroupMemory, pm: GroupMemo, rate_window: float, now: float) -> GroupView:
    """A skipped cycle: the last view, its rate span moved on; the memory clocks tended
    when one is due (:func:`tend`), else counted for when the group wakes."""
    if now >= r.due:
        tend(r, st, pm, rate_window, now)
    else:
        r.skipped += 1
        r.last = now
    pr = r.view.progress
    if r.t0 is None or pr is None:
        return r.view
    return dataclasses.replace(r.view, progress=dataclasses.replace(pr, window_seconds=now - r.t0))


def possible(rate_window: float, span_min: float) -> bool:
    """Rates known over a group's points stay known when the oldest is dropped (the
    points after it span more than the window less one spacing), unless the shortest
    span is longer than that (an interval above a third of the window): then no group
    rests."""
    return span_min <= rate_window - rate_window / POINTS_PER_WINDOW


def settle(r: Resting, st: GroupMemory, pm: GroupMemo | None) -> None:
    """What the skipped cycles moved, before the group is evaluated again."""
    if not r.skipped:
        return
    for tp, mem in st.parts.items():
        st.parts[tp] = settle_rest(mem, r.skipped, r.last)
    for points in pm.parts.values() if pm is not None else ():
        points.touch(r.last)


def tend(r: Resting, st: GroupMemory, pm: GroupMemo, rate_window: float, now: float) -> None:
    """A memory clock is due (a late-commit floor rolls, a rate point is appended or
    dropped) and the view stays: step the memories of the skipped cycles and this one,
    as evaluating the group would, without evaluating it."""
    for tp, mem in st.parts.items():
        st.parts[tp] = settle_rest(mem, r.skipped + 1, now)
    for points in pm.parts.values():
        if r.skipped:
            points.touch(r.last)
        points.again(now, rate_window)
    r.skipped, r.last = 0, now
    due, _known, t0 = _clocks(st, pm, r.keys, rate_window, 0.0)
    r.due = due
    if r.t0 is not None:
        r.t0 = t0


def enter(g: GroupSample, v: GroupView, st: GroupMemory, pm: GroupMemo | None,
          rm: RebalanceMemo | None, partitions: Mapping[TP, PartitionOffsets],
          windows: tuple[float, float, float, float], now: float) -> Resting | None:
    """The group's rest after an evaluation that found it at rest, else None.
    ``windows``: (judgement window, rebalance window, rate window, shortest rate span)."""
    window, rebalance_window, rate_window, span_min = windows
    if (g.type not in COMMITTING_TYPES or g.error is not None or g.reported_lag
            or v.status != Status.OK or v.reasons or v.notes or st.uncommitted
            or st.outside_at is not None or pm is None
            or not _memory_at_rest(g, v.partitions, st, partitions)
            or not all((points := pm.parts.get(tp)) is not None and points.constant()
                       for tp in g.committed)):
        return None
    due, wake_at, t0 = _clocks(st, pm, tuple(g.committed), rate_window, span_min)
    known = v.progress is not None and bool(v.progress.window_seconds)
    if g.committed and not known:  # the group's rates become known at t0 + span_min
        wake_at = min(wake_at, t0 + span_min)
    if st.joins:
        wake_at = min(wake_at, st.joins[0] + window)
    if rm is not None and rm.events:
        wake_at = min(wake_at, rm.events[0] + rebalance_window)
    if wake_at <= now:
        return None
    return Resting(sample=dataclasses.replace(g, committed={}), keys=tuple(g.committed),
                   offsets=array("q", g.committed.values()),
                   topics=frozenset(t for t, _ in g.committed), view=v, due=due,
                   wake_at=wake_at, t0=t0 if known else None)


def _clocks(st: GroupMemory, pm: GroupMemo, keys: tuple[TP, ...], rate_window: float,
            span_min: float) -> tuple[float, float, float]:
    """(when a memory clock is next due, when a partition's rates become known, the oldest
    time common to the rate points)."""
    due = wake_at = math.inf
    t0 = -math.inf
    for mem in st.parts.values():
        due = min(due, rest_due(mem))
    for tp in keys:
        points = pm.parts[tp]
        due = min(due, points.rest_due(rate_window))
        known_at = points.known_at(span_min)
        if known_at > -math.inf:  # not known yet: the view changes then
            wake_at = min(wake_at, known_at)
        t0 = max(t0, points.oldest())
    return due, wake_at, t0


def _memory_at_rest(g: GroupSample, parts: tuple[PartitionView, ...], st: GroupMemory,
                    partitions: Mapping[TP, PartitionOffsets]) -> bool:
    """Every partition committed, ``ok`` without lag, and its memory at rest."""
    if len(parts) != len(g.committed):
        return False
    owner_of = {tp: m.member_id for m in g.members for tp in m.assignment}
    for p in parts:
        if (p.status != Status.OK or p.committed is None or p.lag_offsets != 0
                or p.lag_seconds != 0.0 or p.stalled_seconds or p.unsubscribed
                or p.position is not None):
            return False
        tp = (p.topic, p.partition)
        mem, po = st.parts.get(tp), partitions.get(tp)
        if mem is None or po is None or not at_rest(mem, p.committed, po.hw, owner_of.get(tp)):
            return False
    return True
