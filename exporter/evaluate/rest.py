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

A group left behind with nobody consuming rests too (:class:`Clocks`): no members, every
partition ``stopped`` by the rule ``unowned`` and as remembered, no note but the one
saying nothing was consumed. Nothing but time moves its judgement, and every figure
time moves is ``now`` less a time that stays: each row's lag and stalled seconds, each
reason's ages and departure text, the idle note's span. Each skipped cycle serves its
rows with those written anew by the same arithmetic as the evaluation's; it also wakes
when the record timestamps its lag read change.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter

import numpy as np

from exporter.contracts.snapshot import COMMITTING_TYPES, HW_OF, TP, GroupSample, PartitionOffsets
from exporter.contracts.status import Status
from exporter.contracts.view import (
    GroupProgress,
    GroupReasons,
    GroupView,
    PartitionRows,
    Repeated,
    copied,
    offsets_column,
)
from exporter.evaluate.columns import Columns, PartitionTable
from exporter.evaluate.departures import Departure, departure_text, last_owner
from exporter.evaluate.memory import (
    GroupMemory,
    PartitionMemory,
    at_rest,
    floor_rolls,
    rolled_floor,
    settle_rest,
)
from exporter.evaluate.progress import RatesMemory, idle_note
from exporter.evaluate.rates import POINTS_PER_WINDOW, Points, RateTable
from exporter.evaluate.rebalances import RebalanceMemory
from exporter.evaluate.rules import LaterReason

# The times the lags of ``lag_off`` records at ``committed`` count from, given each
# record's timestamp read this cycle (Evaluator.lag_origins); None: unknowable.
LagOrigins = Callable[[Sequence[TP], list[int], list[int], list[float | None] | None], list[float | None]]
ExactTimestamps = Mapping[tuple[str, int, int], float]


@dataclass(slots=True)
class _Rolls:
    """The late-commit floor of the partitions whose floor last rolled at ``since`` when
    the group came to rest: rolled ``rolls`` times since, the last at ``at``."""

    at: float
    rolls: int = 0


@dataclass(slots=True)
class _Aging:
    """A reason its rows share, and what its ages count from."""

    reason: LaterReason
    changed_at: float  # committed offset frozen since: its ``frozen_seconds``
    new_data_at: float | None  # its ``new_data_seconds`` (None: none)
    row: TP | None  # a row whose last owner the departure text names ("left 40s ago"); None: fixed text


@dataclass(slots=True)
class Clocks:
    """A group at rest ``stopped``: what moves in its view with time alone, each figure
    ``now`` less a time that stays while nothing else moves."""

    lag_from: np.ndarray  # each row's lag in seconds: max(0, now - lag_from); NaN: unknown, stays
    stall_from: np.ndarray  # each row's stalled seconds: now - stall_from
    agings: dict[int, _Aging]  # by the id of the reason served
    exact: list[float | None] | None  # the record timestamps its lag read (None: none was read)
    departed: tuple[Departure, ...]  # the group's departures (the texts name the last owners)
    last_view: GroupView  # as the group's memory kept it at rest (before its figures)
    idle: bool  # its first note says over what span nothing was consumed (progress.idle_note)


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
    # When its rates become known (its one set of point times spans enough): its figures
    # are then computed at rest (:func:`points_apart`, :func:`rates_known`), not woken.
    known_at: float
    # The clocks its partitions share, moved each skipped cycle in their stead: the
    # late-commit floors by the time they last rolled at rest, and the times of the rate
    # points (the partitions' own points are dropped at rest and rebuilt from these).
    floors: dict[float, _Rolls]
    times: list[Points]  # one per distinct set of point times, at offsets 0
    which: dict[TP, int] = field(default_factory=dict)  # index into ``times`` when several
    skipped: int = 0  # cycles skipped so far
    last: float = 0.0  # the last skipped cycle's time
    clocks: Clocks | None = None  # at rest ``stopped``: the figures time moves


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


def still(r: Resting, g: GroupSample, changed: set[str], reported: bool, exact: ExactCheck,
          now: float) -> bool:
    """The group may be skipped this cycle: nothing it was evaluated on changed and its
    view would not change (at rest ``stopped``: its lag reads the same record timestamps)."""
    s = r.sample
    return (now < r.wake_at and not reported and g.error is None and r.topics.isdisjoint(changed)
            and g.members == s.members and g.state == s.state and g.epoch == s.epoch
            and g.type == s.type and not g.reported_lag and tuple(g.committed) == r.keys
            and array("q", g.committed.values()) == r.offsets
            and (r.clocks is None or exact.as_before()
                 or _exact(r.view.partitions, exact.exact_ts) == r.clocks.exact))


class ExactCheck:
    """A cycle's record timestamps, for :func:`still`, and whether they are the cycle
    before's. A record's timestamp at an offset does not change, so only which offsets a
    read found can; when the map fingerprints as the cycle before's, a group at rest
    ``stopped`` (found at rest or entering it in that cycle) is spared a lookup per row.
    The fingerprint (the map's length and the hash of its keys and values) is taken when
    the first such group asks, so a cycle without one hashes nothing; it is not a copy, as
    the map can hold an entry per group-partition. Maps that differ but hash alike would
    leave such a group on the timestamps of offsets it read before, which are the same."""

    __slots__ = ("exact_ts", "before", "fingerprint", "_same")

    def __init__(self, exact_ts: ExactTimestamps, before: tuple[int, int] | None) -> None:
        self.exact_ts = exact_ts
        self.before = before  # the cycle before's fingerprint; None: not taken
        self.fingerprint: tuple[int, int] | None = None  # this cycle's, once taken
        self._same: bool | None = None

    def as_before(self) -> bool:
        if self._same is None:
            if self.exact_ts:
                self.fingerprint = (len(self.exact_ts),
                                    hash((tuple(self.exact_ts), tuple(self.exact_ts.values()))))
            self._same = self.fingerprint is not None and self.fingerprint == self.before
        return self._same


def _exact(rows: PartitionRows, exact_ts: ExactTimestamps) -> list[float | None] | None:
    """The record timestamp read this cycle of each row's committed offset; None: none."""
    if not exact_ts:
        return None
    found = [exact_ts.get((t, p, c)) for (t, p), c in zip(rows.tps, rows.committed.tolist(), strict=True)]
    return found if any(x is not None for x in found) else None


def served(r: Resting, rate_window: float, now: float) -> GroupView:
    """A skipped cycle: the shared clocks move as every partition's would, and the last
    view is served, its rate span moved on (at rest ``stopped``, its seconds and reasons'
    ages too)."""
    r.skipped += 1
    r.last = now
    for rolls in r.floors.values():
        if floor_rolls(rolls.at, now):
            rolls.at, rolls.rolls = now, rolls.rolls + 1
    for times in r.times:
        times.add(now, 0, 0, rate_window)
    v, pr = r.view, r.view.progress
    if r.rates_known and pr is not None:
        t0 = max(times.oldest() for times in r.times)  # as common_rates reads the points
        notes = (idle_note(now - t0), *pr.notes[1:]) if r.clocks is not None and r.clocks.idle else pr.notes
        pr = copied(pr, window_seconds=now - t0, notes=notes)
    if r.clocks is None:
        return v if pr is v.progress else copied(v, progress=pr)
    rows, reasons = _aged(r.clocks, v, now)
    return copied(v, partitions=rows, reasons=reasons, progress=pr)


def points_apart(r: Resting, st: GroupMemory, pm: RatesMemory) -> RatesMemory | None:
    """A group at rest whose rates become known this cycle (``r.known_at``): a copy of its
    rates memory with its points rebuilt, as :func:`settle` rebuilds them (its own stay
    dropped), for the progress tracker to compute its figures over. None (wake it) when
    its memory is not in columns."""
    table, rates = st.parts, pm.parts
    if not (isinstance(table, PartitionTable) and isinstance(rates, RateTable)
            and _in_columns_at_rest(r, table, rates)):
        return None
    points = RateTable()
    _rebuilt(r, Columns(*table.rows), table, points)
    return RatesMemory(points, dict(pm.counted), dict(pm.lost), pm.lost_total, pm.last)


def rates_known(r: Resting, pm: RatesMemory, apart: RatesMemory, pr: GroupProgress, rate_window: float,
                now: float) -> GroupView | None:
    """The skipped cycle of a group at rest whose rates become known, its figures ``pr``
    computed over ``apart`` (:func:`points_apart`): what waking it would serve, the group
    left at rest. None (wake it) when :func:`enter` would not find it at rest with them."""
    if (not pr.window_seconds or pr.consume_rate or pr.produce_rate
            or (apart.counted, apart.lost, apart.lost_total) != (pm.counted, pm.lost, pm.lost_total)):
        return None
    idle = bool(pr.notes) and pr.notes[0] == idle_note(pr.window_seconds)
    if r.clocks is not None and pr.notes and not idle:  # as :func:`_clocks` tests them
        return None
    r.rates_known, r.known_at, r.view = True, math.inf, copied(r.view, progress=pr)
    if r.clocks is not None:
        r.clocks.idle = idle
    return served(r, rate_window, now)


def _aged(c: Clocks, v: GroupView, now: float) -> tuple[PartitionRows, Sequence[str]]:
    """The rows and reasons of a group at rest ``stopped`` at ``now``: as
    exporter/evaluate/columns.py and Evaluator._classified write them for the same memory."""
    rows = v.partitions
    new = {key: a.reason.aged(
        now - a.changed_at, None if a.new_data_at is None else now - a.new_data_at,
        a.reason.departure if a.row is None else departure_text(c.departed, a.row, True, now))
        for key, a in c.agings.items()}
    reason = rows.reason
    col = (Repeated(new[id(reason.value)], reason.n) if isinstance(reason, Repeated)
           else [new[id(x)] for x in reason])
    aged = rows.aged(np.maximum(0.0, now - c.lag_from), now - c.stall_from, col)
    return aged, v.reasons.over(aged) if isinstance(v.reasons, GroupReasons) else v.reasons


def settle(r: Resting, st: GroupMemory, pm: RatesMemory) -> None:
    """Before the group is evaluated again: what its skipped cycles moved in each
    partition's memory, and its rate points rebuilt."""
    if r.skipped and r.clocks is not None:  # the view kept: the last one served, before its figures
        rows, reasons = _aged(r.clocks, r.clocks.last_view, r.last)
        st.last_view = copied(r.clocks.last_view, partitions=rows, reasons=reasons)
    table, rates = st.parts, pm.parts
    if (isinstance(table, PartitionTable) and isinstance(rates, RateTable)
            and _in_columns_at_rest(r, table, rates)):
        _settle_columns(r, table, rates)
        return
    if r.skipped:
        for tp, mem in st.parts.items():
            rolls = r.floors[mem.floor_at]
            floor = rolled_floor(mem.floor, mem.followed, rolls.rolls, rolls.at)
            st.parts[tp] = settle_rest(mem, r.skipped, r.last, floor)
    for tp in sorted(r.keys):  # in the order of the group's rows, as its memory keeps them
        mem = st.parts[tp]
        hw = mem.freeze_hw
        assert hw is not None  # at rest: a known HW
        pm.parts[tp] = r.times[r.which.get(tp, 0)].filled(hw if r.clocks is None else mem.followed, hw)


def _settle_columns(r: Resting, table: PartitionTable, rates: RateTable) -> None:
    """:func:`settle` of a group whose memory is in columns and whose points were all
    dropped at rest, every partition at once: ``settle_rest`` on the columns, and the
    points rebuilt as columns (so the progress tracker steps the group in columns again,
    not one partition at a time)."""
    cols = Columns(*table.rows)  # views: the writes go to the table
    if r.skipped:
        cols.quiet_at[:] = np.where(np.isnan(cols.new_data_at), r.last, cols.quiet_at)
        cols.unowned[:] = np.where(cols.unowned > 0, cols.unowned + r.skipped, cols.unowned)
        masks = {at: cols.floor_at == at for at, rolls in r.floors.items() if rolls.rolls}
        for at, rolled in masks.items():  # rolled_floor of each group of floors
            rolls = r.floors[at]
            low = cols.floor_next if rolls.rolls == 1 else cols.followed
            cols.floor_low[:] = np.where(rolled, low, cols.floor_low)
            cols.floor_next[:] = np.where(rolled, cols.followed, cols.floor_next)
            cols.floor_at[:] = np.where(rolled, rolls.at, cols.floor_at)
    _rebuilt(r, cols, table, rates)


def _in_columns_at_rest(r: Resting, table: PartitionTable, rates: RateTable) -> bool:
    """The group's memory is in columns and every one of its points was dropped at rest,
    at one set of times: they are rebuilt as columns (:func:`_rebuilt`)."""
    return not len(rates) and bool(r.keys) and not r.which and len(table.tps) == len(r.keys)


def _rebuilt(r: Resting, cols: Columns, table: PartitionTable, into: RateTable) -> None:
    """The group's points rebuilt into ``into`` as columns, at the times shared at rest:
    each partition's at its frozen HW (at rest ``stopped``: consumed at its committed offset)."""
    into.fill(list(table.tps), r.times[0].times(), cols.freeze_hw if r.clocks is None else cols.followed,
              cols.freeze_hw)


def enter(g: GroupSample, v: GroupView, st: GroupMemory, pm: RatesMemory | None,
          rm: RebalanceMemory | None, partitions: Mapping[TP, PartitionOffsets],
          windows: tuple[float, float, float], now: float, origin: LagOrigins | None = None,
          exact_ts: ExactTimestamps | None = None) -> Resting | None:
    """The group's rest after an evaluation that found it at rest, else None.
    ``windows``: (judgement window, rebalance window, shortest rate span); ``origin`` and
    ``exact_ts``: where its lag in seconds counts from, for a group at rest ``stopped``."""
    pr = v.progress
    # The cheap tests first: this runs after every evaluation of every group not at rest.
    if (g.type not in COMMITTING_TYPES or g.error is not None or g.reported_lag
            or v.status not in (Status.OK, Status.STOPPED) or st.uncommitted
            or st.outside_at is not None or pm is None
            or (pr is not None and (pr.consume_rate or pr.produce_rate))):  # points not constant
        return None
    if v.status == Status.STOPPED:
        if origin is None or not isinstance(st.parts, PartitionTable) or not isinstance(pm.parts, RateTable):
            return None
        clocks = _clocks(g, v, st, st.parts, pm.parts, partitions, origin, exact_ts or {}, now)
        if clocks is None:
            return None
        cols = Columns(*st.parts.rows)
        times = [Points.at_times(pm.parts.times)]  # in columns (:func:`_clocks`)
        return _rest(g, v, st, pm, rm, windows, now, times, {}, set(cols.floor_at.tolist()), clocks)
    if v.reasons or v.notes or not _view_at_rest(g, v.partitions):
        return None
    keys = tuple(g.committed)
    table, rates = st.parts, pm.parts
    owner_of = {tp: m.member_id for m in g.members for tp in m.assignment}
    if isinstance(table, PartitionTable) and isinstance(rates, RateTable) and _in_columns(keys, table, rates):
        # both memories in columns: the same tests on whole columns, no partition decoded
        cols = Columns(*table.rows)
        if not rates.constant(cols.freeze_hw) or not _rows_at_rest(table, v.partitions, partitions, owner_of):
            return None
        times, which = [Points.at_times(rates.times)], {}
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
    return _rest(g, v, st, pm, rm, windows, now, times, which, floors, None)


def _rest(g: GroupSample, v: GroupView, st: GroupMemory, pm: RatesMemory, rm: RebalanceMemory | None,
          windows: tuple[float, float, float], now: float, times: list[Points], which: dict[TP, int],
          floors: set[float], clocks: Clocks | None) -> Resting | None:
    """The rest of a group found at rest, its points' times and floors taken: None when its
    view would change by the next cycle."""
    window, rebalance_window, span_min = windows
    pr, keys, rates = v.progress, tuple(g.committed), pm.parts
    known = pr is not None and bool(pr.window_seconds)
    known_at = min((at for t in times if (at := t.known_at(span_min)) > -math.inf), default=math.inf)
    if keys and not known:  # the group's rates become known once its common span is long enough
        known_at = min(known_at, max(t.oldest() for t in times) + span_min)
    wake_at = math.inf
    if len(times) > 1:  # several sets of times: the group wakes for them
        wake_at, known_at = known_at, math.inf
    if st.joins:
        wake_at = min(wake_at, st.joins[0] + window)
    if rm is not None and rm.events:
        wake_at = min(wake_at, rm.events[0] + rebalance_window)
    if min(wake_at, known_at) <= now:
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
                   topics=frozenset(map(itemgetter(0), keys)), view=v, wake_at=wake_at,
                   rates_known=known, known_at=known_at, times=times, which=which,
                   floors={at: _Rolls(at) for at in floors}, clocks=clocks)


def _clocks(g: GroupSample, v: GroupView, st: GroupMemory, table: PartitionTable, rates: RateTable,
            partitions: Mapping[TP, PartitionOffsets], origin: LagOrigins, exact_ts: ExactTimestamps,
            now: float) -> Clocks | None:
    """What moves with time alone in the view of a group ``stopped`` whose every row is
    behind and nobody's (the rule ``unowned``), its memory in columns and nothing moving
    (:func:`_stopped_still`); else None. While nothing but time moves, ``unowned`` holds
    for every row: nobody owns it, nothing rewinds, no client commits from outside, and
    no rejoin (a join wakes the group). Its rows' lag and stall are ``now`` less a time."""
    rows, keys, pr = v.partitions, tuple(g.committed), v.progress
    idle = pr is not None and bool(pr.notes) and pr.notes[0] == idle_note(pr.window_seconds)
    if (g.members or v.exposure is not None or len(rows) != len(keys)
            or not _in_columns(keys, table, rates) or (v.rebalances is not None and v.rebalances.notes)
            or (pr is not None and pr.notes and not idle)):
        return None
    reasons = [rows.reason.value] if isinstance(rows.reason, Repeated) else list(rows.reason)
    if not all(isinstance(x, LaterReason) and x.rule == "unowned" for x in reasons):
        return None
    whole = Columns(*table.rows)
    cols = whole if list(rows.tps) == table.tps else Columns(  # the rows in the table's order, or gathered
        *table.rows[:, np.fromiter(map(table.index.__getitem__, rows.tps), np.intp, len(rows))])
    if not (_stopped_still(rows, cols, partitions, now) and rates.constant(whole.freeze_hw, whole.followed)):
        return None
    exact = _exact(rows, exact_ts)
    lag_from = origin(rows.tps, rows.committed.tolist(), rows.lag_offsets.tolist(), exact)
    agings = _agings(rows, reasons, cols, tuple(st.departed))
    if agings is None:
        return None
    return Clocks(lag_from=np.array(lag_from, np.float64),  # None: NaN
                  stall_from=np.maximum(cols.changed_at, cols.lag_since), agings=agings, exact=exact,
                  departed=tuple(st.departed), last_view=st.last_view or v, idle=idle)


def _stopped_still(rows: PartitionRows, cols: Columns, partitions: Mapping[TP, PartitionOffsets],
                   now: float) -> bool:
    """Every row ``stopped`` and behind, with no position, as remembered (committed and HW
    as sampled), no backward move pending or running, its lag run started, not lagging,
    its lag's start known: its memory steps only the clocks a rest moves."""
    pos = list(map(partitions.get, rows.tps))
    if not all(pos) or set(rows.status) != {Status.STOPPED}:  # all(): no PartitionOffsets.__eq__ call
        return False
    hw = offsets_column(list(map(HW_OF, pos)))
    # one reduction over the rows' tests, each elementwise (NaN compares false)
    return bool(((rows.committed >= 0) & (rows.lag_offsets > 0) & (rows.position < 0) & ~rows.unsubscribed
                 & (cols.followed == rows.committed) & (cols.freeze_hw == hw) & np.isnan(cols.rewind_pending)
                 & ~(now < cols.rewind_until) & ~np.isnan(cols.run_t0) & (cols.lagging == 0)
                 & ~np.isnan(cols.lag_since)).all())


def _agings(rows: PartitionRows, reasons: list[object], cols: Columns, departed: tuple[Departure, ...]
            ) -> dict[int, _Aging] | None:
    """Each distinct reason of ``rows`` and what its ages count from (the first of its rows;
    the others hold the same facts); None when rows sharing a reason name different last
    owners."""
    out: dict[int, _Aging] = {}
    owners: dict[int, object] = {}
    one = isinstance(rows.reason, Repeated)
    n = 1 if one and not departed else len(rows)  # one reason and no last owners: its first row
    changed, new_data = cols.changed_at[:n].tolist(), cols.new_data_at[:n].tolist()
    column = repeat(reasons[0], n) if one else reasons
    for i, (tp, x) in enumerate(zip(rows.tps[:n], column, strict=True)):
        d = last_owner(departed, tp, True) if departed else None
        key = id(x)
        if key not in out:
            nd = new_data[i]
            out[key] = _Aging(x, changed[i], None if nd != nd else nd, None if d is None else tp)  # type: ignore[arg-type]
            owners[key] = d
        elif owners[key] is not d:
            return None
    return out


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
