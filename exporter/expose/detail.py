"""Which groups ``metrics_detail: bounded`` serves in detail.

In a cluster of thousands of groups nearly all are ``ok`` and caught up, and their
per-group and per-partition series are most of ``/metrics`` (about 550 bytes per
group-partition). Bounded mode serves, for every group, its status (the current one,
value 1) and its max lag in seconds; the per-group families only of the groups for which
a shipped alert (alerts/lagwatch.rules.yml) reads them; and the per-partition families
only where an alert reads those. Every group and partition stays in the JSON API.
"""

from __future__ import annotations

from enum import IntEnum

from exporter.contracts.snapshot import GroupType
from exporter.contracts.status import Status
from exporter.contracts.view import GroupView

RETENTION_WATCH = 0.5
"""A group whose committed offset sits in the older half of a partition's retained log
(``GroupProgress.retained_position`` below this) is served in full. The near-retention
alert fires below 0.1; the series must be there before, and the records-lost counter
before the loss, or ``increase()`` would take the first loss for the counter's start.
Retention deletes whole segments, so the offset can go from well above 0.1 to below the
log start in one step: half the log leaves a segment's room on logs of three segments or
more (docs/metrics.md#bounded-metrics says what a log of one or two costs)."""


class Detail(IntEnum):
    """What bounded mode serves of a group, each level adding to the one before."""

    STATUS = 0  # its status and max lag in seconds
    GROUP = 1  # and its other per-group series
    PARTITIONS = 2  # and its per-partition series


def detail_of(g: GroupView) -> Detail:
    """Everything (``PARTITIONS``) for a group that is not ``ok`` (the status alerts read
    its stall and lag, on-call its partitions); that lost records or whose committed
    offset nears the log start (records lost, near retention: :data:`RETENTION_WATCH`);
    that holds offsets on a topic no member subscribes to (the abandoned-topic alert).
    The per-group series (``GROUP``) for a group that rebalanced within
    ``thresholds.rebalance_window`` (the rebalance-storm alert reads its counter; served
    from its first rebalance on, the alert counts the ones after it) and for Spark queries
    (their alerts tell them apart by ``kafka_consumergroup_info{type="spark"}``)."""
    if g.status != Status.OK:
        return Detail.PARTITIONS
    pr = g.progress
    if pr is not None and (pr.records_lost_total or pr.below_log_start or (
            pr.retained_position is not None and pr.retained_position < RETENTION_WATCH)):
        return Detail.PARTITIONS
    if g.partitions.unsubscribed.any():
        return Detail.PARTITIONS
    if g.type == GroupType.SPARK or (g.rebalances is not None and g.rebalances.recent > 0):
        return Detail.GROUP
    return Detail.STATUS
