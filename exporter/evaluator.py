"""Snapshot + reports + memory of earlier cycles -> statuses, lag seconds, reasons.

Unlike Burrow, which evaluates only when a commit arrives, every partition is
evaluated every cycle against the *current* HW, so a group that stops
committing is noticed as its lag grows, with thresholds in seconds.

Rules per partition with lag > 0 (lag == 0 is always ``ok``):

* ``livelocked``: the owner's own reports say its last poll is older than
  ``livelock_after`` while it is still a group member (precise); or the
  owner is a member but stopped reporting; or the committed offset has been
  frozen for ``stall_after`` while members keep leaving and rejoining
  (broker-side heuristic: at least two joins inside ``window``).
  For Spark: a batch running longer than ``livelock_after`` while the driver
  keeps sending heartbeats.
* ``stopped``: nobody owns the partition (no members, no live driver, or a
  terminated query) and there is no rejoin pattern.
* ``stalled``: committed frozen for ``stall_after`` while a member owns it.
* ``rewind``: committed moved backwards (held for 5 cycles so scrapes see it).
* ``lagging``: lag above ``lag_seconds``, or committed advancing at every one
  of the last two cycles while lag seconds grew at each (sticky until it shrinks).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from exporter.config import Thresholds
from exporter.lag import HwHistory, lag_seconds
from exporter.report_match import match_reports
from exporter.reports import ConsumerReport, SparkReport
from exporter.snapshot import TP, GroupSample, Member, PartitionOffsets, Snapshot
from exporter.view import (
    SEVERITY,
    ClusterView,
    GroupView,
    MemberView,
    PartitionView,
    SparkInfo,
)

MAX_REASONS = 5
REWIND_HOLD_CYCLES = 5
STOPPED_AFTER_CYCLES = 2


class _PartState:
    __slots__ = ("committed", "changed_at", "lag_since", "samples", "lagging", "rewind_until",
                 "unowned")

    def __init__(self, committed: int, now: float) -> None:
        self.committed = committed
        self.changed_at = now
        self.lag_since: float | None = None
        # last three (time, committed, lag seconds); a tuple, not a deque: 100k deques
        # cost ~60 MB
        self.samples: tuple[tuple[float, int, float | None], ...] = ()
        self.lagging = False
        self.rewind_until = 0.0
        self.unowned = 0  # consecutive cycles nobody owned the partition


@dataclass
class _GroupState:
    members: set[str] = field(default_factory=set)
    joins: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=64))
    seen_once: bool = False
    parts: dict[TP, _PartState] = field(default_factory=dict)
    last_view: GroupView | None = None


def _member_label(m: Member | None) -> str:
    if m is None:
        return ""
    return f"{m.client_id or '?'}@{m.host or '?'} ({m.member_id})"


def _fmt_s(v: float | None) -> str:
    if v is None:
        return "unknown"
    return f"{v:.0f}s" if v >= 10 else f"{v:.1f}s"


class Evaluator:
    """Keeps per-partition memory for one cluster; call :meth:`evaluate` once per cycle."""

    def __init__(self, cluster: str, thresholds: Thresholds, interval: float,
                 history_points: int = 120, max_group_partitions: int = 500_000) -> None:
        self.cluster = cluster
        self.th = thresholds
        self.interval = interval
        self.history_points = history_points
        self.max_group_partitions = max_group_partitions
        self.hw_history: dict[TP, HwHistory] = {}
        self.groups: dict[str, _GroupState] = {}
        self.errors_by_stage: collections.Counter[str] = collections.Counter()
        self.last_good: ClusterView | None = None
        self._lag_memo: dict[tuple[str, int, int], float | None] = {}

    # -- entry point ---------------------------------------------------------
    def evaluate(self, snap: Snapshot,
                 consumer_reports: dict[str, list[ConsumerReport]] | None = None,
                 spark_reports: dict[str, SparkReport] | None = None,
                 exact_ts: dict[tuple[str, int, int], float] | None = None,
                 now: float | None = None) -> ClusterView:
        now = snap.taken_at if now is None else now
        for stage, _msg in snap.errors:
            self.errors_by_stage[stage] += 1
        if not snap.ok:
            # Keep everything we knew; only `up` and the error change.
            prev = self.last_good
            return ClusterView(
                self.cluster, False, prev.sampled_at if prev else 0.0, snap.duration,
                prev.partitions if prev else {}, prev.groups if prev else {},
                last_error="; ".join(f"{s}: {m}" for s, m in snap.errors),
                brokers=snap.brokers, errors_by_stage=dict(self.errors_by_stage))
        self._update_history(snap, now)
        self._lag_memo: dict[tuple[str, int, int], float | None] = {}
        consumer_reports = consumer_reports or {}
        samples = dict(snap.groups)
        spark_reports = spark_reports or {}
        for gid, rep in spark_reports.items():
            # A consumer group of that name with members wins; an empty one is normally the
            # listener's own commit_offsets_to_group mirror of this query.
            if gid not in samples or not samples[gid].members:
                samples[gid] = _spark_sample(rep, now, self.th)
        views: dict[str, GroupView] = {}
        for gid, g in samples.items():
            state = self.groups.setdefault(gid, _GroupState())
            views[gid] = self._group(g, state, snap.partitions, consumer_reports.get(gid, []),
                                     spark_reports.get(gid) if g.type == "spark" else None,
                                     exact_ts or {}, now)
        for gid in list(self.groups):
            if gid not in samples:
                del self.groups[gid]  # deleted group: its series vanish this cycle
        views, dropped = self._cap(views)
        view = ClusterView(self.cluster, True, snap.taken_at, snap.duration, snap.partitions,
                           views, last_error="; ".join(f"{s}: {m}" for s, m in snap.errors[:3]),
                           brokers=snap.brokers, dropped_group_partitions=dropped,
                           errors_by_stage=dict(self.errors_by_stage))
        self.last_good = view
        return view

    def _update_history(self, snap: Snapshot, now: float) -> None:
        for tp, po in snap.partitions.items():
            if po.hw is None:
                continue
            h = self.hw_history.get(tp)
            if h is None:
                h = self.hw_history[tp] = HwHistory(self.history_points)
            h.add(now, po.hw)
        for tp in list(self.hw_history):
            if tp not in snap.partitions:
                del self.hw_history[tp]

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

    def lag_inputs(self, snap: Snapshot, lag_mode: str) -> list[tuple[TP, int]]:
        """(tp, committed) pairs whose lag seconds need the record's own timestamp."""
        want = []
        for g in snap.groups.values():
            for tp, off in g.committed.items():
                po = snap.partitions.get(tp)
                if po is None or po.hw is None or off >= po.hw:
                    continue
                if lag_mode == "exact":
                    want.append((tp, off))
                    continue
                h = self.hw_history.get(tp)
                # Older than our table (or no table yet): interpolation cannot tell.
                if h is None or not h.points or h.points[0][1] > off:
                    want.append((tp, off))
        return want

    # -- one group -----------------------------------------------------------
    def _group(self, g: GroupSample, st: _GroupState, partitions: dict[TP, PartitionOffsets],
               reports: list[ConsumerReport], spark: SparkReport | None,
               exact_ts: dict[tuple[str, int, int], float], now: float) -> GroupView:
        if g.error is not None:
            prev = st.last_view
            reason = f"group could not be read: {g.error}"
            view = GroupView(g.group_id, g.type, g.state, "error", (reason,),
                             prev.members if prev else (), prev.partitions if prev else (),
                             prev.spark if prev else None)
            return view

        member_ids = {m.member_id for m in g.members}
        if st.seen_once:
            st.joins.extend(now for _ in member_ids - st.members)
        st.seen_once = True
        st.members = member_ids
        while st.joins and st.joins[0] < now - self.th.window:
            st.joins.popleft()
        churn = len(st.joins) >= 2

        owner_of: dict[TP, Member] = {m_tp: m for m in g.members for m_tp in m.assignment}
        assignment_known = g.type in ("consumer", "spark") or g.state == "stable" or not g.members
        fresh_reports = [r for r in reports if not r.closed]
        report_of: dict[TP, ConsumerReport] = {}
        for r in sorted(fresh_reports, key=lambda r: r.received_at):
            for tp in r.positions.keys() | r.committed.keys():
                report_of[tp] = r
        report_by_member = match_reports(g.members, fresh_reports)

        parts: list[PartitionView] = []
        seen: set[TP] = set()
        for tp in sorted(g.committed):
            seen.add(tp)
            committed = g.committed[tp]
            ps = st.parts.get(tp)
            if ps is None:
                ps = st.parts[tp] = _PartState(committed, now)
            po = partitions.get(tp)
            owner = owner_of.get(tp)
            rep = report_of.get(tp)
            if owner is not None and owner.member_id in report_by_member:
                rep = report_by_member[owner.member_id]
            parts.append(self._partition(g, tp, committed, ps, po, owner, rep, spark,
                                         assignment_known, churn, exact_ts, now))
        for tp in list(st.parts):
            if tp not in seen:
                del st.parts[tp]

        worst = max((p.status for p in parts), key=SEVERITY.__getitem__, default="ok")
        if g.type == "spark" and spark is not None and spark.terminated:
            worst = "stopped"
        bad = sorted((p for p in parts if p.status != "ok"),
                     key=lambda p: (-SEVERITY[p.status], -(p.lag_offsets or 0)))
        reasons = [p.reason for p in bad[:MAX_REASONS]]
        if len(bad) > MAX_REASONS:
            reasons.append(f"... and {len(bad) - MAX_REASONS} more partition(s)")
        if g.type == "spark" and spark is not None and spark.terminated and not bad:
            reasons.append(_spark_terminated_reason(spark, now))

        members = tuple(
            MemberView(m.member_id, m.client_id, m.host, len(m.assignment),
                       report_by_member[m.member_id].poll_age(now)
                       if m.member_id in report_by_member else None)
            for m in g.members)
        view = GroupView(g.group_id, g.type, g.state, worst, tuple(reasons), members, tuple(parts),
                         _spark_info(spark, now) if spark else None)
        st.last_view = view
        return view

    def _partition(self, g: GroupSample, tp: TP, committed: int, ps: _PartState,
                   po: PartitionOffsets | None, owner: Member | None,
                   rep: ConsumerReport | None, spark: SparkReport | None, assignment_known: bool,
                   churn: bool, exact_ts: dict[tuple[str, int, int], float], now: float
                   ) -> PartitionView:
        th = self.th
        topic, part = tp
        position = rep.positions.get(tp) if rep else None
        if spark is not None:
            position = None  # Spark's in-flight batch end is not visible to the listener

        # committed-offset movement
        rewound = committed < ps.committed
        if committed != ps.committed:
            ps.committed = committed
            ps.changed_at = now
        if rewound:
            ps.rewind_until = now + REWIND_HOLD_CYCLES * self.interval
            ps.lagging = False

        hw = po.hw if po else None
        if hw is None:
            lag_off = None
            lag_s = None
        else:
            lag_off = max(0, hw - committed)
            key = (topic, part, committed)
            if key in self._lag_memo:  # many groups read the same partitions
                lag_s = self._lag_memo[key]
            else:
                lag_s = lag_seconds(now, committed, hw, self.hw_history.get(tp), exact_ts.get(key))
                if lag_s is None and lag_off > 0:
                    # Older than anything we know: report at least our own history's age.
                    h = self.hw_history.get(tp)
                    lag_s = max(0.0, now - h.oldest) if h and h.oldest else None
                self._lag_memo[key] = lag_s

        if lag_off is None or lag_off == 0:
            ps.lag_since = None
        elif ps.lag_since is None:
            ps.lag_since = now
        stall_start = max(ps.changed_at, ps.lag_since) if ps.lag_since is not None else None
        stalled_s = (now - stall_start) if stall_start is not None else 0.0
        ps.samples = (*ps.samples[-2:], (now, committed, lag_s))

        owner_txt = _member_label(owner)
        status, reason = "ok", ""
        has_members = bool(g.members)
        if g.type == "spark":
            owned = spark is not None and not spark.terminated and has_members
        else:
            owned = owner is not None or (has_members and not assignment_known)
        ps.unowned = 0 if owned else ps.unowned + 1
        # A coordinator failover or rebalance can show a group empty for one cycle:
        # `stopped` needs two cycles in a row without an owner.
        unowned_confirmed = ps.unowned >= STOPPED_AFTER_CYCLES

        if lag_off is None:
            status, reason = "ok", ""
        elif lag_off == 0:
            ps.lagging = False
        else:
            where = f"{topic}[{part}]"
            nums = f"committed {committed}, HW {hw}, lag {lag_off} ({_fmt_s(lag_s)})"
            poll_age = rep.poll_age(now) if rep else None
            report_stale = (rep is not None and
                            now - rep.received_at > max(th.report_stale_after, 3 * rep.interval))
            batch_running = spark.batch_running(now) if spark else None
            if spark is not None and spark.terminated:
                status, reason = "stopped", (f"{where}: query terminated; {nums}")
            elif spark is not None and not owned:
                status, reason = "stopped", (
                    f"{where}: driver of query {spark.query_id} sent nothing for "
                    f"{_fmt_s(now - spark.received_at)}; {nums}")
            elif (spark is not None and batch_running is not None
                  and batch_running >= th.livelock_after):
                status, reason = "livelocked", (
                    f"{where}: batch {0 if spark.batch_id is None else spark.batch_id + 1} "
                    f"has been running for "
                    f"{batch_running:.0f} seconds while {lag_off} records wait; driver alive "
                    f"(heartbeat {_fmt_s(now - spark.received_at)} ago); {nums}")
            elif (owned and rep is not None and not report_stale and poll_age is not None
                  and poll_age >= th.livelock_after):
                status, reason = "livelocked", (
                    f"{where}: owner {rep.client_id}@{rep.host} ({rep.member_id}) is in the group "
                    f"but last polled {poll_age:.0f}s ago; {nums}")
            elif (owner is not None and rep is not None and report_stale
                  and stalled_s >= th.livelock_after):
                status, reason = "livelocked", (
                    f"{where}: owner {owner_txt} is still a member but its reports stopped "
                    f"{_fmt_s(now - rep.received_at)} ago; {nums}")
            elif churn and stalled_s >= th.stall_after:
                status, reason = "livelocked", (
                    f"{where}: members keep leaving and rejoining ({len(self._joins(g))} joins in "
                    f"{th.window:.0f}s) but the committed offset has not moved for "
                    f"{stalled_s:.0f}s; {nums}")
            elif now < ps.rewind_until:
                status, reason = "rewind", f"{where}: committed offset moved backwards; {nums}"
            elif unowned_confirmed:
                status, reason = "stopped", (
                    f"{where}: no member owns the partition (group {g.state}); "
                    f"committed unchanged for {now - ps.changed_at:.0f}s; {nums}")
            elif stalled_s >= th.stall_after:
                status, reason = "stalled", (
                    f"{where}: committed offset frozen for {stalled_s:.0f}s; owner "
                    f"{owner_txt or 'unknown (rebalancing)'}; {nums}")
            elif self._lagging(ps, lag_s):
                status, reason = "lagging", (
                    f"{where}: lag growing while committing; owner {owner_txt or 'unknown'}; {nums}")
        if status != "lagging" and status != "ok":
            ps.lagging = False
        if status == "ok" and lag_off and now < ps.rewind_until:
            status, reason = "rewind", f"{topic}[{part}]: committed offset moved backwards"
        return PartitionView(topic, part, committed, position, lag_off, lag_s,
                             stalled_s if lag_off else 0.0, status, reason, owner_txt)

    def _joins(self, g: GroupSample) -> collections.deque[float]:
        return self.groups[g.group_id].joins

    def _lagging(self, ps: _PartState, lag_s: float | None) -> bool:
        if lag_s is None:
            return False
        if lag_s > self.th.lag_seconds:
            ps.lagging = True
            return True
        s = ps.samples
        if ps.lagging:
            # sticky until the lag shrinks
            if len(s) >= 2 and s[-2][2] is not None and lag_s < s[-2][2]:
                ps.lagging = False
            return ps.lagging
        if len(s) < 3 or any(x[2] is None for x in s):
            return False
        (_, c0, l0), (_, c1, l1), (_, c2, l2) = s
        growing = c0 < c1 < c2 and l0 < l1 < l2  # type: ignore[operator]
        if growing and l2 >= self.interval and l2 - l0 >= 0.5 * self.interval:  # type: ignore[operator]
            ps.lagging = True
        return ps.lagging


# -- Spark queries as groups ------------------------------------------------------

def _spark_alive(rep: SparkReport, now: float, th: Thresholds) -> bool:
    return (not rep.terminated and
            now - rep.received_at <= max(th.report_stale_after, 3 * rep.interval))


def _spark_sample(rep: SparkReport, now: float, th: Thresholds) -> GroupSample:
    alive = _spark_alive(rep, now, th)
    state = "terminated" if rep.terminated else ("active" if alive else "inactive")
    members: tuple[Member, ...] = ()
    if alive:
        members = (Member(rep.run_id, "spark-driver", "", None, tuple(rep.end_offsets)),)
    return GroupSample(rep.group, "spark", state, members, None, dict(rep.end_offsets))


def _spark_info(rep: SparkReport, now: float) -> SparkInfo:
    return SparkInfo(
        query_id=rep.query_id, run_id=rep.run_id, batch_id=rep.batch_id,
        batch_duration_seconds=(rep.batch_duration_ms / 1000.0
                                if rep.batch_duration_ms is not None else None),
        input_rows_per_second=rep.input_rows_per_second,
        processed_rows_per_second=rep.processed_rows_per_second,
        last_progress_age=rep.progress_age(now), batch_running_seconds=rep.batch_running(now),
        active=not rep.terminated)


def _spark_terminated_reason(rep: SparkReport, now: float) -> str:
    exc = f": {rep.exception.splitlines()[0][:200]}" if rep.exception else ""
    return f"query {rep.query_id} terminated {_fmt_s(now - rep.received_at)} ago{exc}"

