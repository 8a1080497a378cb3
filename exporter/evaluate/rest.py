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

A skipped cycle still moves a few clocks of every partition. None is moved per partition
while the group rests, so a resting group costs a few operations a cycle whatever its
size, and skipping changes nothing that is served or judged (``tests/test_rest.py`` runs
recordings and synthetic runs through a skipping evaluator and one that never skips, and
compares every view of every cycle and every memory of a group evaluated):

- clocks the partitions share move once for the group each skipped cycle: the
  late-commit floors (by the time they last rolled, usually one for the whole group) and
  the times of the rate points (one set for the group, at offsets 0: each partition's own
  points, all at its HW, are dropped at rest and rebuilt when it wakes);
- clocks settled in closed form when it wakes (:func:`settle`): the quiet HW's time is the
  last skipped cycle's, a partition nobody owns was unowned that many cycles more, the
  floor rolled as the group's did (:func:`~exporter.evaluate.memory.settle_rest`);
- served each skipped cycle: the group's rate span (``window_seconds``), ``now`` minus the
  oldest time common to its rate points;
- the group wakes (is evaluated again) when its view would change: rates becoming known,
  joins and rebalances ageing out of their windows.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

from exporter.contracts.snapshot import COMMITTING_TYPES, TP, GroupSample, PartitionOffsets
from exporter.contracts.status import Status
from exporter.contracts.view import GroupView, PartitionRows
from exporter.evaluate.columns import Columns, PartitionTable
from exporter.evaluate.memory import (
    GroupMemory,
    PartitionMemory,
    at_rest,
    floor_rolls,
    rolled_floor,
    settle_rest,
)
from exporter.evaluate.progress import RatesMemory
from exporter.evaluate.rates import POINTS_PER_WINDOW, Points, RateTable
from exporter.evaluate.rebalances import RebalanceMemory


@dataclass(slots=True)
class _Rolls:
    """The late-commit floor of the partitions whose floor last rolled at ``since`` when
    the group came to rest: rolled ``rolls`` times since, the last at ``at``."""

    at: float
    rolls: int = 0


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
    wake_at: float  # its view would change: evaluated again at the first cycle at or after
    rates_known: bool  # the group's rates are known (its view shows their span)
    # The clocks its partitions share, moved each skipped cycle in their stead: the
    # late-commit floors by the time they last rolled at rest, and the times of the rate
    # points (the partitions' own points are dropped at rest and rebuilt from these).
    floors: dict[float, _Rolls]
    times: list[Points]  # one per distinct set of point times, at offsets 0
    which: dict[TP, int] = field(default_factory=dict)  # index into ``times`` when several
    skipped: int = 0  # cycles skipped so far
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


def possible(rate_window: float, span_min: float) -> bool:
    """Rates known over a group's points stay known when the oldest is dropped (the
    points after it span more than the window less one spacing), unless the shortest
    span is longer than that (an interval above a third of the window): then no group
    rests."""
    return span_min <= rate_window - rate_window / POINTS_PER_WINDOW


def still(r: Resting, g: GroupSample, changed: set[str], reported: bool, now: float) -> bool:
    """The group may be skipped this cycle: nothing it was evaluated on changed and its
    view would not change."""
    s = r.sample
    return (now < r.wake_at and not reported and g.error is None and r.topics.isdisjoint(changed)
            and g.members == s.members and g.state == s.state and g.epoch == s.epoch
            and g.type == s.type and not g.reported_lag and tuple(g.committed) == r.keys
            and array("q", g.committed.values()) == r.offsets)


def served(r: Resting, rate_window: float, now: float) -> GroupView:
    """A skipped cycle: the shared clocks move as every partition's would, and the last
    view is served, its rate span moved on."""
    r.skipped += 1
    r.last = now
    for rolls in r.floors.values():
        if floor_rolls(rolls.at, now):
            rolls.at, rolls.rolls = now, rolls.rolls + 1
    for times in r.times:
        times.add(now, 0, 0, rate_window)
    pr = r.view.progress
    if not r.rates_known or pr is None:
        return r.view
    t0 = max(times.oldest() for times in r.times)  # as common_rates reads the points
    return dataclasses.replace(r.view, progress=dataclasses.replace(pr, window_seconds=now - t0))


def settle(r: Resting, st: GroupMemory, pm: RatesMemory) -> None:
    """Before the group is evaluated again: what its skipped cycles moved in each
    partition's memory, and its rate points rebuilt."""
    if r.skipped:
        for tp, mem in st.parts.items():
            rolls = r.floors[mem.floor_at]
            floor = rolled_floor(mem.floor, mem.followed, rolls.rolls, rolls.at)
            st.parts[tp] = settle_rest(mem, r.skipped, r.last, floor)
    for tp in r.keys:
        hw = st.parts[tp].freeze_hw
        assert hw is not None  # at rest: a known HW
        pm.parts[tp] = r.times[r.which.get(tp, 0)].filled(hw, hw)


def enter(g: GroupSample, v: GroupView, st: GroupMemory, pm: RatesMemory | None,
          rm: RebalanceMemory | None, partitions: Mapping[TP, PartitionOffsets],
          windows: tuple[float, float, float], now: float) -> Resting | None:
    """The group's rest after an evaluation that found it at rest, else None.
    ``windows``: (judgement window, rebalance window, shortest rate span)."""
    window, rebalance_window, span_min = windows
    pr = v.progress
    # The cheap tests first: this runs after every evaluation of every group not at rest.
    if (g.type not in COMMITTING_TYPES or g.error is not None or g.reported_lag
            or v.status != Status.OK or v.reasons or v.notes or st.uncommitted
            or st.outside_at is not None or pm is None
            or (pr is not None and (pr.consume_rate or pr.produce_rate))):  # points not constant
        return None
    keys = tuple(g.committed)
    table, rates = st.parts, pm.parts
    if not _view_at_rest(g, v.partitions):
        return None
    owner_of = {tp: m.member_id for m in g.members for tp in m.assignment}
    if isinstance(table, PartitionTable) and isinstance(rates, RateTable) and _in_columns(keys, table, rates):
        # both memories in columns: the same tests on whole columns, no partition decoded
        cols = Columns(*table.rows)
        if not rates.constant(cols.freeze_hw) or not _rows_at_rest(table, v.partitions, partitions, owner_of):
            return None
        times, which = [rates[keys[0]].filled(0, 0)], {}
        floors = set(cols.floor_at.tolist())
    else:
        for tp in keys:  # each partition's points constant at its frozen HW
            mem, points = table.get(tp), rates.get(tp)
            hw = mem.freeze_hw if mem is not None else None
            if points is None or hw is None or not points.constant(hw, hw):
                return None
        if not _each_at_rest(table, v.partitions, partitions, owner_of):
            return None
        times, which = _shared_times(keys, pm)
        floors = {table[tp].floor_at for tp in keys}
    known = pr is not None and bool(pr.window_seconds)
    wake_at = min((at for t in times if (at := t.known_at(span_min)) > -math.inf), default=math.inf)
    if keys and not known:  # the group's rates become known once its common span is long enough
        wake_at = min(wake_at, max(t.oldest() for t in times) + span_min)
    if st.joins:
        wake_at = min(wake_at, st.joins[0] + window)
    if rm is not None and rm.events:
        wake_at = min(wake_at, rm.events[0] + rebalance_window)
    if wake_at <= now:
        return None
    # their points are rebuilt when it wakes (:func:`settle`); every partition's at once
    # when they are all the group has (a RateTable then drops its columns, not unpacked)
    if len(rates) == len(keys):
        rates.clear()
    else:
        for tp in keys:
            del rates[tp]
    return Resting(sample=dataclasses.replace(g, committed={}), keys=keys,
                   offsets=array("q", g.committed.values()),
                   topics=frozenset(t for t, _ in keys), view=v, wake_at=wake_at,
                   rates_known=known, times=times, which=which,
                   floors={at: _Rolls(at) for at in floors})


def _shared_times(keys: tuple[TP, ...], pm: RatesMemory) -> tuple[list[Points], dict[TP, int]]:
    """The distinct sets of point times of the partitions (usually one: they are sampled
    together), at offsets 0, and which partition has which when there are several."""
    index: dict[tuple[float, ...], int] = {}
    which: dict[TP, int] = {}
    times: list[Points] = []
    for tp in keys:
        key = pm.parts[tp].times()
        i = index.get(key)
        if i is None:
            i = index[key] = len(times)
            times.append(pm.parts[tp].filled(0, 0))
        which[tp] = i
    return times, which if len(times) > 1 else {}


def _view_at_rest(g: GroupSample, parts: PartitionRows) -> bool:
    """Every partition committed and ``ok``, without lag, stall or a reported position."""
    return len(parts) == len(g.committed) and not (
        set(parts.status) - {Status.OK} or (parts.committed < 0).any() or parts.lag_offsets.any()
        or parts.lag_seconds.any() or parts.stalled_seconds.any() or parts.unsubscribed.any()
        or (parts.position >= 0).any())


def _each_at_rest(table: MutableMapping[TP, PartitionMemory], parts: PartitionRows,
                  partitions: Mapping[TP, PartitionOffsets], owner_of: dict[TP, str]) -> bool:
    """:func:`~exporter.evaluate.memory.at_rest` of every row of ``parts``, one memory at a
    time (:func:`_rows_at_rest` reads the same from a table's columns)."""
    for tp, committed in zip(parts.tps, parts.committed.tolist(), strict=True):
        mem, po = table.get(tp), partitions.get(tp)
        if mem is None or po is None or not at_rest(mem, committed, po.hw, owner_of.get(tp)):
            return False
    return True


def _in_columns(keys: tuple[TP, ...], table: PartitionTable, rates: RateTable) -> bool:
    """Every partition of ``keys`` has its memory in ``table`` and its points in ``rates``'s
    columns, in the same rows (both follow the group's sorted partitions)."""
    return rates.in_columns and table.tps == rates.tps and len(keys) == len(table.tps) and all(
        map(table.index.__contains__, keys))


def _rows_at_rest(table: PartitionTable, parts: PartitionRows, partitions: Mapping[TP, PartitionOffsets],
                  owner_of: dict[TP, str]) -> bool:
    """:func:`~exporter.evaluate.memory.at_rest` of every row of ``parts`` from the
    table's columns: no partition's memory decoded."""
    index, cols = table.index, Columns(*table.rows)
    followed, frozen, pending, run, lagging, owner = (
        col.tolist() for col in (cols.followed, cols.freeze_hw, cols.rewind_pending, cols.run_t0,
                                 cols.lagging, cols.owner))
    for tp, committed in zip(parts.tps, parts.committed.tolist(), strict=True):
        i, po = index.get(tp), partitions.get(tp)
        if i is None or po is None or po.hw is None:
            return False
        hw, mine = po.hw, owner_of.get(tp)
        if not (committed == followed[i] and hw <= committed and hw == frozen[i] and pending[i] != pending[i]
                and run[i] == run[i] and not lagging[i]
                and (mine is None or (owner[i] >= 0 and table.owners[int(owner[i])] == mine))):
            return False
    return True
