"""What the evaluator remembers between cycles, and the one place where it changes.

A cycle runs in three steps per partition: :func:`observe` (pure) derives this
cycle's values from the memory and the new sample, the rules classify them,
and :func:`remember` (the only function that mutates a :class:`PartitionMemory`)
keeps what the next cycle needs. Group-level memory (members seen, join times)
changes only in :func:`remember_members`.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from exporter.status import Status
from exporter.view import GroupView

REWIND_HOLD_CYCLES = 5  # a rewind is reported this many cycles so that scrapes see it
STOPPED_AFTER_CYCLES = 2  # a coordinator failover can show a group empty for one cycle
MAX_JOINS = 64

Sample = tuple[float, int, float | None]  # (time, committed, lag seconds)


class PartitionMemory:
    """Per partition of a group. Slotted and tuple-based: 100k of these must stay small."""

    __slots__ = ("committed", "changed_at", "freeze_hw", "quiet_at", "new_data_at", "lag_since",
                 "samples", "lagging", "rewind_until", "unowned")

    def __init__(self, committed: int, now: float) -> None:
        self.committed = committed
        self.changed_at = now
        self.freeze_hw: int | None = None  # HW when the committed offset last moved
        self.quiet_at = now  # last sample at which HW was still freeze_hw
        self.new_data_at: float | None = None  # records arrived after the freeze, from then on
        self.lag_since: float | None = None
        self.samples: tuple[Sample, ...] = ()  # the last three; a tuple, not a deque (memory)
        self.lagging = False
        self.rewind_until = 0.0
        self.unowned = 0  # consecutive cycles nobody owned the partition


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """This cycle's values for one partition, derived from memory plus the new sample.

    ``next_*`` fields are what :func:`remember` stores."""

    rewinding: bool
    stalled_seconds: float
    frozen_seconds: float
    new_data_seconds: float | None
    unowned_confirmed: bool
    lagging: bool
    next_changed_at: float
    next_freeze_hw: int | None
    next_quiet_at: float
    next_new_data_at: float | None
    next_lag_since: float | None
    next_samples: tuple[Sample, ...]
    next_lagging: bool
    next_rewind_until: float
    next_unowned: int


def lag_trend(was_lagging: bool, samples: tuple[Sample, ...], lag_s: float,
              lag_threshold: float, interval: float) -> bool:
    """Lagging when lag seconds exceed the threshold, or when the committed offset
    advanced at each of the last two commits (samples are taken at commits) while lag
    seconds grew at each (by a quarter of the time elapsed or more, to one interval or
    more); once lagging, it stays so until the lag shrinks from one commit to the next."""
    if lag_s > lag_threshold:
        return True
    if was_lagging:
        prev = samples[-2][2] if len(samples) >= 2 else None
        return not (prev is not None and lag_s < prev)
    if len(samples) < 3:
        return False
    (t0, c0, l0), (_, c1, l1), (t2, c2, l2) = samples
    if l0 is None or l1 is None or l2 is None:
        return False
    # Falling behind by a quarter of the time elapsed or more (half an interval over two
    # cycles when it commits every cycle): a consumer reading less than ~3/4 of what arrives.
    return c0 < c1 < c2 and l0 < l1 < l2 and l2 >= interval and l2 - l0 >= 0.25 * (t2 - t0)


def observe(mem: PartitionMemory, committed: int, hw: int | None, lag_off: int | None,
            lag_s: float | None, owned: bool, now: float, interval: float,
            lag_threshold: float) -> Observation:
    """Pure: this cycle's derived values and the memory the next cycle will need."""
    rewound = committed < mem.committed
    moved = committed != mem.committed
    changed_at = now if moved else mem.changed_at
    # Did records arrive after the committed offset stopped moving? Without that, a frozen
    # offset with lag may be a tail the consumer read but commits only with the next records.
    if moved or mem.freeze_hw is None:
        freeze_hw, quiet_at, new_data_at = hw, now, None
    else:
        freeze_hw, quiet_at, new_data_at = mem.freeze_hw, mem.quiet_at, mem.new_data_at
        if new_data_at is None and hw is not None:
            if hw > freeze_hw:
                new_data_at = quiet_at  # they arrived after the last sample without them
            else:
                quiet_at = now
    rewind_until = now + REWIND_HOLD_CYCLES * interval if rewound else mem.rewind_until
    has_lag = bool(lag_off)
    lag_since = (mem.lag_since if mem.lag_since is not None else now) if has_lag else None
    stalled_s = now - max(changed_at, lag_since) if lag_since is not None else 0.0
    # The lag trend is judged at commits: a consumer that commits every few cycles (in
    # batches, or a share group acknowledging in steps) is compared commit to commit.
    samples = (*mem.samples[-2:], (now, committed, lag_s)) if moved or not mem.samples else mem.samples
    unowned = 0 if owned else mem.unowned + 1

    was_lagging = mem.lagging and not rewound
    if lag_off is None:  # unknown HW: nothing to judge, keep the trend as it was
        now_lagging, next_lagging = False, was_lagging
    elif lag_off == 0 or lag_s is None:
        now_lagging = False
        next_lagging = False if lag_off == 0 else was_lagging
    elif moved or not mem.samples or lag_s > lag_threshold:
        now_lagging = next_lagging = lag_trend(was_lagging, samples, lag_s, lag_threshold, interval)
    else:  # no commit this cycle: the trend stands until the next one
        now_lagging = next_lagging = was_lagging
    return Observation(
        rewinding=now < rewind_until, stalled_seconds=stalled_s,
        frozen_seconds=now - changed_at,
        new_data_seconds=None if new_data_at is None else now - new_data_at,
        unowned_confirmed=unowned >= STOPPED_AFTER_CYCLES,
        lagging=now_lagging, next_changed_at=changed_at, next_freeze_hw=freeze_hw,
        next_quiet_at=quiet_at, next_new_data_at=new_data_at, next_lag_since=lag_since,
        next_samples=samples, next_lagging=next_lagging, next_rewind_until=rewind_until,
        next_unowned=unowned)


def remember(mem: PartitionMemory, committed: int, obs: Observation, status: Status) -> None:
    """The only place a partition's memory changes. The lag trend ends when a more
    severe status took over, so a consumer recovering from a stall starts afresh."""
    mem.committed = committed
    mem.changed_at = obs.next_changed_at
    mem.freeze_hw = obs.next_freeze_hw
    mem.quiet_at = obs.next_quiet_at
    mem.new_data_at = obs.next_new_data_at
    mem.lag_since = obs.next_lag_since
    mem.samples = obs.next_samples
    mem.rewind_until = obs.next_rewind_until
    mem.unowned = obs.next_unowned
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
