"""Per group, each cycle: consume and produce rates, time to catch up, records lost to
retention (:class:`GroupProgress`), added to the evaluated views.

It runs after the judgement and never changes a status or a judgement reason: it reads
the group views and the snapshot's partition offsets, keeps its own memory (a few
points per group-partition, see :mod:`exporter.evaluate.rates`, and the loss counters
of :mod:`exporter.evaluate.retention`) and attaches a :class:`GroupProgress` to each view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from exporter.contracts.snapshot import HW_OF, LOG_START_OF, TP, GroupSample, PartitionOffsets
from exporter.contracts.view import (
    Filled,
    GroupProgress,
    GroupView,
    PartitionProgress,
    PartitionView,
    ProgressRows,
    filled,
    offsets_column,
)
from exporter.evaluate.rates import (
    Points,
    Rates,
    RateTable,
    catchup_seconds,
    caught_up,
    common_rates,
    fmt_duration,
    fmt_rate,
    min_span,
    rates,
    step_together,
)
from exporter.evaluate.retention import below_log_start, lost_step, retained_position

# Partitions named in the notes about records lost, at most.
MAX_LOST_NOTES = 3


@dataclass(slots=True)
class RatesMemory:
    parts: RateTable = field(default_factory=RateTable)  # rate points per partition
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
    tps: Sequence[TP]
    rates: Rates | None  # summed over a span common to its partitions; None: not known yet
    eta: float | None  # None: not gaining, or rates unknown


class HoldsRates(Protocol):
    """A group's memories as the tracker reads them (exporter/evaluate/group_memories.py)."""

    rates: RatesMemory | None


class ProgressTracker:
    """The memory behind :class:`GroupProgress` for one cluster: :meth:`begin`, then
    :meth:`one` for each group of a cycle as the evaluator judges it (:meth:`rested` for
    a group at rest), then :meth:`end`."""

    def __init__(self, window: float, interval: float, groups: Mapping[str, HoldsRates],
                 columns: bool = True) -> None:
        # Rate points in columns where a group's partitions are sampled together
        # (:class:`~exporter.evaluate.rates.RateTable`); False: one Points per partition,
        # the reference the tests hold the columns equal to.
        self.columns = columns
        self.window = window
        self.min_span = min_span(window, interval)
        # A partition whose lag is what its consumer gets through in this long is caught
        # up: records between two commits (or two Spark triggers), not a backlog.
        self.settle = max(interval, window / 10)
        # The evaluator's memories by group (exporter/evaluate/group_memories.py): the tracker's
        # own are each group's ``rates``.
        self.groups = groups
        # One object per distinct PartitionProgress of a cycle (they are frozen).
        self._shared: dict[PartitionProgress, PartitionProgress] = {}
        self._canon: dict[TP, TP] = {}
        self.stepped_together = 0  # groups whose points stepped with others' in the last cycle

    def begin(self, keys: dict[TP, TP]) -> None:
        """A cycle's groups follow; the evaluator annotates each as soon as it is judged,
        so that a group entering rest drops its rate points before the next is judged.
        ``keys``: the snapshot's own (topic, partition) keys, by themselves, used in the
        memory kept and in the figures served (one object per partition)."""
        self._shared = {}
        self._canon = keys
        self.stepped_together = 0

    def rested(self, gid: str, v: GroupView) -> None:
        """A group at rest: its view carries its figures already (exporter/evaluate/rest.py)."""
        rates_of(self.groups[gid]).last = v.progress

    def apart(self, memos: list[RatesMemory], views: list[GroupView],
              partitions: dict[TP, PartitionOffsets], now: float) -> list[GroupProgress | None]:
        """The figures of each view of ``views`` over its memory of ``memos``, memories the
        tracker does not keep (groups at rest whose rates become known:
        exporter/evaluate/rest.py); groups at the same point times step together. None for
        a group whose points do not step in columns."""
        out: list[GroupProgress | None] = [None] * len(views)
        cohorts: dict[tuple[float, ...], list[tuple[int, Observed]]] = {}
        for i, (memo, v) in enumerate(zip(memos, views, strict=True)):
            o = _observed(v, partitions)
            if o is not None and memo.parts.times and memo.parts.tps == o.tps:
                cohorts.setdefault(tuple(memo.parts.times), []).append((i, o))
        for members in cohorts.values():
            figs = self._cohort([memos[i] for i, _o in members], [o for _i, o in members], now)
            for (i, _o), fig in zip(members, figs, strict=True):
                out[i] = fig
        return out

    def one(self, gid: str, v: GroupView, sample: GroupSample,
            partitions: dict[TP, PartitionOffsets], now: float,
            o: Observed | None = None) -> GroupProgress | None:
        """One group's figures, for its view (None: none yet); ``o``: its columns as the
        evaluator gathered them (None: read from the view)."""
        rec = self.groups[gid]
        memo = rec.rates
        if memo is None:
            memo = rec.rates = RatesMemory()
        if sample.error is None:
            memo.last = self._group(memo, v, partitions, now, o)
        # An unreadable group keeps its last figures, like its last judgement.
        return memo.last

    def many(self, groups: Sequence[ChunkGroup], partitions: dict[TP, PartitionOffsets], now: float
             ) -> list[GroupProgress | None]:
        """:meth:`one` of each group of a chunk, in order. The groups whose points are in
        columns at the same times and whose :class:`Observed` columns the evaluator
        gathered step together (:func:`~exporter.evaluate.rates.step_together`); the others
        one after the other."""
        out: list[GroupProgress | None] = [None] * len(groups)
        cohorts: dict[tuple[float, ...], list[int]] = {}
        firsts: list[int] = []  # new to the tracker
        for i, (gid, v, sample, o) in enumerate(groups):
            memo = self.groups[gid].rates
            table = None if memo is None else memo.parts
            if not (self.columns and o is not None and sample.error is None):
                out[i] = self.one(gid, v, sample, partitions, now)
            elif memo is None:
                firsts.append(i)
            elif isinstance(table, RateTable) and table.times and table.tps == o.tps:
                cohorts.setdefault(tuple(table.times), []).append(i)
            else:
                out[i] = self.one(gid, v, sample, partitions, now, o)
        if firsts:
            self._firsts([groups[i] for i in firsts], partitions, now, firsts, out)
        for members in cohorts.values():
            self._together([groups[i] for i in members], partitions, now, members, out)
        return out

    def _firsts(self, groups: list[ChunkGroup], partitions: dict[TP, PartitionOffsets], now: float,
                at: list[int], out: list[GroupProgress | None]) -> None:
        """:meth:`many` of groups new to the tracker, each with its columns: their tables
        take their first points as :meth:`_in_columns` gives them, and the figures that
        need nothing per row are read over the groups at once (:meth:`_one_pool_figures`).
        As in :meth:`_cohort`, a group with an offset not known steps alone."""
        obs = [o for _gid, _v, _s, o in groups if o is not None]  # every one (:meth:`many`)
        assert len(obs) == len(groups)
        chunk = _stacked(obs)
        unfit = _unfit(chunk)
        if any(unfit):
            for k in (k for k, bad in enumerate(unfit) if bad):
                gid, v, sample, o = groups[k]
                out[at[k]] = self.one(gid, v, sample, partitions, now, o)
            if fit := [k for k, bad in enumerate(unfit) if not bad]:
                self._firsts([groups[k] for k in fit], partitions, now, [at[k] for k in fit], out)
            return
        memos, consumed = [], []
        for (gid, *_rest), o in zip(groups, obs, strict=True):
            memo = self.groups[gid].rates = RatesMemory()
            memo.parts.start([self._canon.get(tp, tp) for tp in o.tps])
            consumed.append(o.hw - o.lag)  # its own array, as :meth:`_in_columns` steps it
            memo.parts.step(now, consumed[-1], o.hw, self.window)
            memos.append(memo)
        span = memos[0].parts.span(self.min_span)
        pooled = self._one_pool_figures(memos, obs, [True] * len(memos), chunk, span)
        for i, memo, o, c, fig in zip(at, memos, obs, consumed, pooled, strict=True):
            out[i] = memo.last = fig or self._figures(memo, o, c, span, first=True)
            self.stepped_together += 1

    def _together(self, groups: list[ChunkGroup], partitions: dict[TP, PartitionOffsets], now: float,
                  at: list[int], out: list[GroupProgress | None]) -> None:
        """:meth:`many` of groups whose points are at the same times: their figures into
        ``out`` at ``at``."""
        obs = [o for _gid, _v, _s, o in groups if o is not None]  # every one (:meth:`many`)
        assert len(obs) == len(groups)
        memos = [rates_of(self.groups[gid]) for gid, *_ in groups]
        for (gid, v, sample, _o), memo, i, fig in zip(groups, memos, at, self._cohort(memos, obs, now),
                                                     strict=True):
            if fig is not None:
                out[i] = memo.last = fig
                self.stepped_together += 1
            else:  # an offset not known, or a row moved backwards: one at a time
                out[i] = self.one(gid, v, sample, partitions, now)

    def _cohort(self, memos: list[RatesMemory], obs: list[Observed], now: float
                ) -> list[GroupProgress | None]:
        """The figures of groups whose points are at the same times, stepped together; None
        for a group that steps alone (an offset not known, as :func:`_observed` reads it,
        or a row moved backwards: its points unchanged)."""
        chunk = _stacked(obs)
        unfit = _unfit(chunk)
        if any(unfit):
            out: list[GroupProgress | None] = [None] * len(memos)
            fit = [k for k, bad in enumerate(unfit) if not bad]
            if fit:
                for k, fig in zip(fit, self._cohort([memos[k] for k in fit], [obs[k] for k in fit], now),
                                  strict=True):
                    out[k] = fig
            return out
        stepped = step_together([m.parts for m in memos], now, chunk.consumed, chunk.hw, self.window)
        span = memos[0].parts.span(self.min_span)
        pooled = self._one_pool_figures(memos, obs, stepped, chunk, span)
        figs: list[GroupProgress | None] = []
        lo = 0
        for o, memo, ok, fig in zip(obs, memos, stepped, pooled, strict=True):
            rows, lo = slice(lo, lo + len(o.tps)), lo + len(o.tps)
            figs.append((fig or self._figures(memo, o, chunk.consumed[rows], span, first=False))
                        if ok else None)
        return figs

    def _one_pool_figures(self, memos: list[RatesMemory], obs: list[Observed], stepped: list[bool],
                       chunk: _Chunk, span: float | None) -> list[GroupProgress | None]:
        """:meth:`_figures` of the groups stepped together that need nothing per row: no
        committed offset below its log start and no losses counted, every partition
        subscribed, one owner (or none) for all, so one pool. Their sums, rates and
        retained positions are read over the chunk at once; None for each other group
        (:meth:`_figures` then)."""
        starts = chunk.starts
        log_start = np.concatenate([o.log_start for o in obs])  # NaN (unknown): no comparison holds
        below = np.logical_or.reduceat(log_start > chunk.consumed, starts).tolist()
        left = np.logical_or.reduceat(np.concatenate([o.unsubscribed for o in obs]), starts).tolist()
        retained = _retained_each(chunk, log_start)
        lags = np.add.reduceat(chunk.lag, starts).tolist()
        sums = [(0.0, 0.0)] * len(memos)
        if span is not None:  # the newest points are this cycle's: the chunk's own offsets
            moved_c = chunk.consumed - np.concatenate([m.parts.consumed.oldest for m in memos])  # type: ignore[misc]
            moved_h = chunk.hw - np.concatenate([m.parts.hw.oldest for m in memos])  # type: ignore[misc]
            sums = list(zip(np.add.reduceat(moved_c, starts).tolist(),
                            np.add.reduceat(moved_h, starts).tolist(), strict=True))
            consume_all, produce_all = moved_c / span, moved_h / span
        out: list[GroupProgress | None] = []
        lo = 0
        for k, (memo, o, (c_sum, h_sum)) in enumerate(zip(memos, obs, sums, strict=True)):
            n = len(o.tps)
            rows, lo = slice(lo, lo + n), lo + n
            if not stepped[k] or below[k] or left[k] or memo.counted or len(set(o.owners)) != 1:
                out.append(None)
                continue
            group = None if span is None else Rates(consume=c_sum / span, produce=h_sum / span, span=span)
            pool = _pool(o.owners[0], o.tps, int(lags[k]), lambda g=group: g, self.settle)
            pools = [] if pool is None else [pool]
            eta, losing = _eta(pools)
            if span is None:
                consume = produce = filled(Filled.UNKNOWN, n)
            else:  # copies: a slice would keep the chunk's array alive with the figures
                consume, produce = consume_all[rows].copy(), produce_all[rows].copy()
            catchup = (np.where(o.lag > 0, pool.eta, np.nan) if pool is not None and pool.eta is not None
                       else filled(Filled.UNKNOWN, n))
            tps = memo.parts.tps
            parts = ProgressRows(tps, consume, produce, catchup, _lost_column(memo, tps),
                                 filled(Filled.ZERO, n))
            out.append(_progress(group, eta, losing, len(pools), memo, parts, [], retained[k]))
        return out

    def end(self) -> None:
        """The cycle's groups are done (a deleted group's rates go with its memories)."""
        self._shared, self._canon = {}, {}

    def _group(self, memo: RatesMemory, v: GroupView, partitions: dict[TP, PartitionOffsets],
               now: float, o: Observed | None = None) -> GroupProgress:
        if not isinstance(memo.parts, RateTable):  # restored from the state topic
            memo.parts = RateTable(memo.parts)
        if self.columns:
            rows = o if o is not None else _observed(v, partitions)
            if rows is not None and (out := self._in_columns(memo, rows, now)) is not None:
                return out
        memo.parts.unpack()
        out = self._one_at_a_time(memo, v, partitions, now)
        if self.columns:
            memo.parts.pack([(p.topic, p.partition) for p in v.partitions
                             if (p.topic, p.partition) in memo.parts])
        return out

    def _one_at_a_time(self, memo: RatesMemory, v: GroupView, partitions: dict[TP, PartitionOffsets],
                       now: float) -> GroupProgress:
        """:meth:`_group` one partition at a time, the exact form."""
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

    def _in_columns(self, memo: RatesMemory, o: Observed, now: float) -> GroupProgress | None:
        """:meth:`_one_at_a_time`'s figures for a group whose partitions are sampled together
        (its points in columns, or none yet), a few array operations for all of them; None,
        nothing changed, for a group in any other shape."""
        table = memo.parts
        first = not len(table)
        if not first and table.tps != o.tps:
            return None
        if first:  # the snapshot's own keys: one object per partition, not per group-partition
            table.start([self._canon.get(tp, tp) for tp in o.tps])
        consumed = o.hw - o.lag
        if not table.step(now, consumed, o.hw, self.window):
            return None
        return self._figures(memo, o, consumed, table.span(self.min_span), first)

    def _figures(self, memo: RatesMemory, o: Observed, consumed: np.ndarray, span: float | None,
                 first: bool) -> GroupProgress:
        """The figures of a group whose points in columns took this cycle's (``first``: its
        first), read over ``span``."""
        table = memo.parts
        trimmed = bool((o.log_start > 0).any())  # NaN (unknown) is not: nothing trimmed known
        if trimmed or memo.counted:
            self._lost(memo, o, consumed, first)
        rows = np.flatnonzero(~o.unsubscribed) if o.unsubscribed.any() else np.arange(len(o.tps))
        moved = _over_span(table, span)
        group = _summed(moved, rows, span)
        pools = self._pools(o, rows, moved, span, group)
        eta, losing = _eta(pools)
        parts = self._partitions(memo, o, consumed, rows, moved, span, {p.owner: p.eta for p in pools},
                                 trimmed)
        if not trimmed:  # no log start above 0: nothing below it, no retained position
            return _progress(group, eta, losing, len(pools), memo, parts, [], None)
        below = o.log_start[rows] > consumed[rows]
        gone = [(o.tps[i], int(consumed[i]), int(o.log_start[i])) for i in rows[below].tolist()]
        return _progress(group, eta, losing, len(pools), memo, parts, _lost_notes(gone),
                         _retained(o, consumed, rows))

    def _lost(self, memo: RatesMemory, o: Observed, consumed: np.ndarray, first: bool) -> None:
        """:func:`~exporter.evaluate.retention.lost_step` of the partitions where it changes
        something: a log start above the floor (the consumed offset, or where losses were
        counted to when that is higher), or below where they were counted to (recreated)."""
        log_start = o.log_start  # NaN where unknown: no comparison holds
        if memo.counted:
            counted = np.array([np.nan if c is None else c for c in map(memo.counted.get, memo.parts.tps)])
            changes = (log_start > np.fmax(consumed, counted)) | (log_start < counted)
        else:  # nothing counted yet: the floor is the consumed offset
            changes = log_start > consumed
        for i in np.flatnonzero(changes).tolist():
            _count_loss(memo, o.tps[i], int(consumed[i]), int(o.log_start[i]),
                        first or bool(o.unsubscribed[i]))

    def _pools(self, o: Observed, rows: np.ndarray, moved: _OverSpan | None, span: float | None,
               group: Rates | None) -> list[_Pool]:
        """:func:`_pools` over the columns; ``group``: the rates of ``rows`` (a single pool's)."""
        whole = len(rows) == len(o.tps)
        owners = o.owners if whole else [o.owners[i] for i in rows.tolist()]
        by_owner: dict[str, np.ndarray] = {}
        if len(set(owners)) == 1:  # one consumer owns them all, or nobody does: one pool
            by_owner[owners[0]] = rows
        else:
            lists: dict[str, list[int]] = {}
            for i, owner in zip(rows.tolist(), owners, strict=True):
                lists.setdefault(owner, []).append(i)
            by_owner = {owner: np.array(idx) for owner, idx in lists.items()}

        def tps_of(idx: np.ndarray) -> Sequence[TP]:
            return o.tps if whole and idx is rows else [o.tps[i] for i in idx.tolist()]
        def rates_of(idx: np.ndarray) -> Callable[[], Rates | None]:
            return (lambda: group) if idx is rows else (lambda: _summed(moved, idx, span))
        pools = (_pool(owner, tps_of(idx), int(o.lag[idx].sum()), rates_of(idx), self.settle)
                 for owner, idx in sorted(by_owner.items()))
        return [p for p in pools if p is not None]

    def _partitions(self, memo: RatesMemory, o: Observed, consumed: np.ndarray, rows: np.ndarray,
                    moved: _OverSpan | None, span: float | None, eta_of: dict[str, float | None],
                    trimmed: bool) -> ProgressRows:
        """:func:`_partition` of every row, as columns; ``trimmed``: some log start is above
        0 (else nothing is below one)."""
        table, n = memo.parts, len(rows)
        whole = n == len(table.tps)  # every row, in order: the table's keys as they are
        if moved is None or span is None:
            consume = produce = filled(Filled.UNKNOWN, n)
        elif whole:
            consume, produce = moved.consumed / span, moved.produced / span
        else:
            consume, produce = moved.consumed[rows] / span, moved.produced[rows] / span
        known = ~np.isnan(o.log_start[rows])
        below = (np.where(known, np.maximum(0.0, o.log_start[rows] - consumed[rows]), 0.0).astype(np.int64)
                 if trimmed else filled(Filled.ZERO, n))
        tps = table.tps if whole else [table.tps[i] for i in rows.tolist()]
        catchup = filled(Filled.UNKNOWN, n)
        if any(eta is not None for eta in eta_of.values()):  # only a partition with lag has one
            owners = o.owners if whole else [o.owners[i] for i in rows.tolist()]
            eta = np.array([np.nan if (e := eta_of.get(w)) is None else e for w in owners])
            catchup = np.where(o.lag[rows] > 0, eta, np.nan)
        return ProgressRows(tps, consume, produce, catchup, _lost_column(memo, tps), below)

    def _observe(self, memo: RatesMemory, tp: TP, p: PartitionView, po: PartitionOffsets | None,
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
            _count_loss(memo, tp, consumed, po.log_start, first or p.unsubscribed)
        points.add(now, consumed, po.hw, self.window)
        return _Row(tp, p.lag_offsets, consumed, po.log_start, rates(points, self.min_span), p.owner,
                    points)


class Observed(NamedTuple):
    """The partitions of one group view whose pace a cycle observes, as columns (in the
    view's order; float64, ``log_start`` NaN where unknown): :func:`_observed` reads them
    from the view, or the evaluator hands those it gathered (:meth:`ProgressTracker.many`)."""

    tps: list[TP]  # the view's own list where every row is observed (read, not written)
    lag: np.ndarray
    hw: np.ndarray
    log_start: np.ndarray
    unsubscribed: np.ndarray  # bool
    owners: Sequence[str]


class _Chunk(NamedTuple):
    """The rows of groups stepped together, one group after the other (float64)."""

    consumed: np.ndarray
    hw: np.ndarray
    lag: np.ndarray
    starts: np.ndarray  # each group's first row


def rates_of(rec: HoldsRates) -> RatesMemory:
    """The rates memory of a group that has one: in a cohort (:meth:`ProgressTracker.many`),
    or at rest (it entered rest with its points: exporter/evaluate/rest.py)."""
    assert rec.rates is not None
    return rec.rates


def _stacked(obs: list[Observed]) -> _Chunk:
    """The rows of ``obs``, one group after the other."""
    hw, lag = np.concatenate([o.hw for o in obs]), np.concatenate([o.lag for o in obs])
    return _Chunk(hw - lag, hw, lag, np.cumsum([0, *map(len, [o.tps for o in obs[:-1]])]))


def _unfit(chunk: _Chunk) -> list[bool]:
    """Per group of ``chunk``: an offset not known (a NaN HW) or consumed below zero, as
    :func:`_observed` would not read it; that group steps alone."""
    return np.logical_or.reduceat(np.isnan(chunk.hw) | (chunk.consumed < 0), chunk.starts).tolist()


# A group of a chunk whose figures are wanted (:meth:`ProgressTracker.many`): its id, its
# view, its sample, and its columns as the evaluator gathered them (None: read from the view).
ChunkGroup = tuple[str, GroupView, GroupSample, Observed | None]


def _observed(v: GroupView, partitions: dict[TP, PartitionOffsets]) -> Observed | None:
    """What :meth:`ProgressTracker._observe` reads of each partition, as columns (from the
    view's rows); None for a group without any."""
    rows = v.partitions
    tps = rows.tps
    pos = list(map(partitions.get, tps))
    hws = list(map(HW_OF, pos)) if all(pos) else None  # all(): no PartitionOffsets.__eq__ call
    known = (rows.committed >= 0) & (rows.lag_offsets >= 0)
    if hws is not None and None not in hws and known.all():
        lag, unsubscribed, owners = rows.lag_offsets, rows.unsubscribed, rows.owner
    else:
        keep = [i for i, (k, po) in enumerate(zip(known.tolist(), pos, strict=True))
                if k and po is not None and po.hw is not None]
        idx = np.array(keep, np.int64)
        tps, pos = [tps[i] for i in keep], [pos[i] for i in keep]
        lag, unsubscribed = rows.lag_offsets[idx], rows.unsubscribed[idx]
        owners = [rows.owner[i] for i in keep]
        hws = list(map(HW_OF, pos))
    if not tps:
        return None
    return Observed(tps, lag.astype(np.float64), np.array(hws, float),
                    offsets_column(list(map(LOG_START_OF, pos))), unsubscribed, owners)


def summarize(rows: list[_Row], memo: RatesMemory, settle: float, span_min: float,
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
    eta, losing = _eta(pools)
    by_owner = {p.owner: p for p in pools}
    before = memo.last.partitions if memo.last is not None else {}
    parts = {r.tp: _partition(r, memo, by_owner.get(r.owner), before.get(r.tp)) for r in rows}
    if shared is not None:  # equal figures, one object: idle partitions all read 0/s
        parts = {tp: pp if pp is before.get(tp) else shared.setdefault(pp, pp)
                 for tp, pp in parts.items()}
    gone = [(r.tp, r.consumed, r.log_start) for r in rows
            if r.log_start is not None and r.consumed < r.log_start]
    return _progress(group, eta, losing, len(pools), memo, parts, _lost_notes(gone),
                     _retained_position(rows))


def _eta(pools: list[_Pool]) -> tuple[float | None, list[_Pool]]:
    """The group's time to catch up (its slowest pool's), and the pools that do not gain."""
    losing = [p for p in pools if p.rates is not None and p.eta is None]
    eta = None
    if pools and not losing and all(p.rates is not None for p in pools):
        eta = max(p.eta for p in pools if p.eta is not None)
    return eta, losing


def _progress(group: Rates | None, eta: float | None, losing: list[_Pool], pools: int, memo: RatesMemory,
              parts: dict[TP, PartitionProgress] | ProgressRows, lost_notes: list[str],
              retained: float | None) -> GroupProgress:
    notes = _pace_notes(eta, group, losing, pools) + lost_notes
    below = (int(parts.below.sum()) if isinstance(parts, ProgressRows)
             else sum(p.below_log_start for p in parts.values()))
    return GroupProgress(
        window_seconds=group.span if group else 0.0, consume_rate=group.consume if group else None,
        produce_rate=group.produce if group else None, catchup_seconds=eta,
        falling_behind=bool(losing), records_lost_total=memo.lost_total,
        below_log_start=below, notes=tuple(notes), partitions=parts, retained_position=retained)


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
    pools = (_pool(owner, tuple(r.tp for r in rs), sum(r.lag for r in rs),
                   lambda rs=rs: common_rates([r.points for r in rs], span_min), settle)
             for owner, rs in sorted(by_owner.items()))
    return [p for p in pools if p is not None]


def _pool(owner: str, tps: Sequence[TP], lag: int, pool_rates: Callable[[], Rates | None],
          settle: float) -> _Pool | None:
    """One owner's partitions as a pool with a backlog; None when caught up (its rates are
    read only then)."""
    if lag <= 0:  # caught up whatever the rates
        return None
    pr = pool_rates()
    if caught_up(lag, pr.consume if pr else None, settle):
        return None
    return _Pool(owner, tps, pr, catchup_seconds(lag, pr.consume, pr.produce) if pr else None)


def _count_loss(memo: RatesMemory, tp: TP, consumed: int, log_start: int, baseline: bool) -> None:
    """:func:`~exporter.evaluate.retention.lost_step` of one partition into the memory.
    ``baseline``: its first look, or a topic no member subscribes to any more (read by
    nobody: what retention deletes there moves the baseline, it is not this group's loss;
    the abandoned-topic alert warns about it before)."""
    new, counted_to = lost_step(consumed, log_start, memo.counted.get(tp), baseline)
    if counted_to is None:
        memo.counted.pop(tp, None)
    else:
        memo.counted[tp] = counted_to
    if new:  # partitions that never lost a record hold no entry
        memo.lost[tp] = memo.lost.get(tp, 0) + new
    memo.lost_total += new


def _partition(r: _Row, memo: RatesMemory, pool: _Pool | None,
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
    where = worst.owner or ", ".join(f"{t}[{n}]" for t, n in worst.tps[:3])
    more = f" (and {len(losing) - 1} more owner(s))" if len(losing) > 1 else ""
    return [_behind(f"{where}: ", worst.rates.consume, worst.rates.produce, worst.rates.span) + more]


def idle_note(span: float) -> str:
    """The note of a group of one pool that consumed nothing while nothing was produced
    over its rates' ``span`` (exporter/evaluate/rest.py moves its span at rest)."""
    return _behind("", 0.0, 0.0, span)


def _behind(where: str, consume: float, produce: float, span: float) -> str:
    if consume <= 0 and produce <= 0:
        return f"{where}not catching up: nothing consumed over the last {fmt_duration(span)}"
    if consume >= produce:
        return (f"{where}not catching up: consumes {fmt_rate(consume)} records/s, "
                f"only as fast as they are produced")
    return (f"{where}falling behind by {fmt_rate(produce - consume)} records/s "
            f"(consumes {fmt_rate(consume)}/s, {fmt_rate(produce)}/s produced)")


def _lost_notes(gone: list[tuple[TP, int, int]]) -> list[str]:
    """``gone``: (partition, consumed offset, log start) of the partitions below the log start."""
    notes = [f"{tp[0]}[{tp[1]}]: {log_start - consumed} records deleted by retention before the "
             f"group read them (committed {consumed} < log start {log_start})"
             for tp, consumed, log_start in gone[:MAX_LOST_NOTES]]
    if len(gone) > MAX_LOST_NOTES:
        notes.append(f"... and {len(gone) - MAX_LOST_NOTES} more partition(s) below the log start")
    return notes


class _OverSpan(NamedTuple):
    """Of each row of a table in columns, its records consumed and produced over the span
    of its points (the newest point's offsets less the oldest's)."""

    consumed: np.ndarray
    produced: np.ndarray


def _over_span(table: RateTable, span: float | None) -> _OverSpan | None:
    """:class:`_OverSpan` of every row of ``table``; None while its span is unknown."""
    if span is None:
        return None
    c, h = table.consumed, table.hw
    assert c.newest is not None and c.oldest is not None and h.newest is not None and h.oldest is not None
    return _OverSpan(c.newest - c.oldest, h.newest - h.oldest)


def _summed(moved: _OverSpan | None, rows: np.ndarray, span: float | None) -> Rates | None:
    """:func:`~exporter.evaluate.rates.common_rates` of these rows of a table in columns:
    their points are at the same times, so no interpolation."""
    if moved is None or span is None or not len(rows):
        return None
    if len(rows) == len(moved.consumed):  # every row (``rows`` never repeats one)
        consumed, produced = float(moved.consumed.sum()), float(moved.produced.sum())
    else:
        consumed, produced = float(moved.consumed[rows].sum()), float(moved.produced[rows].sum())
    return Rates(consume=consumed / span, produce=produced / span, span=span)


def _lost_column(memo: RatesMemory, tps: list[TP]) -> np.ndarray:
    """Records lost of each partition of ``tps`` (one shared column of zeros for a group
    that never lost any)."""
    if not memo.lost:
        return filled(Filled.ZERO, len(tps))
    return np.array([memo.lost.get(tp, 0) for tp in tps], np.int64)


def _retained_each(chunk: _Chunk, log_start: np.ndarray) -> list[float | None]:
    """:func:`_retained` of each group of a chunk, every row of it."""
    with np.errstate(invalid="ignore", divide="ignore"):
        valid = ~np.isnan(log_start) & (log_start != 0) & (chunk.lag > 0) & (chunk.hw > log_start)
        ratio = np.where(valid, (chunk.consumed - log_start) / (chunk.hw - log_start), np.inf)
    return [None if r == np.inf else r for r in np.minimum.reduceat(ratio, chunk.starts).tolist()]


def _retained(o: Observed, consumed: np.ndarray, rows: np.ndarray) -> float | None:
    """:func:`_retained_position` over the columns."""
    ls, lag = o.log_start[rows], o.lag[rows]
    c = consumed[rows]
    with np.errstate(invalid="ignore"):
        valid = ~np.isnan(ls) & (ls != 0) & (lag > 0) & (o.hw[rows] > ls)
    if not valid.any():
        return None
    return float(((c[valid] - ls[valid]) / (o.hw[rows][valid] - ls[valid])).min())
