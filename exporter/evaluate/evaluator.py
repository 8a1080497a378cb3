"""Snapshot + reports + memory of earlier cycles -> statuses, lag seconds, reasons.

Per partition, each cycle: lag in offsets and seconds against the *current* HW,
then :func:`exporter.evaluate.memory.observe` (pure, one step per concern),
:func:`exporter.evaluate.rules.classify` (the status rules, one predicate each, see
``exporter/evaluate/rules.py``) and :func:`exporter.evaluate.memory.remember` (the
partition's next memory, which replaces the old one). A group's status is its worst
partition's. What differs between group types is named in one place each: who owns a
committed partition (:func:`_member_owns`, :func:`_spark_owns`), share groups' progress
(:func:`_share_offsets`, :func:`_share_dates`), partitions owned and never committed
(member groups only, :meth:`Evaluator._uncommitted`), the group's status
(:func:`_group_status`). A group found entirely at rest is not evaluated again while its
sample stands still (``exporter/evaluate/rest.py``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from itertools import chain, repeat
from operator import is_
from typing import NamedTuple

import numpy as np

from exporter.config import Config, GroupThresholds, LagMode, Thresholds, default_of, thresholds_for
from exporter.contracts.reports import ConnectSide, ConsumerReport, SparkReport
from exporter.contracts.snapshot import (
    COMMITTING_TYPES,
    TP,
    GroupSample,
    GroupType,
    KafkaGroupState,
    Member,
    PartitionOffsets,
    Snapshot,
)
from exporter.contracts.state import SavedGroup, SavedTopic
from exporter.contracts.status import Status
from exporter.contracts.view import (
    NO_OFFSET,
    SEVERITY,
    ClusterView,
    Filled,
    GroupExposure,
    GroupProgress,
    GroupReasons,
    GroupRebalances,
    GroupView,
    Membership,
    MemberView,
    PartitionRows,
    PartitionView,
    Reason,
    Repeated,
    SparkInfo,
    filled,
    seconds,
)
from exporter.evaluate import persist
from exporter.evaluate.cadence import CommitClock, learn_commit_gaps, member_allowance, new_gaps
from exporter.evaluate.columns import (
    COLUMN_RULES,
    LAGGING,
    Columns,
    CycleOffsets,
    PartitionTable,
    RowStep,
    Samples,
    alike_runs,
    first_rules,
    observe_rows,
    ok_rows,
    plain,
)
from exporter.evaluate.constants import (
    REPORT_STALE_INTERVALS,
    UNREADABLE_GRACE_CYCLES,
    UNREADABLE_GRACE_SECONDS,
)
from exporter.evaluate.departures import NOBODY_SEEN, departure_text, remember_departures
from exporter.evaluate.exposure import consumer_exposure, group_exposure, spark_exposure
from exporter.evaluate.group_memories import GroupMemories, MemoriesByGroup
from exporter.evaluate.lag import HwHistory, lag_origin
from exporter.evaluate.memory import (
    GroupMemory,
    PartitionMemory,
    StepInput,
    Tuning,
    at_rest,
    forget_uncommitted,
    joins_since,
    observe,
    outside_allowance,
    outside_cadence,
    remember,
    remember_members,
    remember_outside,
    remember_uncommitted,
    rest_step,
)
from exporter.evaluate.progress import Observed, ProgressTracker, rates_of
from exporter.evaluate.rebalances import RebalanceTracker
from exporter.evaluate.rest import (
    ExactCheck,
    Resting,
    changed_topics,
    enter,
    points_apart,
    possible,
    rates_known,
    served,
    settle,
    still,
)
from exporter.evaluate.rules import (
    LaterReason,
    PartitionFacts,
    broker_evidence,
    classify,
    client_gone,
    fmt_seconds,
    note,
    reason_parts,
    status_of,
)
from exporter.evaluate.unread import UnreadOffsets
from exporter.reports.match import match_reports

MAX_REASONS = 5
# Groups are prepared and judged in chunks of about this many committed partitions: the
# column pass's arrays and the prepared groups' facts stay small whatever the cluster.
CHUNK_ROWS = 4096
# Takes a chunk's judged views, in the view's order (:meth:`Evaluator.evaluate`).
OnJudged = Callable[[list[GroupView]], None]
_MISSING = object()  # not in a memo
# States in which a coordinator-driven group moves partitions between members.
IN_FLIGHT_STATES = frozenset({KafkaGroupState.ASSIGNING, KafkaGroupState.RECONCILING,
                              KafkaGroupState.UNKNOWN})


def _member_label(m: Member | None) -> str:
    if m is None:
        return ""
    return f"{m.client_id or '?'}@{m.host or '?'} ({m.member_id})"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _GroupCycle:
    """One group in one cycle: what each of its partitions is judged with."""

    g: GroupSample
    st: GroupMemory
    th: Thresholds  # the group's: the cluster's, or the first group override matching it
    partitions: dict[TP, PartitionOffsets]
    spark: SparkReport | None  # the query's last report (Spark queries only)
    exact_ts: dict[tuple[str, int, int], float]
    now: float
    owner_of: dict[TP, Member]  # current assignments
    incoming: frozenset[TP]  # target assignments (KIP-848, streams)
    assignment_known: bool  # :func:`_assignment_known`
    report_of: dict[TP, ConsumerReport]  # the latest open report naming the partition
    report_by_member: dict[str, ConsumerReport]  # the open report matching each member
    offsets: Mapping[TP, tuple[int, int]]  # (consumed offset, followed offset)
    share_dates: dict[TP, tuple[float | None, float | None]]  # share groups: :func:`_share_dates`
    membership: Membership  # :meth:`Evaluator._membership`
    allowance: float  # stall allowance of a client outside group membership
    left: frozenset[str]  # topics no member subscribes to any more
    tuning: Tuning  # the group's thresholds, as the memory step reads them


@dataclasses.dataclass(slots=True, kw_only=True)
class _Columns:
    """One group's share of the cycle's columns: what :meth:`Evaluator._column_batch`
    gathers of each committed partition, in order, then what :meth:`Evaluator._judge_columns`
    finds for the whole chunk of groups at once."""

    committed: list[int]
    owners: list[Member | None]
    owned: np.ndarray  # bool: a member owns it (:func:`_member_owns`)
    owner: np.ndarray  # its owner's id in the group's PartitionTable, -1: none
    listed: np.ndarray | None = None  # bool: its topic still subscribed; None: every one
    # set by Evaluator._chunk_samples, for the chunk at once: each partition's log start
    # (float64, NaN: unknown; CycleOffsets)
    log_start: np.ndarray = dataclasses.field(default_factory=lambda: _NO_FLOATS)
    # set by Evaluator._judge_columns: the rows of the PartitionTable stepped in columns
    # (:func:`plain`), their samples, and ``whole``: every row, in order
    rows: np.ndarray = dataclasses.field(default_factory=lambda: _NO_ROWS)
    samples: Samples | None = None
    whole: bool = False
    shown: _Shown | None = None  # what their rows show
    # of each row stepped, whether every rule leaves it ok, the evidence (set where a row
    # of the chunk is not ok) and when its committed offset last moved
    ok: np.ndarray | None = None
    step: RowStep | None = None
    changed_at: np.ndarray | None = None
    # and of each row, the first column rule that holds (:func:`first_rules`) and its joins
    # since its offset froze; ``alike``: its rows not ok are alike in every fact a reason keeps
    first: np.ndarray | None = None
    rejoins: np.ndarray | None = None
    alike: bool = False


_NO_ROWS = np.zeros(0, np.int64)
_NO_FLOATS = np.zeros(0)


class _Shown(NamedTuple):
    """What the rows stepped in columns show (:class:`PartitionRows` columns)."""

    committed: np.ndarray  # int64
    lag_offsets: np.ndarray  # int64
    stalled_seconds: np.ndarray  # 0 without lag


# A partition classified from the columns: its status, its reason (written when read) and
# the evidence that status rests on.
Judged = tuple[Status, "str | Reason", str]
_OK_JUDGED: Judged = (Status.OK, "", "")  # a row no rule holds for
# Each rule of COLUMN_RULES with its status and the brokers' evidence for it.
_COLUMN_JUDGEMENTS = tuple((rule, status_of(rule), broker_evidence(status_of(rule))) for rule in COLUMN_RULES)


@dataclasses.dataclass(slots=True, kw_only=True)
class _Pending:
    """A group between its preparation and its judgement (:meth:`Evaluator.evaluate`)."""

    gid: str
    g: GroupSample
    st: GroupMemory
    th: Thresholds
    reports: list[ConsumerReport]
    cycle: _GroupCycle | None = None  # None: the group could not be read
    tps: list[TP] = dataclasses.field(default_factory=list)  # its committed partitions, in order
    columns: _Columns | None = None


class _InColumns(NamedTuple):
    """A prepared group whose committed partitions join its chunk's columns: its pending
    record with the cycle facts and the columns it then has."""

    p: _Pending
    cycle: _GroupCycle
    columns: _Columns


class Evaluator:
    """Keeps per-partition memory for one cluster; call :meth:`evaluate` once per cycle."""

    def __init__(self, cluster: str, thresholds: Thresholds, interval: float,
                 history_points: int = default_of(Config, "history_points"),
                 max_group_partitions: int = default_of(Config, "max_group_partitions"),
                 group_thresholds: Sequence[GroupThresholds] = (), skip_at_rest: bool = True,
                 columns: bool = True) -> None:
        self.cluster = cluster
        # Partitions judged together in columns where no partition needs its own Python
        # (exporter/evaluate/columns.py); False: one at a time, the reference the tests
        # hold the columns equal to.
        self.columns = columns
        self.judged_in_columns = 0  # partitions judged in columns in the last cycle
        self.served_at_rest = 0  # groups served again from their rest in the last cycle
        self.known_at_rest = 0  # groups whose rates became known at rest, since the start
        # A group's thresholds are the cluster's, or the first group override matching it
        # (:meth:`thresholds_of`), kept with its memories; each group's travel with it
        # (``_Pending.th``, ``_GroupCycle.th``).
        self.cluster_th = thresholds
        self.group_thresholds = tuple(group_thresholds)
        self.interval = interval
        self.history_points = history_points
        self.max_group_partitions = max_group_partitions
        self.hw_history: dict[TP, HwHistory] = {}
        # Every group's memories in one place (exporter/evaluate/group_memories.py), shared
        # with the trackers: forgetting a group is one deletion.
        self.groups: MemoriesByGroup = {}
        self.last_good: ClusterView | None = None
        self._lag_memo: dict[tuple[TP, int], float | None] = {}
        self._origin_memo: dict[tuple[TP, int], float | None] = {}
        self._keys: dict[TP, TP] = {}
        # Rates, time to catch up, records lost (exporter/evaluate/progress.py).
        self.progress = ProgressTracker(thresholds.window, interval, self.groups, columns=columns)
        # Rebalances per group (exporter/evaluate/rebalances.py).
        self.rebalances = RebalanceTracker(self.groups)
        # Groups at rest (their memories' ``rest``), skipped while nothing changes
        # (exporter/evaluate/rest.py).
        self.skip_at_rest = skip_at_rest and possible(self.progress.window, self.progress.min_span)
        # The fingerprint of the last evaluated cycle's record timestamps, if it took one
        # (rest.ExactCheck). Every group at rest was found at rest or entered it in that
        # cycle (a group not sampled is forgotten with its rest).
        self._exact_seen: tuple[int, int] | None = None
        # Partitions whose HW a cycle could not read (exporter/evaluate/unread.py).
        self.unread = UnreadOffsets()
        # Groups that come into view in the next evaluation without having been created
        # (replicas: a shard newly assigned, its group without a state record): their first
        # sample is no evidence of a commit from outside membership. Set by the runner.
        self.adopted: set[str] = set()

    # -- entry point ---------------------------------------------------------
    def evaluate(self, snap: Snapshot,
                 consumer_reports: dict[str, list[ConsumerReport]] | None = None,
                 spark_reports: dict[str, SparkReport] | None = None,
                 exact_ts: dict[tuple[str, int, int], float] | None = None,
                 now: float | None = None, judged: OnJudged | None = None) -> ClusterView:
        """The cycle's view. ``judged`` is handed the groups' final views as each chunk is
        judged, in the view's order (the per-partition lines rendered beside the
        evaluation: exporter/expose/partition_lines.py); not called when the cluster
        could not be read."""
        now = snap.taken_at if now is None else now
        if not snap.ok:
            # Keep everything we knew; only `up` and the error change.
            prev = self.last_good
            return ClusterView(
                cluster=self.cluster, up=False, sampled_at=prev.sampled_at if prev else 0.0,
                sample_duration=snap.duration, partitions=prev.partitions if prev else {},
                groups=prev.groups if prev else {},
                last_error="; ".join(str(e) for e in snap.errors),
                brokers=snap.brokers)
        unread = self._update_history(snap, now)  # what was read, not what stands in for it
        snap = dataclasses.replace(snap, partitions=self.unread.bridge(
            snap.partitions, unread, self.last_good.partitions if self.last_good else {}, now,
            self._grace()))
        changed = self._changed_topics(snap)
        self.judged_in_columns = self.served_at_rest = 0
        self._lag_memo: dict[tuple[TP, int], float | None] = {}
        self._origin_memo: dict[tuple[TP, int], float | None] = {}
        consumer_reports = consumer_reports or {}
        spark_reports = spark_reports or {}
        samples = self._samples(snap, spark_reports, now)
        # The snapshot's own (topic, partition) keys: one object per partition, not one per
        # group-partition, in the views and memory kept.
        self._keys = {tp: tp for tp in snap.partitions}
        self._offsets_at = CycleOffsets.of(snap.partitions)
        self.progress.begin(self._keys)
        views = self._views(snap, samples, changed, consumer_reports, spark_reports, exact_ts or {}, now,
                            judged)
        for gid in [gid for gid in self.groups if gid not in samples]:
            del self.groups[gid]  # deleted group: its series vanish this cycle
        self.progress.end()
        views, dropped = self._cap(views)
        view = ClusterView(cluster=self.cluster, up=True, sampled_at=snap.taken_at,
                           sample_duration=snap.duration, partitions=snap.partitions,
                           groups=views, last_error="; ".join(str(e) for e in snap.errors[:3]),
                           brokers=snap.brokers, dropped_group_partitions=dropped)
        self.last_good = view
        self.adopted = set()
        return view

    def _samples(self, snap: Snapshot, spark_reports: dict[str, SparkReport], now: float
                 ) -> dict[str, GroupSample]:
        """The cycle's groups: the snapshot's, and the Spark queries reporting."""
        samples = dict(snap.groups)
        for gid, rep in spark_reports.items():
            # A consumer group of that name with members wins; an empty one is normally the
            # listener's own commit_offsets_to_group mirror of this query.
            if gid not in samples or not samples[gid].members:
                samples[gid] = _spark_sample(rep, now, self.thresholds_of(gid))
        return samples

    def _changed_topics(self, snap: Snapshot) -> set[str]:
        """The topics whose offsets moved since the last evaluated snapshot; only groups at
        rest need them (exporter/evaluate/rest.py)."""
        if self.last_good is None or not any(rec.rest is not None for rec in self.groups.values()):
            return set()
        return changed_topics(self.last_good.partitions, snap.partitions)

    def _views(self, snap: Snapshot, samples: dict[str, GroupSample], changed: set[str],
               consumer_reports: dict[str, list[ConsumerReport]], spark_reports: dict[str, SparkReport],
               exact_ts: dict[tuple[str, int, int], float], now: float,
               judged: OnJudged | None) -> dict[str, GroupView]:
        """Every group's view: a group at rest served again, the others prepared and judged
        in chunks (:data:`CHUNK_ROWS`), each chunk's views then handed to ``judged``."""
        views: dict[str, GroupView] = {}
        ch = _Chunks()
        exact = ExactCheck(exact_ts, self._exact_seen)

        def prepare(gid: str, g: GroupSample, r: Resting | None) -> None:
            ch.pending.append(self._prepared(gid, g, r, snap.partitions,
                                             consumer_reports.get(gid, []),
                                             spark_reports.get(gid) if g.type == GroupType.SPARK else None,
                                             exact_ts, now))
            ch.rows += len(ch.pending[-1].tps)

        for gid, g in samples.items():
            rec = self.groups.get(gid)
            if rec is None:  # a group seen for the first time
                rec = self.groups[gid] = GroupMemories(GroupMemory(parts=PartitionTable(len(g.committed))),
                                                    self.thresholds_of(gid))
            r, rec.rest = rec.rest, None
            if r is None or not still(r, g, changed, bool(consumer_reports.get(gid)), exact, now):
                prepare(gid, g, r)
            elif now < r.known_at:
                self._rested(gid, rec, r, served(r, self.progress.window, now), views, ch)
            else:  # its rates become known: with others', at rest (:meth:`_know`)
                ch.knowing.append((gid, g, r))
                ch.knowing_rows += len(r.keys)
                if ch.knowing_rows >= CHUNK_ROWS:
                    self._know(ch, views, prepare, snap.partitions, now)
            if ch.rows >= CHUNK_ROWS:
                self._judge_chunk(ch.pending, views, snap.partitions, now)
                _handed(judged, ch.done, ch.pending, views)
                ch.done, ch.resting, ch.pending, ch.rows = [], 0, [], 0
            elif ch.resting >= CHUNK_ROWS:  # a cluster at rest is handed on in chunks too
                _handed(judged, ch.done, [], views)
                ch.done, ch.resting = [], 0
        self._exact_seen = exact.fingerprint
        self._know(ch, views, prepare, snap.partitions, now)
        self._judge_chunk(ch.pending, views, snap.partitions, now)
        _handed(judged, ch.done, ch.pending, views)
        return views

    def _rested(self, gid: str, rec: GroupMemories, r: Resting, v: GroupView, views: dict[str, GroupView],
                ch: _Chunks) -> None:
        """A group served from its rest ``r`` this cycle, its view ``v``."""
        rec.rest, views[gid] = r, v
        self.served_at_rest += 1
        self.progress.rested(gid, v)
        ch.done.append(v)
        ch.resting += len(v.partitions)

    def _know(self, ch: _Chunks, views: dict[str, GroupView],
              prepare: Callable[[str, GroupSample, Resting | None], None],
              partitions: dict[TP, PartitionOffsets], now: float) -> None:
        """The groups at rest whose rates become known (``ch.knowing``): their figures
        computed together over their points rebuilt apart, each served at rest with them
        (exporter/evaluate/rest.py, :func:`~exporter.evaluate.rest.rates_known`), or woken
        (``prepare``) when it would not rest with them."""
        items, ch.knowing, ch.knowing_rows = ch.knowing, [], 0
        if not items:
            return
        recs = [self.groups[gid] for gid, _g, _r in items]
        apart = {i: memo for i, ((_gid, _g, r), rec) in enumerate(zip(items, recs, strict=True))
                 if (memo := points_apart(r, rec.memory, rates_of(rec))) is not None}
        figures = self.progress.apart(list(apart.values()), [items[i][2].view for i in apart],
                                      partitions, now)
        known: list[GroupView | None] = [None] * len(items)
        for (i, memo), pr in zip(apart.items(), figures, strict=True):
            r = items[i][2]
            if pr is not None:
                known[i] = rates_known(r, rates_of(recs[i]), memo, pr, self.progress.window, now)
        for (gid, g, r), rec, v in zip(items, recs, known, strict=True):
            if v is None:
                prepare(gid, g, r)
            else:
                self._rested(gid, rec, r, v, views, ch)
                self.known_at_rest += 1

    def _judge_chunk(self, pending: list[_Pending], views: dict[str, GroupView],
                     partitions: dict[TP, PartitionOffsets], now: float) -> None:
        """Prepared groups judged: their column pass, their views, their figures (the
        chunk's rate tables at once), then each group's rebalances and rest."""
        self._judge_columns(pending, now)
        judged = [(p, self._group(p, now)) for p in pending]
        figures = self.progress.many([(p.gid, v, p.g, _observed(p, v)) for p, v in judged], partitions, now)
        for (p, v), progress in zip(judged, figures, strict=True):
            views[p.gid] = self._judged(p, v, progress, partitions, now)

    def _prepared(self, gid: str, g: GroupSample, r: Resting | None,
                  partitions: dict[TP, PartitionOffsets], reports: list[ConsumerReport],
                  spark: SparkReport | None, exact_ts: dict[tuple[str, int, int], float],
                  now: float) -> _Pending:
        """A group woken or not at rest, its group-level evidence taken (members, the cycle's
        facts) and its share of the cycle's columns gathered: judged once every group's is
        (:meth:`_judge_columns`, :meth:`_judged`)."""
        rec = self.groups[gid]
        state, th = rec.memory, rec.th
        if r is not None:
            settle(r, state, rates_of(rec))
        if g.error is not None:
            return _Pending(gid=gid, g=g, st=state, th=th, reports=reports)
        state.unreadable_since = None
        was_empty = state.seen_once and not state.members
        remember_members(state, {m.member_id for m in g.members}, now, th.window, g.epoch)
        if g.type != GroupType.SPARK:
            state.seen = remember_departures(state.seen, state.departed, g.members, now)
        c = self._cycle_of(g, state, th, partitions, reports, spark, exact_ts, was_empty, now)
        for tp in _gone(state.parts, g.committed):
            del state.parts[tp]
        tps = sorted(g.committed)
        return _Pending(gid=gid, g=g, st=state, th=th, reports=reports, cycle=c, tps=tps,
                        columns=self._column_batch(c, tps) if self.columns else None)

    def _judged(self, p: _Pending, v: GroupView, progress: GroupProgress | None,
                partitions: dict[TP, PartitionOffsets], now: float) -> GroupView:
        """One group's view (:meth:`_group`) with its rates (``progress``) and rebalances;
        found at rest, it is skipped from the next cycle on while nothing changes
        (exporter/evaluate/rest.py). Done chunk by chunk, so a group entering rest drops its
        per-partition rate points before the next chunk is judged: a cycle that wakes every
        group holds one chunk's points."""
        rebalances = self.rebalances.one(p.gid, v, p.g, p.reports, now)
        if progress is not None or rebalances is not None:  # one copy of the view, not two
            v = _with_figures(v, progress or v.progress, rebalances or v.rebalances)
        if self.skip_at_rest and not p.reports:
            th, rec = p.th, self.groups[p.gid]
            rec.rest = enter(p.g, v, p.st, rec.rates, rec.rebalances,
                             partitions, (th.window, th.rebalance_window, self.progress.min_span), now,
                             self.lag_origins, p.cycle.exact_ts if p.cycle is not None else None)
        return v

    def _grace(self) -> float:
        """How long a group, or a partition's offsets, may go unread with the last reading
        standing in before it is ``error``."""
        return max(UNREADABLE_GRACE_CYCLES * self.interval, UNREADABLE_GRACE_SECONDS)

    def thresholds_of(self, gid: str) -> Thresholds:
        """The group's thresholds: kept with its memories, or (a group not yet remembered) matched
        now from the cluster's and the group overrides."""
        rec = self.groups.get(gid)
        return rec.th if rec is not None else thresholds_for(self.cluster_th, self.group_thresholds, gid)

    def _update_history(self, snap: Snapshot, now: float) -> list[TP]:
        """Each HW read this cycle into its partition's history; the partitions whose HW
        was not read (exporter/evaluate/unread.py), found in the same pass."""
        unread: list[TP] = []
        for tp, po in snap.partitions.items():
            if po.hw is None:
                unread.append(tp)
                continue
            h = self.hw_history.get(tp)
            if h is None:
                h = self.hw_history[tp] = HwHistory(self.history_points)
            h.add(now, po.hw)
        for tp in list(self.hw_history):
            if tp not in snap.partitions:
                del self.hw_history[tp]
        return unread

    def _cap(self, views: dict[str, GroupView]) -> tuple[dict[str, GroupView], int]:
        # A group without committed partitions still costs its group-level series:
        # it counts as one, so thousands of empty groups cannot escape the cap.
        def cost(v: GroupView) -> int:
            return max(1, len(v.partitions))

        total = sum(cost(v) for v in views.values())
        if total <= self.max_group_partitions:
            return views, 0
        kept: dict[str, GroupView] = {}
        used = 0
        order = sorted(views.values(), key=lambda v: (-SEVERITY[v.status], v.group))
        for v in order:
            if used + cost(v) <= self.max_group_partitions:
                kept[v.group] = v
                used += cost(v)
        return kept, total - used

    def lag_inputs(self, snap: Snapshot, lag_mode: LagMode) -> list[tuple[TP, int]]:
        """(tp, committed) pairs whose lag seconds need the record's own timestamp, each
        once (many groups often stand at the same offset of a partition): every committed
        offset below the HW in exact mode; else those older than the partition's HW
        history (or with none yet), where interpolation cannot tell."""
        below: dict[TP, int] = {}  # per partition: a committed offset below this is wanted
        for tp, po in snap.partitions.items():
            if po.hw is None:
                continue
            h = None if lag_mode == LagMode.EXACT else self.hw_history.get(tp)
            below[tp] = min(po.hw, h.points[0][1]) if h is not None and h.points else po.hw
        want: dict[tuple[TP, int], None] = {}
        for g in snap.groups.values():
            for tp, off in g.committed.items():
                if off < below.get(tp, -1):
                    want[tp, off] = None
        return list(want)

    # -- one group -----------------------------------------------------------
    def _group(self, p: _Pending, now: float) -> GroupView:
        """One readable group: its committed partitions, then (member groups) those owned
        and never committed, then the group's status, reasons and members."""
        c = p.cycle
        if c is None:
            return self._unreadable(p.g, p.st, now)
        g, st = c.g, c.st
        if p.columns is not None:
            parts = self._columns_rows(c, p.tps, p.columns)
        else:
            parts = PartitionRows.of([self._partition(c, tp) for tp in p.tps],
                                     list(map(self._keys.get, p.tps, p.tps)))
        fresh = self._uncommitted(c)
        if fresh:
            parts = PartitionRows.of(sorted((*parts, *fresh), key=lambda p: (p.topic, p.partition)))
        worst, membership = _group_status(g, parts, c.spark, c.membership)
        view = GroupView(group=g.group_id, type=g.type, state=g.state, status=worst,
                         reasons=_group_reasons(g, st, parts, c.spark, membership, now),
                         members=_member_views(g, c.report_by_member, now), partitions=parts,
                         spark=_spark_info(c.spark, now) if c.spark else None, epoch=g.epoch,
                         membership=membership, exposure=_exposure(c, parts))
        st.last_view = view
        return view

    def _cycle_of(self, g: GroupSample, st: GroupMemory, th: Thresholds,
                  partitions: dict[TP, PartitionOffsets],
                  reports: list[ConsumerReport], spark: SparkReport | None,
                  exact_ts: dict[tuple[str, int, int], float], was_empty: bool,
                  now: float) -> _GroupCycle:
        """What every partition of the group is judged with this cycle, computed once."""
        assignment_known = _assignment_known(g)
        report_of, report_by_member = _reports_of(g, reports)
        offsets, share_dates = _offsets(g, st, partitions, now)
        membership, allowance = self._membership(g, st, th, offsets, was_empty, now)
        return _GroupCycle(
            g=g, st=st, th=th, partitions=partitions, spark=spark, exact_ts=exact_ts, now=now,
            owner_of={m_tp: m for m in g.members for m_tp in m.assignment},
            # A partition moving between members of a KIP-848 or streams group is in nobody's
            # current assignment until its new owner's next heartbeat (5 s by default), but in
            # its target assignment: owned, not stopped.
            incoming=frozenset(m_tp for m in g.members for m_tp in m.target),
            assignment_known=assignment_known, report_of=report_of,
            report_by_member=report_by_member, offsets=offsets, share_dates=share_dates,
            membership=membership, allowance=allowance,
            left=_unsubscribed_topics(g, assignment_known),
            tuning=Tuning(self.interval, th.lag_seconds, th.stall_after))

    def _unreadable(self, g: GroupSample, st: GroupMemory, now: float) -> GroupView:
        """A group that could not be read this cycle."""
        prev = st.last_view
        reason_txt = f"group could not be read: {g.error}"
        if st.unreadable_since is None:
            st.unreadable_since = now
        if prev is not None and prev.status != Status.ERROR and now - st.unreadable_since < self._grace():
            # A coordinator failing over or a broker restarting leaves a group unreadable
            # for a cycle or three: its last judgement stands meanwhile (the error is
            # counted), so a healthy group is not flagged and its alerts keep their `for:`.
            return dataclasses.replace(prev, reasons=(*prev.reasons, f"{reason_txt} (last values kept)"))
        return GroupView(group=g.group_id, type=g.type, state=g.state, status=Status.ERROR,
                         reasons=(reason_txt,), members=prev.members if prev else (),
                         partitions=prev.partitions if prev else (),
                         spark=prev.spark if prev else None, epoch=prev.epoch if prev else None,
                         membership=prev.membership if prev else Membership.NONE)

    def _membership(self, g: GroupSample, st: GroupMemory, th: Thresholds,
                    offsets: Mapping[TP, tuple[int, int]],
                    was_empty: bool, now: float) -> tuple[Membership, float]:
        """(membership model, stall allowance of an outside committer or 0): ``members``,
        ``outside`` (no members, committed offsets seen moving: a client outside group
        membership consumes; :func:`_group` turns it to ``none`` once a partition's records
        waited past the allowance, ``stopped``) or ``none``."""
        if g.members or g.type in (GroupType.SPARK, GroupType.SHARE):
            remember_outside(st, False, False, was_empty, False, now)
            if not g.members:
                return Membership.NONE, 0.0
            return Membership.MEMBERS, self._member_allowance(g, st, th, now)
        prev = st.last_view
        # An empty group that appeared while lagwatch was watching was created by a commit
        # from outside group membership (a new assign()-mode job's first checkpoint): its
        # first sample is evidence too, not only the second commit. Not after a cycle with
        # sampling errors: the group may have been there, unlisted.
        last = self.last_good
        created = (prev is None and last is not None and not last.last_error
                   and g.group_id not in self.adopted)
        moved = created or _moved_forward(st.parts, offsets)
        healthy = prev is None or prev.status in (Status.OK, Status.LAGGING)
        remember_outside(st, moved, True, was_empty or created, healthy, now)
        if st.outside_at is None:
            return Membership.NONE, 0.0
        return Membership.OUTSIDE, outside_allowance(st, th.stall_after, self.interval)

    def _member_allowance(self, g: GroupSample, st: GroupMemory, th: Thresholds, now: float) -> float:
        """The stall allowance of a group with members, from the commit cadence it has
        shown (exporter/evaluate/cadence.py). Not for share groups, whose progress is
        acknowledgements, nor Spark queries, which are never `stalled`."""
        if g.type not in COMMITTING_TYPES:
            return 0.0
        rec = self.groups[g.group_id]
        gaps = rec.gaps
        if gaps is None:
            gaps = rec.gaps = new_gaps()
        last = self.last_good
        before = last.sampled_at if last is not None and 0 < last.sampled_at < now else now - self.interval
        clock = CommitClock(now, before, st.committed_after)
        if learn_commit_gaps(gaps, st.last_view, g.committed, self.hw_history, clock, th.stall_after):
            st.committed_after = before
        return member_allowance(gaps, th.stall_after, self.interval)

    def _uncommitted(self, c: _GroupCycle) -> list[PartitionView]:
        """Partitions a member owns without any committed offset, judged all the same: lag
        from the member's reported position when instrumented (else unknown), its last
        poll, and how long it has owned the partition without committing while records
        arrived. Only in member groups (classic, consumer, streams), and not while an
        assignment is in progress: it is judged once it settles."""
        g, st = c.g, c.st
        if g.type not in COMMITTING_TYPES or not c.assignment_known:
            forget_uncommitted(st, set())
            return []
        tps = sorted(tp for tp in c.owner_of if tp not in g.committed)
        forget_uncommitted(st, set(tps))
        return [self._owned_uncommitted(c, tp) for tp in tps]

    def _owned_uncommitted(self, c: _GroupCycle, tp: TP) -> PartitionView:
        """One partition owned and never committed (:meth:`_uncommitted`)."""
        owner, now = c.owner_of[tp], c.now
        rep = c.report_by_member.get(owner.member_id, c.report_of.get(tp))
        po = c.partitions.get(tp)
        hw = po.hw if po else None
        position = rep.positions.get(tp) if rep else None
        lag_off = None if hw is None or position is None else max(0, hw - position)
        lag_s = (self._lag_seconds(tp, position, hw, lag_off, c.exact_ts, now)
                 if lag_off is not None and position is not None and hw is not None else None)
        owned_s, new_data_s = remember_uncommitted(c.st, tp, owner.member_id, hw, now)
        facts = PartitionFacts(
            topic=tp[0], partition=tp[1], committed=None, hw=hw, lag_offsets=lag_off,
            lag_seconds=lag_s, stalled_seconds=owned_s, frozen_seconds=owned_s,
            new_data_seconds=new_data_s, lagging=False, rewinding=False, owned=True,
            unowned_confirmed=False, owner=_member_label(owner), group_state=c.g.state,
            rejoins=joins_since(c.st, now - owned_s), never_committed=True,
            **_report_facts(rep, now, c.th))
        status, rule = classify(facts, c.th)
        text, evidence = reason_parts(rule, facts, c.th)
        return PartitionView(topic=tp[0], partition=tp[1], committed=None, position=position,
                             lag_offsets=lag_off, lag_seconds=lag_s,
                             stalled_seconds=owned_s if new_data_s is not None else 0.0,
                             status=status, reason=text, evidence=evidence, owner=facts.owner)

    def _partition(self, c: _GroupCycle, tp: TP) -> PartitionView:
        """One committed partition: observe, classify, remember. At rest
        (:func:`~exporter.evaluate.memory.at_rest`) or without lag it is ``ok`` whatever the
        other facts say (:func:`classify` returns before reading them): none is gathered,
        and at rest the memory takes the short step and last cycle's view is kept."""
        g, st, now, spark = c.g, c.st, c.now, c.spark
        committed = g.committed[tp]
        po = c.partitions.get(tp)
        hw = po.hw if po else None
        owner = c.owner_of.get(tp)
        owner_id = owner.member_id if owner is not None else None
        rep = _report_for(c, tp, owner)
        position = rep.positions.get(tp) if rep and spark is None else None
        if hw is None and (unread := self.unread.overdue(tp, now, self._grace())) is not None:
            return _unread(tp, committed, position, owner, unread)
        owned = _spark_owns(g, spark) if g.type == GroupType.SPARK else _member_owns(c, tp)
        unsubscribed = tp[0] in c.left  # shown with a note: the full path
        consumed, followed = c.offsets[tp]
        mem = st.parts.get(tp)
        if mem is None:
            mem = PartitionMemory.first(followed, now)
        elif g.type != GroupType.SHARE and not unsubscribed and at_rest(mem, followed, hw, owner_id):
            st.parts[tp] = rest_step(mem, owned, owner_id, now)
            return _caught_up(tp, committed, 0, 0.0, position, owner)
        lag_off = None if hw is None else max(0, hw - consumed)
        lag_s = None if lag_off is None else self._lag_seconds(tp, consumed, hw, lag_off, c.exact_ts, now)
        sample = StepInput(followed, hw, lag_off, lag_s, owned, now, owner_id,
                        st.acknowledged_at if g.type == GroupType.SHARE else None)
        obs = observe(mem, sample, c.tuning)
        if not lag_off and not unsubscribed:
            st.parts[tp] = remember(obs, Status.OK, c.share_dates.get(tp))
            return _caught_up(tp, committed, lag_off, lag_s, position, owner)
        facts = PartitionFacts(
            topic=tp[0], partition=tp[1], committed=committed, hw=hw, lag_offsets=lag_off,
            lag_seconds=lag_s, stalled_seconds=obs.stalled_seconds,
            frozen_seconds=obs.frozen_seconds, new_data_seconds=obs.new_data_seconds,
            lagging=obs.lagging, rewinding=obs.rewinding, rewind_pending=obs.rewind_pending,
            owned=owned, unowned_confirmed=obs.unowned_confirmed, owner=_member_label(owner),
            departure="" if owned else departure_text(st.departed, tp, not g.members, now),
            group_state=g.state, rejoins=joins_since(st, obs.after.changed_at),
            outside=st.outside_at is not None, stall_allowance=c.allowance, unsubscribed=unsubscribed,
            **_report_facts(rep, now, c.th),
            **_spark_facts(spark, now, c.th))
        status, rule = classify(facts, c.th)
        st.parts[tp] = remember(obs, status, c.share_dates.get(tp))
        text, evidence = reason_parts(rule, facts, c.th)
        return PartitionView(topic=tp[0], partition=tp[1], committed=committed, position=position,
                             lag_offsets=lag_off, lag_seconds=lag_s,
                             stalled_seconds=obs.stalled_seconds if lag_off else 0.0, status=status,
                             reason=text or note(facts), evidence=evidence, owner=facts.owner,
                             unsubscribed=unsubscribed)

    def _column_batch(self, c: _GroupCycle, tps: list[TP]) -> _Columns | None:
        """What a group's committed partitions bring to the chunk's columns
        (:meth:`_judge_columns`), gathered with C-level calls. None when the group is
        judged one partition at a time (reports, Spark, share groups); partitions new to
        the memory take their first memory here."""
        g, table = c.g, c.st.parts
        if (g.type not in COMMITTING_TYPES or c.spark is not None or c.report_of
                or c.report_by_member or not isinstance(table, PartitionTable) or not tps):
            return None
        if len(table) < len(tps):  # partitions new to the memory: their first memory
            known = set(table.tps)
            new = [tp for tp in tps if tp not in known] if known else tps
            offsets = c.offsets
            followed = (list(map(offsets.committed.__getitem__, new)) if isinstance(offsets, _AsCommitted)
                        else [offsets[tp][1] for tp in new])
            table.add_first(new, followed, c.now)
        if not table.aligned(tps):
            return None
        owners, owned, owner = _owners(c, table, tps)
        listed = np.fromiter((tp[0] not in c.left for tp in tps), bool, len(tps)) if c.left else None
        return _Columns(committed=list(map(g.committed.__getitem__, tps)), owners=owners, owned=owned,
                        owner=owner, listed=listed)

    def _stepped_rows(self, judged: list[_InColumns], now: float) -> tuple[Samples, np.ndarray]:
        """The samples and the memory of the rows of ``judged`` stepped in columns, one group
        after the other; each group's ``rows`` and ``whole`` set."""
        s, before, stepped = self._chunk_samples(judged, now)
        every = bool(stepped.all())
        lo = 0
        for j in judged:
            b, n = j.columns, len(j.p.tps)
            b.rows = np.arange(n) if every else np.flatnonzero(stepped[lo:lo + n])
            b.whole = len(b.rows) == n
            lo += n
        if every:
            return s, before
        return Samples(*(col[stepped] for col in s)), before[:, stepped]

    def _chunk_samples(self, judged: list[_InColumns], now: float
                       ) -> tuple[Samples, np.ndarray, np.ndarray]:
        """The samples and the memory of every committed partition of ``judged`` (their
        columns gathered), one group after the other, and which of them are stepped in
        columns (:func:`plain`, their topic still subscribed)."""
        batches = [j.columns for j in judged]
        tps = list(chain.from_iterable(j.p.tps for j in judged))
        committed = list(chain.from_iterable(b.committed for b in batches))
        at = self._offsets_at
        rows = at.rows_of(tps)  # the chunk's HW and log start columns: two takes
        hw, log_start = at.hw[rows], at.log_start[rows]
        lo = 0
        for j in judged:
            j.columns.log_start = log_start[lo:lo + len(j.p.tps)]
            lo += len(j.p.tps)
        followed = np.array(committed, float)
        lag = np.maximum(0.0, hw - followed)
        lag[np.isnan(lag)] = 0.0  # the HW unknown: no lag known, none counted
        exact_ts = judged[0].cycle.exact_ts
        s = Samples(followed, hw, lag, self._lag_column(tps, committed, hw, lag, exact_ts, now),
                    np.concatenate([b.owned for b in batches]), np.concatenate([b.owner for b in batches]))
        before = np.concatenate([j.p.st.parts.rows for j in judged], axis=1)
        stepped = plain(before, s)
        if any(b.listed is not None for b in batches):
            stepped &= np.concatenate([np.ones(len(j.p.tps), bool) if j.columns.listed is None
                                       else j.columns.listed for j in judged])
        return s, before, stepped

    def _judge_columns(self, groups: list[_Pending], now: float) -> None:
        """The memory step of every group's plain partitions at once, and which of them
        every rule leaves ``ok`` (exporter/evaluate/columns.py): each takes its next memory
        now; their rows are built with the rest of their group (:meth:`_columns_rows`)."""
        judged = [_InColumns(p, p.cycle, p.columns) for p in groups
                  if p.columns is not None and p.cycle is not None]
        if not judged:
            return
        s, before = self._stepped_rows(judged, now)
        sizes = [len(j.columns.rows) for j in judged]

        def per_row(values: list[float] | list[bool]) -> np.ndarray:
            return np.repeat(np.array(values), sizes)

        batches = [j.columns for j in judged]
        cycles = [j.cycle for j in judged]
        stall_after = per_row([j.p.th.stall_after for j in judged])
        lag_threshold = per_row([j.p.th.lag_seconds for j in judged])
        after, e = observe_rows(before, s, now, Tuning(self.interval, lag_threshold, stall_after))
        outside, allowance = per_row([c.st.outside_at is not None for c in cycles]), per_row(
            [c.allowance for c in cycles])
        ok = ok_rows(e, s, outside, allowance, stall_after, lag_threshold)
        changed_at = Columns(*after).changed_at
        shown = _Shown(s.followed.astype(np.int64), s.lag_off.astype(np.int64),
                       np.where(s.lag_off > 0, e.stalled_seconds, 0.0))
        # the rules of the rows not ok, for every group at once, and which groups have every
        # row not ok and alike in each fact a reason keeps (one judgement for the group)
        starts = np.cumsum([0, *sizes[:-1]]).tolist()
        ruled = None  # (first rule, rejoins) of each row, and each group's rows not ok alike
        if not ok.all():
            rejoins = _rejoins(cycles, sizes, changed_at)
            first = first_rules(e, s.lag_s, rejoins, outside, allowance, stall_after, lag_threshold)
            alike = _alike_not_ok(ok, sizes, first, changed_at, e.new_data_seconds, s.owned, rejoins)
            ruled = first, rejoins, alike.tolist()
        for i, (c, b, n, lo) in enumerate(zip(cycles, batches, sizes, starts, strict=True)):
            c.st.parts.step(slice(0, n) if b.whole else b.rows, after[:, lo:lo + n])
            b.ok, b.changed_at = ok[lo:lo + n], changed_at[lo:lo + n]
            b.samples = Samples(*(col[lo:lo + n] for col in s))
            b.shown = _Shown(*(col[lo:lo + n] for col in shown))
            if ruled is not None:  # the evidence is read only where some row is not ok
                b.step = RowStep(*(col[lo:lo + n] for col in e))
                b.first, b.rejoins, b.alike = ruled[0][lo:lo + n], ruled[1][lo:lo + n], ruled[2][i]
        self.judged_in_columns += len(ok)

    def _columns_rows(self, c: _GroupCycle, tps: list[TP], b: _Columns) -> PartitionRows:
        """The group's committed partitions: those judged in columns (found ``ok`` there, or
        classified from the evidence the columns give), the others one at a time
        (:meth:`_partition`). The rows of those ``ok`` are their columns as they are."""
        assert b.shown is not None
        n, rows = len(tps), b.rows
        if b.whole:  # the chunk's column as it is (no row of it written)
            stalled = b.shown.stalled_seconds
        else:
            stalled = np.zeros(n)
            stalled[rows] = b.shown.stalled_seconds
        labels: dict[int, str] = {}  # owners' labels, by the Member object's id
        owner: Sequence[str] = Repeated("", n) if not any(b.owners) else [
            "" if m is None else labels.get(id(m)) or labels.setdefault(id(m), _member_label(m))
            for m in b.owners]
        classified, ended = self._classified(c, tps, b)
        if ended:  # rows whose lag trend a more severe status ends (remember); all: a slice
            c.st.parts.rows[LAGGING, ended if len(ended) < n else slice(None)] = 0.0
        views: dict[int, PartitionView] = {}
        if not b.whole:  # the rest one at a time
            judged = np.zeros(n, bool)
            judged[rows] = True
            views = {i: self._partition(c, tps[i]) for i in np.flatnonzero(~judged).tolist()}
        return _rows(self._keys, tps, b, stalled, owner, classified, views)

    def _classified(self, c: _GroupCycle, tps: list[TP], b: _Columns) -> tuple[dict[int, Judged], list[int]]:
        """The rows of ``b`` some rule may hold for (:func:`ok_rows` did not find them
        ``ok``), by partition index: classified at once from the evidence of their memory
        step (:func:`first_rules`, the rules :meth:`_partition` runs one at a time), each
        reason kept to be written when read (:class:`~exporter.evaluate.rules.LaterReason`);
        and those whose status is more severe than ``lagging``."""
        if b.first is None:  # every row of the chunk ok
            return {}, []
        e, now, st = b.step, c.now, c.st
        assert e is not None and b.ok is not None and b.changed_at is not None and b.samples is not None
        bad = np.flatnonzero(~b.ok)
        if not len(bad):
            return {}, []
        assert b.rejoins is not None  # found where some row is not ok
        every = len(bad) == len(b.ok)
        step = e if every else RowStep(*(col[bad] for col in e))
        changed_at, first, rejoins = ((b.changed_at, b.first, b.rejoins) if every else
                                      (b.changed_at[bad], b.first[bad], b.rejoins[bad]))
        owned = b.samples.owned[bad]
        empty = not c.g.members
        # nobody seen leaving: one text for every partition nobody owns
        nobody = None if st.departed else NOBODY_SEEN if empty else ""
        rows = b.rows[bad].tolist()
        if nobody is not None and b.alike:
            # every row the same facts (a group committed once and left): one judgement
            nd = float(step.new_data_seconds[0])
            judged = _later(c, int(first[0]), float(changed_at[0]), None if nd != nd else nd,
                            "" if owned[0] else nobody, int(rejoins[0]))
            return dict.fromkeys(rows, judged), rows if judged[0] not in (Status.OK, Status.LAGGING) else []
        classified: dict[int, Judged] = {}
        ended: list[int] = []
        # Partitions alike in every fact a reason keeps share one judgement and its LaterReason.
        alike: dict[tuple, Judged] = {}
        for rule_at, i, since, nd, joins, is_owned in zip(
                first.tolist(), rows, changed_at.tolist(), step.new_data_seconds.tolist(),
                rejoins.tolist(), owned.tolist(), strict=True):
            departure = "" if is_owned else nobody if nobody is not None else departure_text(
                st.departed, tps[i], empty, now)
            key = (rule_at, since, None if nd != nd else nd, departure, joins)
            judged = alike.get(key)
            if judged is None:
                judged = alike[key] = _later(c, *key)
            classified[i] = judged
            if judged[0] not in (Status.OK, Status.LAGGING):
                ended.append(i)
        return classified, ended

    def _lag_column(self, tps: list[TP], committed: list[int], hw: np.ndarray, lag: np.ndarray,
                    exact_ts: dict[tuple[str, int, int], float], now: float) -> np.ndarray:
        """:meth:`_lag_seconds` of many partitions (NaN: unknown): 0 without lag (``lag`` is 0
        where the HW is unknown); the cycle's memo looked up in C (many groups read the same
        partitions at the same offsets), the rest one at a time."""
        found = list(map(self._lag_memo.get, zip(tps, committed, strict=True), repeat(_MISSING)))
        zero = lag == 0
        if _MISSING in found:
            none = zero.tolist()
            for i in [i for i, v in enumerate(found) if v is _MISSING]:
                found[i] = 0.0 if none[i] else self._lag_seconds(
                    tps[i], committed[i], int(hw[i]), int(lag[i]), exact_ts, now)
        out = np.array(found, float) if None not in found else seconds(found)
        out[zero] = 0.0
        return out

    def _lag_seconds(self, tp: TP, committed: int, hw: int, lag_off: int,
                     exact_ts: dict[tuple[str, int, int], float], now: float) -> float | None:
        key = (tp, committed)
        if key in self._lag_memo:  # many groups read the same partitions
            return self._lag_memo[key]
        if committed >= hw:
            lag_s: float | None = 0.0
        else:
            since = self.lag_origin(tp, committed, lag_off, exact_ts.get((tp[0], tp[1], committed)))
            self._origin_memo[key] = since
            lag_s = None if since is None else max(0.0, now - since)
        self._lag_memo[key] = lag_s
        return lag_s

    def lag_origins(self, tps: Sequence[TP], committed: list[int], lag_off: list[int],
                    exact: list[float | None] | None) -> list[float | None]:
        """:meth:`lag_origin` of many partitions behind: the cycle's memo looked up in C
        (the evaluation computed most of them for the lag in seconds), the rest one at a
        time."""
        found = list(map(self._origin_memo.get, zip(tps, committed, strict=True), repeat(_MISSING)))
        for i in [i for i, v in enumerate(found) if v is _MISSING]:
            found[i] = self.lag_origin(tps[i], committed[i], lag_off[i], None if exact is None else exact[i])
        return found

    def lag_origin(self, tp: TP, committed: int, lag_off: int, exact: float | None) -> float | None:
        """The time the lag in seconds of a partition behind (``committed`` below its HW)
        counts from, ``now`` less it (:func:`~exporter.evaluate.lag.lag_origin`, ``exact``
        its record's timestamp read this cycle); None when unknowable."""
        h = self.hw_history.get(tp)
        since = lag_origin(committed, h, exact)
        if since is None and lag_off > 0:
            # Older than anything we know: report at least our own history's age.
            since = h.oldest if h and h.oldest else None
        return since

    def resting(self) -> dict[str, Resting]:
        """The groups at rest after the last cycle, and their rests."""
        return {gid: rec.rest for gid, rec in self.groups.items() if rec.rest is not None}

    # -- state that survives a restart (exporter/contracts/state.py) -----------------
    def state_groups(self) -> list[str]:
        """The groups :meth:`export_group` has memory of."""
        return list(self.groups)

    def export_group(self, gid: str) -> SavedGroup | None:
        """What judging ``gid`` on needs, as plain data; None for a group not remembered."""
        return persist.export_group(self, gid)

    def import_group(self, gid: str, state: SavedGroup) -> None:
        """``gid``'s memory from ``state`` (before the first cycle after a start); raises
        ValueError, changing nothing, when ``state`` does not fit."""
        if state.group != gid:
            raise ValueError(f"state of group {state.group!r} imported as {gid!r}")
        persist.import_group(self, state)

    def export_topics(self) -> list[SavedTopic]:
        """Each topic's last offsets and HW history (lag in seconds interpolates on it)."""
        return persist.export_topics(self)

    def import_topic(self, state: SavedTopic, sampled_at: float) -> None:
        """A topic's offsets and HW history as read at ``sampled_at``."""
        persist.import_topic(self, state, sampled_at)



def _observed(p: _Pending, v: GroupView) -> Observed | None:
    """What the progress tracker observes of a group whose every committed partition was
    stepped in columns and who has no other row, from the columns gathered
    (:meth:`Evaluator._column_batch`); None for another group (the tracker reads its view)."""
    b = p.columns
    rows = v.partitions
    if b is None or not b.whole or b.samples is None or len(rows) != len(p.tps):
        return None
    return Observed(rows.tps, b.samples.lag_off, b.samples.hw, b.log_start,
                    rows.unsubscribed, rows.owner)


@dataclasses.dataclass(slots=True)
class _Chunks:
    """A cycle's groups on their way to their views (:meth:`Evaluator._views`)."""

    pending: list[_Pending] = dataclasses.field(default_factory=list)  # prepared, judged with the chunk
    rows: int = 0  # the committed partitions of ``pending``
    # views in the dict's order, not yet handed on
    done: list[GroupView] = dataclasses.field(default_factory=list)
    resting: int = 0  # the rows of the views at rest in ``done``
    # at rest, their rates known this cycle (:meth:`Evaluator._know`)
    knowing: list[tuple[str, GroupSample, Resting]] = dataclasses.field(default_factory=list)
    knowing_rows: int = 0


def _handed(judged: OnJudged | None, done: list[GroupView], pending: list[_Pending],
            views: dict[str, GroupView]) -> None:
    """``done`` and the chunk just judged handed to ``judged``. The groups pending are not
    in ``views`` before they are judged, so views at rest handed on ahead of them keep the
    dict's order."""
    if judged is not None and (done or pending):
        judged(done + [views[p.gid] for p in pending])


def _rejoins(cycles: list[_GroupCycle], sizes: list[int], changed_at: np.ndarray) -> np.ndarray:
    """Each row's joins since its committed offset froze
    (:func:`~exporter.evaluate.memory.joins_since`), the rows of ``cycles`` one after the
    other: 0 but in groups with joins in their window."""
    out = np.zeros(len(changed_at), np.int64)
    lo = 0
    for c, n in zip(cycles, sizes, strict=True):
        joins = c.st.joins
        if joins:
            froze = changed_at[lo:lo + n]
            out[lo:lo + n] = len(joins) - np.searchsorted(np.array(joins), froze, side="right")
        lo += n
    return out


def _alike_not_ok(ok: np.ndarray, sizes: list[int], *columns: np.ndarray) -> np.ndarray:
    """Of each group, its ``sizes`` rows one after the other: whether it has rows not
    ``ok`` and they hold the same value in each column (:func:`alike_runs`)."""
    bad = ~ok
    counts = np.bincount(np.repeat(np.arange(len(sizes)), sizes)[bad], minlength=len(sizes))
    some = counts > 0
    out = np.zeros(len(sizes), bool)
    rows = np.flatnonzero(bad)
    out[some] = alike_runs(np.cumsum([0, *counts[some][:-1]]), *(col[rows] for col in columns))
    return out


def _later(c: _GroupCycle, rule_at: int, since: float, new_data: float | None, departure: str,
           rejoins: int) -> Judged:
    """A row's judgement by the rule at ``rule_at`` of the column rules (-1: none holds):
    its status, its reason to be written when read, and its evidence."""
    if rule_at < 0:
        return _OK_JUDGED
    rule, status, evidence = _COLUMN_JUDGEMENTS[rule_at]
    return status, LaterReason(rule, c.th, c.now - since, new_data, departure, c.g.state, rejoins), evidence


def _judgement_columns(classified: dict[int, Judged], n: int
                       ) -> tuple[Sequence[Status], Sequence[str | Reason], Sequence[str]]:
    """The status, reason and evidence columns of ``n`` rows, ``ok`` but those
    ``classified``: one :class:`Repeated` a column where every row holds the same
    judgement."""
    values = list(classified.values())
    if not values or (len(values) == n and all(map(is_, values, repeat(values[0])))):
        one = values[0] if values else _OK_JUDGED  # none, or one judgement for every row
        return Repeated(one[0], n), Repeated(one[1], n), Repeated(one[2], n)
    status: list[Status] = [Status.OK] * n
    reason: list[str | Reason] = [""] * n
    evidence = [""] * n
    for i, (judged, why, what) in classified.items():
        status[i], reason[i], evidence[i] = judged, why, what
    return status, reason, evidence


def _rows(keys: dict[TP, TP], tps: list[TP], b: _Columns, stalled: np.ndarray, owner: Sequence[str],
          classified: dict[int, Judged], views: dict[int, PartitionView]) -> PartitionRows:
    """A group's rows: its columns, as :meth:`Evaluator._partition` would judge an ``ok``
    partition (no position, its stall only while it lags), with the status, reason and
    evidence of the rows ``classified``, and the rows of ``views`` as they say.
    ``keys``: the snapshot's own (topic, partition) keys, one object per partition kept
    for every group that reads it, not one per group-partition."""
    n = len(tps)
    keyed = list(map(keys.get, tps, tps))
    status, reason, evidence = _judgement_columns(classified, n)
    shown, samples = b.shown, b.samples
    assert shown is not None and samples is not None
    lag_s = samples.lag_s
    if not views and b.whole:  # every row judged in columns: its columns as they are
        return PartitionRows(keyed, shown.committed, filled(Filled.NO_OFFSET, n), shown.lag_offsets, lag_s,
                             stalled, status, reason, owner, filled(Filled.FALSE, n), evidence)
    status, reason, evidence, owner = list(status), list(reason), list(evidence), list(owner)
    committed, lag_off, position = (np.full(n, NO_OFFSET, np.int64) for _ in range(3))
    committed[b.rows], lag_off[b.rows] = shown.committed, shown.lag_offsets
    lag_s = np.full(n, np.nan)
    lag_s[b.rows] = samples.lag_s
    unsubscribed = np.zeros(n, bool)
    for i, v in views.items():
        committed[i], lag_off[i] = _offset(v.committed), _offset(v.lag_offsets)
        lag_s[i] = np.nan if v.lag_seconds is None else v.lag_seconds
        stalled[i] = v.stalled_seconds
        status[i], reason[i], evidence[i], owner[i] = v.status, v.reason, v.evidence, v.owner
        position[i] = _offset(v.position)
        unsubscribed[i] = v.unsubscribed
    return PartitionRows(keyed, committed, position, lag_off, lag_s, stalled,
                         status, reason, owner, unsubscribed, evidence)


def _with_figures(v: GroupView, progress: GroupProgress | None, rebalances: GroupRebalances | None
                  ) -> GroupView:
    """``v`` with its progress and rebalances (``dataclasses.replace`` without its per-field
    introspection: once per group and cycle)."""
    return GroupView(group=v.group, type=v.type, state=v.state, status=v.status, reasons=v.reasons,
                     members=v.members, partitions=v.partitions, spark=v.spark, epoch=v.epoch,
                     membership=v.membership, progress=progress, rebalances=rebalances, exposure=v.exposure)


def _offset(v: int | None) -> int:
    return NO_OFFSET if v is None else v

def _caught_up(tp: TP, committed: int, lag_off: int | None, lag_s: float | None,
               position: int | None, owner: Member | None) -> PartitionView:
    """The view of a committed partition without lag (or with an unknown HW)."""
    # topic, partition, committed, position, lag offsets and seconds, stalled, status, reason, owner
    return PartitionView(tp[0], tp[1], committed, position, lag_off, lag_s, 0.0, Status.OK, "",
                         _member_label(owner))


def _unread(tp: TP, committed: int, position: int | None, owner: Member | None,
            unread: float) -> PartitionView:
    """A committed partition whose HW has not been read for longer than the grace
    (exporter/evaluate/unread.py): ``error``, its lag unknown, its memory left as it was."""
    return PartitionView(topic=tp[0], partition=tp[1], committed=committed, position=position,
                         lag_offsets=None, lag_seconds=None, stalled_seconds=0.0, status=Status.ERROR,
                         reason=f"{tp[0]}[{tp[1]}]: high watermark not read for {fmt_seconds(unread)} "
                                "(lagwatch_errors_total, stage list_offsets)",
                         owner=_member_label(owner))


def _moved_forward(parts: MutableMapping[TP, PartitionMemory],
                   offsets: Mapping[TP, tuple[int, int]]) -> bool:
    """Some partition's offset the memory follows is past the one remembered."""
    if isinstance(parts, PartitionTable):
        return parts.any_beyond(offsets.committed if isinstance(offsets, _AsCommitted) else
                                {tp: followed for tp, (_consumed, followed) in offsets.items()})
    return any((mem := parts.get(tp)) is not None and followed > mem.followed
               for tp, (_consumed, followed) in offsets.items())


def _gone(parts: MutableMapping[TP, PartitionMemory], committed: dict[TP, int]) -> list[TP]:
    """The partitions remembered that the group does not commit this cycle (usually none:
    then one pass in C)."""
    tps = parts.tps if isinstance(parts, PartitionTable) else list(parts)
    if all(map(committed.__contains__, tps)):
        return []
    return [tp for tp in tps if tp not in committed]


def _owners(c: _GroupCycle, table: PartitionTable, tps: list[TP]
            ) -> tuple[list[Member | None], np.ndarray, np.ndarray]:
    """Of each partition: its owner, whether a member owns it (:func:`_member_owns`) and the
    owner's id in ``table`` (-1: none), ids given in the order owners first appear."""
    n = len(tps)
    if not (c.owner_of or c.incoming or (c.g.members and not c.assignment_known)):
        return [None] * n, np.zeros(n, bool), np.full(n, -1.0)
    owners = list(map(c.owner_of.get, tps))
    if c.g.members and not c.assignment_known:
        owned = np.ones(n, bool)
    else:
        owned = np.fromiter((o is not None for o in owners), bool, n)
        if c.incoming:
            owned |= np.fromiter((tp in c.incoming for tp in tps), bool, n)
    ids = {m: table.owner_id(m) for m in dict.fromkeys(o.member_id for o in owners if o is not None)}
    owner = np.fromiter((-1 if o is None else ids[o.member_id] for o in owners), float, n)
    return owners, owned, owner


def _member_owns(c: _GroupCycle, tp: TP) -> bool:
    """Consumer, classic, streams and share groups: a member owns the partition, or will at
    its next heartbeat (target assignment), or the assignment is unknown while members are
    there (a classic group rebalancing publishes none)."""
    return tp in c.owner_of or tp in c.incoming or (bool(c.g.members) and not c.assignment_known)


def _spark_owns(g: GroupSample, spark: SparkReport | None) -> bool:
    """Spark queries: a live driver (its heartbeats are fresh) of a query not terminated owns
    every partition the query reads (:func:`_spark_sample`)."""
    return spark is not None and not spark.terminated and bool(g.members)


def _report_for(c: _GroupCycle, tp: TP, owner: Member | None) -> ConsumerReport | None:
    """The report that speaks for a partition: its owner's, else the latest naming it."""
    if owner is not None and owner.member_id in c.report_by_member:
        return c.report_by_member[owner.member_id]
    return c.report_of.get(tp)


def _group_status(g: GroupSample, parts: PartitionRows, spark: SparkReport | None,
                  membership: Membership) -> tuple[Status, Membership]:
    """(the group's status: its worst partition's, a terminated Spark query's ``stopped``
    even with nothing left to read; the membership model, ``none`` once the client outside
    group membership is gone)."""
    status = parts.status
    if isinstance(status, Repeated):  # a group judged whole: one status, no pass over its rows
        worst = status.value if len(status) else Status.OK
    else:
        worst = max(set(status), key=SEVERITY.__getitem__, default=Status.OK)
    if g.type == GroupType.SPARK and spark is not None and spark.terminated:
        worst = Status.STOPPED
    if membership == Membership.OUTSIDE and worst == Status.STOPPED:
        membership = Membership.NONE  # the client outside group membership is gone
    return worst, membership


def _member_views(g: GroupSample, report_by_member: dict[str, ConsumerReport],
                  now: float) -> tuple[MemberView, ...]:
    def view(m: Member) -> MemberView:
        rep = report_by_member.get(m.member_id)
        return MemberView(member_id=m.member_id, client_id=m.client_id, host=m.host,
                          partitions=len(m.assignment),
                          last_poll_age=rep.poll_age(now) if rep is not None else None,
                          epoch=m.epoch, process_id=m.process_id,
                          commit_mode=rep.commit_mode if rep is not None else None,
                          auto_commit_interval=rep.auto_commit_interval if rep is not None else None)
    return tuple(view(m) for m in g.members)


def _exposure(c: _GroupCycle, parts: list[PartitionView]) -> GroupExposure | None:
    """Records fetched and not committed (exporter/evaluate/exposure.py): the Spark query's
    running batch, else the instrumented consumers' position - committed."""
    if c.spark is not None:
        return group_exposure(spark_exposure(c.spark), ())
    if not c.report_by_member and not c.report_of:  # no instrumented consumer: none known
        return None
    reports = {id(r): r for r in (*c.report_by_member.values(), *c.report_of.values())}
    per_tp = consumer_exposure(parts, lambda tp: _report_for(c, tp, c.owner_of.get(tp)))
    return group_exposure(per_tp, reports.values())

def _reports_of(g: GroupSample, reports: list[ConsumerReport]
                ) -> tuple[dict[TP, ConsumerReport], dict[str, ConsumerReport]]:
    """The open reports by partition (the latest naming it) and by the member they match."""
    if not reports:  # most groups: no instrumented consumer
        return {}, {}
    fresh_reports = [r for r in reports if not r.closed]
    report_of: dict[TP, ConsumerReport] = {}
    for r in sorted(fresh_reports, key=lambda r: r.received_at):
        for tp in r.positions.keys() | r.committed.keys():
            report_of[tp] = r
    return report_of, match_reports(g.members, fresh_reports)


class _AsCommitted(Mapping[TP, tuple[int, int]]):
    """:func:`_offsets` of a group with no reported lag: both offsets are the committed
    one, read from the sample when asked instead of a pair built per partition."""

    __slots__ = ("committed",)

    def __init__(self, committed: dict[TP, int]) -> None:
        self.committed = committed

    def __getitem__(self, tp: TP) -> tuple[int, int]:
        c = self.committed[tp]
        return c, c

    def __iter__(self) -> Iterator[TP]:
        return iter(self.committed)

    def __len__(self) -> int:
        return len(self.committed)


def _offsets(g: GroupSample, st: GroupMemory, partitions: dict[TP, PartitionOffsets], now: float
              ) -> tuple[Mapping[TP, tuple[int, int]], dict[TP, tuple[float | None, float | None]]]:
    """(consumed offset, followed offset) per partition, computed once: a
    share group's stall clock needs every partition's before any is judged; and for a
    share group, when each partition's certain progress happened (:func:`_share_dates`)."""
    if g.type != GroupType.SHARE and not g.reported_lag:  # only share groups have a reported lag
        return _AsCommitted(g.committed), {}
    offsets = {tp: _share_offsets(c, po.hw if (po := partitions.get(tp)) else None,
                                  g.reported_lag.get(tp), st.parts.get(tp))
               for tp, c in g.committed.items()}
    if g.type != GroupType.SHARE:
        return offsets, {}
    share_dates = {tp: _share_dates(mem, consumed, followed, now) for tp, (consumed, followed)
                   in offsets.items() if (mem := st.parts.get(tp)) is not None}
    moved = [at for at, _above in share_dates.values() if at is not None]
    if st.acknowledged_at is None:
        st.acknowledged_at = now
    elif moved:
        st.acknowledged_at = max(st.acknowledged_at, *moved)
    return offsets, share_dates


def _assignment_known(g: GroupSample) -> bool:
    """Classic groups publish assignments only when stable. The coordinator-driven
    protocols (KIP-848, KIP-1071, KIP-932) always do, but while the group is assigning or
    reconciling a partition revoked from one member may be in nobody's current or target
    assignment for a heartbeat or two (librdkafka names both states unknown)."""
    if g.type == GroupType.CLASSIC:
        return g.state == KafkaGroupState.STABLE or not g.members
    return g.state not in IN_FLIGHT_STATES or not g.members


def _group_reasons(g: GroupSample, st: GroupMemory, parts: PartitionRows, spark: SparkReport | None,
                   membership: Membership, now: float) -> Sequence[str]:
    """The worst partitions' reasons first (written when read), then what the group as a
    whole has to say (written now: it reads the group's memory of this cycle)."""
    bad: list[int] = []
    status = parts.status
    if isinstance(status, Repeated):  # one status: the largest lag first (unknown: 0)
        if status.value != Status.OK:
            bad = np.argsort(-np.maximum(parts.lag_offsets, 0), kind="stable").tolist()
    elif set(status) != {Status.OK}:  # the worst first, then the largest lag
        severity = np.fromiter(map(SEVERITY.__getitem__, status), np.int64, len(parts))
        order = np.lexsort((-np.maximum(parts.lag_offsets, 0), -severity))  # stable: rows' order next
        bad = order[severity[order] != SEVERITY[Status.OK]].tolist()
    reasons: list[str] = []
    if len(bad) > MAX_REASONS:
        reasons.append(f"... and {len(bad) - MAX_REASONS} more partition(s)")
    if g.type == GroupType.SPARK and spark is not None and not bad:
        if spark.terminated:
            reasons.append(_spark_terminated_reason(spark, now))
        elif spark.connect == ConnectSide.CLIENT and not g.members:
            reasons.append(client_gone(spark.query_id, spark.received_at, now - spark.received_at))
    if st.outside_at is not None:
        reasons.append(_outside_reason(st, membership, now))
    return GroupReasons(parts, bad[:MAX_REASONS], reasons) if bad else tuple(reasons)


def _unsubscribed_topics(g: GroupSample, assignment_known: bool) -> frozenset[str]:
    """Topics the group holds committed offsets on that no member subscribes to any more,
    in a group whose members are stable (classic: stable; KIP-848 and streams: not
    assigning or reconciling). The members' subscriptions when every member's is known;
    otherwise the topics of which no member owns or targets a partition while the members
    do own partitions of other topics (standard assignors assign every partition of a
    subscribed topic, so a subscribed topic that nobody owns is still judged, and so is
    everything when the members own nothing at all). Share groups own no partitions."""
    if not g.members or not assignment_known or g.type in (GroupType.SHARE, GroupType.SPARK):
        return frozenset()
    topics = {t for t, _ in g.committed}
    held = {t for m in g.members for t, _ in (*m.assignment, *m.target)}
    if all(m.subscribed for m in g.members):
        return frozenset(topics - held - {t for m in g.members for t in m.subscribed})
    if not held:
        return frozenset()
    return frozenset(topics - held)


def _outside_reason(st: GroupMemory, membership: Membership, now: float) -> str:
    """The membership model of a group consumed by a client outside group membership."""
    assert st.outside_at is not None
    if membership != Membership.OUTSIDE:
        return (f"no members; the client outside group membership that committed its offsets "
                f"last committed {fmt_seconds(now - st.outside_at)} ago")
    cadence = outside_cadence(st)
    every = f"every ~{cadence:.0f} s" if cadence is not None else "(commit cadence not learnt yet)"
    return f"no members; offsets committed by a client outside group membership {every}"


def _share_offsets(start: int, hw: int | None, reported_lag: int | None,
                    mem: PartitionMemory | None) -> tuple[int, int]:
    """(where the lag starts, what the partition's memory follows): the committed offset
    twice, except for share groups, whose coordinator reports the lag (KIP-1226) but
    persists the share-partition start offset lazily (it can stay behind records long
    acknowledged). There the lag is the broker's, from ``HW - lag``, and the memory follows
    that too, so it moves as records are acknowledged and freezes when nobody consumes; it
    never moves backwards, because records whose acquisition lock expired return to the
    lag without anyone rewinding anything.

    The broker computed its lag against its HW when it answered, after our last cycle's HW
    sample and before this cycle's (the sampler reads groups, then partitions), so the
    records acknowledged lie between last cycle's HW minus the lag and ours minus the lag.
    Taking ours alone, records produced in between made a wedged share consumer look as if
    it acknowledged a few records now and then (read as committing, its stall clock
    restarted). So the memory moves only when the lower end of that range passes where it
    stands (the upper end of an earlier range): certain progress, seen within two cycles."""
    if reported_lag is None or hw is None:
        return start, start
    lag = max(0, reported_lag)
    consumed = max(start, hw - lag)
    if mem is None:
        return consumed, consumed
    before = mem.freeze_hw if mem.freeze_hw is not None else hw  # the HW at the last sample
    return consumed, consumed if max(start, before - lag) > mem.followed else mem.followed


def _share_dates(mem: PartitionMemory, consumed: int, progress: int, now: float
                 ) -> tuple[float | None, float | None]:
    """(when the progress certain this sample happened, the next ``above_from``).

    Certainty can come many samples after the acknowledgements (:func:`_share_offsets`
    waits for a sample whose HW did not move while the broker answered): dated then, the
    last records a consumer acknowledged before it wedged restart the stall clock late. What
    is acknowledged never exceeds the estimate ``consumed``, so passing ``mem.followed``
    happened after the last sample whose estimate stood at or below it: the progress is
    dated to the first sample of the run whose estimates all stood above it."""
    if progress > mem.followed:
        return (mem.above_from if mem.above_from is not None else now), None
    if consumed > mem.followed:
        return None, mem.above_from if mem.above_from is not None else now
    return None, None


def _report_facts(rep: ConsumerReport | None, now: float, th: Thresholds) -> dict:
    if rep is None:
        return {}
    silent = now - rep.received_at
    return {"has_report": True, "poll_age": rep.poll_age(now), "report_silent_seconds": silent,
            "report_stale": silent > max(th.report_stale_after, REPORT_STALE_INTERVALS * rep.interval),
            "reporter": f"{rep.client_id}@{rep.host} ({rep.member_id})"}


SPARK_REPORTERS = {None: "driver", ConnectSide.CLIENT: "Connect client",
                   ConnectSide.SERVER: "listener on the Connect server"}


def _spark_facts(spark: SparkReport | None, now: float, th: Thresholds) -> dict:
    if spark is None:
        return {}
    server_silent = spark.server_silent(now)
    return {"spark": True, "spark_terminated": spark.terminated, "query_id": spark.query_id,
            "spark_silent_seconds": now - spark.received_at,
            "batch_running": spark.batch_running(now),
            "running_batch_id": 0 if spark.batch_id is None else spark.batch_id + 1,
            "spark_reporter": SPARK_REPORTERS.get(spark.connect, "driver"),
            "spark_connect_client": spark.connect == ConnectSide.CLIENT,
            "spark_server_silent": server_silent,
            "spark_server_unreachable": server_silent is not None and server_silent > _stale_after(spark, th),
            "spark_server_error": spark.server_error or "", "spark_last_report": spark.received_at}


def _stale_after(rep: SparkReport, th: Thresholds) -> float:
    """How long a Spark reporter (or, for its client, a Connect server) may stay silent."""
    return max(th.report_stale_after, REPORT_STALE_INTERVALS * rep.interval)


# -- Spark queries as groups ------------------------------------------------------

def _spark_alive(rep: SparkReport, now: float, th: Thresholds) -> bool:
    return not rep.terminated and now - rep.received_at <= _stale_after(rep, th)


def _spark_sample(rep: SparkReport, now: float, th: Thresholds) -> GroupSample:
    alive = _spark_alive(rep, now, th)
    state = "terminated" if rep.terminated else ("active" if alive else "inactive")
    members: tuple[Member, ...] = ()
    if alive:
        members = (Member(member_id=rep.run_id, client_id="spark-driver", host="",
                          assignment=tuple(rep.end_offsets)),)
    return GroupSample(group_id=rep.group, type=GroupType.SPARK, state=state, members=members,
                       committed=dict(rep.end_offsets))


def _spark_info(rep: SparkReport, now: float) -> SparkInfo:
    return SparkInfo(
        query_id=rep.query_id, run_id=rep.run_id, batch_id=rep.batch_id,
        batch_duration_seconds=(rep.batch_duration_ms / 1000.0
                                if rep.batch_duration_ms is not None else None),
        input_rows_per_second=rep.input_rows_per_second,
        processed_rows_per_second=rep.processed_rows_per_second,
        last_progress_age=rep.progress_age(now), batch_running_seconds=rep.batch_running(now),
        active=not rep.terminated, connect=rep.connect, server_silent_seconds=rep.server_silent(now))


def _spark_terminated_reason(rep: SparkReport, now: float) -> str:
    exc = f": {rep.exception.splitlines()[0][:200]}" if rep.exception else ""
    return f"query {rep.query_id} terminated {fmt_seconds(now - rep.received_at)} ago{exc}"

