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

from exporter.contracts.snapshot import TP, GroupSample, PartitionOffsets
from exporter.contracts.view import GroupProgress, GroupView, PartitionProgress, PartitionView
from exporter.evaluate.rates import (
    Point,
    Rates,
    add_point,
    catchup_seconds,
    caught_up,
    fmt_duration,
    fmt_rate,
    min_span,
    rates,
)
from exporter.evaluate.retention import below_log_start, lost_step

# Partitions named in the notes about records lost, at most.
MAX_LOST_NOTES = 3


@dataclass(slots=True)
class PartMemory:
    points: list[Point] = field(default_factory=list)
    counted_to: int | None = None  # see exporter.evaluate.retention


@dataclass(slots=True)
class GroupMemo:
    parts: dict[TP, PartMemory] = field(default_factory=dict)
    lost: dict[TP, int] = field(default_factory=dict)  # per partition, never decreases
    lost_total: int = 0  # kept when a partition goes away: a counter never decreases
    last: GroupProgress | None = None


@dataclass(frozen=True, slots=True)
class _Row:
    """One judged group-partition this cycle."""

    tp: TP
    lag: int
    consumed: int
    log_start: int | None
    rates: Rates | None


class ProgressTracker:
    """The memory behind :class:`GroupProgress` for one cluster; :meth:`annotate` each cycle."""

    def __init__(self, window: float, interval: float) -> None:
        self.window = window
        self.min_span = min_span(window, interval)
        # A partition whose lag is what its consumer gets through in this long is caught
        # up: records between two commits (or two Spark triggers), not a backlog.
        self.settle = max(interval, window / 10)
        self.groups: dict[str, GroupMemo] = {}

    def annotate(self, views: dict[str, GroupView], samples: dict[str, GroupSample],
                 partitions: dict[TP, PartitionOffsets], now: float) -> dict[str, GroupView]:
        out: dict[str, GroupView] = {}
        for gid, v in views.items():
            memo = self.groups.setdefault(gid, GroupMemo())
            sample = samples.get(gid)
            if sample is None or sample.error is None:
                memo.last = self._group(memo, v, partitions, now)
            # An unreadable group keeps its last figures, like its last judgement.
            out[gid] = dataclasses.replace(v, progress=memo.last) if memo.last else v
        for gid in [g for g in self.groups if g not in views]:
            del self.groups[gid]  # deleted group: its series vanish with it
        return out

    def _group(self, memo: GroupMemo, v: GroupView, partitions: dict[TP, PartitionOffsets],
               now: float) -> GroupProgress:
        rows: list[_Row] = []
        for p in v.partitions:
            row = self._observe(memo, p, partitions.get((p.topic, p.partition)), now)
            if row is not None and not p.unsubscribed:
                rows.append(row)
        seen = {(p.topic, p.partition) for p in v.partitions}
        for tp in [tp for tp in memo.parts if tp not in seen]:
            del memo.parts[tp]
            memo.lost.pop(tp, None)
        return summarize(rows, memo, self.settle)

    def _observe(self, memo: GroupMemo, p: PartitionView, po: PartitionOffsets | None,
                 now: float) -> _Row | None:
        """Remember this cycle's consumed offset and HW of one partition; count losses."""
        if p.committed is None or p.lag_offsets is None or po is None or po.hw is None:
            return None
        tp = (p.topic, p.partition)
        consumed = po.hw - p.lag_offsets  # the committed offset (share groups: HW - lag)
        pm = memo.parts.get(tp)
        first = pm is None
        if pm is None:
            pm = memo.parts[tp] = PartMemory()
        if po.log_start is not None:
            new, pm.counted_to = lost_step(consumed, po.log_start, pm.counted_to, first)
            memo.lost[tp] = memo.lost.get(tp, 0) + new
            memo.lost_total += new
        add_point(pm.points, (now, consumed, po.hw), self.window)
        return _Row(tp, p.lag_offsets, consumed, po.log_start, rates(pm.points, self.min_span))


def summarize(rows: list[_Row], memo: GroupMemo, settle: float) -> GroupProgress:
    """The group's rates (sums over its partitions), time to catch up and notes.

    The group is caught up when every partition is (:func:`caught_up`). Otherwise it
    catches up when every partition with a backlog consumes faster than it is produced,
    in ``total lag / (consume rate - produce rate)``: a consumer that has caught up on
    one partition spends its time on the others, so the group's lag shrinks at the
    difference of the sums. A backlogged partition that does not gain means no
    estimate: the group falls behind there."""
    known = [r.rates for r in rows if r.rates is not None]
    consume = sum(r.consume for r in known) if known else None
    produce = sum(r.produce for r in known) if known else None
    backlog = [r for r in rows if not caught_up(r.lag, r.rates.consume if r.rates else None, settle)]
    losing = [r for r in backlog if r.rates is not None and r.rates.consume <= r.rates.produce]
    eta = None
    if backlog and consume is not None and produce is not None and not losing and \
            all(r.rates is not None for r in backlog):
        eta = catchup_seconds(sum(r.lag for r in rows), consume, produce)
    falling = bool(losing) or (bool(backlog) and eta is None and consume is not None
                               and produce is not None and consume <= produce)
    parts = {r.tp: _partition(r, memo, settle) for r in rows}
    notes = _pace_notes(eta, consume, produce, losing, falling, min((k.span for k in known), default=0.0))
    notes += _lost_notes(rows)
    return GroupProgress(
        window_seconds=min((k.span for k in known), default=0.0), consume_rate=consume,
        produce_rate=produce, catchup_seconds=eta, falling_behind=falling,
        records_lost_total=memo.lost_total, below_log_start=sum(p.below_log_start for p in parts.values()),
        notes=tuple(notes), partitions=parts)


def _partition(r: _Row, memo: GroupMemo, settle: float) -> PartitionProgress:
    eta = None
    if r.rates is not None and not caught_up(r.lag, r.rates.consume, settle):
        eta = catchup_seconds(r.lag, r.rates.consume, r.rates.produce)
    return PartitionProgress(
        consume_rate=r.rates.consume if r.rates else None,
        produce_rate=r.rates.produce if r.rates else None, catchup_seconds=eta,
        lost_total=memo.lost.get(r.tp, 0),
        below_log_start=below_log_start(r.consumed, r.log_start) if r.log_start is not None else 0)


def _pace_notes(eta: float | None, consume: float | None, produce: float | None,
                losing: list[_Row], falling: bool, span: float) -> list[str]:
    if consume is None or produce is None:
        return []
    if eta is not None:
        return [f"caught up in about {fmt_duration(eta)} at current rates "
                f"(consumes {fmt_rate(consume)} records/s, {fmt_rate(produce)}/s produced)"]
    if not falling:
        return []
    if consume < produce or not losing:
        return [_behind("", consume, produce, span)]
    # The group as a whole gains, but a backlogged partition does not: name the worst.
    worst = max(losing, key=lambda r: r.rates.produce - r.rates.consume if r.rates else 0.0)
    assert worst.rates is not None
    more = f" (and {len(losing) - 1} more partition(s))" if len(losing) > 1 else ""
    where = f"{worst.tp[0]}[{worst.tp[1]}]: "
    return [_behind(where, worst.rates.consume, worst.rates.produce, span) + more]


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
