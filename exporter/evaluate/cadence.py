"""The commit cadence a group with members has shown, and the stall allowance it earns.

A consumer that commits every ninety seconds by design (a batch committer, a Kafka Streams
application with a long ``commit.interval.ms``) is not stuck at sixty: its stall clock
allows for its cadence. The cadence is learnt from the gaps between its commits while
records waited (a commit cycle's partitions that had records waiting since the previous
commit). A gap is the longest the consumer can have taken: from the cycle before the one
that saw its previous commit to the cycle that sees this one. Its stall clock runs from
the cycle that saw the previous commit and stops before the cycle that sees the next, so
it reads less than the gap it is judged against even when a busy exporter saw one commit
late and the next on time; measured between the cycles that saw them, a gap could read a
whole cycle spacing short of the clock that follows it. A gap longer than
``stall_after`` counts only if records kept arriving through it (the HW rose in each half
of it, up to the cycle before the commit): a consumer that commits only when records
arrive leaves a burst's tail waiting until the next burst, and that wait is no cadence;
so a gap longer than the HW history lagwatch keeps (``history_points`` x interval) is not
learnt either.
The allowance is the second widest of the last :data:`MEMBER_GAPS` gaps (the only one,
with one gap), so one stall the consumer recovered from does not lengthen it, plus one
interval, within [``stall_after``, :data:`MEMBER_CADENCE_BOUND` x ``stall_after``]: a
consumer that slows down is still caught, by this bound and by the lag rules. Until a gap
is learnt the allowance is ``stall_after``: a consumer that commits slower than that reads
``stalled`` until its first commit shows its cadence.

A client outside group membership has its own allowance (``memory.outside_allowance``).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import NamedTuple

from exporter.contracts.snapshot import TP
from exporter.contracts.status import Status
from exporter.contracts.view import GroupView
from exporter.evaluate.lag import HwHistory
from exporter.evaluate.latest import Latest

MEMBER_GAPS = 8
MEMBER_CADENCE_BOUND = 4
# The statuses after which a commit's gap is the consumer's cadence: it owned the partition
# and read it (`stalled` included: a slow committer is `stalled` until its first gap is
# learnt). Not after `livelocked` (wedged), `stopped` (nobody owned it) or `rewind`.
_LEARNT_AFTER = frozenset({Status.OK, Status.LAGGING, Status.STALLED})

Gaps = Latest[float]


class CommitClock(NamedTuple):
    """The times a commit's gap is measured with: this cycle's, the previous cycle's, and
    the cycle before the one that saw the group's previous commit (None: not seen)."""

    now: float
    before: float
    after: float | None


def new_gaps() -> Gaps:
    return Latest(maxlen=MEMBER_GAPS)


def learn_commit_gaps(gaps: Gaps, prev: GroupView | None, committed: Mapping[TP, int],
                      history: Mapping[TP, HwHistory], clock: CommitClock,
                      stall_after: float) -> bool:
    """Keep the gap that ended at this cycle's commit, if records waited for it (see the
    module's docstring). True when a committed offset moved forward since the previous
    view: the caller keeps ``clock.before`` as the earliest time this commit was made."""
    if prev is None:
        return False
    now, before = clock.now, clock.before
    moved, waited = False, []
    rows = prev.partitions
    for tp, was, status, stalled in zip(rows.tps, rows.committed.tolist(), rows.status,
                                        rows.stalled_seconds.tolist(), strict=True):
        if committed.get(tp, was) <= was:
            continue
        moved = True  # the first commit too: the next gap is measured from it
        if was < 0 or status not in _LEARNT_AFTER or stalled <= 0:
            continue
        # without the previous commit's cycle (the first gap after a start): the clock
        # the previous view showed, plus the time since that view
        gap = now - clock.after if clock.after is not None else stalled + now - before
        if gap <= stall_after or _flowed(history.get(tp), now - gap, before):
            waited.append(gap)
    if waited:
        gaps.append(max(waited))
    return moved


def _flowed(h: HwHistory | None, start: float, end: float) -> bool:
    """Records arrived in each half of [start, end] (the HW rose in both)."""
    if h is None or not h.points or h.points[0][0] > start:
        return False
    mid = (start + end) / 2
    a, b, c = _hw_at(h, start), _hw_at(h, mid), _hw_at(h, end)
    return a < b < c


def _hw_at(h: HwHistory, t: float) -> int:
    """The HW last sampled at or before ``t`` (runs of equal HW keep their ends: exact)."""
    i = bisect.bisect_right(h.points, (t, float("inf")))
    return h.points[max(0, i - 1)][1]


def member_allowance(gaps: Gaps, stall_after: float, interval: float) -> float:
    """How long records may wait for a member's commit (see the module's docstring)."""
    if not gaps:
        return stall_after
    typical = sorted(gaps)[-2] if len(gaps) >= 2 else gaps[0]
    return min(MEMBER_CADENCE_BOUND * stall_after, max(stall_after, typical + interval))

