"""Rebalances per group: a counter that only rises, and the storm and livelock notes.

Where the count comes from, by group type:

- ``consumer`` (KIP-848), ``streams`` (KIP-1071) and ``share`` (KIP-932) groups: the group
  epoch, which the coordinator bumps by one at every membership or subscription change
  (KIP-848, "Group Epoch"): each bump is a new target assignment, a rebalance. Exact,
  whatever happened between two samples.
- ``classic`` groups: DescribeGroups returns no generation id, and neither do ListGroups
  nor OffsetFetch. What the broker shows is the member ids: each cycle in which they
  changed (members joined or left) counts one rebalance. A lower bound: several
  rebalances between two samples count as one, and a member that left and rejoined with
  the same id between them counts none. A static member (``group.instance.id``,
  KIP-345) counts by its instance id: its restart within the session timeout is no
  rebalance, though it comes back with a new member id.
- Instrumented members of classic groups report how many rebalances they took part in (the
  Python client counts the assignments librdkafka hands it, one per rebalance;
  librdkafka's own ``cgrp.rebalance_cnt`` also counts revocations, two per eager
  rebalance; the JVM interceptor reports the consumer's ``rebalance-total``). Every
  member takes part in a group's rebalance, so the clients' count is, per cycle, the
  largest rise any one member reports, summed over cycles (:func:`client_step`).

The group's counter is whichever of the two has seen more, so it never goes down. The
first sample of a group (and of a client) is a baseline: rebalances before lagwatch
watched are not counted, so an exporter restart does not show old ones again as an
increase. A group epoch that goes down (the group was deleted and recreated under the
same id) is a new baseline, not a decrease. The memory lives in the evaluator, in the
main process: a restarted Kafka worker costs no count, a cycle in which the group could
not be read keeps its last figures and catches up on the epoch the next cycle.

Like progress (exporter/evaluate/progress.py) this runs after the judgement and never
changes a status or a judgement reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Protocol

from exporter.config import Thresholds
from exporter.contracts.reports import ConsumerReport
from exporter.contracts.snapshot import GroupSample, GroupType
from exporter.contracts.status import Status
from exporter.contracts.view import GroupRebalances, GroupView, RebalanceSource
from exporter.evaluate.latest import Latest
from exporter.evaluate.rates import fmt_duration

EPOCH_TYPES = frozenset({GroupType.CONSUMER, GroupType.STREAMS, GroupType.SHARE})
# Rebalance times kept per group, at most: enough for any storm threshold that matters.
MAX_EVENTS = 1000


@dataclass(slots=True)
class RebalanceMemory:
    broker: int = 0  # counted from the epoch or the membership changes
    clients: int = 0  # counted from the instrumented clients' own counters
    total: int = 0  # max(broker, clients) as last served: never decreases
    epoch: int | None = None
    members: frozenset[str] | None = None  # None: no sample yet (the baseline comes next)
    client_counts: dict[str, int] = field(default_factory=dict)  # last count per client
    events: Latest[float] = field(default_factory=lambda: Latest(maxlen=MAX_EVENTS))
    last: GroupRebalances | None = None


def epoch_step(epoch: int | None, last: int | None) -> int:
    """Rebalances between two group epochs: the rise; none from a first sample (baseline)
    or from an epoch that went down (the group was recreated: a new baseline)."""
    if epoch is None or last is None or epoch <= last:
        return 0
    return epoch - last


def membership_step(members: frozenset[str], last: frozenset[str] | None) -> int:
    """Classic groups: one rebalance for a cycle in which the member ids changed."""
    return 0 if last is None or members == last else 1


def client_step(counts: dict[str, int], reports: list[ConsumerReport]) -> int:
    """The largest rise of any instrumented member's own rebalance count since the last
    cycle; ``counts`` (member -> last count) is replaced by this cycle's.

    A member is a client id, host and member id: the reports of one member id form one
    rising sequence. The reports of a consumer's earlier member ids (before it joined, or
    before it was kicked out and rejoined under a new id) stay until they expire and
    never rise again, and two consumers sharing a client id on one host stay apart. JVM
    interceptors cannot know their member id: two JVMs with one client id on one host
    report under the same name, so a name reported twice in a cycle is left out rather
    than read as one count going up and down. A member seen for the first time, or whose
    count went down, is a baseline."""
    latest: dict[str, int] = {}
    twice: set[str] = set()
    for r in reports:
        if r.rebalances is None:
            continue
        key = f"{r.client_id}@{r.host}#{r.member_id}"
        if key in latest:
            twice.add(key)
        latest[key] = r.rebalances
    rise = 0
    for key in twice:
        del latest[key]
    for key, n in latest.items():
        was = counts.get(key)
        if was is not None and n > was:
            rise = max(rise, n - was)
    counts.clear()
    counts.update(latest)
    return rise


class HoldsRebalances(Protocol):
    """A group's memories as the tracker reads them (exporter/evaluate/group_memories.py)."""

    rebalances: RebalanceMemory | None
    th: Thresholds


class RebalanceTracker:
    """The memory behind :class:`GroupRebalances` for one cluster: :meth:`one` for each group of a
    cycle as the evaluator judges it."""

    def __init__(self, groups: Mapping[str, HoldsRebalances]) -> None:
        # The evaluator's memories by group (exporter/evaluate/group_memories.py): the tracker's
        # own are each group's ``rebalances``.
        self.groups = groups

    def one(self, gid: str, v: GroupView, sample: GroupSample, reports: list[ConsumerReport],
            now: float) -> GroupRebalances | None:
        """One group's rebalances, for its view (a group at rest is not given them again:
        its view carries them); None for a Spark query, or none yet."""
        if v.type == GroupType.SPARK:
            return None
        rec = self.groups[gid]
        memo = rec.rebalances
        if memo is None:
            memo = rec.rebalances = RebalanceMemory()
        if sample.error is None:
            self._observe(memo, sample, reports, now)
            memo.last = self._summary(memo, v, now)
        # An unreadable group keeps its last figures, like its last judgement.
        return memo.last

    def _observe(self, memo: RebalanceMemory, g: GroupSample, reports: list[ConsumerReport],
                 now: float) -> None:
        # A static member (KIP-345) is known by its group.instance.id: restarted within
        # session.timeout.ms it rejoins under a new member id and the coordinator hands it
        # its old assignment without a rebalance, so a new id alone is not one.
        members = frozenset(m.instance_id or m.member_id for m in g.members)
        if g.type in EPOCH_TYPES and g.epoch is not None:
            memo.broker += epoch_step(g.epoch, memo.epoch)  # exact: the clients add nothing
        else:
            memo.broker += membership_step(members, memo.members)
            memo.clients += client_step(memo.client_counts, [r for r in reports if not r.closed])
        memo.epoch, memo.members = g.epoch, members
        total = max(memo.total, memo.broker, memo.clients)
        memo.events.extend(repeat(now, min(MAX_EVENTS, total - memo.total)))
        memo.total = total

    def _summary(self, memo: RebalanceMemory, v: GroupView, now: float) -> GroupRebalances:
        th = self.groups[v.group].th
        while memo.events and memo.events[0] < now - th.rebalance_window:
            memo.events.popleft()
        recent = len(memo.events)
        storm = recent > th.rebalance_storm
        source, last = _source(v.type, memo), memo.last
        if (not recent and not storm and last is not None and not last.recent and not last.storm
                and last.total == memo.total and last.window_seconds == th.rebalance_window
                and last.source == source):
            return last  # quiet as last cycle: the same figures, no notes (frozen, shared)
        return GroupRebalances(
            total=memo.total, recent=recent, window_seconds=th.rebalance_window, storm=storm,
            source=source, notes=_notes(recent, storm, v.status, th))


def _source(t: GroupType, memo: RebalanceMemory) -> RebalanceSource:
    """What the count rests on: ``epoch`` (exact), ``membership`` (a lower bound), or
    ``clients`` when the instrumented clients' own counters have seen more."""
    if memo.clients > memo.broker:
        return RebalanceSource.CLIENTS
    if t in EPOCH_TYPES and memo.epoch is not None:
        return RebalanceSource.EPOCH
    return RebalanceSource.MEMBERSHIP


def _notes(recent: int, storm: bool, status: Status, th: Thresholds) -> tuple[str, ...]:
    span = fmt_duration(th.rebalance_window)
    # A livelocked group's rebalances are its rejoin loop's: a member kicked out by
    # max.poll.interval.ms and rejoining costs the group two (it leaves, it joins).
    livelocked = " while livelocked" if status == Status.LIVELOCKED else ""
    if storm:
        return (f"rebalance storm: {recent} rebalances in the last {span} "
                f"(more than {th.rebalance_storm:g}){livelocked}",)
    if livelocked and recent:
        return (f"{recent} rebalance(s) in the last {span}{livelocked}",)
    return ()
