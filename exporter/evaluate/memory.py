"""What the evaluator remembers between cycles, and the one place where it changes.

A cycle runs in three steps per partition: :func:`observe` (pure) derives this
cycle's evidence from the memory and the new :class:`StepInput`, the rules classify it,
and :func:`remember` returns the partition's next memory, a new frozen
:class:`PartitionMemory` that replaces the old one whole. :func:`observe` is the
composition of one pure step per concern, each with its own table test in
``tests/test_memory_steps.py``:

=====================  ===========================  ====================================
concern                step                         rules that read it
=====================  ===========================  ====================================
new-data evidence      :func:`new_data`             ``stalled``, ``rejoin_loop``
late-commit floor      :func:`late_commit_floor`,   ``rewind`` (and ``unowned``, which
                       :func:`late_commit`,         yields to a rewind)
                       :func:`rewind_evidence`
stall clock            :func:`stall_clock`          ``stalled``, ``reports_stopped``,
                                                    ``rejoin_loop``, ``unowned``
commit-run trend       :func:`commit_trend`         ``lag_growing``
ownership              :func:`ownership`            ``unowned``
=====================  ===========================  ====================================

Group-level memory (:class:`GroupMemory`) changes in the ``remember_*`` functions at the
end of this module (members and joins, partitions owned and never committed, commits from
outside group membership) and, for a share group's queue-wide progress, in
``evaluator._progress``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple

from exporter.contracts.snapshot import Member
from exporter.contracts.status import Status
from exporter.contracts.view import GroupView
from exporter.evaluate.constants import (
    LATE_COMMIT_WINDOW,
    MAX_JOINS,
    OUTSIDE_CADENCE_BOUND,
    OUTSIDE_GAPS,
    QUIET_FRACTION,
    REWIND_HOLD_CYCLES,
    STOPPED_AFTER_CYCLES,
    TREND_GROWTH_RATIO,
    TREND_MIN_COMMITS,
)
from exporter.evaluate.departures import Departure, new_departures
from exporter.evaluate.latest import Latest


class StepInput(NamedTuple):
    """One partition in one cycle, as the memory step sees it."""

    followed: int  # the followed offset: the committed offset (share groups: evaluator._share_offsets)
    hw: int | None  # high watermark now; None when it could not be read
    lag_off: int | None  # lag in offsets; None with an unknown HW
    lag_s: float | None  # lag in seconds (oldest unconsumed record's age); None when unknown
    owned: bool  # a member (or a live Spark driver) owns the partition
    now: float  # the cycle's clock
    owner: str | None = None  # member id of the owner, when known
    # Share groups: when the group last progressed on any partition (GroupMemory.acknowledged_at)
    acknowledged_at: float | None = None


class Tuning(NamedTuple):
    """The thresholds the memory step needs (seconds)."""

    interval: float  # the sampling interval
    lag_threshold: float  # thresholds.lag_seconds
    stall_after: float  # thresholds.stall_after


class Run(NamedTuple):
    """A run of commits at each of which lag seconds grew while records arrived. A named
    tuple whatever the run's length: 100k of these must stay small."""

    t0: float  # first commit of the run
    l0: float | None  # lag seconds then
    n: int  # commits in the run
    gap: float  # widest gap between two of them
    t_last: float  # last commit
    committed: int  # committed offset at the last
    lag_s: float | None  # lag seconds at the last
    hw: int | None  # HW at the last


class NewData(NamedTuple):
    """Evidence that records arrived after the committed offset froze (:func:`new_data`)."""

    freeze_hw: int | None  # the last known HW (the last sample's, with a HW)
    quiet_at: float  # last sample at which HW was still freeze_hw
    flow_at: float  # last sample at which records had arrived since the one before
    tail_from: float | None  # records arrived right after the freeze, since
    new_data_at: float | None  # records arrived after the freeze, from then on
    arrived_at: float  # last sample whose HW was above the one before


class Floor(NamedTuple):
    """What a late commit of a member can land on (:func:`late_commit_floor`): the committed
    offset one to two LATE_COMMIT_WINDOWs ago (``low``), and the one a window ago
    (``next``) that becomes it at ``at`` + LATE_COMMIT_WINDOW. In the first window anything
    can (-1): a commit made before lagwatch first saw the partition can still land."""

    low: int
    next: int
    at: float


class Rewind(NamedTuple):
    """A backward move of the committed offset (:func:`rewind_evidence`)."""

    until: float  # reported as ``rewind`` until then
    pending: int | None  # committed before a backward move not yet confirmed


class Trend(NamedTuple):
    """The lag trend judged at commits (:func:`commit_trend`)."""

    run: Run | None  # the current run of commits with growing lag
    lagging: bool  # the trend said lagging (kept only while the status is ok or lagging)


class Ownership(NamedTuple):
    """Who owns the partition (:func:`ownership`)."""

    owner: str | None  # member id of the last known owner
    unowned: int  # consecutive cycles nobody owned the partition


# The memory of a partition at rest, shared (tuples are immutable): one object each, not
# one per group-partition.
_NO_REWIND = Rewind(0.0, None)
_NO_TREND = Trend(None, False)
_UNOWNED = tuple(Ownership(None, n) for n in range(64))
_NO_OWNER = _UNOWNED[0]


_NO_RUN = (None,) * len(Run._fields)
# Where each concern sits among a PartitionMemory's elements (committed, changed_at, the
# NewData, the Floor, rewind, lag_since, the Run or _NO_RUN, lagging, ownership, above_from).
_DATA = slice(2, 2 + len(NewData._fields))
_FLOOR = slice(_DATA.stop, _DATA.stop + len(Floor._fields))
_REWIND, _LAG_SINCE = _FLOOR.stop, _FLOOR.stop + 1
_RUN = slice(_LAG_SINCE + 1, _LAG_SINCE + 1 + len(Run._fields))
_LAGGING, _OWNERSHIP, _ABOVE_FROM = _RUN.stop, _RUN.stop + 1, _RUN.stop + 2
# The elements PartitionMemory.with_ replaces by name.
_AT = {"changed_at": 1, "quiet_at": _DATA.start + NewData._fields.index("quiet_at"),
       "lag_since": _LAG_SINCE, "lagging": _LAGGING, "ownership": _OWNERSHIP, "above_from": _ABOVE_FROM}


@dataclass(frozen=True)
class _Fields:
    """PartitionMemory's fields, one concern each (read through its properties)."""

    followed: int  # the followed offset (:class:`StepInput`)
    changed_at: float  # when it last moved
    data: NewData
    floor: Floor
    rewind: Rewind
    lag_since: float | None  # the stall clock (:func:`stall_clock`)
    trend: Trend
    ownership: Ownership
    # Share groups: the first sample of the current run whose estimate of what was
    # acknowledged (HW - the broker's lag) stood above ``followed`` (evaluator._share_dates).
    above_from: float | None = None


class PartitionMemory(tuple):
    """Per partition of a group, one concern per field (:class:`_Fields`). Immutable:
    :func:`remember` replaces it whole.

    Stored flat: one tuple of 24 elements instead of an object holding four tuples
    (``NewData``, ``Floor``, ``Trend`` and its ``Run``), 224 bytes a partition instead
    of 448 (100k of these are kept). The concerns are read as their tuples, built on
    access; the dataclass interface stays (``dataclasses.replace``, ``fields``, equality
    of every field)."""

    __slots__ = ()
    __dataclass_fields__ = _Fields.__dataclass_fields__  # type: ignore[assignment]

    def __new__(cls, followed: int, changed_at: float, data: NewData, floor: Floor, rewind: Rewind,
                lag_since: float | None, trend: Trend, ownership: Ownership,
                above_from: float | None = None) -> PartitionMemory:
        return tuple.__new__(cls, (followed, changed_at, *data, *floor, rewind, lag_since,
                                   *(trend.run or _NO_RUN), trend.lagging, ownership, above_from))

    def __repr__(self) -> str:
        return "PartitionMemory(" + ", ".join(
            f"{f}={getattr(self, f)!r}" for f in self.__dataclass_fields__) + ")"

    followed = property(itemgetter(0))
    changed_at = property(itemgetter(1))
    rewind = property(itemgetter(_REWIND))
    lag_since = property(itemgetter(_LAG_SINCE))
    ownership = property(itemgetter(_OWNERSHIP))
    above_from = property(itemgetter(_ABOVE_FROM))
    # Read without building the concern's tuple (the hot paths ask only these).
    freeze_hw = property(itemgetter(_DATA.start + NewData._fields.index("freeze_hw")))
    new_data_at = property(itemgetter(_DATA.start + NewData._fields.index("new_data_at")))
    floor_at = property(itemgetter(_FLOOR.start + Floor._fields.index("at")))
    lagging = property(itemgetter(_LAGGING))  # trend.lagging

    @property
    def data(self) -> NewData:
        return NewData._make(self[_DATA])

    @property
    def floor(self) -> Floor:
        return Floor._make(self[_FLOOR])

    @property
    def trend(self) -> Trend:
        return Trend(Run._make(self[_RUN]) if self.has_run else None, self[_LAGGING])

    @property
    def has_run(self) -> bool:
        """``trend.run is not None`` (a Run's first element, its start, is never None)."""
        return self[_RUN.start] is not None

    def with_(self, floor: Floor | None = None, **changes: Any) -> PartitionMemory:
        """This memory with the floor and the elements named in ``changes`` (in ``_AT``)
        replaced: one new tuple, no concern rebuilt."""
        items = list(self)
        for name, value in changes.items():
            items[_AT[name]] = value
        if floor is not None:
            items[_FLOOR] = floor
        return tuple.__new__(PartitionMemory, items)

    @classmethod
    def first(cls, followed: int, now: float) -> PartitionMemory:
        """The memory of a partition seen for the first time."""
        return cls(followed=followed, changed_at=now,
                   data=NewData(freeze_hw=None, quiet_at=now, flow_at=now, tail_from=None,
                                new_data_at=None, arrived_at=now),
                   floor=Floor(-1, followed, now), rewind=_NO_REWIND, lag_since=None,
                   trend=_NO_TREND, ownership=_NO_OWNER)


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """This cycle's evidence for one partition, and the memory the next cycle needs
    (``after``: :func:`remember` keeps it, with the lag trend ended by a severe status)."""

    rewinding: bool  # :func:`rewind_evidence`: a confirmed rewind is being reported
    rewind_pending: bool  # :func:`rewind_evidence`: it moved backwards, confirmed or not next cycle
    stalled_seconds: float  # :func:`stall_clock`
    frozen_seconds: float  # committed unchanged (whether or not there was lag)
    new_data_seconds: float | None  # :func:`new_data`: since records first arrived after the freeze
    unowned_confirmed: bool  # :func:`ownership`: nobody owned it STOPPED_AFTER_CYCLES in a row
    lagging: bool  # :func:`commit_trend`
    after: PartitionMemory


# -- new-data evidence -------------------------------------------------------------------

def _arrived(before: int | None, hw: int | None, unknown: bool = False) -> bool:
    """Records arrived since ``before`` (the later HW higher); ``unknown`` when either HW
    is: a run extends only on proof, a lagging trend is not ended without it."""
    if before is None or hw is None:
        return unknown
    return hw > before


def new_data(before: NewData, moved: bool, changed_at: float, hw: int | None, now: float,
             stall_after: float) -> NewData:
    """Did records arrive after the committed offset stopped moving (at ``changed_at``)?
    Without that, a frozen offset with lag may be a tail the consumer read but commits only
    with the next records.

    Records arriving after the freeze may be the end of a burst the consumer read and will
    commit with the next records (it commits only when records arrive): they are evidence
    once they keep arriving for ``stall_after`` (and then date from the first of them, so a
    consumer stuck in steady traffic is stalled as early as without this allowance), or
    arrive again after a pause: a burst ended and the next began. A pause shorter than half
    of ``stall_after`` within records that were already arriving is a producer's hiccup, not
    the end of a burst: it leaves the evidence dated from the first records (else one quiet
    second under a steady producer delays ``stalled`` by up to ``stall_after``); a healthy
    consumer that commits when records arrive is at most that pause plus its commit gap
    behind when they resume, well within ``stall_after``."""
    arrived_at = now if _arrived(before.freeze_hw, hw) else before.arrived_at
    if moved or before.freeze_hw is None:
        # Records were arriving as the consumer committed: more of them after a short
        # pause (a clumpy producer) are the same burst's tail, not fresh records.
        tail_from = now if moved and _arrived(before.freeze_hw, hw) else None
        return NewData(hw, now, now, tail_from, None, arrived_at)
    _, quiet_at, flow_at, tail_from, new_data_at, _ = before
    if new_data_at is None and hw is not None:
        if hw > before.freeze_hw:
            paused = quiet_at > changed_at and (
                tail_from is None or quiet_at - flow_at >= QUIET_FRACTION * stall_after)
            if paused:  # fresh records after a pause
                new_data_at = quiet_at
            elif now - changed_at >= stall_after:  # still flowing: no tail
                new_data_at = tail_from if tail_from is not None else quiet_at
            elif tail_from is None:
                tail_from = quiet_at
            flow_at = now
        elif hw == before.freeze_hw:
            quiet_at = now
    freeze_hw = before.freeze_hw if hw is None else hw
    return NewData(freeze_hw, quiet_at, flow_at, tail_from, new_data_at, arrived_at)


# -- late-commit floor and rewind --------------------------------------------------------

def late_commit_floor(before: Floor, committed_before: int, now: float) -> Floor:
    """The floor a window on: every LATE_COMMIT_WINDOW the offset a window ago becomes the
    floor and the committed offset before this sample the next one."""
    if floor_rolls(before.at, now):
        return Floor(before.next, committed_before, now)
    return before


def late_commit(floor: Floor, committed_before: int, committed: int, owned: bool) -> bool:
    """A backward move that is a commit retried after a newer one succeeded: a member owns
    the partition and the offset lands no lower than it stood a LATE_COMMIT_WINDOW or more
    ago (KIP-848 groups under a slow coordinator acknowledge an older retried commit after a
    newer one, and no record is delivered again). An offset reset needs an empty group (the
    tools refuse otherwise) and a consumer seeking back goes further than a minute."""
    return committed < committed_before and owned and committed >= floor.low


def rewind_evidence(before: Rewind, committed_before: int, committed: int, late: bool,
                    now: float, interval: float) -> Rewind:
    """A backward move is a rewind once the next sample is still below where it was: when
    a partition moves between members, a commit of the old owner can land after the new
    owner's (KIP-848 scale-out) and the next commit jumps past it; an offset reset stays.
    A confirmed rewind is reported for REWIND_HOLD_CYCLES so that scrapes see it. The
    ``rewind`` rule reads ``now < until``."""
    if committed < committed_before and not late:
        return Rewind(before.until, max(committed_before, before.pending or committed_before))
    if before.pending is not None and committed < before.pending:
        return Rewind(now + REWIND_HOLD_CYCLES * interval, None)
    return before if before.pending is None else Rewind(before.until, None)


# -- stall clock -------------------------------------------------------------------------

def stall_clock(lag_since: float | None, lag_off: int | None, lag_s: float | None,
                changed_at: float, acknowledged_at: float | None,
                now: float) -> tuple[float | None, float]:
    """(since when the partition has had lag, seconds stalled): the time since the latest of
    the committed offset's last move, the lag's start and (share groups) the group's last
    progress. Lag that appeared since the last sample dates from the arrival of the oldest
    record not yet consumed (its lag seconds), not from the sample that saw it: a consumer
    that stops committing just after a sample at which it was caught up is stalled
    ``stall_after`` after that, not one interval later. No lag: no clock."""
    if not lag_off:
        return None, 0.0
    since = lag_since if lag_since is not None else now - max(lag_s or 0.0, 0.0)
    return since, now - max(changed_at, since, acknowledged_at or changed_at)


# -- commit-run trend --------------------------------------------------------------------

def extend_run(run: Run | None, now: float, committed: int, lag_s: float | None,
               hw: int | None) -> Run:
    """The run of commits with growing lag, after a commit seen now: extended when the
    committed offset advanced, records arrived (HW moved) and lag seconds grew since the
    run's last commit, else a new run starts here. Without new records the lag only ages
    (a burst's tail committed in steps): nobody is falling behind."""
    if (run is not None and committed > run.committed and lag_s is not None and run.lag_s is not None
            and lag_s > run.lag_s and _arrived(run.hw, hw)):
        return Run(run.t0, run.l0, run.n + 1, max(run.gap, now - run.t_last), now, committed, lag_s, hw)
    return Run(now, lag_s, 1, 0.0, now, committed, lag_s, hw)


def lag_trend(was_lagging: bool, run: Run, prev: Run | None, lag_s: float,
              lag_threshold: float, interval: float, quiet: bool = False) -> bool:
    """Lagging when lag seconds exceed the threshold, or when lag seconds grew at each of
    the last two commits or more while records arrived (the run, judged at commits so
    batch committers and share groups acknowledging in steps compare like with like), by
    a quarter of the time elapsed or more *and* by more than the noise of a consumer
    keeping up: lag seconds read at commits wander by up to one commit gap plus one
    sampling interval (the interpolation's resolution), so growth within that is no
    evidence. A partition that changed owner starts a new run (see :func:`commit_trend`).

    Once lagging it stays so until, from one commit to the next, the lag shrinks in
    seconds *and* in offsets (catching up shrinks both), until no record has arrived for
    half of ``stall_after`` (``quiet``: the lag only ages), or until the lag falls within
    one interval (a ``read_committed`` consumer left one transaction marker behind). One
    measure alone is not enough: a producer's pause of a cycle shrinks the offsets while
    the seconds grow, and the consumer reading past that pause later shrinks the seconds
    while the offsets grow; either ended a slow consumer's `lagging` for three cycles.
    (A new pause in the very cycle the consumer reads past an old one still shrinks both.)"""
    if lag_s > lag_threshold:
        return True
    if was_lagging:
        if lag_s <= interval or quiet:
            return False
        return prev is None or prev.lag_s is None or not (
            lag_s < prev.lag_s and _behind(run) < _behind(prev))
    if run.n < TREND_MIN_COMMITS or run.l0 is None or run.lag_s is None:
        return False
    growth = run.lag_s - run.l0
    return growth >= TREND_GROWTH_RATIO * (run.t_last - run.t0) and growth > run.gap + interval


def _behind(run: Run) -> float:
    """Offsets between the run's last commit and the HW then (unknown HW: infinitely far,
    so an unknown lag never counts as shrinking)."""
    return float("inf") if run.hw is None else run.hw - run.committed


def commit_trend(before: Trend, committed_before: int, s: StepInput, new_owner: bool, quiet: bool,
                 tu: Tuning) -> tuple[bool, Trend]:
    """(lagging now, the trend to keep). The trend is judged at commits (:func:`lag_trend`):
    a consumer that commits every few cycles (in batches, or a share group acknowledging in
    steps) is compared commit to commit, and by one owner: a partition's new owner re-reads
    what the old one read but had not committed, and its first commits carry that tail's
    age: it is catching up, not falling behind. ``quiet``: no record arrived for half of
    ``stall_after``. A rewind ends the trend; an unknown HW keeps it as it was."""
    moved = s.followed != committed_before
    prev_run = None if new_owner else before.run
    run = extend_run(prev_run, s.now, s.followed, s.lag_s, s.hw) if moved or prev_run is None else prev_run
    was_lagging = before.lagging and s.followed >= committed_before
    if s.lag_off is None:  # unknown HW: nothing to judge, keep the trend as it was
        return False, _trend(before, run, was_lagging)
    if s.lag_off == 0 or s.lag_s is None:
        return False, _trend(before, run, False if s.lag_off == 0 else was_lagging)
    if moved or prev_run is None or s.lag_s > tu.lag_threshold:
        lagging = lag_trend(was_lagging, run, prev_run, s.lag_s, tu.lag_threshold, tu.interval, quiet)
    else:  # no commit this cycle: the trend stands until the next one, unless no record
        # arrived for a while (a lag that only ages is not growing)
        lagging = was_lagging and not quiet
    return lagging, _trend(before, run, lagging)


def _trend(before: Trend, run: Run | None, lagging: bool) -> Trend:
    """``Trend(run, lagging)``, the same object as ``before`` when that is what it holds."""
    return before if before.run is run and before.lagging == lagging else Trend(run, lagging)


# -- ownership ---------------------------------------------------------------------------

def ownership(before: Ownership, owned: bool, owner: str | None) -> tuple[Ownership, bool, bool]:
    """(ownership to keep, the owner changed, nobody owned the partition for
    STOPPED_AFTER_CYCLES cycles in a row: one empty cycle may be a rebalance or a
    coordinator failover, read by the ``unowned`` rule). ``owner``: the owning member's id
    when known; an unknown owner keeps the last known one."""
    new_owner = owner is not None and before.owner is not None and owner != before.owner
    unowned = 0 if owned else before.unowned + 1
    keep = owner is None or owner == before.owner
    # The same object when nothing changed: no allocation for a partition at rest.
    if keep and unowned == before.unowned:
        after = before
    elif owner is None and before.owner is None and unowned < len(_UNOWNED):
        after = _UNOWNED[unowned]  # nobody ever owned it: one shared object per count
    else:
        after = Ownership(before.owner if owner is None else owner, unowned)
    return after, new_owner, unowned >= STOPPED_AFTER_CYCLES


# -- the step ----------------------------------------------------------------------------

def observe(mem: PartitionMemory, s: StepInput, tu: Tuning) -> Observation:
    """Pure: this cycle's evidence for one partition and the memory the next cycle will
    need, one step per concern."""
    moved = s.followed != mem.followed
    changed_at = s.now if moved else mem.changed_at
    data = new_data(mem.data, moved, mem.changed_at, s.hw, s.now, tu.stall_after)
    floor = late_commit_floor(mem.floor, mem.followed, s.now)
    late = late_commit(floor, mem.followed, s.followed, s.owned)
    rewind = rewind_evidence(mem.rewind, mem.followed, s.followed, late, s.now, tu.interval)
    lag_since, stalled_s = stall_clock(mem.lag_since, s.lag_off, s.lag_s, changed_at,
                                       s.acknowledged_at, s.now)
    owners, new_owner, unowned_confirmed = ownership(mem.ownership, s.owned, s.owner)
    quiet = s.now - data.arrived_at >= QUIET_FRACTION * tu.stall_after
    lagging, trend = commit_trend(mem.trend, mem.followed, s, new_owner, quiet, tu)
    after = PartitionMemory(followed=s.followed, changed_at=changed_at, data=data, floor=floor,
                            rewind=rewind, lag_since=lag_since, trend=trend, ownership=owners,
                            above_from=mem.above_from)
    return Observation(
        rewinding=s.now < rewind.until, rewind_pending=rewind.pending is not None,
        stalled_seconds=stalled_s, frozen_seconds=s.now - changed_at,
        new_data_seconds=None if data.new_data_at is None else s.now - data.new_data_at,
        unowned_confirmed=unowned_confirmed, lagging=lagging, after=after)


def remember(obs: Observation, status: Status, share: tuple[float | None, float | None] | None = None
             ) -> PartitionMemory:
    """The partition's next memory, replacing the old one whole. The lag trend ends when a
    more severe status took over, so a consumer recovering from a stall starts afresh.
    ``share`` (share groups): (when certain progress happened, the next ``above_from``),
    from evaluator._share_dates: the progress is dated then, not at this sample."""
    after = obs.after
    lagging = after.lagging and status in (Status.OK, Status.LAGGING)
    changed_at, above_from = after.changed_at, after.above_from
    if share is not None:
        moved_at, above_from = share
        changed_at = changed_at if moved_at is None else moved_at
    # Built directly, not with dataclasses.replace: this runs for every group-partition.
    return after.with_(changed_at=changed_at, lagging=lagging, above_from=above_from)


# -- a partition at rest -----------------------------------------------------------------

def at_rest(mem: PartitionMemory, committed: int, hw: int | None, owner: str | None) -> bool:
    """Nothing to judge and nothing moving: the committed offset and the HW as at the last
    sample, no lag, no backward move pending, a lag trend started and not lagging, the
    same owner (or none known). Most group-partitions of a large cluster are at rest in
    most cycles (caught-up groups, idle topics); :func:`rest_step` is their memory step.
    exporter/evaluate/rest.py reads the same from a group's columns (``_rows_at_rest``);
    ``tests/test_rest.py`` holds the two equal."""
    return (committed == mem.followed and hw is not None and hw <= committed
            and hw == mem.freeze_hw and mem.rewind.pending is None
            and mem.has_run and not mem.lagging
            and (owner is None or owner == mem.ownership.owner))


def rest_step(mem: PartitionMemory, owned: bool, owner: str | None, now: float) -> PartitionMemory:
    """``remember(observe(mem, sample), OK)`` for a partition :func:`at_rest` (a committed
    partition of a group other than a share group), without the evidence nobody reads:
    with no lag every rule says ``ok``, so only the clocks a later cycle needs move (the
    quiet HW's, the late-commit floor's window, the cycles nobody owned it).
    ``tests/test_memory_steps.py`` holds it equal to the full step."""
    return mem.with_(floor=late_commit_floor(mem.floor, mem.followed, now), lag_since=None,
                     ownership=ownership(mem.ownership, owned, owner)[0],
                     **({} if mem.new_data_at is not None else {"quiet_at": now}))


def floor_rolls(at: float, now: float) -> bool:
    """The late-commit floor last rolled at ``at`` rolls again at ``now``."""
    return now - at >= LATE_COMMIT_WINDOW


def rolled_floor(floor: Floor, committed: int, rolls: int, at: float) -> Floor:
    """The floor after ``rolls`` rolls, the last at ``at``, while the committed offset
    stood at ``committed``: :func:`late_commit_floor` repeated."""
    if rolls == 0:
        return floor
    return Floor(floor.next if rolls == 1 else committed, committed, at)


def settle_rest(mem: PartitionMemory, cycles: int, last: float, floor: Floor) -> PartitionMemory:
    """:func:`rest_step` applied for ``cycles`` cycles with the same sample, the last at
    ``last``, the floor then ``floor`` (:func:`rolled_floor`): the quiet HW's time is the
    last cycle's, and a partition nobody owned (its unowned count above 0 after any step)
    was unowned ``cycles`` more. ``tests/test_rest.py`` holds it equal to the steps."""
    own = mem.ownership
    if own.unowned:
        n = own.unowned + cycles
        own = _UNOWNED[n] if own.owner is None and n < len(_UNOWNED) else Ownership(own.owner, n)
    return mem.with_(floor=floor, ownership=own,
                     **({} if mem.new_data_at is not None else {"quiet_at": last}))


@dataclass
class GroupMemory:
    members: set[str] = field(default_factory=set)
    epoch: int | None = None  # group epoch at the last cycle (KIP-848, streams, share)
    joins: Latest[float] = field(default_factory=lambda: Latest(maxlen=MAX_JOINS))
    seen_once: bool = False
    parts: dict[tuple[str, int], PartitionMemory] = field(default_factory=dict)
    last_view: GroupView | None = None  # kept for a cycle in which the group cannot be read
    unreadable_since: float | None = None  # the group could not be read from then on
    # Share groups (KIP-932) own no partitions: every member fetches from every partition and
    # the broker rotates which partitions a fetch serves first, so under a backlog a partition
    # can wait several fetches for its turn while the group acknowledges records elsewhere.
    # That partition is not stuck; its stall clock is the group's: the last cycle at which
    # the group progressed on any partition.
    acknowledged_at: float | None = None
    # Commits by a client outside group membership: the last cycle at which a committed
    # offset moved forward while the group was empty then and the cycle before (a member
    # committing as it leaves lands in the first empty cycle), and the gaps between such
    # cycles while the group was healthy.
    outside_at: float | None = None
    outside_gaps: Latest[float] = field(default_factory=lambda: Latest(maxlen=OUTSIDE_GAPS))
    # A member group's last commit was made after this time: the cycle before the one that
    # saw it (exporter/evaluate/cadence.py measures the next gap from it).
    committed_after: float | None = None
    # Partitions a member owns without a committed offset: (member id, owned since, HW then,
    # when records first arrived after that), while the same member owns it.
    uncommitted: dict[tuple[str, int], tuple[str, float, int | None, float | None]] = field(
        default_factory=dict)
    # Who left and when (exporter/evaluate/departures.py): the members seen last cycle, with
    # the last assignment each held, and the latest departures.
    seen: dict[str, Member] = field(default_factory=dict)
    departed: Latest[Departure] = field(default_factory=new_departures)


def remember_uncommitted(mem: GroupMemory, tp: tuple[str, int], owner: str, hw: int | None,
                         now: float) -> tuple[float, float | None]:
    """A partition owned by ``owner`` and never committed, seen now: (seconds it has been
    owned so, seconds since records first arrived after it was assigned, or None). A new
    owner restarts both clocks: its assignment is when it could start committing."""
    was = mem.uncommitted.get(tp)
    if was is None or was[0] != owner:
        was = (owner, now, hw, None)
    _, since, hw0, arrived = was
    if hw0 is None:
        hw0 = hw
    elif arrived is None and hw is not None and hw > hw0:
        # the first sample showing new records: they arrived within the last cycle
        arrived = now
    mem.uncommitted[tp] = (owner, since, hw0, arrived)
    return now - since, None if arrived is None else now - arrived


def forget_uncommitted(mem: GroupMemory, keep: set[tuple[str, int]]) -> None:
    for tp in [tp for tp in mem.uncommitted if tp not in keep]:
        del mem.uncommitted[tp]


def remember_outside(mem: GroupMemory, moved: bool, empty: bool, was_empty: bool, healthy: bool,
                     now: float) -> None:
    """Keep the evidence of a client committing outside group membership: ``moved`` (a
    committed offset moved forward this cycle), ``empty`` (no members now), ``was_empty``
    (none the cycle before either), ``healthy`` (last cycle's status ok or lagging: only
    then is a gap the client's cadence, not a stall it recovered from). Members joining
    end the model."""
    if not empty:
        mem.outside_at = None
        mem.outside_gaps.clear()
        return
    if not (moved and was_empty):
        return
    if mem.outside_at is not None and healthy:
        mem.outside_gaps.append(now - mem.outside_at)
    mem.outside_at = now


def outside_cadence(mem: GroupMemory) -> float | None:
    """The typical gap between the outside client's commits (median of the last gaps)."""
    if not mem.outside_gaps:
        return None
    gaps = sorted(mem.outside_gaps)
    return gaps[len(gaps) // 2]


def outside_allowance(mem: GroupMemory, stall_after: float, interval: float) -> float:
    """How long a partition of an outside-committed group may wait for a commit while
    records wait: the widest learnt gap plus one cycle, within
    [``stall_after``, ``OUTSIDE_CADENCE_BOUND`` x ``stall_after``]; the bound until learnt."""
    bound = OUTSIDE_CADENCE_BOUND * stall_after
    if not mem.outside_gaps:
        return bound
    return min(bound, max(stall_after, max(mem.outside_gaps) + interval))


def remember_members(mem: GroupMemory, member_ids: set[str], now: float, window: float,
                     epoch: int | None = None) -> int:
    """Record which members are in the group now; returns the joins within ``window``.

    Members absent last cycle and present now count as joins (first cycle excepted). In
    KIP-848 consumer, streams and share groups a member kicked out by
    ``max.poll.interval.ms`` rejoins with the same member id, often between two samples;
    the coordinator bumps the group epoch once when it leaves and once when it rejoins
    (KIP-848, "Group Epoch"), so an epoch that moved while the members stayed the same
    counts one join per two bumps."""
    if mem.seen_once:
        mem.joins.extend(repeat(now, len(member_ids - mem.members)))
        if (epoch is not None and mem.epoch is not None and epoch > mem.epoch
                and member_ids and member_ids == mem.members):
            mem.joins.extend(repeat(now, max(1, (epoch - mem.epoch) // 2)))
    mem.seen_once = True
    mem.members = member_ids
    mem.epoch = epoch
    while mem.joins and mem.joins[0] < now - window:
        mem.joins.popleft()
    return len(mem.joins)


def joins_since(mem: GroupMemory, t: float) -> int:
    """Joins remembered (within the window) after time ``t``."""
    return len(mem.joins) - bisect.bisect_right(mem.joins, t)
