"""What the evaluator remembers between cycles, and the one place where it changes.

A cycle runs in three steps per partition: :func:`observe` (pure) derives this
cycle's values from the memory and the new sample, the rules classify them,
and :func:`remember` (the only function that mutates a :class:`PartitionMemory`)
keeps what the next cycle needs. Group-level memory (members seen, join times)
changes only in :func:`remember_members`.
"""

from __future__ import annotations

import bisect
import collections
from dataclasses import dataclass, field
from typing import NamedTuple

from exporter.contracts.status import Status
from exporter.contracts.view import GroupView

REWIND_HOLD_CYCLES = 5  # a rewind is reported this many cycles so that scrapes see it
# How late a member's commit can land: a client retries a commit for up to its request
# timeout, 60 s by default in librdkafka (socket.timeout.ms) and in the Java client
# (default.api.timeout.ms). A backward move within that is a late commit, not a rewind.
LATE_COMMIT_WINDOW = 60.0
STOPPED_AFTER_CYCLES = 2  # a coordinator failover can show a group empty for one cycle
MAX_JOINS = 64
# A client outside group membership (assign(): Flink's Kafka source, Spark committing to a
# group) commits at its own cadence, every checkpoint. Its stall allowance is the widest
# gap seen between its commits while healthy, plus one cycle, never less than
# ``stall_after`` and never more than this many times ``stall_after``: a consumer that slows
# down is still caught, by this bound and by the lag rules. Until a gap is seen the bound
# applies (one commit says nothing about the next).
OUTSIDE_CADENCE_BOUND = 4
OUTSIDE_GAPS = 8  # the last gaps between outside commits that the cadence is learnt from

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


class PartitionMemory:
    """Per partition of a group. Slotted and tuple-based: 100k of these must stay small."""

    __slots__ = ("committed", "changed_at", "freeze_hw", "tail_from", "quiet_at", "flow_at", "new_data_at",
                 "lag_since", "run", "lagging", "rewind_until", "rewind_from", "unowned",
                 "floor", "owner", "arrived_at", "above_from")

    def __init__(self, committed: int, now: float) -> None:
        self.committed = committed
        self.changed_at = now
        self.freeze_hw: int | None = None  # the last known HW (the last sample's, with a HW)
        self.tail_from: float | None = None  # records arrived right after the freeze, since
        self.quiet_at = now  # last sample at which HW was still freeze_hw
        self.flow_at = now  # last sample at which records had arrived since the one before
        self.new_data_at: float | None = None  # records arrived after the freeze, from then on
        self.lag_since: float | None = None
        self.run: Run | None = None  # the current run of commits with growing lag
        self.lagging = False
        self.rewind_until = 0.0
        self.rewind_from: int | None = None  # committed before a backward move not yet confirmed
        self.unowned = 0  # consecutive cycles nobody owned the partition
        # (floor, next, at): the committed offset one to two LATE_COMMIT_WINDOWs ago, and the
        # one a window ago that becomes it at ``at`` + LATE_COMMIT_WINDOW: what a late commit
        # of a member can land on. In the first window anything can (-1): a commit made
        # before lagwatch first saw the partition can still land.
        self.floor: tuple[int, int, float] = (-1, committed, now)
        self.owner: str | None = None  # member id of the last known owner
        self.arrived_at = now  # last sample whose HW was above the one before
        # Share groups: the first sample of the current run whose estimate of what was
        # acknowledged (HW - the broker's lag) stood above ``committed`` (see evaluator).
        self.above_from: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """This cycle's values for one partition, derived from memory plus the new sample.

    ``next_*`` fields are what :func:`remember` stores."""

    rewinding: bool
    rewind_pending: bool
    stalled_seconds: float
    frozen_seconds: float
    new_data_seconds: float | None
    unowned_confirmed: bool
    lagging: bool
    next_changed_at: float
    next_freeze_hw: int | None
    next_quiet_at: float
    next_flow_at: float
    next_tail_from: float | None
    next_new_data_at: float | None
    next_lag_since: float | None
    next_run: Run | None
    next_lagging: bool
    next_rewind_until: float
    next_rewind_from: int | None
    next_unowned: int
    next_floor: tuple[int, int, float]  # floor, floor_next, floor_at
    next_owner: str | None
    next_arrived_at: float


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


def _arrived(before: int | None, hw: int | None, unknown: bool = False) -> bool:
    """Records arrived since ``before`` (the later HW higher); ``unknown`` when either HW
    is: a run extends only on proof, a lagging trend is not ended without it."""
    if before is None or hw is None:
        return unknown
    return hw > before


def lag_trend(was_lagging: bool, run: Run, prev: Run | None, lag_s: float,
              lag_threshold: float, interval: float, quiet: bool = False) -> bool:
    """Lagging when lag seconds exceed the threshold, or when lag seconds grew at each of
    the last two commits or more while records arrived (the run, judged at commits so
    batch committers and share groups acknowledging in steps compare like with like), by
    a quarter of the time elapsed or more *and* by more than the noise of a consumer
    keeping up: lag seconds read at commits wander by up to one commit gap plus one
    sampling interval (the interpolation's resolution), so growth within that is no
    evidence. A partition that changed owner starts a new run (see :func:`observe`).

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
    if run.n < 3 or run.l0 is None or run.lag_s is None:
        return False
    growth = run.lag_s - run.l0
    return growth >= 0.25 * (run.t_last - run.t0) and growth > run.gap + interval


def _behind(run: Run) -> float:
    """Offsets between the run's last commit and the HW then (unknown HW: infinitely far,
    so an unknown lag never counts as shrinking)."""
    return float("inf") if run.hw is None else run.hw - run.committed


def observe(mem: PartitionMemory, committed: int, hw: int | None, lag_off: int | None,
            lag_s: float | None, owned: bool, now: float, interval: float,
            lag_threshold: float, stall_after: float,
            queue_progress_at: float | None = None, owner: str | None = None) -> Observation:
    """Pure: this cycle's derived values and the memory the next cycle will need.
    ``queue_progress_at`` (share groups): when the group last progressed on any partition,
    which restarts this partition's stall clock too (see ``GroupMemory.queue_progress_at``).
    ``owner``: the member id owning the partition, when known."""
    rewound = committed < mem.committed
    moved = committed != mem.committed
    changed_at = now if moved else mem.changed_at
    # Did records arrive after the committed offset stopped moving? Without that, a frozen
    # offset with lag may be a tail the consumer read but commits only with the next records.
    # Records arriving after the freeze may be the end of a burst the consumer read and
    # will commit with the next records (it commits only when records arrive): they are
    # evidence once they keep arriving for ``stall_after`` (and then date from the first of
    # them, so a consumer stuck in steady traffic is stalled as early as without this
    # allowance), or arrive again after a pause: a burst ended and the next began. A pause
    # shorter than half of ``stall_after`` within records that were already arriving is a
    # producer's hiccup, not the end of a burst: it leaves the evidence dated from the first
    # records (else one quiet second under a steady producer delays ``stalled`` by up to
    # ``stall_after``); a healthy consumer that commits when records arrive is at most that
    # pause plus its commit gap behind when they resume, well within ``stall_after``.
    if moved or mem.freeze_hw is None:
        freeze_hw, quiet_at, flow_at, tail_from, new_data_at = hw, now, now, None, None
        if moved and _arrived(mem.freeze_hw, hw):
            # Records were arriving as the consumer committed: more of them after a short
            # pause (a clumpy producer) are the same burst's tail, not fresh records.
            tail_from = now
    else:
        freeze_hw, quiet_at, flow_at, tail_from, new_data_at = (
            mem.freeze_hw, mem.quiet_at, mem.flow_at, mem.tail_from, mem.new_data_at)
        if new_data_at is None and hw is not None:
            if hw > freeze_hw:
                paused = quiet_at > changed_at and (
                    tail_from is None or quiet_at - flow_at >= stall_after / 2)
                if paused:  # fresh records after a pause
                    new_data_at = quiet_at
                elif now - changed_at >= stall_after:  # still flowing: no tail
                    new_data_at = tail_from if tail_from is not None else quiet_at
                elif tail_from is None:
                    tail_from = quiet_at
                flow_at = now
            elif hw == freeze_hw:
                quiet_at = now
        if hw is not None:
            freeze_hw = hw
    # A backward move is a rewind once the next sample is still below where it was: when a
    # partition moves between members, a commit of the old owner can land after the new
    # owner's (KIP-848 scale-out) and the next commit jumps past it; an offset reset stays.
    # Nor is it one when a member owns the partition and the offset lands no lower than it
    # stood a LATE_COMMIT_WINDOW or more ago: a commit retried after a newer one succeeded
    # (KIP-848 groups under a slow coordinator: the broker acknowledged 227, then 177, and
    # no record was delivered again). An offset reset needs an empty group (the tools
    # refuse otherwise) and a consumer seeking back goes further than a minute.
    floor, floor_next, floor_at = mem.floor
    if now - floor_at >= LATE_COMMIT_WINDOW:
        floor, floor_next, floor_at = floor_next, mem.committed, now
    late_commit = rewound and owned and committed >= floor
    rewind_until, rewind_from = mem.rewind_until, None
    if rewound and not late_commit:
        rewind_from = max(mem.committed, mem.rewind_from or mem.committed)
    elif mem.rewind_from is not None and committed < mem.rewind_from:
        rewind_until = now + REWIND_HOLD_CYCLES * interval
    has_lag = bool(lag_off)
    # Lag that appeared since the last sample dates from the arrival of the oldest record not
    # yet consumed (its lag seconds), not from the sample that saw it: a consumer that stops
    # committing just after a sample at which it was caught up is stalled ``stall_after``
    # after that, not one interval later.
    if has_lag:
        lag_since = mem.lag_since if mem.lag_since is not None else now - max(lag_s or 0.0, 0.0)
    else:
        lag_since = None
    stalled_s = (now - max(changed_at, lag_since, queue_progress_at or changed_at)
                 if lag_since is not None else 0.0)
    # The lag trend is judged at commits: a consumer that commits every few cycles (in
    # batches, or a share group acknowledging in steps) is compared commit to commit, and
    # by one owner: a partition's new owner re-reads what the old one read but had not
    # committed, and its first commits carry that tail's age (a group scaling in, on a
    # quiet topic, read `lagging` for a cycle): it is catching up, not falling behind.
    new_owner = owner is not None and mem.owner is not None and owner != mem.owner
    arrived_at = now if _arrived(mem.freeze_hw, hw) else mem.arrived_at
    quiet = now - arrived_at >= stall_after / 2
    prev_run = None if new_owner else mem.run
    run = extend_run(prev_run, now, committed, lag_s, hw) if moved or prev_run is None else prev_run
    unowned = 0 if owned else mem.unowned + 1

    was_lagging = mem.lagging and not rewound
    if lag_off is None:  # unknown HW: nothing to judge, keep the trend as it was
        now_lagging, next_lagging = False, was_lagging
    elif lag_off == 0 or lag_s is None:
        now_lagging = False
        next_lagging = False if lag_off == 0 else was_lagging
    elif moved or prev_run is None or lag_s > lag_threshold:
        now_lagging = next_lagging = lag_trend(was_lagging, run, prev_run, lag_s, lag_threshold,
                                               interval, quiet)
    else:  # no commit this cycle: the trend stands until the next one, unless no record
        # arrived for a while (a lag that only ages is not growing)
        now_lagging = next_lagging = was_lagging and not quiet
    return Observation(
        rewinding=now < rewind_until, rewind_pending=rewind_from is not None, stalled_seconds=stalled_s,
        frozen_seconds=now - changed_at,
        new_data_seconds=None if new_data_at is None else now - new_data_at,
        unowned_confirmed=unowned >= STOPPED_AFTER_CYCLES,
        lagging=now_lagging, next_changed_at=changed_at, next_freeze_hw=freeze_hw,
        next_quiet_at=quiet_at, next_flow_at=flow_at, next_tail_from=tail_from, next_new_data_at=new_data_at,
        next_lag_since=lag_since,
        next_run=run, next_lagging=next_lagging, next_rewind_until=rewind_until, next_rewind_from=rewind_from,
        next_unowned=unowned, next_floor=(floor, floor_next, floor_at),
        next_owner=owner if owner is not None else mem.owner, next_arrived_at=arrived_at)


def remember(mem: PartitionMemory, committed: int, obs: Observation, status: Status) -> None:
    """The only place a partition's memory changes. The lag trend ends when a more
    severe status took over, so a consumer recovering from a stall starts afresh."""
    mem.committed = committed
    mem.changed_at = obs.next_changed_at
    mem.freeze_hw = obs.next_freeze_hw
    mem.quiet_at = obs.next_quiet_at
    mem.flow_at = obs.next_flow_at
    mem.tail_from = obs.next_tail_from
    mem.new_data_at = obs.next_new_data_at
    mem.lag_since = obs.next_lag_since
    mem.run = obs.next_run
    mem.rewind_until = obs.next_rewind_until
    mem.rewind_from = obs.next_rewind_from
    mem.unowned = obs.next_unowned
    mem.floor = obs.next_floor
    mem.owner = obs.next_owner
    mem.arrived_at = obs.next_arrived_at
    mem.lagging = obs.next_lagging and status in (Status.OK, Status.LAGGING)


@dataclass
class GroupMemory:
    members: set[str] = field(default_factory=set)
    epoch: int | None = None  # group epoch at the last cycle (KIP-848, streams, share)
    joins: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=MAX_JOINS))
    seen_once: bool = False
    parts: dict[tuple[str, int], PartitionMemory] = field(default_factory=dict)
    last_view: GroupView | None = None  # kept for a cycle in which the group cannot be read
    unreadable_since: float | None = None  # the group could not be read from then on
    # Share groups (KIP-932) own no partitions: every member fetches from every partition and
    # the broker rotates which partitions a fetch serves first, so under a backlog a partition
    # can wait several fetches for its turn while the group acknowledges records elsewhere.
    # That partition is not stuck; its stall clock is the group's: the last cycle at which
    # the group progressed on any partition.
    queue_progress_at: float | None = None
    # Commits by a client outside group membership: the last cycle at which a committed
    # offset moved forward while the group was empty then and the cycle before (a member
    # committing as it leaves lands in the first empty cycle), and the gaps between such
    # cycles while the group was healthy.
    outside_at: float | None = None
    outside_gaps: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=OUTSIDE_GAPS))
    # Partitions a member owns without a committed offset: (member id, owned since, HW then,
    # when records first arrived after that), while the same member owns it.
    uncommitted: dict[tuple[str, int], tuple[str, float, int | None, float | None]] = field(
        default_factory=dict)


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
        mem.joins.extend(now for _ in member_ids - mem.members)
        if (epoch is not None and mem.epoch is not None and epoch > mem.epoch
                and member_ids and member_ids == mem.members):
            mem.joins.extend(now for _ in range(max(1, (epoch - mem.epoch) // 2)))
    mem.seen_once = True
    mem.members = member_ids
    mem.epoch = epoch
    while mem.joins and mem.joins[0] < now - window:
        mem.joins.popleft()
    return len(mem.joins)


def joins_since(mem: GroupMemory, t: float) -> int:
    """Joins remembered (within the window) after time ``t``."""
    return len(mem.joins) - bisect.bisect_right(mem.joins, t)
