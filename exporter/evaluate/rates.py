"""Consume and produce rates and the time to catch up: pure functions.

A group's consume rate is how fast its consumed offset (the committed offset; for a
share group, HW minus the lag the broker reports) advances; the produce rate is how
fast the partition's high watermark advances. Both are read over the same window
from the same samples, so their difference is exactly how fast the lag shrinks:
``lag(t) = HW(t) - consumed(t)``.

The window is the evaluator's judgement window (``thresholds.window``, 600 s by
default): it spans many commits of an auto-committing consumer (every 5 s) and many
triggers of a Spark query, so commit steps average out, yet a change of pace shows
within minutes; and it is the window the ``lagging`` rule judges lag growth over, so
the estimate and the status speak of the same period. Rates are shown once the
samples span a quarter of it (at least three cycles): fewer commits than that make
a rate out of one step.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

import numpy as np

from exporter.contracts.snapshot import TP

# (sample time, consumed offset, high watermark) of one group-partition.
Point = tuple[float, int, int]

# Points kept per group-partition: one per tenth of the window plus the newest, so
# memory does not grow with the sampling rate or the window (rates span 90 to 100 % of it).
POINTS_PER_WINDOW = 10


class Points:
    """The points of one group-partition in one flat array of doubles (time, consumed, HW,
    time, ...): about 350 bytes for a full window where a list of tuples takes 1.5 to 3 KB,
    and one per group-partition is kept (100k of them in a large cluster). Offsets are
    exact as doubles up to 2**53. Reads as a sequence of :data:`Point`; the few mutations
    :func:`add_point` makes are supported."""

    __slots__ = ("_a",)

    def __init__(self) -> None:
        self._a = array("d")

    def __len__(self) -> int:
        return len(self._a) // 3

    def __getitem__(self, i: int) -> Point:
        a = self._a
        j = 3 * (i if i >= 0 else len(a) // 3 + i)
        if not 0 <= j < len(a):
            raise IndexError(i)
        return a[j], int(a[j + 1]), int(a[j + 2])

    def __setitem__(self, i: int, p: Point) -> None:
        if i != -1:
            raise IndexError("only the newest point is replaced")
        self._a[-3:] = array("d", p)

    def __delitem__(self, i: int) -> None:
        if i != 0:
            raise IndexError("only the oldest point is dropped")
        del self._a[:3]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence | Points) and list(self) == list(other)  # type: ignore[arg-type]

    __hash__ = None  # type: ignore[assignment]

    def append(self, p: Point) -> None:
        self._a.extend(p)

    def clear(self) -> None:
        del self._a[:]

    def add(self, t: float, consumed: int, hw: int, window: float) -> None:
        """:func:`add_point` on the flat array itself: it runs for every group-partition
        every cycle, where going through :meth:`__getitem__` costs several tuples each."""
        a = self._a
        n = len(a)
        if n and (consumed < a[n - 2] or hw < a[n - 1]):
            del a[:]
            n = 0
        if n >= 6 and t - a[n - 6] < window / POINTS_PER_WINDOW:
            a[n - 3], a[n - 2], a[n - 1] = t, consumed, hw
        else:
            a.extend((t, consumed, hw))
        while len(a) > 6 and a[0] < t - window:
            del a[:3]

    def constant(self, consumed: int, hw: int) -> bool:
        """Two points or more, the oldest and the newest at these offsets (offsets never go
        down within the points, so all are): every rate over them is zero."""
        a = self._a
        n = len(a)
        return (n >= 6 and a[1] == a[n - 2] == consumed and a[2] == a[n - 1] == hw)

    def flat(self) -> tuple[float, ...]:
        """The points as one flat tuple (time, consumed, HW, time, ...): their saved state."""
        return tuple(self._a)

    @classmethod
    def from_flat(cls, values: Sequence[float]) -> Points:
        """Points from :meth:`flat`'s tuple."""
        out = cls()
        out._a.extend(values)
        return out

    def times(self) -> tuple[float, ...]:
        return tuple(self._a[0::3])

    @classmethod
    def at_times(cls, times: Sequence[float]) -> Points:
        """Points at ``times``, every one at offsets 0 (exporter/evaluate/rest.py keeps one
        such set of times for all the partitions of a group at rest)."""
        out = cls()
        a = out._a = array("d", bytes(24 * len(times)))
        a[0::3] = array("d", times)
        return out

    def filled(self, consumed: int, hw: int) -> Points:
        """A copy at these times, every point at these offsets (exporter/evaluate/rest.py
        advances one set of times for all the partitions of a group at rest)."""
        out = Points()
        a = out._a = array("d", self._a)
        n = len(a) // 3
        a[1::3] = array("d", [consumed]) * n
        a[2::3] = array("d", [hw]) * n
        return out

    def known_at(self, span_min: float) -> float:
        """When :func:`rates` over these points is first known (``-inf``: it is already)."""
        a = self._a
        return -math.inf if a[len(a) - 3] - a[0] >= span_min else a[0] + span_min

    def oldest(self) -> float:
        return self._a[0]

    def ends(self) -> tuple[Point, Point] | None:
        """(oldest, newest) point; None with fewer than two."""
        a = self._a
        n = len(a)
        if n < 6:
            return None
        return (a[0], int(a[1]), int(a[2])), (a[n - 3], int(a[n - 2]), int(a[n - 1]))


@dataclass(frozen=True, slots=True)
class Rates:
    consume: float  # records per second
    produce: float  # records per second
    span: float  # seconds the rates were measured over


def add_point(points: list[Point] | Points, p: Point, window: float) -> None:
    """Append a sample, keeping points at least a tenth of the window apart (the last one
    is always the newest sample) and none older than the window.

    A consumed offset or a high watermark that moved backwards (a rewind, an offset
    reset, a topic recreated) makes the older points meaningless: they are dropped."""
    if isinstance(points, Points):
        points.add(p[0], p[1], p[2], window)
        return
    if points and (p[1] < points[-1][1] or p[2] < points[-1][2]):
        points.clear()
    spacing = window / POINTS_PER_WINDOW
    if len(points) >= 2 and p[0] - points[-2][0] < spacing:
        points[-1] = p
    else:
        points.append(p)
    while len(points) > 2 and points[0][0] < p[0] - window:
        del points[0]


def rates(points: Sequence[Point] | Points, min_span: float) -> Rates | None:
    """Consume and produce rates between the oldest and the newest point; None until
    the points span ``min_span`` seconds."""
    ends = _ends(points)
    if ends is None:
        return None
    (t0, c0, h0), (t1, c1, h1) = ends
    span = t1 - t0
    if not span >= min_span or span <= 0:
        return None
    return Rates(consume=(c1 - c0) / span, produce=(h1 - h0) / span, span=span)


def common_rates(series: Sequence[Sequence[Point] | Points], min_span: float) -> Rates | None:
    """Summed rates of several partitions over the span they were all sampled in.

    Summing each partition's own rate would mix spans: a consumer that drained one
    partition, then turned to another first committed only later, looks as if it
    consumed at both paces at once. So each partition's offsets are read (interpolated
    between its points) at the same two times: the newest sample, and the oldest time
    every partition has a point at or before. None until that span is ``min_span`` long."""
    ends = [_ends(pts) for pts in series]
    if not ends or any(e is None for e in ends):
        return None
    t0 = max(e[0][0] for e in ends)  # type: ignore[index]
    t1 = min(e[1][0] for e in ends)  # type: ignore[index]
    span = t1 - t0
    if not span >= min_span or span <= 0:
        return None
    consumed = produced = 0.0
    for pts, (first, last) in zip(series, ends, strict=True):  # type: ignore[misc]
        # Partitions sampled together keep points at the same times: interpolate only
        # for one whose history started later or ends earlier.
        c0, h0 = (first[1], first[2]) if first[0] == t0 else _at(pts, t0)
        c1, h1 = (last[1], last[2]) if last[0] == t1 else _at(pts, t1)
        consumed += c1 - c0
        produced += h1 - h0
    return Rates(consume=consumed / span, produce=produced / span, span=span)


def _ends(points: Sequence[Point] | Points) -> tuple[Point, Point] | None:
    """(oldest, newest) point; None with fewer than two."""
    if isinstance(points, Points):
        return points.ends()
    return (points[0], points[-1]) if len(points) >= 2 else None


def _at(points: Sequence[Point] | Points, t: float) -> tuple[float, float]:
    """Consumed offset and HW at ``t`` (within the points' span), linearly interpolated."""
    for i in range(len(points) - 1):
        (ta, ca, ha), (tb, cb, hb) = points[i], points[i + 1]
        if ta <= t <= tb:
            f = 0.0 if tb == ta else (t - ta) / (tb - ta)
            return ca + f * (cb - ca), ha + f * (hb - ha)
    last = points[-1]
    return float(last[1]), float(last[2])


def min_span(window: float, interval: float) -> float:
    """The shortest span rates are shown for: a quarter of the window, at least three
    sampling cycles (never more than the window)."""
    return min(window, max(window / 4, 3 * interval))


def caught_up(lag: int, consume: float | None, settle: float) -> bool:
    """No lag, or no more than the consumer gets through in ``settle`` seconds: records
    in flight between two commits, not a backlog."""
    return lag <= 0 or (consume is not None and consume > 0 and lag <= consume * settle)


def catchup_seconds(lag: int, consume: float, produce: float) -> float | None:
    """Seconds until ``lag`` is gone at these rates; None when consumption is not faster
    than production (it never catches up at this pace) or the result is not finite."""
    net = consume - produce
    if lag <= 0:
        return 0.0
    if net <= 0:
        return None
    eta = lag / net
    return eta if math.isfinite(eta) else None


def fmt_duration(seconds: float) -> str:
    """A rounded human duration: "12 s", "4 min", "2.5 h", "3 days"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def fmt_rate(v: float) -> str:
    """Records per second with the precision a reader needs: "120", "3.5", "0.04"."""
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.1f}"
    return f"{v:.2g}"


class PointColumn:
    """One offset column of a :class:`RateTable`'s points (consumed, or HW), a row per
    partition: the oldest and the newest point's offsets as float64 (all that rates read),
    and between consecutive points each row's increase, one array for all of them
    (``steps``: a row per point after the oldest), in the narrowest unsigned dtype that
    holds the largest (offsets never move backwards in columns). The points between wait
    to become the oldest: 1 to 4 bytes a partition where float64 takes 8, and one array
    where each point took its own. Sums of integers below 2**53 in float64 are exact: the
    points read back equal the points added."""

    __slots__ = ("newest", "oldest", "steps")

    def __init__(self, points: Sequence[np.ndarray] = ()) -> None:
        self.oldest: np.ndarray | None = points[0] if len(points) else None
        self.newest: np.ndarray | None = points[-1] if len(points) else None
        increases = [_narrow(b - a) for a, b in zip(points, points[1:], strict=False)]
        self.steps: np.ndarray | None = np.stack(increases) if increases else None

    @classmethod
    def constant(cls, values: np.ndarray, n: int) -> PointColumn:
        """``n`` points all at ``values``: what ``n`` equal arrays make, without a
        difference taken between each pair."""
        out = cls()
        if n:
            out.oldest = out.newest = values
            out.steps = np.zeros((n - 1, len(values)), np.uint8) if n > 1 else None
        return out

    def __len__(self) -> int:
        if self.newest is None:
            return 0
        return 1 if self.steps is None else len(self.steps) + 1

    def push(self, new: np.ndarray) -> None:
        """A newer point."""
        if self.newest is None:
            self.oldest = self.newest = new
            return
        increase = new - self.newest
        self.push_increase(new, increase, _top(increase))

    def push_increase(self, new: np.ndarray, increase: np.ndarray, top: float) -> None:
        """:meth:`push` with ``increase`` (``new`` less the newest point, float64) and its
        largest value ``top`` computed beforehand (:func:`step_together`: for many tables
        at once)."""
        step = _narrow(increase, top).reshape(1, -1)
        self.steps = step.copy() if self.steps is None else np.concatenate([self.steps, step])
        self.newest = new

    def replace_newest(self, new: np.ndarray) -> None:
        """The newest point moved to ``new`` (two points or more)."""
        steps = self.steps
        assert self.newest is not None and steps is not None
        if new is self.newest:
            return
        increase = new - (self.newest - steps[-1])
        self.replace_increase(new, increase, _top(increase))

    def replace_increase(self, new: np.ndarray, increase: np.ndarray, top: float) -> None:
        """:meth:`replace_newest` with ``increase`` (``new`` less the point before the
        newest, float64) and its largest value ``top`` computed beforehand."""
        steps = self.steps
        assert steps is not None
        dtype = _dtype_for(top)
        if not np.can_cast(dtype, steps.dtype):  # a wider increase: every row widened
            steps = self.steps = steps.astype(np.result_type(steps.dtype, dtype))
        steps[-1] = increase
        self.newest = new

    def drop_oldest(self) -> None:
        """The oldest point forgotten (two points or more): the next is the oldest."""
        steps = self.steps
        assert self.oldest is not None and steps is not None
        if steps[0].any():
            self.oldest = self.oldest + steps[0]
        if len(steps) == 1:
            self.steps, self.oldest = None, self.newest
        else:
            self.steps = steps[1:]

    def points(self) -> list[np.ndarray]:
        """Every point's offsets, oldest first (float64)."""
        if self.oldest is None or self.newest is None:
            return []
        if self.steps is None:
            return [self.oldest]
        between = self.oldest + np.cumsum(self.steps[:-1], axis=0, dtype=np.float64)
        return [self.oldest, *between, self.newest]

    def row(self, i: int) -> list[float]:
        """Row ``i``'s offsets at every point, oldest first."""
        if self.oldest is None:
            return []
        at = float(self.oldest[i])
        out = [at]
        if self.steps is not None:  # one numpy call: a lookup runs once per partition
            for increase in self.steps[:, i].tolist():
                at += increase
                out.append(at)
        return out


_NARROW = tuple((dt, float(np.iinfo(dt).max)) for dt in (np.uint8, np.uint16, np.uint32))


def _top(increase: np.ndarray) -> float:
    """The largest of ``increase`` (NaN if any is), 0 for none."""
    return float(increase.max()) if len(increase) else 0.0


def _dtype_for(top: float) -> np.dtype:
    """The narrowest unsigned dtype that holds every increase up to ``top`` exactly;
    float64 for NaN, or past 2**32."""
    for dtype, most in _NARROW:
        if top <= most:  # False for NaN
            return np.dtype(dtype)
    return np.dtype(np.float64)


def _narrow(increase: np.ndarray, top: float | None = None) -> np.ndarray:
    """``increase`` (float64 integers, none negative) in the narrowest unsigned dtype that
    holds it exactly, or as it is (NaN, or past 2**32); ``top``: its largest value."""
    dtype = _dtype_for(_top(increase) if top is None else top)
    return increase if dtype == np.float64 else increase.astype(dtype)


class RateTable(MutableMapping[TP, Points]):
    """The rate points of one group's partitions: :class:`Points` per partition, kept in
    columns while the partitions are sampled together (the usual case), so that one
    cycle's step, rates and sums are a few array operations per group, not Python per
    partition. Then ``times`` holds the points' times (shared by every row) and
    ``consumed``/``hw`` one array per time, a row per partition of ``tps``.

    Anything else (a partition whose offsets moved backwards, one added or gone, one not
    sampled this cycle) turns the table into one :class:`Points` per partition
    (:meth:`unpack`), the exact form: what the columns hold is what those would hold,
    point for point. :meth:`pack` turns it back once every partition's points are at the
    same times again."""

    __slots__ = ("_by_tp", "_index", "consumed", "hw", "times", "tps")

    def __init__(self, points: Mapping[TP, Points] | None = None) -> None:
        self._by_tp: dict[TP, Points] = dict(points or {})
        self.tps: list[TP] = []  # the rows, while in columns
        self._index: dict[TP, int] | None = None  # row by partition, made at the first lookup
        self.times: list[float] = []
        self.consumed = PointColumn()
        self.hw = PointColumn()

    # -- the mapping: one Points per partition, copies while in columns -----------
    @property
    def index(self) -> dict[TP, int]:
        """The row of each partition, while in columns: made at a lookup and kept until
        the next :meth:`step` (lookups come in bursts, one group's evaluation; the steps
        read the columns, so a table in use keeps none between cycles)."""
        if self._index is None:
            self._index = {tp: i for i, tp in enumerate(self.tps)}
        return self._index

    def __getitem__(self, tp: TP) -> Points:
        i = self.index.get(tp)
        if i is None:
            return self._by_tp[tp]
        out = Points()
        for t, c, h in zip(self.times, self.consumed.row(i), self.hw.row(i), strict=True):
            out.append((t, int(c), int(h)))
        return out

    def __setitem__(self, tp: TP, points: Points) -> None:
        self.unpack()
        self._by_tp[tp] = points

    def __delitem__(self, tp: TP) -> None:
        self.unpack()
        del self._by_tp[tp]

    def __iter__(self) -> Iterator[TP]:
        return iter(self.tps) if self.tps else iter(self._by_tp)

    def __len__(self) -> int:
        return len(self.tps) or len(self._by_tp)

    @property
    def in_columns(self) -> bool:
        return bool(self.tps)

    def constant(self, hw: np.ndarray, consumed: np.ndarray | None = None) -> bool:
        """:meth:`Points.constant` of every row at its ``hw`` and ``consumed`` (its HW when
        not given; NaN: unknown, not constant), while in columns: two points or more, the
        oldest and the newest at those offsets."""
        c, h = self.consumed, self.hw
        if (len(self.times) < 2 or c.oldest is None or c.newest is None or h.oldest is None
                or h.newest is None):
            return False
        at = hw if consumed is None else consumed
        return bool(((c.oldest == at) & (c.newest == at) & (h.oldest == hw) & (h.newest == hw)).all())

    def clear(self) -> None:
        """No partition's points (what deleting each would leave, without unpacking)."""
        self._by_tp, self.tps, self._index, self.times = {}, [], None, []
        self.consumed, self.hw = PointColumn(), PointColumn()

    def unpack(self) -> dict[TP, Points]:
        """The table as one :class:`Points` per partition, from now on (its exact form)."""
        if self.tps:
            self._by_tp = {tp: Points.from_flat(row) for tp, row in self._flat_rows()}
            self.tps, self._index, self.times = [], None, []
            self.consumed, self.hw = PointColumn(), PointColumn()
        return self._by_tp

    def pack(self, tps: list[TP]) -> bool:
        """Into columns with rows ``tps`` when they are exactly its partitions and their
        points are at the same times; False (nothing changed) otherwise."""
        by = self._by_tp
        if self.tps or len(by) != len(tps) or not tps:
            return bool(self.tps) and self.tps == tps
        first = by.get(tps[0])
        if first is None:
            return False
        times = first.times()
        if any((p := by.get(tp)) is None or p.times() != times for tp in tps):
            return False
        flat = np.array([by[tp].flat() for tp in tps], dtype=float).reshape(len(tps), len(times), 3)
        self.tps, self._index, self.times = list(tps), None, list(times)
        self.consumed = PointColumn(list(flat[:, :, 1].T.copy()))
        self.hw = PointColumn(list(flat[:, :, 2].T.copy()))
        self._by_tp = {}
        return True

    def fill(self, tps: list[TP], times: Sequence[float], consumed: np.ndarray, hw: np.ndarray) -> None:
        """Rows ``tps`` in columns, a point at each of ``times`` at its row's offsets
        (``consumed``, ``hw``: whole numbers): what :meth:`Points.filled` of each row, then
        :meth:`pack`, hold, without a :class:`Points` per row."""
        n = len(times)
        self._by_tp = {}
        self.tps, self._index, self.times = list(tps), None, list(times)
        self.consumed = PointColumn.constant(np.array(consumed, np.float64), n)
        self.hw = PointColumn.constant(np.array(hw, np.float64), n)

    def start(self, tps: list[TP]) -> None:
        """An empty table, its rows to be ``tps`` from its first :meth:`step`."""
        self._by_tp = {}
        self.tps, self._index, self.times = list(tps), None, []
        self.consumed, self.hw = PointColumn(), PointColumn()

    def step(self, t: float, consumed: np.ndarray, hw: np.ndarray, window: float) -> bool:
        """:meth:`Points.add` on every row at once; False, nothing changed, when some row's
        offsets moved backwards (that row's points restart: :meth:`unpack` first)."""
        n = len(self.times)
        self._index = None
        if n:
            assert self.consumed.newest is not None and self.hw.newest is not None
            moved_consumed, moved_hw = _moved(consumed, self.consumed.newest), _moved(hw, self.hw.newest)
            if moved_consumed is None or moved_hw is None:
                return False
            consumed, hw = moved_consumed, moved_hw
        if _replaces(self.times, t, window):
            self.times[-1] = t
            self.consumed.replace_newest(consumed)
            self.hw.replace_newest(hw)
        else:
            self.times.append(t)
            self.consumed.push(consumed)
            self.hw.push(hw)
        self._forget(t, window)
        return True

    def _forget(self, t: float, window: float) -> None:
        """The points older than the window dropped, two kept at least."""
        while len(self.times) > 2 and self.times[0] < t - window:
            del self.times[0]
            self.consumed.drop_oldest()
            self.hw.drop_oldest()

    def span(self, min_span: float) -> float | None:
        """The span every row's rates are read over (:func:`rates`); None while unknown."""
        if len(self.times) < 2:
            return None
        span = self.times[-1] - self.times[0]
        return span if span >= min_span and span > 0 else None

    def flat_items(self) -> Iterator[tuple[TP, tuple[float, ...]]]:
        """(partition, :meth:`Points.flat`) of every partition, without a Points each."""
        if not self.tps:
            yield from ((tp, p.flat()) for tp, p in self._by_tp.items())
            return
        yield from ((tp, tuple(row)) for tp, row in self._flat_rows())

    def _flat_rows(self) -> Iterator[tuple[TP, list[float]]]:
        """(partition, its points flat: time, consumed, HW, time, ...) of every row, while
        in columns."""
        n = len(self.tps)
        if not n or not self.times:
            yield from ((tp, []) for tp in self.tps)
            return
        times = np.stack([np.full(n, t) for t in self.times], axis=1)
        flat = np.stack([times, np.stack(self.consumed.points(), axis=1), np.stack(self.hw.points(), axis=1)],
                        axis=2)
        yield from zip(self.tps, flat.reshape(n, -1).tolist(), strict=True)


def _moved(new: np.ndarray, newest: np.ndarray) -> np.ndarray | None:
    """The column a new point keeps: the newest point's own array where no offset moved
    (a group that stands still makes no new array; the columns are not written), ``new``
    where they moved forward, None where one moved backwards."""
    if (new == newest).all():
        return newest
    return None if (new < newest).any() else new


def _replaces(times: list[float], t: float, window: float) -> bool:
    """Whether a point at ``t`` replaces the newest of ``times`` (it comes within a tenth
    of the window after the one before it) rather than adding one."""
    return len(times) >= 2 and t - times[-2] < window / POINTS_PER_WINDOW


def step_together(tables: Sequence[RateTable], t: float, consumed: np.ndarray, hw: np.ndarray,
                  window: float) -> list[bool]:
    """:meth:`RateTable.step` of many tables at once: tables in columns with one point or
    more, all at the same times, their rows in ``consumed`` and ``hw`` one table after the
    other (float64, none NaN). The comparisons, increases and their largest values are a
    few array operations for all of them; each table then takes its slices. Returns, per
    table, whether it stepped (False: some row moved backwards; that table is unchanged,
    as :meth:`RateTable.step` leaves it)."""
    sizes = [len(tb.tps) for tb in tables]
    starts = np.cumsum([0, *sizes[:-1]])
    c_old = np.concatenate([tb.consumed.newest for tb in tables])  # type: ignore[misc]
    h_old = np.concatenate([tb.hw.newest for tb in tables])  # type: ignore[misc]
    back = np.logical_or.reduceat((consumed < c_old) | (hw < h_old), starts).tolist()
    c_same = np.logical_and.reduceat(consumed == c_old, starts).tolist()
    h_same = np.logical_and.reduceat(hw == h_old, starts).tolist()
    replace = _replaces(tables[0].times, t, window)
    if replace:  # the increases over the point before the newest
        c_old = c_old - np.concatenate([tb.consumed.steps[-1] for tb in tables])  # type: ignore[index]
        h_old = h_old - np.concatenate([tb.hw.steps[-1] for tb in tables])  # type: ignore[index]
    c_up, h_up = consumed - c_old, hw - h_old
    c_top, h_top = np.maximum.reduceat(c_up, starts).tolist(), np.maximum.reduceat(h_up, starts).tolist()
    lo = 0
    for k, (tb, n) in enumerate(zip(tables, sizes, strict=True)):
        rows, lo = slice(lo, lo + n), lo + n
        if back[k]:
            continue
        tb._index = None
        for column, same, new, up, top in ((tb.consumed, c_same[k], consumed, c_up, c_top[k]),
                                           (tb.hw, h_same[k], hw, h_up, h_top[k])):
            if replace and same:
                continue  # the newest point stays, its array too
            kept = column.newest if same else new[rows].copy()  # a copy: no chunk kept alive
            if replace:
                column.replace_increase(kept, up[rows], top)
            else:
                column.push_increase(kept, up[rows], top)
        if replace:
            tb.times[-1] = t
        else:
            tb.times.append(t)
        tb._forget(t, window)
    return [not b for b in back]
