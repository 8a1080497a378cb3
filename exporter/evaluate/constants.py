"""The judgement constants of the status rules, in one place.

The thresholds an operator tunes live in :class:`exporter.config.Thresholds`; these are
the fixed judgements around them: how many cycles a status is held or confirmed, how
late a commit may land, which ratios count as growth. Each has a docstring saying what
it decides and why it has this value; ``docs/statuses.md`` shows them in a table generated
from this file (``python -m tests.test_config_docs`` rewrites it). No imports: every
stage may read these without loading another.
"""

from __future__ import annotations

from typing import Final

REWIND_HOLD_CYCLES: Final = 5
"""Cycles a confirmed rewind is reported as ``rewind``, so that scrapes see it."""

LATE_COMMIT_WINDOW: Final = 60.0
"""Seconds a member's commit can land late: a client retries a commit for up to its request
timeout, 60 s by default in librdkafka (``socket.timeout.ms``) and in the Java client
(``default.api.timeout.ms``). A backward move within that is a late commit, not a rewind."""

STOPPED_AFTER_CYCLES: Final = 2
"""Cycles in a row nobody owns a partition before it can be ``stopped``: a coordinator
failover or a rebalance can show a group empty for one cycle."""

UNREADABLE_GRACE_CYCLES: Final = 4
"""Cycles a group may be unreadable, its last judgement standing, before it is ``error``:
a coordinator failing over or a broker restarting leaves a group unreadable for a cycle
or three (and at least ``UNREADABLE_GRACE_SECONDS``)."""

UNREADABLE_GRACE_SECONDS: Final = 60.0
"""The grace's floor in seconds, for short intervals: when a coordinator dies, the
controller first fences its broker (``broker.session.timeout.ms``, 9 s by default), then
elects new leaders for its ``__consumer_offsets`` partitions, whose new coordinator loads
them before it answers; 20-29 s on a small local cluster (bench/results/broker-faults.md),
longer with large offsets partitions."""

QUIET_FRACTION: Final = 0.5
"""Fraction of ``stall_after`` without a new record after which a lag only ages (a
``lagging`` trend ends), and the length of a pause after which records that arrive again
begin a new burst (evidence for ``stalled``) instead of continuing a burst's tail."""

TREND_MIN_COMMITS: Final = 3
"""Commits in a run (lag seconds growing at each of the last two or more) before a
growing lag is ``lagging``: growth at one commit is noise."""

TREND_GROWTH_RATIO: Final = 0.25
"""Least growth of lag seconds over a run, as a fraction of the time the run spans, to be
``lagging`` (and it must also exceed one commit gap plus one interval)."""

REPORT_STALE_INTERVALS: Final = 3
"""A reporter (instrumented consumer, Spark driver) is stale after
``max(report_stale_after, this many of its own reporting intervals)``: a reporter
configured to report slowly is not stale after one quiet interval."""

GONE_AFTER_INTERVALS: Final = 3
"""Reports of one member: a report this many of its intervals older than its sibling's is
from a process that is gone (a restarted consumer reusing its member's identity)."""

OUTSIDE_CADENCE_BOUND: Final = 4
"""A client outside group membership (``assign()``: Flink's Kafka source, Spark committing
to a group) commits at its own cadence. Its stall allowance is the widest gap seen between
its commits while healthy, plus one cycle, at least ``stall_after`` and at most this many
times ``stall_after`` (the bound applies until a gap is seen): a consumer that slows down is
still caught, by this bound and by the lag rules."""

OUTSIDE_GAPS: Final = 8
"""The last gaps between an outside client's commits that its cadence is learnt from."""

MAX_JOINS: Final = 64
"""Joins remembered per group for the rejoin-loop rule (within ``window``)."""
