"""Per group, each cycle: consume and produce rates, time to catch up, records lost to
retention (:class:`GroupProgress`), added to the evaluated views.

It runs after the judgement and never changes a status or a judgement reason: it reads
the group views and the snapshot's partition offsets, keeps its own memory (a few
points per group-partition, see :mod:`exporter.evaluate.rates`, and the loss counters
of :mod:`exporter.evaluate.retention`) and attaches a :class:`GroupProgress` to each view.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

from exporter.contracts.snapshot import TP, GroupSample, PartitionOffsets
from exporter.contracts.view import GroupProgress, GroupView, PartitionProgress, PartitionView
from exporter.evaluate.rates import (
    Points,
    Rates,
    catchup_seconds,
    caught_up,
    common_rates,
    fmt_duration,
    fmt_rate,
    min_span,
    rates,
)
from exporter.evaluate.retention import below_log_start, lost_step, retained_position

# Partitions named in the notes about records lost, at most.
MAX_LOST_NOTES = 3


@dataclass(slots=True)
class GroupMemo:
    parts: dict[TP, Points] = field(default_factory=dict)  # rate points per partition
    # exporter.evaluate.retention's ``counted_to``, only of the partitions that have one
    counted: dict[TP, int] = field(default_factory=dict)
    lost: dict[TP, int] = field(default_factory=dict)  # per partition with losses, never decreases
    lost_total: int = 0  # kept when a partition goes away: a counter never decreases
    last: GroupProgress | None = None


class _Row(NamedTuple):
    """One judged group-partition this cycle (a named tuple: one per group-partition per
    cycle, built in a fraction of a frozen dataclass's time)."""

    tp: TP
    lag: int
    consumed: int
    log_start: int | None
    rates: Rates | None  # this partition's own, over its own span
    owner: str  # the member that owns it ("" for none): its partitions share its time
    points: Points  # its samples (exporter/evaluate/rates.py)


@dataclass(frozen=True, slots=True)
class _Pool:
    """The backlogged partitions of one owner: what it must get through, how fast it gains."""

    owner: str
    rows: tuple[_Row, ...]
    rates: Rates | None  # summed over a span common to its partitions; None: not known yet
    eta: float | None  # None: not gaining, or rates unknown


class ProgressTracker:
    """The memory behind :class:`GroupProgress` for one cluster: :meth:`begin`, then
    :meth:`one` for each group of a cycle as the evaluator judges it (:meth:`rested` for
    a group at rest), then :meth:`end`."""

    def __init__(self, window: float, interval: float) -> None:
        self.window = window
        self.min_span = min_span(window, interval)
        # A partition whose lag is what its consumer gets through in this long is caught
        # up: records between two commits (or two Spark triggers), not a backlog.
        self.settle = max(interval, window / 10)
        self.groups: dict[str, GroupMemo] = {}
        # One object per distinct PartitionProgress of a cycle (they are frozen).
        self._shared: dict[PartitionProgress, PartitionProgress] = {}
        self._canon: dict[TP, TP] = {}

    def begin(self, partitions: dict[TP, PartitionOffsets]) -> None:
        """A cycle's groups follow; the evaluator annotates each as soon as it is judged,
        so that a group entering rest drops its rate points before the next is judged."""
        self._shared = {}
        # The snapshot's own (topic, partition) keys: one object per partition, not one per
        # group-partition, in the memory kept and in the figures served.
        self._canon = {tp: tp for tp in partitions}

    def rested(self, gid: str, v: GroupView) -> None:
        """A group at rest: its view carries its figures already (exporter/evaluate/rest.py)."""
        self.groups.setdefault(gid, GroupMemo()).last = v.progress

    def one(self, gid: str, v: GroupView, sample: GroupSample,
            partitions: dict[TP, PartitionOffsets], now: float) -> GroupView:
        """One group's view with its figures."""
        memo = self.groups.setdefault(gid, GroupMemo())
        if sample.error is None:
            memo.last = self._group(memo, v, partitions, now)
        # An unreadable group keeps its last figures, like its last judgement.
        return dataclasses.replace(v, progress=memo.last) if memo.last else v

    def end(self, views: dict[str, GroupView]) -> None:
        """The cycle's groups are done: ``views`` holds every group of the cycle."""
        for gid in [g for g in self.groups if g not in views]:
            del self.groups[gid]  # deleted group: its series vanish with it
        self._shared, self._canon = {}, {}

    def _group(self, memo: GroupMemo, v: GroupView, partitions: dict[TP, PartitionOffsets],
               now: float) -> GroupProgress:
        rows: list[_Row] = []
        for p in v.partitions:
            tp = (p.topic, p.partition)
            row = self._observe(memo, self._canon.get(tp, tp), p, partitions.get(tp), now)
            if row is not None and not p.unsubscribed:
                rows.append(row)
        seen = {(p.topic, p.partition) for p in v.partitions}
        for tp in [tp for tp in memo.parts if tp not in seen]:
            del memo.parts[tp]
            memo.lost.pop(tp, None)
            memo.counted.pop(tp, None)
        return summarize(rows, memo, self.settle, self.min_span, self._shared)

    def _observe(self, memo: GroupMemo, tp: TP, p: PartitionView, po: PartitionOffsets | None,
                 now: float) -> _Row | None:
        """Remember this cycle's consumed offset and HW of one partition; count losses."""
        if p.committed is None or p.lag_offsets is None or po is None or po.hw is None:
            return None
        consumed = po.hw - p.lag_offsets  # the committed offset (share groups: HW - lag)
        points = memo.parts.get(tp)
        first = points is None
        if points is None:
            points = memo.parts[tp] = Points()
        if po.log_start is not None:
            # A topic no member subscribes to any more is read by nobody: what retention
            # deletes there moves the baseline, it is not this group's loss (the
            # abandoned-topic alert warns about it before).
            new, counted_to = lost_step(consumed, po.log_start, memo.counted.get(tp),
                                        first or p.unsubscribed)
            if counted_to is None:
                memo.counted.pop(tp, None)
            else:
                memo.counted[tp] = counted_to
            if new:  # partitions that never lost a record hold no entry
                memo.lost[tp] = memo.lost.get(tp, 0) + new
            memo.lost_total += new
        points.add(now, consumed, po.hw, self.window)
        return _Row(tp, p.lag_offsets, consumed, po.log_start, rates(points, self.min_span), p.owner,
                    points)


def summarize(rows: list[_Row], memo: GroupMemo, settle: float, span_min: float,
              shared: dict[PartitionProgress, PartitionProgress] | None = None) -> GroupProgress:
    """The group's rates, time to catch up and notes.

    The partitions are pooled by owner: one consumer's partitions share its time
    (librdkafka may drain one partition's backlog before the next's), so a pool is
    caught up when its lag is what it consumes in ``settle`` seconds
    (:func:`caught_up`), and otherwise catches up in ``pool lag / (pool consume rate -
    pool produce rate)``; partitions without an owner form one pool. The group catches
    up when its slowest pool does; a pool that does not gain means no estimate: the
    group falls behind there."""
    group = common_rates([r.points for r in rows], span_min)
    pools = _pools(rows, settle, span_min)
    losing = [p for p in pools if p.rates is not None and p.eta is None]
    eta = None
    if pools and not losing and all(p.rates is not None for p in pools):
        eta = max(p.eta for p in pools if p.eta is not None)
    by_owner = {p.owner: p for p in pools}
    before = memo.last.partitions if memo.last is not None else {}
    parts = {r.tp: _partition(r, memo, by_owner.get(r.owner), before.get(r.tp)) for r in rows}
    if shared is not None:  # equal figures, one object: idle partitions all read 0/s
        parts = {tp: pp if pp is before.get(tp) else shared.setdefault(pp, pp)
                 for tp, pp in parts.items()}
    notes = _pace_notes(eta, group, losing, len(pools)) + _lost_notes(rows)
    return GroupProgress(
        window_seconds=group.span if group else 0.0, consume_rate=group.consume if group else None,
        produce_rate=group.produce if group else None, catchup_seconds=eta,
        falling_behind=bool(losing), records_lost_total=memo.lost_total,
        below_log_start=sum(p.below_log_start for p in parts.values()), notes=tuple(notes),
        partitions=parts, retained_position=_retained_position(rows))


def _retained_position(rows: list[_Row]) -> float | None:
    """GroupProgress.retained_position: the lowest of its partitions'
    (:func:`~exporter.evaluate.retention.retained_position`)."""
    known = [p for r in rows if (p := retained_position(r.consumed, r.lag, r.log_start)) is not None]
    return min(known) if known else None


def _pools(rows: list[_Row], settle: float, span_min: float) -> list[_Pool]:
    """The pools (by owner) with a backlog."""
    by_owner: dict[str, list[_Row]] = {}
    for r in rows:
        by_owner.setdefault(r.owner, []).append(r)
    out = []
    for owner, rs in sorted(by_owner.items()):
        lag = sum(r.lag for r in rs)
        if lag <= 0:  # caught up whatever the rates
            continue
        pr = common_rates([r.points for r in rs], span_min)
        if caught_up(lag, pr.consume if pr else None, settle):
            continue
        eta = catchup_seconds(lag, pr.consume, pr.produce) if pr else None
        out.append(_Pool(owner, tuple(rs), pr, eta))
    return out


def _partition(r: _Row, memo: GroupMemo, pool: _Pool | None,
               before: PartitionProgress | None) -> PartitionProgress:
    """A partition's figures; its time to catch up is its owner's pool's (they share its
    time), ``pool`` None when the owner has no backlog. ``before``, last cycle's figures,
    is returned itself when they are this cycle's (a partition at rest)."""
    consume = r.rates.consume if r.rates else None
    produce = r.rates.produce if r.rates else None
    catchup = pool.eta if pool is not None and r.lag > 0 else None
    lost = memo.lost.get(r.tp, 0)
    below = below_log_start(r.consumed, r.log_start) if r.log_start is not None else 0
    if (before is not None and before.consume_rate == consume and before.produce_rate == produce
            and before.catchup_seconds == catchup and before.lost_total == lost
            and before.below_log_start == below):
        return before
    return PartitionProgress(consume_rate=consume, produce_rate=produce, catchup_seconds=catchup,
                             lost_total=lost, below_log_start=below)


def _pace_notes(eta: float | None, group: Rates | None, losing: list[_Pool], pools: int) -> list[str]:
    if group is None:
        return []
    if eta is not None:
        return [f"caught up in about {fmt_duration(eta)} at current rates "
                f"(consumes {fmt_rate(group.consume)} records/s, {fmt_rate(group.produce)}/s produced)"]
    if not losing:
        return []
    if pools == 1 and len(losing) == 1 and group.consume <= group.produce:
        return [_behind("", group.consume, group.produce, group.span)]  # one consumer
    # Name the pool that loses most: its owner, or its partitions when nobody owns them.
    worst = max(losing, key=lambda p: p.rates.produce - p.rates.consume if p.rates else 0.0)
    assert worst.rates is not None
    where = worst.owner or ", ".join(f"{t}[{n}]" for t, n in (r.tp for r in worst.rows[:3]))
    more = f" (and {len(losing) - 1} more owner(s))" if len(losing) > 1 else ""
    return [_behind(f"{where}: ", worst.rates.consume, worst.rates.produce, worst.rates.span) + more]


def _behind(where: str, consume: float, produce: float, span: float) -> str:
    if consume <= 0 and produce <= 0:
        return f"{where}not catching up: nothing consumed over the last {fmt_duration(span)}"
    if consume >= produce:
        return (f"{where}not catching up: consumes {fmt_rate(consume)} records/s, "
                f"only as fast as they are produced")
    return (f"{where}falling behind by {fmt_rate(produce - consume)} records/s "
            f"(consumes {fmt_rate(consume)}/s, {fmt_rate(produce)}/s produced)")


def _lost_notes(rows: list[_Row]) -> list[str]:
    gone = [(r, below_log_start(r.consumed, r.log_start)) for r in rows if r.log_start is not None
            and r.consumed < r.log_start]
    notes = [f"{r.tp[0]}[{r.tp[1]}]: {n} records deleted by retention before the group read them "
             f"(committed {r.consumed} < log start {r.log_start})" for r, n in gone[:MAX_LOST_NOTES]]
    if len(gone) > MAX_LOST_NOTES:
        notes.append(f"... and {len(gone) - MAX_LOST_NOTES} more partition(s) below the log start")
    return notes
