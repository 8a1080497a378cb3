"""Redelivery exposure: what a crash or a rebalance right now would deliver again.

Kafka consumers are at-least-once: after a crash, or when a rebalance moves a partition, its
next owner starts at the committed offset, so every record the old owner fetched past it is
delivered again. Per partition that is ``position - committed``, both from the consumer's own
report (one moment, one clock; the broker's committed offset when the report has none yet),
and for a Spark query the running micro-batch's end offsets against its start, the end of
the last committed batch (Spark re-runs a planned, uncommitted batch after a restart).

Only instrumented consumers and Spark listeners know their position: for other groups the
exposure is unknown, never 0. The commit mode comes from the members' own configuration.
This explains, it does not judge: statuses do not use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from exporter.contracts.reports import CommitMode, ConsumerReport, SparkReport
from exporter.contracts.snapshot import TP
from exporter.contracts.view import GroupExposure, PartitionView


def consumer_exposure(parts: Iterable[PartitionView],
                      report_for: Callable[[TP], ConsumerReport | None]) -> dict[TP, int]:
    """``max(0, position - committed)`` of every partition whose speaking report has a position."""
    out: dict[TP, int] = {}
    for p in parts:
        tp = (p.topic, p.partition)
        rep = report_for(tp)
        if rep is None or tp not in rep.positions:
            continue
        committed = rep.committed.get(tp, p.committed)
        if committed is not None:
            out[tp] = max(0, rep.positions[tp] - committed)
    return out


def spark_exposure(spark: SparkReport) -> dict[TP, int] | None:
    """The running batch's records per partition (0 everywhere when none runs); None when the
    listener cannot tell (an older one, or a driver it cannot inspect). A terminated query's
    planned batch counts too: Spark runs it again when the query restarts."""
    rb = spark.running
    if rb is None:
        return None
    if rb.batch_id is None:
        return dict.fromkeys(spark.end_offsets, 0)
    return {tp: max(0, end - rb.start_offsets[tp]) for tp, end in rb.end_offsets.items()
            if tp in rb.start_offsets}


def commit_mode(reports: Iterable[ConsumerReport]) -> tuple[str | None, float | None]:
    """(``auto``, ``manual`` or ``mixed``; the longest auto-commit interval) of the reports that
    say; (None, None) when none does."""
    modes = {r.commit_mode for r in reports if r.commit_mode is not None}
    intervals = [r.auto_commit_interval for r in reports
                 if r.commit_mode == CommitMode.AUTO and r.auto_commit_interval is not None]
    if not modes:
        return None, None
    mode = modes.pop() if len(modes) == 1 else CommitMode.MIXED
    return mode, max(intervals) if intervals else None


def group_exposure(partitions: dict[TP, int] | None, reports: Iterable[ConsumerReport]
                   ) -> GroupExposure | None:
    """The group's exposure: None when neither an exposure nor a commit mode is known."""
    mode, interval = commit_mode(reports)
    if not partitions and mode is None:
        return None
    parts = dict(sorted((partitions or {}).items()))
    return GroupExposure(records=sum(parts.values()) if partitions is not None and parts else None,
                         partitions=parts, commit_mode=mode, auto_commit_interval=interval)
