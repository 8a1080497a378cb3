"""The commit cadence a group with members has shown, and the stall allowance it earns.

A consumer that commits every ninety seconds by design (a batch committer, a Kafka Streams
application with a long ``commit.interval.ms``) is not stuck at sixty: its stall clock
allows for its cadence. The cadence is learnt from the gaps between its commits while
records waited (a commit cycle's partitions that had records waiting since the previous
commit: the previous cycle's ``stalled_seconds`` plus one interval). A gap longer than
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


def new_gaps() -> Gaps:
    return Latest(maxlen=MEMBER_GAPS)


def learn_commit_gaps(gaps: Gaps, prev: GroupView | None, committed: Mapping[TP, int],
                      history: Mapping[TP, HwHistory], now: float, interval: float,
                      stall_after: float) -> None:
    """Keep the gap that ended at this cycle's commit, if records waited for it: the widest
    over the partitions whose committed offset moved forward since the previous view."""
    if prev is None:
        return
    waited = []
    rows = prev.partitions
    for tp, before, status, stalled in zip(rows.tps, rows.committed.tolist(), rows.status,
                                           rows.stalled_seconds.tolist(), strict=True):
        if (before < 0 or status not in _LEARNT_AFTER or stalled <= 0
                or committed.get(tp, before) <= before):
            continue
        gap = stalled + interval
        if gap <= stall_after or _flowed(history.get(tp), now - gap, now - interval):
            waited.append(gap)
    if waited:
        gaps.append(max(waited))


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

