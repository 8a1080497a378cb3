"""The evaluated view of a cluster: what /metrics, the JSON API and the status page render.

Built once per cycle by the evaluator and never mutated afterwards, so
renderers can read it from any thread without locks.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from functools import lru_cache
from itertools import repeat
from typing import Any, Protocol, TypeVar, overload

import numpy as np

from exporter.contracts.reports import CommitMode
from exporter.contracts.snapshot import TP, GroupType, KafkaGroupState, PartitionOffsets
from exporter.contracts.status import Status

# Label values in severity order (a group's status is its worst partition's).
STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
SEVERITY: dict[str, int] = {s.value: s.severity for s in Status}


class Membership(StrEnum):
    """How a group's partitions are consumed."""

    MEMBERS = "members"  # by the group's members
    OUTSIDE = "outside"  # no members; a client outside group membership commits (assign())
    NONE = "none"  # no members, and nobody commits


class RebalanceSource(StrEnum):
    """What a group's rebalance count rests on."""

    EPOCH = "epoch"  # the group epoch (KIP-848 consumer, streams and share groups): exact
    MEMBERSHIP = "membership"  # changes of the member set (classic groups): a lower bound
    CLIENTS = "clients"  # the instrumented clients' own counters, when they have seen more


@dataclass(slots=True)
class PartitionView:
    """One partition of a group as judged in one cycle. Read-only by contract, not frozen:
    one is built for every group-partition every cycle, and a frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field) costs several times as much. Not
    keyword-only either: the evaluator's per-partition paths pass the fields in order,
    which takes half the time of naming them; everywhere else names them."""

    topic: str
    partition: int
    committed: int | None
    position: int | None
    lag_offsets: int | None
    lag_seconds: float | None
    stalled_seconds: float
    status: Status
    reason: str  # what holds, with the partition's numbers; "" for ``ok`` without a note
    owner: str  # "client_id@host (member_id)" or ""
    # No member subscribes to the topic any more: shown, not judged, and left out of the
    # group's lag totals (they feed the lag alerts).
    unsubscribed: bool = False
    # What the status rests on (exporter/evaluate/rules.py EVIDENCE): one text per status
    # and evidence, mostly the same string object in every partition it applies to.
    evidence: str = ""

    @property
    def explained(self) -> str:
        """The reason as served (API, a group's reasons): with its evidence."""
        return explained(self.reason, self.evidence)


def explained(reason: str, evidence: str) -> str:
    """A reason followed by what its status rests on."""
    return f"{reason}; evidence: {evidence}" if evidence else reason


# What PartitionRows.of reads of a PartitionView, in one C-level call per partition.
_VIEW_FIELDS = operator.attrgetter("topic", "partition", "committed", "position", "lag_offsets",
                                   "lag_seconds", "stalled_seconds", "status", "reason", "owner",
                                   "unsubscribed", "evidence")
NO_OFFSET = -1  # an offset column's None (offsets and lags are never negative)


def offsets(values: Iterable[int | None]) -> np.ndarray:
    """An offset column: int64, :data:`NO_OFFSET` for None."""
    return np.array([NO_OFFSET if v is None else v for v in values], np.int64)


def offsets_column(values: list[int | None]) -> np.ndarray:
    """Offsets as float64 (the evaluator's columns), NaN for None (not known)."""
    if None not in values:
        return np.array(values, float)
    return np.array([np.nan if v is None else v for v in values], float)


def seconds(values: Iterable[float | None]) -> np.ndarray:
    """A seconds column: float64, NaN for None (no served value is ever NaN)."""
    return np.array([np.nan if v is None else v for v in values], np.float64)


class Reason(Protocol):
    """A partition's reason not written yet: the evaluator keeps what its text needs beyond
    the row's own columns, and the text is written when the reason is read (a group's
    worst few every cycle, the others when the API or the status page asks)."""

    def text(self, tp: TP, committed: int | None, lag_offsets: int | None, lag_seconds: float | None,
             stalled_seconds: float, owner: str) -> str: ...

    def texts(self, tps: Sequence[TP], committed: Sequence[int | None], lag_offsets: Sequence[int | None],
              lag_seconds: Sequence[float | None], stalled_seconds: Sequence[float], owners: Sequence[str]
              ) -> list[str]:
        """:meth:`text` of each of many rows that hold this reason."""
        ...


T = TypeVar("T")
S = TypeVar("S")


class Repeated(Sequence[T]):
    """One value ``n`` times: a text column of :class:`PartitionRows` whose rows all hold
    the same object (a group judged whole, alike in every row), in 48 bytes where a list
    takes 8 a row. Read-only, as the rows are."""

    __slots__ = ("n", "value")

    def __init__(self, value: T, n: int) -> None:
        self.value, self.n = value, n

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self.value] * len(range(self.n)[i])
        range(self.n)[i]  # noqa: B018 -- an index out of range raises as a list's would
        return self.value

    def __iter__(self) -> Iterator[T]:
        return repeat(self.value, self.n)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(other) == self.n and all(v == self.value for v in other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Repeated({self.value!r}, {self.n})"


class Filled(Enum):
    """What every row of a shared column holds, and its dtype."""

    NO_OFFSET = (NO_OFFSET, np.int64)  # offsets: none (a group judged whole has no position)
    FALSE = (False, np.bool_)  # flags: none set (no row unsubscribed)
    UNKNOWN = (np.nan, np.float64)  # figures: not known yet (rates, times to catch up)
    ZERO = (0, np.int64)  # counts: none (records lost or below the log start)


@lru_cache(maxsize=1024)  # (kind, size): a few distinct group sizes in a cluster
def filled(kind: Filled, n: int) -> np.ndarray:
    """A column of ``n`` rows holding ``kind``'s value, one read-only array for every
    column of that kind and size: a group whose column says nothing keeps no array of
    its own, in the view served or the one being built."""
    value, dtype = kind.value
    out = np.full(n, value, dtype)
    out.flags.writeable = False
    return out


class PartitionRows(Sequence[PartitionView]):
    """A group's partitions as judged in one cycle, in columns: a row per partition in
    (topic, partition) order, the numbers in arrays (8 bytes a value, where a
    :class:`PartitionView` holds an object per number), the texts in lists (mostly one
    shared string). Read as a sequence of :class:`PartitionView` (made when read: the
    API, the status page), or column by column (the renderer, the rates, the totals),
    which makes none. Read-only by contract."""

    __slots__ = ("committed", "evidence", "lag_offsets", "lag_seconds", "owner", "position",
                 "reason", "stalled_seconds", "status", "tps", "unsubscribed")

    def __init__(self, tps: list[TP], committed: np.ndarray, position: np.ndarray,
                 lag_offsets: np.ndarray, lag_seconds: np.ndarray, stalled_seconds: np.ndarray,
                 status: Sequence[Status], reason: Sequence[str | Reason], owner: Sequence[str],
                 unsubscribed: np.ndarray, evidence: Sequence[str]) -> None:
        self.tps = tps  # the snapshot's own (topic, partition) keys where it has them
        self.committed = committed  # offsets: int64, NO_OFFSET for None
        self.position = position
        self.lag_offsets = lag_offsets
        self.lag_seconds = lag_seconds  # seconds: float64, NaN for None
        self.stalled_seconds = stalled_seconds
        # a reason is its text, or a Reason written when read (:meth:`reason_at`)
        self.status, self.reason, self.owner, self.evidence = status, reason, owner, evidence
        self.unsubscribed = unsubscribed  # bool

    @classmethod
    def of(cls, views: Iterable[PartitionView], tps: list[TP] | None = None) -> PartitionRows:
        """The rows of ``views`` (made one at a time), in their order. ``tps``: their
        (topic, partition) keys in that order, where the caller holds them (the
        snapshot's own, one object per partition; otherwise one is made a row)."""
        fields = list(map(_VIEW_FIELDS, views))
        if not fields:
            return EMPTY_ROWS
        return cls.of_columns(*zip(*fields, strict=True), tps=tps)

    @classmethod
    def of_columns(cls, topic: Sequence[str], partition: Sequence[int], committed: Sequence[int | None],
                   position: Sequence[int | None], lag_offsets: Sequence[int | None],
                   lag_seconds: Sequence[float | None], stalled: Sequence[float], status: Sequence[Status],
                   reason: Sequence[str], owner: Sequence[str], unsubscribed: Sequence[bool],
                   evidence: Sequence[str], tps: list[TP] | None = None) -> PartitionRows:
        """The rows of PartitionView's field values given column by column (None where a
        value is), in their order; ``tps`` as in :meth:`of`."""
        if tps is None:
            tps = list(zip(topic, partition, strict=True))
        return cls(tps, offsets(committed), offsets(position),
                   offsets(lag_offsets), seconds(lag_seconds), np.array(stalled, np.float64),
                   list(status), list(reason), list(owner), np.array(unsubscribed, bool),
                   list(evidence))

    def aged(self, lag_seconds: np.ndarray, stalled_seconds: np.ndarray,
             reason: Sequence[str | Reason]) -> PartitionRows:
        """The same rows at a later cycle in which only time moved: these seconds and
        reasons, every other column shared."""
        return PartitionRows(self.tps, self.committed, self.position, self.lag_offsets, lag_seconds,
                             stalled_seconds, self.status, reason, self.owner, self.unsubscribed,
                             self.evidence)

    def __len__(self) -> int:
        return len(self.tps)

    @overload
    def __getitem__(self, i: int) -> PartitionView: ...
    @overload
    def __getitem__(self, i: slice) -> list[PartitionView]: ...

    def __getitem__(self, i: int | slice) -> PartitionView | list[PartitionView]:
        if isinstance(i, slice):
            return list(self)[i]
        return self._view(range(len(self.tps))[i])

    def _view(self, i: int) -> PartitionView:
        c, po, lo, ls = (self.committed[i], self.position[i], self.lag_offsets[i], self.lag_seconds[i])
        return PartitionView(self.tps[i][0], self.tps[i][1], None if c < 0 else int(c),
                             None if po < 0 else int(po), None if lo < 0 else int(lo),
                             None if ls != ls else float(ls), float(self.stalled_seconds[i]),
                             self.status[i], self.reason_at(i), self.owner[i], bool(self.unsubscribed[i]),
                             self.evidence[i])

    def reason_at(self, i: int) -> str:
        """The ``i``-th row's reason, written now if it was kept as a :class:`Reason`."""
        r = self.reason[i]
        if isinstance(r, str):
            return r
        c, lo, ls = int(self.committed[i]), int(self.lag_offsets[i]), float(self.lag_seconds[i])
        return r.text(self.tps[i], None if c < 0 else c, None if lo < 0 else lo, None if ls != ls else ls,
                      float(self.stalled_seconds[i]), self.owner[i])

    def _values(self, status: Iterable[object]) -> Iterator[tuple[Any, ...]]:
        """Each row's PartitionView field values in order, read from the columns (None for
        NO_OFFSET and NaN, each reason written), with ``status`` in the status's place."""
        committed, lag_offsets = optional(self.committed), optional(self.lag_offsets)
        lag_seconds, stalled = optional_seconds(self.lag_seconds), self.stalled_seconds.tolist()
        reason = self.reason
        if isinstance(reason, Repeated) and not isinstance(reason.value, str):  # one reason: texts at once
            reasons = reason.value.texts(self.tps, committed, lag_offsets, lag_seconds, stalled, self.owner)
        else:
            reasons = [r if isinstance(r, str) else self.reason_at(i) for i, r in enumerate(reason)]
        return zip([t for t, _ in self.tps], [p for _, p in self.tps], committed,
                   optional(self.position), lag_offsets, lag_seconds,
                   stalled, status, reasons, self.owner, self.unsubscribed.tolist(),
                   self.evidence, strict=True)

    def __iter__(self) -> Iterator[PartitionView]:
        return (PartitionView(*row) for row in self._values(self.status))

    def plain(self) -> tuple[tuple[Any, ...], ...]:
        """Every row as its :class:`PartitionView`'s field values in order, a status as its
        value: what the state topic keeps of a view (exporter/state/plain.py), made from
        the columns, no PartitionView built (this runs for every group written)."""
        return tuple(self._values([s.value for s in self.status]))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PartitionRows | tuple | list):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PartitionRows({list(self)!r})"

    def max_lag_seconds(self) -> float | None:
        """The largest lag in seconds of the partitions judged (a topic no member subscribes
        to any more left out); None when none is known."""
        vals = self.lag_seconds[~self.unsubscribed]
        vals = vals[~np.isnan(vals)]
        return float(vals.max()) if len(vals) else None

    def unsubscribed_topics(self) -> list[str]:
        """The topics of the rows no member subscribes to any more, sorted."""
        if not self.unsubscribed.any():
            return []
        return sorted({self.tps[i][0] for i in np.flatnonzero(self.unsubscribed).tolist()})

    def total_lag(self) -> int | None:
        """The summed lag in offsets of the partitions judged; None when none is known."""
        vals = self.lag_offsets[~self.unsubscribed]
        vals = vals[vals >= 0]
        return int(vals.sum()) if len(vals) else None


def optional(column: np.ndarray) -> list[int | None]:
    """An offset column as Python values, None for :data:`NO_OFFSET`."""
    values = column.tolist()
    return [None if v < 0 else v for v in values] if NO_OFFSET in values else values


def optional_seconds(column: np.ndarray) -> list[float | None]:
    """A seconds (or rate) column as Python values, None for NaN (:func:`seconds` back)."""
    return [None if v != v else v for v in column.tolist()]


def _rows_of(v: Any) -> PartitionRows:
    return v if isinstance(v, PartitionRows) else PartitionRows.of(v)


_NONE_I = np.zeros(0, np.int64)
_NONE_F = np.zeros(0, np.float64)
EMPTY_ROWS = PartitionRows([], _NONE_I, _NONE_I, _NONE_I, _NONE_F, _NONE_F, [], [], [],
                           np.zeros(0, bool), [])


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberView:
    member_id: str
    client_id: str
    host: str
    partitions: int
    last_poll_age: float | None  # from the member's own reports, when instrumented
    epoch: int | None = None  # KIP-848 consumer, streams and share groups
    process_id: str = ""  # Kafka Streams application instance
    # From the member's own configuration, when instrumented: auto (every
    # auto_commit_interval seconds) or manual; None when its reports do not say.
    commit_mode: CommitMode | None = None
    auto_commit_interval: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkInfo:
    query_id: str
    run_id: str
    batch_id: int | None
    batch_duration_seconds: float | None
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    last_progress_age: float | None
    batch_running_seconds: float | None
    active: bool
    # Spark Connect: where the listener runs ("client" | "server"; None: a classic driver),
    # and, from a client's reports, seconds since the server last spoke about the query
    connect: str | None = None
    server_silent_seconds: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProgress:
    """Pace of one group-partition (exporter/evaluate/progress.py); None when unknown."""

    consume_rate: float | None  # records/s the consumed offset advanced over the window
    produce_rate: float | None  # records/s the high watermark advanced over the window
    catchup_seconds: float | None  # lag / (consume - produce); None unless catching up
    lost_total: int  # records deleted before the group read them, counted while watched
    below_log_start: int  # records between the consumed offset and the log start now


def _or_none(v: float) -> float | None:
    return None if v != v else v


class ProgressRows(Mapping[TP, PartitionProgress]):
    """A group's :class:`PartitionProgress` by partition, in columns (rates and times to
    catch up in float64, NaN for None; records in int64): one array a figure where a
    mapping holds an object a partition. Read as that mapping (each value made when
    read: the JSON API, the below-log-start series) or column by column. Read-only by
    contract."""

    __slots__ = ("_index", "below", "catchup", "consume", "lost", "produce", "tps")

    def __init__(self, tps: list[TP], consume: np.ndarray, produce: np.ndarray, catchup: np.ndarray,
                 lost: np.ndarray, below: np.ndarray) -> None:
        self.tps = tps
        self.consume, self.produce, self.catchup = consume, produce, catchup
        self.lost, self.below = lost, below
        self._index: dict[TP, int] | None = None  # row by partition, made at the first lookup

    def __len__(self) -> int:
        return len(self.tps)

    def __iter__(self) -> Iterator[TP]:
        return iter(self.tps)

    def __getitem__(self, tp: TP) -> PartitionProgress:
        if self._index is None:
            self._index = {t: i for i, t in enumerate(self.tps)}
        i = self._index[tp]
        return PartitionProgress(consume_rate=_or_none(float(self.consume[i])),
                                 produce_rate=_or_none(float(self.produce[i])),
                                 catchup_seconds=_or_none(float(self.catchup[i])),
                                 lost_total=int(self.lost[i]), below_log_start=int(self.below[i]))

    def plain(self) -> tuple[tuple[TP, tuple[Any, ...]], ...]:
        """(partition, its :class:`PartitionProgress`'s field values) of every row: what
        the state topic keeps (exporter/state/plain.py), made from the columns."""
        figures = zip(optional_seconds(self.consume), optional_seconds(self.produce),
                      optional_seconds(self.catchup), self.lost.tolist(), self.below.tolist(), strict=True)
        return tuple(zip(self.tps, figures, strict=True))

    def __repr__(self) -> str:
        return f"ProgressRows({dict(self.items())!r})"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupProgress:
    """How fast a group consumes against production, when it catches up, what it lost.

    Kept apart from the judgement (status and reasons): it explains and forecasts,
    it does not judge."""

    window_seconds: float  # span the group's rates were measured over (0: no rates yet)
    consume_rate: float | None
    produce_rate: float | None
    catchup_seconds: float | None
    falling_behind: bool  # some partition with a backlog consumes no faster than it is produced
    records_lost_total: int
    below_log_start: int
    notes: tuple[str, ...]  # human-readable: "caught up in about 4 min at current rates", ...
    partitions: Mapping[TP, PartitionProgress]  # a dict, or ProgressRows
    # Where the committed offset sits in the retained log, lowest over the partitions with
    # lag whose log retention has trimmed: (committed - log start) / (HW - log start), 0 at
    # the log start, negative below it; None without such a partition. The ratio the
    # near-retention alert reads (alerts/lagwatch.rules.yml).
    retained_position: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRebalances:
    """A group's rebalances since lagwatch watches it (exporter/evaluate/rebalances.py).

    Kept apart from the judgement like :class:`GroupProgress`: a storm is a note."""

    total: int  # never decreases while the group exists
    recent: int  # within window_seconds (thresholds.rebalance_window)
    window_seconds: float
    storm: bool  # recent > thresholds.rebalance_storm
    source: RebalanceSource
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupExposure:
    """Redelivery exposure (at-least-once): records consumers fetched but have not committed,
    which a crash or a rebalance right now would deliver again (exporter/evaluate/exposure.py).

    Known only from the consumers' own reports (instrumented consumers, Spark listeners)."""

    records: int | None  # summed over ``partitions``; None when no partition's is known
    partitions: dict[TP, int]  # position - committed, per partition known
    # auto, manual, mixed (members differ) or None: what the instrumented members say
    commit_mode: CommitMode | None
    auto_commit_interval: float | None  # the longest interval of the members in "auto"


class GroupReasons(Sequence[str]):
    """A group's reasons (:attr:`GroupView.reasons`): its worst partitions' first, written
    from their rows when first read (the JSON API, the status page, the state topic), then
    the texts of the group as a whole, written when judged. Equal to any sequence of the
    same texts. Read-only by contract."""

    __slots__ = ("_rest", "_rows", "_texts", "_worst")

    def __init__(self, rows: PartitionRows, worst: list[int], rest: list[str]) -> None:
        self._rows, self._worst, self._rest = rows, worst, rest
        self._texts: tuple[str, ...] | None = None

    def over(self, rows: PartitionRows) -> GroupReasons:
        """The same worst rows and group texts, read from ``rows`` (the group's rows of a
        later cycle, in the same order)."""
        return GroupReasons(rows, self._worst, self._rest)

    def _all(self) -> tuple[str, ...]:
        if self._texts is None:
            rows = self._rows
            worst = [explained(rows.reason_at(i), rows.evidence[i]) for i in self._worst]
            self._texts = (*worst, *self._rest)
        return self._texts

    def __len__(self) -> int:
        return len(self._worst) + len(self._rest)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...

    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        return self._all()[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Sequence) and not isinstance(other, str)
                and self._all() == tuple(other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._all())


def copied(v: S, **changes: Any) -> S:
    """A frozen dataclass with slots, ``changes`` made: what ``dataclasses.replace`` gives
    without its checks and ``__init__`` (a group at rest is served a copy of its view
    every cycle; ``v`` was checked when made)."""
    out = object.__new__(type(v))
    for name in type(v).__slots__:  # type: ignore[attr-defined]
        object.__setattr__(out, name, changes[name] if name in changes else getattr(v, name))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupView:
    group: str
    type: GroupType
    state: KafkaGroupState
    status: Status
    reasons: Sequence[str]  # a tuple, or GroupReasons written when read
    members: tuple[MemberView, ...]
    partitions: PartitionRows  # any sequence of PartitionView given is kept as its rows
    spark: SparkInfo | None = None
    epoch: int | None = None  # group epoch (KIP-848 consumer, streams and share groups)
    membership: Membership = Membership.MEMBERS
    progress: GroupProgress | None = None  # rates, time to catch up, records lost
    rebalances: GroupRebalances | None = None  # None for Spark queries
    exposure: GroupExposure | None = None  # records a crash would deliver again; None: unknown

    @property
    def notes(self) -> tuple[str, ...]:
        """What follows the judgement's reasons: progress, then rebalance notes."""
        return ((self.progress.notes if self.progress else ())
                + (self.rebalances.notes if self.rebalances else ()))

    def __post_init__(self) -> None:
        if not isinstance(self.partitions, PartitionRows):
            object.__setattr__(self, "partitions", _rows_of(self.partitions))

    @property
    def max_lag_seconds(self) -> float | None:
        return self.partitions.max_lag_seconds()

    @property
    def total_lag(self) -> int | None:
        return self.partitions.total_lag()


@dataclass(frozen=True, kw_only=True)
class ClusterView:
    cluster: str
    up: bool
    sampled_at: float  # wall clock of the snapshot this view came from (0 = never)
    sample_duration: float
    partitions: dict[TP, PartitionOffsets]
    groups: dict[str, GroupView]
    last_error: str = ""
    brokers: int = 0
    dropped_group_partitions: int = 0
