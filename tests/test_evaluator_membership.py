"""Membership models through the real Evaluator, deterministically (simulated clock).

A group is judged by its evidence whatever its membership model (docs/statuses.md,
"Membership models"): members owning partitions; no members while a client outside
group membership commits (assign(): Flink's Kafka source at each checkpoint, Spark
committing to a group); and topics the group's members no longer subscribe to.
"""

from __future__ import annotations

import pytest

from exporter.config import Thresholds
from exporter.contracts.errors import ErrorRecord
from exporter.contracts.reports import ConsumerReport
from exporter.contracts.snapshot import TP, GroupSample, Member, PartitionOffsets, Snapshot
from exporter.contracts.status import Status
from exporter.contracts.view import GroupView
from exporter.evaluate.evaluator import Evaluator
from exporter.evaluate.memory import OUTSIDE_CADENCE_BOUND
from exporter.expose.api import group_doc

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0
RATE = 10  # records per second on every partition
OLD, NEW = ("orders-v1", 0), ("orders-v2", 0)


def _th(stall_after: float) -> Thresholds:
    return Thresholds(stall_after=stall_after, livelock_after=20, lag_seconds=3600, window=300,
                      report_stale_after=30)


def _offsets(hw: int) -> PartitionOffsets:
    return PartitionOffsets(leader=1, replicas=3, isr=3, log_start=0, hw=hw, lso=hw, leo=hw)


def _sample(ev: Evaluator, t: float, committed: dict[TP, int], hws: dict[TP, int],
            members: tuple[Member, ...] = (), state: str | None = None) -> GroupView:
    state = state or ("stable" if members else "empty")
    snap = Snapshot(cluster="c", taken_at=T0 + t, duration=0.01,
                    partitions={tp: _offsets(hw) for tp, hw in hws.items()},
                    groups={"g": GroupSample(group_id="g", type="classic", state=state, members=members,
                                             coordinator=1, committed=committed)})
    return ev.evaluate(snap).groups["g"]


def _checkpointing(ev: Evaluator, every: float, behind: float, until: float, stop_at: float = 1e9,
                   slow: float = 1.0, start: float = 0.0) -> list[tuple[float, GroupView]]:
    """An assign()-mode client committing at each checkpoint (every ``every`` s) the position
    it had read, ``behind`` seconds behind a steady producer, until ``stop_at`` (killed);
    ``slow`` < 1 reads at that fraction of the producer's rate."""
    out = []
    committed = 0
    t = start
    while t <= until:
        hw = int(RATE * t)
        if t <= stop_at and t >= every and int(t) % int(every) == 0:
            committed = max(committed, int(RATE * slow * (t - behind)))
        out.append((t, _sample(ev, t, {NEW: committed}, {NEW: hw})))
        t += 1
    return out


@pytest.mark.parametrize("every", [5, 60])
def test_outside_committer_reading_steadily_behind_is_ok_at_every_sample(every: int) -> None:
    """A Flink-like job committing every checkpoint (5 s, 60 s) with stall_after 30: never
    stopped nor stalled, whatever the sample falls between two checkpoints; its model and
    cadence are told."""
    ev = Evaluator("c", _th(30), interval=1)
    views = _checkpointing(ev, every, behind=4.8, until=600)
    judged = [(t, v.status) for t, v in views if t > every]
    assert all(s == Status.OK for _, s in judged), [x for x in judged if x[1] != Status.OK][:3]
    last = views[-1][1]
    assert last.membership == "outside"
    assert f"offsets committed by a client outside group membership every ~{every}" in last.reasons[-1]
    assert group_doc("c", last)["membership"] == "outside"


def test_a_new_outside_job_is_ok_from_its_first_checkpoint() -> None:
    """A job started while lagwatch watches: its group appears with its first checkpoint's
    commit and no members. That commit is the evidence (a member would have been seen), so
    the group is not `stopped` while it waits for its second checkpoint, 60 s later."""
    ev = Evaluator("c", _th(30), interval=1)
    ev.evaluate(Snapshot(cluster="c", taken_at=T0, duration=0.01, partitions={NEW: _offsets(0)}, groups={}))
    views = _checkpointing(ev, 60, behind=4.8, until=300, start=1)
    bad = [(t, v.status) for t, v in views if v.status != Status.OK]
    assert not bad, bad[:3]
    assert all(v.membership == "outside" for _, v in views)


def test_an_empty_group_first_listed_after_a_sampling_error_is_not_taken_for_a_new_job() -> None:
    """The cycle before had errors (a broker's ListGroups failed): the group may have been
    there all along, unlisted, its consumer long gone. It is `stopped` as any empty group
    whose offsets do not move, not given an outside client's allowance."""
    ev = Evaluator("c", _th(30), interval=1)
    ev.evaluate(Snapshot(cluster="c", taken_at=T0, duration=0.01, partitions={NEW: _offsets(0)}, groups={},
                         errors=(ErrorRecord(stage="list_groups", message="broker 2: timed out"),)))
    views = [_sample(ev, t, {NEW: 0}, {NEW: RATE * t}) for t in range(1, 10)]
    assert views[-1].status == Status.STOPPED and views[-1].membership == "none"


def test_an_empty_group_adopted_by_a_replica_is_not_taken_for_a_new_job() -> None:
    """A replica's new shard brings a group it has no state record of (``adopted``): new to
    this evaluator, not to the cluster. It is `stopped` as at a start, not given an outside
    client's allowance as a group just created by a commit would be."""
    def run(adopted: set[str]) -> list[GroupView]:
        ev = Evaluator("c", _th(30), interval=1)
        ev.evaluate(Snapshot(cluster="c", taken_at=T0, duration=0.01, partitions={NEW: _offsets(0)},
                             groups={}))
        ev.adopted = adopted
        return [_sample(ev, t, {NEW: 0}, {NEW: RATE * t}) for t in range(1, 10)]
    adopted = run({"g"})
    assert adopted[-1].status == Status.STOPPED and adopted[-1].membership == "none"
    created = run(set())  # the same samples, the group taken for one a commit just created
    assert created[-1].status == Status.OK and created[-1].membership == "outside"


def test_outside_committer_killed_is_stopped_after_its_cadence_and_not_before() -> None:
    """Commits every 5 s, stall_after 8, killed at t=100 while records keep arriving:
    stopped within stall_after + 2 cycles of its last commit, not before stall_after."""
    ev = Evaluator("c", _th(8), interval=1)
    views = _checkpointing(ev, 5, behind=4.8, until=140, stop_at=100)
    first_bad = next(t for t, v in views if v.status != Status.OK and t > 5)
    assert views[int(first_bad)][1].status == Status.STOPPED
    assert 100 + 8 <= first_bad <= 100 + 8 + 2
    assert views[-1][1].membership == "none"
    assert "last committed" in views[-1][1].reasons[-1]


def test_outside_committer_with_a_long_cadence_is_stopped_within_its_cadence() -> None:
    """Commits every 60 s with stall_after 30: killed, it is flagged within its learnt
    cadence + 2 cycles, not at the bound."""
    ev = Evaluator("c", _th(30), interval=1)
    views = _checkpointing(ev, 60, behind=4.8, until=600, stop_at=360)
    first_bad = next(t for t, v in views if v.status != Status.OK and t > 60)
    assert views[int(first_bad)][1].status == Status.STOPPED
    assert 360 + 60 <= first_bad <= 360 + 60 + 1 + 2
    assert first_bad < 360 + OUTSIDE_CADENCE_BOUND * 30


def test_outside_committer_falling_behind_is_lagging() -> None:
    """A job reading at 70 % of the producer's rate, committing every 5 s: lagging, not stopped."""
    ev = Evaluator("c", _th(8), interval=1)
    views = _checkpointing(ev, 5, behind=1, until=200, slow=0.7)
    statuses = {v.status for t, v in views if t > 60}
    assert statuses == {Status.LAGGING}


def test_group_that_lost_its_members_and_stopped_committing_is_stopped() -> None:
    """A classic consumer killed: the group empties and nothing commits any more."""
    ev = Evaluator("c", _th(8), interval=1)
    member = Member(member_id="m-1", client_id="billing", host="/10.0.0.5", assignment=(NEW,))
    got = []
    for t in range(40):
        hw = RATE * t
        alive = t < 20
        got.append(_sample(ev, t, {NEW: hw - 5 if alive else RATE * 19 - 5}, {NEW: hw},
                           (member,) if alive else ()))
    assert got[-1].status == Status.STOPPED
    assert got[-1].membership == "none"
    assert not any("outside group membership" in r for r in got[-1].reasons)


def _moved_group(ev: Evaluator, t: int, member: Member) -> GroupView:
    """One member keeps up on orders-v2; orders-v1 keeps receiving records and keeps the
    group's old committed offset."""
    return _sample(ev, t, {OLD: 600, NEW: RATE * t - 3}, {OLD: 600 + RATE * t, NEW: RATE * t},
                   (member,))


@pytest.mark.parametrize("subscribed", [("orders-v2",), ()], ids=["subscription-known", "fallback"])
def test_topic_the_group_moved_away_from_is_shown_but_not_judged(subscribed: tuple[str, ...]) -> None:
    ev = Evaluator("c", _th(8), interval=1)
    member = Member(member_id="m-1", client_id="orders", host="/10.0.0.5", assignment=(NEW,),
                    subscribed=subscribed)
    views = [_moved_group(ev, t, member) for t in range(1, 120)]
    assert {v.status for v in views} == {Status.OK}
    old = next(p for p in views[-1].partitions if (p.topic, p.partition) == OLD)
    assert old.status == Status.OK and old.lag_offsets == RATE * 119 and old.committed == 600
    assert old.reason.startswith("orders-v1[0]: no member subscribes to orders-v1 any more; committed 600")
    # the group's lag totals (the lag alerts' series) are the subscribed topics' only
    assert views[-1].total_lag == 3
    assert views[-1].max_lag_seconds is not None and views[-1].max_lag_seconds < 1
    doc = group_doc("c", views[-1])
    assert [p["subscribed"] for p in doc["partitions"]] == [False, True]
    assert doc["membership"] == "members"


def test_subscribed_topic_nobody_owns_in_a_stable_group_is_still_stopped() -> None:
    ev = Evaluator("c", _th(8), interval=1)
    member = Member(member_id="m-1", client_id="orders", host="/10.0.0.5", assignment=(NEW,),
                    subscribed=("orders-v1", "orders-v2"))
    views = [_moved_group(ev, t, member) for t in range(1, 30)]
    assert views[-1].status == Status.STOPPED
    assert "orders-v1[0]: no member owns the partition (group stable)" in views[-1].reasons[0]


def test_members_owning_nothing_still_judge_every_topic() -> None:
    """Subscriptions unknown and no member owns any partition: nothing says the group moved
    on, so its committed topics are still judged."""
    ev = Evaluator("c", _th(8), interval=1)
    member = Member(member_id="m-1", client_id="orders", host="/10.0.0.5")
    views = [_sample(ev, t, {OLD: 600}, {OLD: 600 + RATE * t}, (member,)) for t in range(1, 30)]
    assert views[-1].status == Status.STOPPED


def test_unsubscribed_topic_is_judged_while_the_group_rebalances() -> None:
    """A classic group that is not stable publishes no assignments: nothing is concluded
    about subscriptions then (the old rules apply: owned while the assignment is unknown)."""
    ev = Evaluator("c", _th(8), interval=1)
    member = Member(member_id="m-1", client_id="orders", host="/10.0.0.5", subscribed=("orders-v2",))
    v = None
    for t in range(1, 5):
        v = _sample(ev, t, {OLD: 600}, {OLD: 600 + RATE * t}, (member,), state="preparingrebalance")
    assert v is not None
    assert all(p.reason == "" for p in v.partitions)


# -- owned but never committed -------------------------------------------------------

CONSUMER = Member(member_id="m-1", client_id="cc-blocked-client", host="/10.0.0.5", assignment=(NEW,))


def _owned_uncommitted(ev: Evaluator, t: int, committed: dict[TP, int], state: str = "stable",
                       report_poll: float | None = None) -> GroupView:
    """A member owns orders-v2[0] since t=0; records arrive from t=0 on."""
    hws = {NEW: 100 + RATE * t}
    now = T0 + t
    reports = {}
    if report_poll is not None:
        reports = {"g": [ConsumerReport("g", "cc-blocked-client", "m-1", "/10.0.0.5", sent_at=now,
                                        last_poll=T0 + report_poll, interval=5, positions={NEW: 100},
                                        committed={}, closed=False, received_at=now)]}
    snap = Snapshot(cluster="c", taken_at=now, duration=0.01,
                    partitions={tp: _offsets(hw) for tp, hw in hws.items()},
                    groups={"g": GroupSample(group_id="g", type="classic", state=state, members=(CONSUMER,),
                                             coordinator=1, committed=committed)})
    return ev.evaluate(snap, reports).groups["g"]


def test_consumer_wedged_before_its_first_commit_is_stalled_without_instrumentation() -> None:
    ev = Evaluator("c", _th(8), interval=1)
    views = [_owned_uncommitted(ev, t, {}) for t in range(30)]
    first_bad = next(t for t, v in enumerate(views) if v.status != Status.OK)
    assert 8 <= first_bad <= 8 + 2
    assert views[-1].status == Status.STALLED
    p = views[-1].partitions[0]
    assert (p.committed, p.lag_offsets, p.position) == (None, None, None)
    assert "no offset committed since the member was assigned this partition" in p.reason
    assert "lag unknown" in p.reason


def test_consumer_wedged_before_its_first_commit_is_livelocked_when_instrumented() -> None:
    """Its reports say it last polled at t=0 and its position is the offset it was given."""
    ev = Evaluator("c", _th(60), interval=1)
    views = [_owned_uncommitted(ev, t, {}, report_poll=0.0) for t in range(30)]
    first_bad = next(t for t, v in enumerate(views) if v.status != Status.OK)
    assert 20 <= first_bad <= 20 + 2
    assert views[first_bad].status == Status.LIVELOCKED
    p = views[-1].partitions[0]
    assert p.position == 100 and p.lag_offsets == RATE * 29
    assert "cc-blocked-client" in p.reason and "never committed" in p.reason


def test_consumer_that_just_started_and_commits_soon_is_ok() -> None:
    """No commit for its first 5 s (auto commit interval), then commits as it reads."""
    ev = Evaluator("c", _th(8), interval=1)
    views = [_owned_uncommitted(ev, t, {NEW: 100 + RATE * t - 3} if t >= 5 else {}) for t in range(60)]
    assert {v.status for v in views} == {Status.OK}
    assert views[-1].partitions[0].committed == 100 + RATE * 59 - 3


def test_assignment_in_progress_is_not_judged_until_it_settles() -> None:
    ev = Evaluator("c", _th(8), interval=1)
    views = [_owned_uncommitted(ev, t, {}, state="completingrebalance") for t in range(30)]
    assert {v.status for v in views} == {Status.OK}
    assert views[-1].partitions == ()
    settled = [_owned_uncommitted(ev, t, {}) for t in range(30, 50)]
    first_bad = next(t for t, v in zip(range(30, 50), settled, strict=True) if v.status != Status.OK)
    assert first_bad >= 30 + 8


def test_subscriptions_are_asked_only_where_a_topic_was_left() -> None:
    """The sampler's extra DescribeGroups goes to stable classic groups with committed offsets
    on a topic none of their members owns a partition of, and to no other."""
    from exporter.kafka.sampler import _left_a_topic

    member = Member(member_id="m-1", client_id="orders", host="/10.0.0.5", assignment=(NEW,))

    def group(committed: dict[TP, int], state: str = "stable", members: tuple[Member, ...] = (member,),
              gtype: str = "classic") -> GroupSample:
        return GroupSample(group_id="g", type=gtype, state=state, members=members, committed=committed)
    assert _left_a_topic(group({OLD: 1, NEW: 2}))
    assert not _left_a_topic(group({NEW: 2}))
    assert not _left_a_topic(group({OLD: 1, NEW: 2}, state="preparingrebalance"))
    assert not _left_a_topic(group({OLD: 1}, members=()))
    assert not _left_a_topic(group({OLD: 1}, members=(Member(member_id="m-2", client_id="c", host="h"),)))
    assert not _left_a_topic(group({OLD: 1, NEW: 2}, gtype="consumer"))  # its describe says


def test_outside_committer_idle_on_a_quiet_topic_is_still_outside_and_gets_its_allowance() -> None:
    """No record for far longer than its allowance (nothing to commit), then a burst: the
    job commits it at its next checkpoint, 5 s later, and is never stopped meanwhile."""
    ev = Evaluator("c", _th(8), interval=1)
    views = _checkpointing(ev, 5, behind=0, until=60)
    hw = committed = int(RATE * 60)
    quiet = [_sample(ev, t, {NEW: committed}, {NEW: hw}) for t in range(61, 200)]
    assert {v.status for v in quiet} == {Status.OK} and quiet[-1].membership == "outside"
    burst = [_sample(ev, t, {NEW: committed if t < 205 else hw + 50}, {NEW: hw + 50})
             for t in range(200, 210)]
    assert {v.status for v in burst} == {Status.OK}
    assert views[-1][1].membership == burst[-1].membership == "outside"


def test_a_group_committing_on_some_of_its_partitions_only() -> None:
    """One member owns two partitions and commits only on the first as it reads; records
    arrive on both. The second is shown (no committed offset) and `stalled` after
    stall_after, naming the fact, while the first stays `ok`; the group reads `stalled`."""
    ev = Evaluator("c", _th(8), interval=1)
    a, b = ("orders", 0), ("orders", 1)
    member = Member(member_id="m-1", client_id="half-client", host="/10.0.0.5", assignment=(a, b),
                    subscribed=("orders",))
    views = [_sample(ev, t, {a: RATE * t - 2}, {a: RATE * t, b: RATE * t}, (member,)) for t in range(1, 30)]
    first_bad = next(t for t, v in enumerate(views, start=1) if v.status != Status.OK)
    assert 8 <= first_bad <= 8 + 2, first_bad
    last = views[-1]
    assert last.status == Status.STALLED
    pa, pb = last.partitions
    assert (pa.partition, pa.status, pa.committed) == (0, Status.OK, RATE * 29 - 2)
    assert (pb.partition, pb.status, pb.committed, pb.lag_offsets) == (1, Status.STALLED, None, None)
    assert "no offset committed since the member was assigned this partition" in pb.reason
    assert "half-client" in pb.reason


MEMBER = Member(member_id="m-1", client_id="batch-client", host="/10.0.0.5", assignment=(NEW,),
                subscribed=("orders-v2",))


def _committing_member(ev: Evaluator, every: int, until: int, stop_at: int = 10**9,
                       wedged: tuple[int, int] = (0, 0)) -> list[tuple[int, Status]]:
    """A group member reading a steady producer 5 s behind and committing every ``every``
    seconds until ``stop_at``, not at all while ``wedged`` (from, to)."""
    out, committed = [], 0
    for t in range(until + 1):
        if t <= stop_at and t % every == 0 and not wedged[0] <= t < wedged[1]:
            committed = max(committed, RATE * (t - 5))
        out.append((t, _sample(ev, t, {NEW: committed}, {NEW: RATE * t}, (MEMBER,)).status))
    return out


def test_member_committing_slower_than_stall_after_is_ok_once_its_cadence_is_shown() -> None:
    """Every 90 s with stall_after 60: `stalled` at most until its first commit gap is seen,
    then never again, for 15 minutes."""
    ev = Evaluator("c", _th(60), interval=1)
    seen = _committing_member(ev, 90, 1000)
    after_first_gap = {s for t, s in seen if t > 180}
    assert after_first_gap == {Status.OK}, [(t, s) for t, s in seen if t > 180 and s != Status.OK][:3]
    assert {s for t, s in seen if t <= 180} <= {Status.OK, Status.STALLED}


def test_member_that_stops_committing_is_stalled_within_its_cadence_and_not_before() -> None:
    """The same consumer stops committing at 900 s (its last commit), records arriving:
    `stalled` once records waited its learnt cadence (90 s) plus one cycle, within 2 cycles."""
    ev = Evaluator("c", _th(60), interval=1)
    seen = _committing_member(ev, 90, 1200, stop_at=900)
    first = next(t for t, s in seen if t > 900 and s != Status.OK)
    assert dict(seen)[first] == Status.STALLED
    # records have waited since before it (it reads 5 s behind): the clock runs from the commit
    assert 900 + 90 <= first <= 900 + 91 + 2, first


def test_member_commit_seen_late_by_a_busy_exporter_does_not_shorten_its_cadence() -> None:
    """A member reading 5 s behind commits every 12 s from 12 s on (stall_after 8, interval
    1 s). The exporter is busy from 12 s to 15 s and sees the first commit 3 s late, the
    second on time: between the cycles that saw them the gap reads 9 s, and records then
    wait 11 s for the third commit. Ok at every cycle from the second commit on."""
    ev = Evaluator("c", _th(8), interval=1)
    out, committed = [], {}
    for t in [t for t in range(0, 70) if t not in (12, 13, 14)]:
        made = max((c for c in range(12, 70, 12) if c <= t), default=None)
        if made is not None:
            committed = {NEW: RATE * (made - 5)}
        out.append((t, _sample(ev, t, committed, {NEW: RATE * t}, (MEMBER,)).status))
    late = [(t, s) for t, s in out if t >= 24 and s != Status.OK]
    assert late == [], late


def test_one_long_recovered_stall_does_not_lengthen_the_stall_clock() -> None:
    """A consumer committing every second, wedged 100 s once (stall_after 60) while records
    arrive, then healthy: wedged again three commits later, it is `stalled` at stall_after,
    not at the 100 s gap it showed once (still among its last gaps)."""
    seen = _committing_member(Evaluator("c", _th(60), interval=1), 1, 600, stop_at=203,
                              wedged=(100, 200))
    assert {s for t, s in seen if 160 <= t < 200} == {Status.STALLED}
    first = next(t for t, s in seen if t > 203 and s != Status.OK)
    assert 203 + 60 <= first <= 203 + 60 + 2, first
