"""``--compat kafka_exporter``: kafka_exporter's family names and ``consumergroup`` label.

Same meanings as danielqsj/kafka_exporter v1.9.0 (its README's metric list), so
Grafana dashboard 7589 keeps working during a migration. kafka_exporter's
``kafka_consumergroup_members`` has the same name as lagwatch's own family, so
instead of a second family lagwatch's series get a ``consumergroup`` label
too (see exporter.expose.render.render_groups). Unlike the
original, lag is never negative and there is no -1 sentinel: a partition with
no committed offset has no series.
"""

from __future__ import annotations

from exporter.contracts.snapshot import GroupType
from exporter.contracts.view import ClusterView
from exporter.expose.detail import Detail
from exporter.expose.render import partition_labels
from exporter.expose.textformat import Lines, escape_label


def kafka_exporter_lines(v: ClusterView, level: dict[str, Detail] | None = None) -> list[Lines]:
    """kafka_exporter's families for one cluster's view (labels: cluster plus theirs);
    ``level`` (``metrics_detail: bounded``): per-partition group series only of the
    groups exporter/expose/detail.py serves in full (sums always)."""
    current = Lines("kafka_topic_partition_current_offset", "Current (high watermark) offset of a partition")
    oldest = Lines("kafka_topic_partition_oldest_offset", "Oldest offset of a partition")
    isr = Lines("kafka_topic_partition_in_sync_replica", "In-sync replicas of a partition")
    replicas = Lines("kafka_topic_partition_replicas", "Replicas of a partition")
    leader = Lines("kafka_topic_partition_leader", "Leader broker id of a partition")
    under = Lines("kafka_topic_partition_under_replicated_partition",
                  "1 if the partition is under-replicated")
    parts = Lines("kafka_topic_partitions", "Partitions of a topic")
    brokers = Lines("kafka_brokers", "Brokers in the cluster")
    cg_off = Lines("kafka_consumergroup_current_offset", "Committed offset of a consumer group")
    cg_off_sum = Lines("kafka_consumergroup_current_offset_sum",
                       "Sum of committed offsets of a group per topic")
    cg_lag = Lines("kafka_consumergroup_lag", "Lag of a consumer group (high watermark - committed)")
    cg_lag_sum = Lines("kafka_consumergroup_lag_sum", "Sum of lag of a group per topic")
    cl = f'cluster="{escape_label(v.cluster)}"'
    brokers.add(cl, v.brokers)
    per_topic: dict[str, int] = {}
    for t, lab, po in partition_labels(v):
        per_topic[t] = per_topic.get(t, 0) + 1
        if po.hw is not None:
            current.add(lab, po.hw)
        if po.log_start is not None:
            oldest.add(lab, po.log_start)
        isr.add(lab, po.isr)
        replicas.add(lab, po.replicas)
        leader.add(lab, po.leader)
        under.add(lab, 1 if po.isr < po.replicas else 0)
    for t, n in per_topic.items():
        parts.add(f'{cl},topic="{escape_label(t)}"', n)
    for g in v.groups.values():
        if g.type == GroupType.SPARK:
            continue
        gl = f'{cl},consumergroup="{escape_label(g.group)}"'
        sums: dict[str, list[int]] = {}
        detail = level is None or level[g.group] == Detail.PARTITIONS
        for pv in g.partitions:
            lab = f'{gl},topic="{escape_label(pv.topic)}",partition="{pv.partition}"'
            s = sums.setdefault(pv.topic, [0, 0])
            if pv.committed is not None:
                s[0] += pv.committed
                if detail:
                    cg_off.add(lab, pv.committed)
            if pv.lag_offsets is not None:
                s[1] += pv.lag_offsets
                if detail:
                    cg_lag.add(lab, pv.lag_offsets)
        for t, (off, lag) in sums.items():
            tl = f'{gl},topic="{escape_label(t)}"'
            cg_off_sum.add(tl, off)
            cg_lag_sum.add(tl, lag)
    return [current, oldest, isr, replicas, leader, under, parts, brokers, cg_off, cg_off_sum,
            cg_lag, cg_lag_sum]
