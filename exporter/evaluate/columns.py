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

``None`` is stored as NaN in a float column and as :data:`NONE` in an integer column
(offsets and counts are never that low).
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import NamedTuple

import numpy as np

from exporter.evaluate.constants import (
    LATE_COMMIT_WINDOW,
    QUIET_FRACTION,
    STOPPED_AFTER_CYCLES,
    TREND_GROWTH_RATIO,
    TREND_MIN_COMMITS,
)
from exporter.evaluate.memory import Ownership, PartitionMemory, Rewind, Tuning

TP = tuple[str, int]
NONE = np.iinfo(np.int64).min  # an integer element that is None

_I, _F, _B = "i8", "f8", "?"
# One column per element of PartitionMemory's flat tuple, in its order; the rewind and
# the ownership (one element each there) take two columns each here.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("committed", _I), ("changed_at", _F),
    ("freeze_hw", _I), ("quiet_at", _F), ("flow_at", _F), ("tail_from", _F),
    ("new_data_at", _F), ("arrived_at", _F),
    ("floor_low", _I), ("floor_next", _I), ("floor_at", _F),
    ("rewind_until", _F), ("rewind_pending", _I),
    ("lag_since", _F),
    ("run_t0", _F), ("run_l0", _F), ("run_n", _I), ("run_gap", _F), ("run_t_last", _F),
    ("run_committed", _I), ("run_lag_s", _F), ("run_hw", _I),
    ("lagging", _B), ("owner", _I), ("unowned", _I), ("above_from", _F),
)
DTYPE = np.dtype(list(COLUMNS))
_REWIND_AT, _OWNERSHIP_AT = 11, 22  # their places in PartitionMemory's flat tuple
_KINDS = tuple(kind for _name, kind in COLUMNS)


def _enc(v: object, kind: str) -> object:
    if v is None:
        return np.nan if kind == _F else NONE
    return v


def _dec(v: object, kind: str) -> object:
    if kind == _F:
        return None if v != v else v  # NaN is None
    if kind == _I:
        return None if v == NONE else v
    return v


class PartitionTable(MutableMapping[TP, PartitionMemory]):
    """The partition memory of one group: a row per partition, a column per element.
    Member ids of owners are kept once each, as row values their index in ``owners``."""

    __slots__ = ("tps", "_index", "_buf", "owners", "_owner_ids")

    def __init__(self) -> None:
        self.tps: list[TP] = []
        self._index: dict[TP, int] = {}
        self._buf = np.zeros(0, DTYPE)  # the rows, then room for more
        self.owners: list[str] = []
        self._owner_ids: dict[str, int] = {}

    @property
    def rows(self) -> np.ndarray:
        """One row per partition, in the order of ``tps`` (a view: writes go to the table)."""
        return self._buf[:len(self.tps)]

    # -- the mapping (one partition at a time) --------------------------------------
    def __len__(self) -> int:
        return len(self.tps)

    def __iter__(self) -> Iterator[TP]:
        return iter(list(self.tps))

    def __contains__(self, tp: object) -> bool:
        return tp in self._index

    def __getitem__(self, tp: TP) -> PartitionMemory:
        return self.memory(self._index[tp])

    def __setitem__(self, tp: TP, mem: PartitionMemory) -> None:
        i = self._index.get(tp)
        if i is None:
            i = self._append(tp)
        self._buf[i] = self.encode(mem)

    def __delitem__(self, tp: TP) -> None:
        i = self._index.pop(tp)
        n = len(self.tps)
        self._buf[i:n - 1] = self._buf[i + 1:n]
        del self.tps[i]
        for j, t in enumerate(self.tps[i:], i):
            self._index[t] = j

    def _append(self, tp: TP) -> int:
        i = len(self.tps)
        if i == len(self._buf):  # room for half as many again: appends cost O(1) each
            grown = np.zeros(max(4, i + i // 2), DTYPE)
            grown[:i] = self._buf
            self._buf = grown
        self.tps.append(tp)
        self._index[tp] = i
        return i

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

    def encode(self, mem: PartitionMemory) -> tuple[object, ...]:
        flat = list(mem)
        rewind, ownership = flat[_REWIND_AT], flat[_OWNERSHIP_AT]
        flat[_OWNERSHIP_AT:_OWNERSHIP_AT + 1] = [self.owner_id(ownership.owner), ownership.unowned]
        flat[_REWIND_AT:_REWIND_AT + 1] = [rewind.until, rewind.pending]
        return tuple(_enc(v, k) for v, k in zip(flat, _KINDS, strict=True))

    def memory(self, i: int) -> PartitionMemory:
        vals = [_dec(v, k) for v, k in zip(self._buf[i].tolist(), _KINDS, strict=True)]
        owner = vals[_OWNERSHIP_AT + 1]
        vals[_OWNERSHIP_AT + 1:_OWNERSHIP_AT + 3] = [
            Ownership(None if owner is None or owner < 0 else self.owners[owner], vals[_OWNERSHIP_AT + 2])]
        vals[_REWIND_AT:_REWIND_AT + 2] = [Rewind(vals[_REWIND_AT], vals[_REWIND_AT + 1])]
        return tuple.__new__(PartitionMemory, vals)

    # -- the group's partitions at once ------------------------------------------------
    def aligned(self, tps: list[TP]) -> bool:
        """The rows are ``tps``, in this order (reordered when they are the same set)."""
        if self.tps == tps:
            return True
        if len(tps) != len(self.tps) or any(tp not in self._index for tp in tps):
            return False
        self._buf = self._buf[[self._index[tp] for tp in tps]]
        self.tps = list(tps)
        self._index = {tp: i for i, tp in enumerate(tps)}
        return True


class Samples(NamedTuple):
    """One cycle's :class:`~exporter.evaluate.memory.Sample` of many partitions, as
    columns (a known HW each: :func:`plain`)."""

    committed: np.ndarray  # i8
    hw: np.ndarray  # i8
    lag_off: np.ndarray  # i8
    lag_s: np.ndarray  # f8, NaN: unknown
    owned: np.ndarray  # bool
    owner: np.ndarray  # i8, the owner's id in the table, -1: not known


class Evidence(NamedTuple):
    """What the rules read, for many partitions (:class:`~exporter.evaluate.memory.Observation`)."""

    stalled_seconds: np.ndarray
    new_data_seconds: np.ndarray  # NaN: None
    rewinding: np.ndarray
    unowned_confirmed: np.ndarray
    lagging: np.ndarray


def plain(before: np.ndarray, s: Samples) -> np.ndarray:
    """The rows :func:`observe_rows` steps: the HW known, the committed offset not moved
    backwards and no backward move pending (a rewind's evidence is judged one at a time)."""
    return (s.hw != NONE) & (s.committed >= before["committed"]) & (before["rewind_pending"] == NONE)


def observe_rows(m: np.ndarray, s: Samples, now: float, tu: Tuning) -> tuple[np.ndarray, Evidence]:
    """:func:`~exporter.evaluate.memory.observe` then ``remember`` with an ``ok`` or
    ``lagging`` status, for rows that are all :func:`plain`: the next memory of each, and
    the evidence."""
    a = m.copy()
    moved = s.committed != m["committed"]
    changed_at = np.where(moved, now, m["changed_at"])
    a["committed"], a["changed_at"] = s.committed, changed_at
    _new_data(a, m, moved, s.hw, now, tu.stall_after)
    rolls = now - m["floor_at"] >= LATE_COMMIT_WINDOW
    a["floor_low"] = np.where(rolls, m["floor_next"], m["floor_low"])
    a["floor_next"] = np.where(rolls, m["committed"], m["floor_next"])
    a["floor_at"] = np.where(rolls, now, m["floor_at"])
    has_lag = s.lag_off != 0
    since = np.where(np.isnan(m["lag_since"]), now - np.maximum(np.nan_to_num(s.lag_s), 0.0),
                     m["lag_since"])
    a["lag_since"] = np.where(has_lag, since, np.nan)
    stalled = np.where(has_lag, now - np.maximum(changed_at, since), 0.0)
    new_owner = (s.owner >= 0) & (m["owner"] >= 0) & (s.owner != m["owner"])
    a["unowned"] = np.where(s.owned, 0, m["unowned"] + 1)
    a["owner"] = np.where(s.owner < 0, m["owner"], s.owner)
    quiet = now - a["arrived_at"] >= QUIET_FRACTION * tu.stall_after
    lagging = _commit_trend(a, m, s, moved, new_owner, quiet, now, tu)
    nd = now - a["new_data_at"]
    return a, Evidence(stalled, nd, now < m["rewind_until"],
                       a["unowned"] >= STOPPED_AFTER_CYCLES, lagging)


def _new_data(a: np.ndarray, m: np.ndarray, moved: np.ndarray, hw: np.ndarray, now: float,
              stall_after: float) -> None:
    """:func:`~exporter.evaluate.memory.new_data`, a known HW each."""
    fz = m["freeze_hw"]
    known = fz != NONE
    arrived = known & (hw > fz)
    a["arrived_at"] = np.where(arrived, now, m["arrived_at"])
    restart = moved | ~known  # the offset moved, or no HW known before: evidence restarts
    quiet_at, flow_at, tail_from, nd_at = m["quiet_at"], m["flow_at"], m["tail_from"], m["new_data_at"]
    waiting = ~restart & np.isnan(nd_at)
    grew = waiting & arrived
    paused = (quiet_at > m["changed_at"]) & (
        np.isnan(tail_from) | (quiet_at - flow_at >= QUIET_FRACTION * stall_after))
    flowing = ~paused & (now - m["changed_at"] >= stall_after)
    nd_new = np.where(paused, quiet_at, np.where(np.isnan(tail_from), quiet_at, tail_from))
    a["new_data_at"] = np.where(restart, np.nan, np.where(grew & (paused | flowing), nd_new, nd_at))
    tail_keep = np.where(grew & ~paused & ~flowing & np.isnan(tail_from), quiet_at, tail_from)
    a["tail_from"] = np.where(restart, np.where(moved & arrived, now, np.nan), tail_keep)
    a["flow_at"] = np.where(restart | grew, now, flow_at)
    a["quiet_at"] = np.where(restart | (waiting & (hw == fz)), now, quiet_at)
    a["freeze_hw"] = hw


def _commit_trend(a: np.ndarray, m: np.ndarray, s: Samples, moved: np.ndarray, new_owner: np.ndarray,
                  quiet: np.ndarray, now: float, tu: Tuning) -> np.ndarray:
    """:func:`~exporter.evaluate.memory.commit_trend` (and ``extend_run``, ``lag_trend``)
    for :func:`plain` rows, which never moved backwards: writes the run and the trend kept
    into ``a``; returns whether each is lagging."""
    has_prev = ~new_owner & ~np.isnan(m["run_t0"])
    prev = {k: np.where(has_prev, m[k], np.nan if kind == _F else NONE)
            for k, kind in COLUMNS if k.startswith("run_")}
    extends = (has_prev & (s.committed > prev["run_committed"]) & ~np.isnan(s.lag_s)
               & ~np.isnan(prev["run_lag_s"]) & (s.lag_s > prev["run_lag_s"])
               & (prev["run_hw"] != NONE) & (s.hw > prev["run_hw"]))
    new_run = moved | ~has_prev
    fresh = new_run & ~extends
    ext = new_run & extends
    for k in ("run_t0", "run_l0"):
        a[k] = np.where(fresh, now if k == "run_t0" else s.lag_s, prev[k])
    a["run_n"] = np.where(fresh, 1, np.where(ext, prev["run_n"] + 1, prev["run_n"]))
    a["run_gap"] = np.where(fresh, 0.0, np.where(ext, np.maximum(prev["run_gap"], now - prev["run_t_last"]),
                                                 prev["run_gap"]))
    latest = (("run_t_last", now), ("run_committed", s.committed), ("run_lag_s", s.lag_s), ("run_hw", s.hw))
    for k, v in latest:
        a[k] = np.where(new_run, v, prev[k])
    was = m["lagging"]
    trend = _lag_trend(a, prev, s.lag_s, was, quiet, tu)
    judged = moved | ~has_prev | (s.lag_s > tu.lag_threshold)
    lagging = np.where(judged, trend, was & ~quiet)
    unknown = np.isnan(s.lag_s)
    lagging = np.where(s.lag_off == 0, False, np.where(unknown, was, lagging))
    a["lagging"] = np.where(unknown & (s.lag_off != 0), was, lagging)
    return np.where(unknown, False, lagging)


def _lag_trend(a: np.ndarray, prev: dict[str, np.ndarray], lag_s: np.ndarray, was: np.ndarray,
               quiet: np.ndarray, tu: Tuning) -> np.ndarray:
    """:func:`~exporter.evaluate.memory.lag_trend` over the run in ``a`` and the one before."""
    above = lag_s > tu.lag_threshold
    behind_now = np.where(a["run_hw"] == NONE, np.inf, (a["run_hw"] - a["run_committed"]).astype(float))
    behind_prev = np.where(prev["run_hw"] == NONE, np.inf,
                           (prev["run_hw"] - prev["run_committed"]).astype(float))
    shrinking = (lag_s < prev["run_lag_s"]) & (behind_now < behind_prev)
    stays = np.isnan(prev["run_t0"]) | np.isnan(prev["run_lag_s"]) | ~shrinking
    keeps = ~((lag_s <= tu.interval) | quiet) & stays
    growth = a["run_lag_s"] - a["run_l0"]
    grows = ((a["run_n"] >= TREND_MIN_COMMITS) & ~np.isnan(a["run_l0"]) & ~np.isnan(a["run_lag_s"])
             & (growth >= TREND_GROWTH_RATIO * (a["run_t_last"] - a["run_t0"]))
             & (growth > a["run_gap"] + tu.interval))
    return above | np.where(was, keeps, grows)


def ok_rows(e: Evidence, s: Samples, outside: bool, allowance: float, th_stall_after: float,
            th_lag_seconds: float) -> np.ndarray:
    """The rows every rule of :data:`~exporter.evaluate.rules.RULES` leaves ``ok`` for a
    partition of a group without reports (not a Spark query, not owned-and-never-committed,
    its topic subscribed): no lag; or nobody-owns not confirmed (or an outside client
    within its allowance), stalled for less than ``stall_after``, no rewind, lag seconds
    within the threshold and no growing trend. The others are judged one at a time."""
    limit = max(th_stall_after, allowance)
    unowned_clear = ~e.unowned_confirmed | (outside & (e.stalled_seconds < limit))
    judged_ok = (unowned_clear & (e.stalled_seconds < th_stall_after) & ~e.rewinding
                 & ~(s.lag_s > th_lag_seconds) & ~e.lagging)
    return (s.lag_off == 0) | judged_ok
