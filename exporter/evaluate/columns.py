"""A group's partition memory in columns, and the memory step for many partitions at once.

:class:`PartitionTable` holds the :class:`~exporter.evaluate.memory.PartitionMemory` of
each committed partition of a group as one row of a numpy structured array (one column
per element of the flat memory), and reads and writes rows as ``PartitionMemory`` for the
code that judges one partition at a time (a mapping, like the dict it replaces).

:func:`observe_rows` is :func:`~exporter.evaluate.memory.observe` for every row of such a
table at once, for the rows whose step needs no per-partition Python (:func:`plain`: a
known HW, no backward move, none pending); :func:`ok_rows` says which of them every rule
leaves ``ok`` without reading a reason's facts. ``tests/test_columns.py`` holds both equal
to the per-partition step and to :func:`~exporter.evaluate.rules.classify`.

Every column is float64 and the table is column-major (a column's rows are contiguous,
which is what the steps read): offsets are exact up to 2**53, as in
:mod:`exporter.evaluate.rates`; ``None`` is NaN; an owner is its member id's index in the
table's ``owners`` (-1: none known).
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from itertools import repeat
from operator import gt
from typing import NamedTuple

import numpy as np

from exporter.contracts.snapshot import HW_OF, LOG_START_OF, TP, PartitionOffsets
from exporter.contracts.state import PARTITION_COLUMNS
from exporter.contracts.view import offsets_column
from exporter.evaluate.constants import (
    LATE_COMMIT_WINDOW,
    QUIET_FRACTION,
    STOPPED_AFTER_CYCLES,
    TREND_GROWTH_RATIO,
    TREND_MIN_COMMITS,
)
from exporter.evaluate.memory import Ownership, PartitionMemory, Rewind, Tuning

NONE = np.nan  # an element that is None

# One column per element of the partition rows of the state contract
# (exporter/contracts/state.py PARTITION_COLUMNS: PartitionMemory with its rewind and
# ownership flattened), with what it holds: i an integer (an owner: its index in the
# table's member ids), f a float, b a bool.
_KIND = {"int": "i", "int?": "i", "str?": "i", "float": "f", "float?": "f", "bool": "b"}
COLUMNS: tuple[tuple[str, str], ...] = tuple((name, _KIND[kind]) for name, kind in PARTITION_COLUMNS)
Columns = NamedTuple("Columns", [(name, np.ndarray) for name, _kind in COLUMNS])  # type: ignore[misc]
LAGGING = [name for name, _kind in COLUMNS].index("lagging")
_REWIND_AT, _OWNERSHIP_AT = 11, 22  # their places in PartitionMemory's flat tuple
_KINDS = tuple(kind for _name, kind in COLUMNS)
_RUN = tuple(i for i, (name, _kind) in enumerate(COLUMNS) if name.startswith("run_"))
_OWNER = [name for name, _kind in COLUMNS].index("owner")
# The columns of a first memory that hold the committed offset it starts from
# (PartitionMemory.first: ``followed`` and its floor's ``next``).
_STARTS_AT = [i for i, (name, _kind) in enumerate(COLUMNS) if name in ("followed", "floor_next")]


def _dec(v: float, kind: str) -> object:
    if kind == "b":
        return bool(v)
    if v != v:  # NaN is None
        return None
    return int(v) if kind == "i" else v


class PartitionTable(MutableMapping[TP, PartitionMemory]):
    """The partition memory of one group: a row per partition, a column per element."""

    __slots__ = ("tps", "_index", "_buf", "owners", "_owner_ids")

    def __init__(self, capacity: int = 0) -> None:
        """``capacity``: rows to make room for at once (a new group's partitions, added one
        at a time in its first cycle), where growing by half would leave a quarter unused."""
        self.tps: list[TP] = []
        self._index: dict[TP, int] | None = {}  # row by partition: see :attr:`index`
        self._buf = np.zeros((len(COLUMNS), capacity))  # the rows, then room for more
        self.owners: list[str] = []
        self._owner_ids: dict[str, int] = {}

    @classmethod
    def of_plain(cls, tps: list[TP], rows: list[tuple[object, ...]]) -> PartitionTable:
        """A table of ``tps`` whose rows are :meth:`plain`'s (an owner as its member id, None
        where an element is), made column by column: a restored group's memory."""
        table = cls(len(tps))
        table._extend(tps)
        if tps:
            cols = [list(col) for col in zip(*rows, strict=True)]
            cols[_OWNER] = [table.owner_id(m) for m in cols[_OWNER]]  # type: ignore[arg-type]
            table._buf[:, :len(tps)] = [col if None not in col else [NONE if v is None else v for v in col]
                                        for col in cols]
        return table

    def copy(self) -> PartitionTable:
        """An equal table with rows of its own: what is settled on it leaves this one."""
        out = PartitionTable()
        out.tps, out._index, out._buf = list(self.tps), None, self.rows.copy()
        out.owners, out._owner_ids = list(self.owners), dict(self._owner_ids)
        return out

    @property
    def rows(self) -> np.ndarray:
        """A column per element, a row per partition in the order of ``tps`` (a view:
        writes go to the table)."""
        return self._buf[:, :len(self.tps)]

    @property
    def index(self) -> dict[TP, int]:
        """The row of each partition: made at a lookup and kept until the next
        :meth:`step` (lookups come in bursts, one group's evaluation; the step reads the
        columns, so a group judged in columns keeps none between cycles)."""
        if self._index is None:
            self._index = {tp: i for i, tp in enumerate(self.tps)}
        return self._index

    def step(self, which: slice | np.ndarray, after: np.ndarray) -> None:
        """The rows ``which`` take their next memory ``after`` (a column per element)."""
        self._buf[:, which] = after
        self._index = None

    # -- the mapping (one partition at a time) --------------------------------------
    def __len__(self) -> int:
        return len(self.tps)

    def __iter__(self) -> Iterator[TP]:
        return iter(list(self.tps))

    def __contains__(self, tp: object) -> bool:
        return tp in self.index

    def __getitem__(self, tp: TP) -> PartitionMemory:
        return self.memory(self.index[tp])

    def __setitem__(self, tp: TP, mem: PartitionMemory) -> None:
        i = self.index.get(tp)
        if i is None:
            i = self._append(tp)
        self._buf[:, i] = self.encode(mem)

    def __delitem__(self, tp: TP) -> None:
        index = self.index
        i = index.pop(tp)
        n = len(self.tps)
        self._buf[:, i:n - 1] = self._buf[:, i + 1:n]
        del self.tps[i]
        for j, t in enumerate(self.tps[i:], i):
            index[t] = j

    def add_first(self, tps: list[TP], followed: list[int], now: float) -> None:
        """Rows for partitions seen for the first time, each
        :meth:`~exporter.evaluate.memory.PartitionMemory.first` at its followed offset,
        written at once: a new group's first cycle is then stepped in columns too."""
        first = np.array(self.encode(PartitionMemory.first(0, now)))
        self._extend(tps)
        n = len(self.tps)
        block = self._buf[:, n - len(tps):n]
        block[:] = first[:, None]
        block[_STARTS_AT] = np.array(followed, float)

    def _append(self, tp: TP) -> int:
        i = len(self.tps)
        self._extend([tp])
        return i

    def _extend(self, tps: list[TP]) -> None:
        """Rows for ``tps``, none of them in the table yet, after the others."""
        i = len(self.tps)
        n = i + len(tps)
        if n > self._buf.shape[1]:  # room for half as many again: appends cost O(1) each
            grown = np.zeros((len(COLUMNS), max(4, n, i + i // 2)))
            grown[:, :i] = self._buf[:, :i]
            self._buf = grown
        if self._index is not None:  # else made at the next lookup
            self._index.update(zip(tps, range(i, n), strict=True))
        self.tps.extend(tps)

    # -- rows <-> PartitionMemory -----------------------------------------------------
    def owner_id(self, member: str | None) -> int:
        """The row value naming ``member`` as an owner (-1: none known)."""
        if member is None:
            return -1
        i = self._owner_ids.get(member)
        if i is None:
            i = self._owner_ids[member] = len(self.owners)
            self.owners.append(member)
        return i

    def encode(self, mem: PartitionMemory) -> list[float]:
        flat = list(mem)
        rewind, ownership = flat[_REWIND_AT], flat[_OWNERSHIP_AT]
        flat[_OWNERSHIP_AT:_OWNERSHIP_AT + 1] = [self.owner_id(ownership.owner), ownership.unowned]
        flat[_REWIND_AT:_REWIND_AT + 1] = [rewind.until, rewind.pending]
        return [np.nan if v is None else v for v in flat]

    def memory(self, i: int) -> PartitionMemory:
        vals = [_dec(v, k) for v, k in zip(self._buf[:, i].tolist(), _KINDS, strict=True)]
        owner = vals[_OWNERSHIP_AT + 1]
        vals[_OWNERSHIP_AT + 1:_OWNERSHIP_AT + 3] = [
            Ownership(None if owner is None or owner < 0 else self.owners[owner], vals[_OWNERSHIP_AT + 2])]
        vals[_REWIND_AT:_REWIND_AT + 2] = [Rewind(vals[_REWIND_AT], vals[_REWIND_AT + 1])]
        return tuple.__new__(PartitionMemory, vals)

    def plain(self) -> list[tuple[object, ...]]:
        """Every row as PartitionMemory's elements with its Rewind and Ownership flattened
        (an owner as its member id): what :meth:`memory` decodes, column by column."""
        cols = []
        for (name, kind), col in zip(COLUMNS, self.rows.tolist(), strict=True):
            if name == "owner":
                cols.append([None if v < 0 else self.owners[int(v)] for v in col])
            elif kind == "b":
                cols.append([bool(v) for v in col])
            elif kind == "i":
                cols.append([None if v != v else int(v) for v in col])
            else:
                cols.append([None if v != v else v for v in col])
        return list(zip(*cols, strict=True))

    # -- the group's partitions at once ------------------------------------------------
    def any_beyond(self, offsets: dict[TP, int]) -> bool:
        """Some partition's offset in ``offsets`` is past its remembered followed offset."""
        # each row's offset in ``offsets`` (-1: none) against its memory, compared in C
        # (a group's few dozen rows: less work than building an array to compare)
        return any(map(gt, map(offsets.get, self.tps, repeat(-1)), self._buf[0, :len(self.tps)].tolist()))

    def aligned(self, tps: list[TP]) -> bool:
        """The rows are ``tps``, in this order (reordered when they are the same set)."""
        if self.tps == tps:
            return True
        index = self.index
        if len(tps) != len(self.tps) or any(tp not in index for tp in tps):
            return False
        self._buf = self._buf[:, [index[tp] for tp in tps]]
        self.tps = list(tps)
        self._index = None
        return True


class CycleOffsets(NamedTuple):
    """The cycle's partition offsets as columns (float64, NaN: unknown), each partition's
    row by its key; the last row, NaN, stands for a partition the cycle did not sample.
    A group's HW and log start column are then two takes, not a lookup per partition."""

    row: dict[TP, int]
    hw: np.ndarray
    log_start: np.ndarray

    @classmethod
    def of(cls, partitions: dict[TP, PartitionOffsets]) -> CycleOffsets:
        pos = list(partitions.values())
        return cls({tp: i for i, tp in enumerate(partitions)},
                   offsets_column([*map(HW_OF, pos), None]), offsets_column([*map(LOG_START_OF, pos), None]))

    def rows_of(self, tps: list[TP]) -> np.ndarray:
        """The row of each of ``tps`` (-1, the last: not sampled)."""
        return np.fromiter(map(self.row.get, tps, repeat(-1)), np.intp, len(tps))


class Samples(NamedTuple):
    """One cycle's :class:`~exporter.evaluate.memory.StepInput` of many partitions, as
    columns (float64 as the table's, NaN: None; ``owned`` bool)."""

    followed: np.ndarray
    hw: np.ndarray
    lag_off: np.ndarray
    lag_s: np.ndarray
    owned: np.ndarray
    owner: np.ndarray  # the owner's id in the table, -1: not known


class RowStep(NamedTuple):
    """What the rules read, for many partitions (:class:`~exporter.evaluate.memory.Observation`)."""

    stalled_seconds: np.ndarray
    new_data_seconds: np.ndarray  # NaN: None
    rewinding: np.ndarray
    unowned_confirmed: np.ndarray
    lagging: np.ndarray


def plain(before: np.ndarray, s: Samples) -> np.ndarray:
    """The rows :func:`observe_rows` steps: the HW known, the committed offset not moved
    backwards and no backward move pending (a rewind's evidence is judged one at a time)."""
    m = Columns(*before)
    return ~np.isnan(s.hw) & (s.followed >= m.followed) & np.isnan(m.rewind_pending)


def observe_rows(before: np.ndarray, s: Samples, now: float, tu: Tuning) -> tuple[np.ndarray, RowStep]:
    """:func:`~exporter.evaluate.memory.observe` then ``remember`` with an ``ok`` or
    ``lagging`` status, for rows that are all :func:`plain`: the next memory of each, and
    the evidence. The thresholds of ``tu`` may be arrays, each row's group's."""
    after = before.copy()
    m, a = Columns(*before), Columns(*after)
    moved = s.followed != m.followed
    changed_at = np.where(moved, now, m.changed_at)
    a.followed[:], a.changed_at[:] = s.followed, changed_at
    _new_data(a, m, moved, s.hw, now, tu.stall_after)
    rolls = now - m.floor_at >= LATE_COMMIT_WINDOW
    a.floor_low[:] = np.where(rolls, m.floor_next, m.floor_low)
    a.floor_next[:] = np.where(rolls, m.followed, m.floor_next)
    a.floor_at[:] = np.where(rolls, now, m.floor_at)
    has_lag = s.lag_off != 0
    since = np.where(np.isnan(m.lag_since), now - np.maximum(np.nan_to_num(s.lag_s), 0.0), m.lag_since)
    a.lag_since[:] = np.where(has_lag, since, np.nan)
    stalled = np.where(has_lag, now - np.maximum(changed_at, since), 0.0)
    new_owner = (s.owner >= 0) & (m.owner >= 0) & (s.owner != m.owner)
    a.unowned[:] = np.where(s.owned, 0, m.unowned + 1)
    a.owner[:] = np.where(s.owner < 0, m.owner, s.owner)
    quiet = now - a.arrived_at >= QUIET_FRACTION * tu.stall_after
    lagging = _commit_trend(a, m, s, moved, new_owner, quiet, now, tu)
    return after, RowStep(stalled, now - a.new_data_at, now < m.rewind_until,
                           a.unowned >= STOPPED_AFTER_CYCLES, lagging)


def _new_data(a: Columns, m: Columns, moved: np.ndarray, hw: np.ndarray, now: float,
              stall_after: float | np.ndarray) -> None:
    """:func:`~exporter.evaluate.memory.new_data`, a known HW each."""
    fz = m.freeze_hw
    known = ~np.isnan(fz)
    arrived = hw > fz  # False where fz is NaN (unknown)
    a.arrived_at[:] = np.where(arrived, now, m.arrived_at)
    restart = moved | ~known  # the offset moved, or no HW known before: evidence restarts
    quiet_at, flow_at, tail_from, nd_at = m.quiet_at, m.flow_at, m.tail_from, m.new_data_at
    no_tail = np.isnan(tail_from)
    grew = ~restart & np.isnan(nd_at) & arrived
    paused = (quiet_at > m.changed_at) & (no_tail | (quiet_at - flow_at >= QUIET_FRACTION * stall_after))
    flowing = ~paused & (now - m.changed_at >= stall_after)
    nd_new = np.where(paused | no_tail, quiet_at, tail_from)
    a.new_data_at[:] = np.where(restart, np.nan, np.where(grew & (paused | flowing), nd_new, nd_at))
    tail_keep = np.where(grew & ~paused & ~flowing & no_tail, quiet_at, tail_from)
    a.tail_from[:] = np.where(restart, np.where(moved & arrived, now, np.nan), tail_keep)
    a.flow_at[:] = np.where(restart | grew, now, flow_at)
    a.quiet_at[:] = np.where(restart | (~restart & np.isnan(nd_at) & (hw == fz)), now, quiet_at)
    a.freeze_hw[:] = hw


def _commit_trend(a: Columns, m: Columns, s: Samples, moved: np.ndarray, new_owner: np.ndarray,
                  quiet: np.ndarray, now: float, tu: Tuning) -> np.ndarray:
    """:func:`~exporter.evaluate.memory.commit_trend` (and ``extend_run``, ``lag_trend``)
    for :func:`plain` rows, which never moved backwards: writes the run and the trend kept
    into ``a``; returns whether each is lagging."""
    has_prev = ~new_owner & ~np.isnan(m.run_t0)
    prev = Columns(*(np.where(has_prev, col, np.nan) if i in _RUN else col for i, col in enumerate(m)))
    extends = (has_prev & (s.followed > prev.run_committed) & (s.lag_s > prev.run_lag_s)
               & (s.hw > prev.run_hw))  # False wherever one of them is None (NaN)
    new_run = moved | ~has_prev
    fresh = new_run & ~extends
    ext = new_run & extends
    a.run_t0[:] = np.where(fresh, now, prev.run_t0)
    a.run_l0[:] = np.where(fresh, s.lag_s, prev.run_l0)
    a.run_n[:] = np.where(fresh, 1, np.where(ext, prev.run_n + 1, prev.run_n))
    a.run_gap[:] = np.where(fresh, 0.0, np.where(ext, np.maximum(prev.run_gap, now - prev.run_t_last),
                                                 prev.run_gap))
    a.run_t_last[:] = np.where(new_run, now, prev.run_t_last)
    a.run_committed[:] = np.where(new_run, s.followed, prev.run_committed)
    a.run_lag_s[:] = np.where(new_run, s.lag_s, prev.run_lag_s)
    a.run_hw[:] = np.where(new_run, s.hw, prev.run_hw)
    was = m.lagging != 0
    trend = _lag_trend(a, prev, s.lag_s, was, quiet, tu)
    judged = moved | ~has_prev | (s.lag_s > tu.lag_threshold)
    unknown = np.isnan(s.lag_s)
    kept = np.where(s.lag_off == 0, False, np.where(unknown, was, np.where(judged, trend, was & ~quiet)))
    a.lagging[:] = kept
    return kept & ~unknown


def _lag_trend(a: Columns, prev: Columns, lag_s: np.ndarray, was: np.ndarray, quiet: np.ndarray,
               tu: Tuning) -> np.ndarray:
    """:func:`~exporter.evaluate.memory.lag_trend` over the run in ``a`` and the one before."""
    behind_now = np.where(np.isnan(a.run_hw), np.inf, a.run_hw - a.run_committed)
    behind_prev = np.where(np.isnan(prev.run_hw), np.inf, prev.run_hw - prev.run_committed)
    shrinking = (lag_s < prev.run_lag_s) & (behind_now < behind_prev)
    keeps = ~((lag_s <= tu.interval) | quiet) & ~shrinking
    growth = a.run_lag_s - a.run_l0  # NaN (no growth) where either is None
    grows = ((a.run_n >= TREND_MIN_COMMITS) & (growth >= TREND_GROWTH_RATIO * (a.run_t_last - a.run_t0))
             & (growth > a.run_gap + tu.interval))
    return (lag_s > tu.lag_threshold) | np.where(was, keeps, grows)


def ok_rows(e: RowStep, s: Samples, outside: np.ndarray, allowance: np.ndarray,
            th_stall_after: np.ndarray, th_lag_seconds: np.ndarray) -> np.ndarray:
    """The rows every rule of :data:`~exporter.evaluate.rules.RULES` leaves ``ok`` for a
    partition of a group without reports (not a Spark query, not owned-and-never-committed,
    its topic subscribed): no lag; or nobody-owns not confirmed (or an outside client
    within its allowance), stalled for less than ``stall_after``, no rewind, lag seconds
    within the threshold and no growing trend. The others are judged one at a time.
    The group-level facts and thresholds come per row (each row's group's)."""
    limit = np.maximum(th_stall_after, allowance)
    unowned_clear = ~e.unowned_confirmed | (outside & (e.stalled_seconds < limit))
    judged_ok = (unowned_clear & (e.stalled_seconds < th_stall_after) & ~e.rewinding
                 & ~(s.lag_s > th_lag_seconds) & ~e.lagging)
    return (s.lag_off == 0) | judged_ok


# The rules of exporter/evaluate/rules.py RULES that may hold for a row :func:`ok_rows`
# does not find ``ok`` (no Spark query, no reports, committed, its topic subscribed), in
# the table's order. tests/test_columns.py holds the list to the table.
COLUMN_RULES: tuple[str, ...] = ("unowned", "rejoin_loop", "stalled", "rewind", "lag_above_threshold",
                                 "lag_growing")


def first_rules(e: RowStep, lag_s: np.ndarray, rejoins: np.ndarray, outside: bool | np.ndarray,
                allowance: float | np.ndarray, stall_after: float | np.ndarray,
                lag_threshold: float | np.ndarray) -> np.ndarray:
    """For rows that :func:`ok_rows` does not find ``ok`` (so with lag): the index in
    :data:`COLUMN_RULES` of the first rule that holds, -1 for none; each rule's predicate
    of exporter/evaluate/rules.py over the rows' evidence at once. ``rejoins``: each row's
    :func:`~exporter.evaluate.memory.joins_since` its committed offset froze. The
    group-level facts and thresholds come once (rows of one group) or per row."""
    nd, stalled = e.new_data_seconds, e.stalled_seconds  # NaN new data: no comparison holds
    limit = np.maximum(stall_after, allowance)
    rejoin_loop = (rejoins >= 2) & (stalled >= stall_after) & (nd >= stall_after)
    unowned = (e.unowned_confirmed & ~e.rewinding & ~(outside & (stalled < limit))
               & ~rejoin_loop)  # a rejoin loop is the only livelock rule here
    holds = np.stack([unowned, rejoin_loop, (stalled >= limit) & (nd >= limit) & ~e.rewinding,
                      e.rewinding, lag_s > lag_threshold, e.lagging.astype(bool)])
    return np.where(holds.any(axis=0), holds.argmax(axis=0), -1)


def alike_runs(starts: np.ndarray, *columns: np.ndarray) -> np.ndarray:
    """For each run of rows from ``starts`` (ascending, each run not empty) to the next
    start: whether every row of the run holds the same value in each column (NaN the same
    as NaN), for all runs at once."""
    alike = np.ones(len(starts), bool)
    counts = np.diff(np.append(starts, len(columns[0]))) if columns else alike
    for col in columns:
        col = col.astype(np.float64, copy=False)
        nan = np.isnan(col)
        nans = np.add.reduceat(nan, starts)
        filled = np.where(nan, 0.0, col)
        same = np.maximum.reduceat(filled, starts) == np.minimum.reduceat(filled, starts)
        alike &= (nans == counts) | ((nans == 0) & same)
    return alike
