"""``--compat kafka_exporter``: kafka_exporter's family names and ``consumergroup`` label.

Same meanings as danielqsj/kafka_exporter v1.9.0 (its README's metric list), so
Grafana dashboard 7589 keeps working during a migration. kafka_exporter's
``kafka_consumergroup_members`` has the same name as lagwatch's own family, so
instead of a second family lagwatch's series get a ``consumergroup`` label
too (see exporter.expose.render.render_groups; the families' texts are in the
metric contract, exporter/expose/metrics.py). Unlike the
original, lag is never negative and there is no -1 sentinel: a partition with
no committed offset has no series.
"""

from __future__ import annotations

from exporter.contracts.snapshot import GroupType
from exporter.contracts.view import ClusterView
from exporter.expose.detail import Detail
from exporter.expose.families import CompatFamilies
from exporter.expose.labels import cluster_label, partition_labels
from exporter.expose.textformat import Lines, escape_label


def kafka_exporter_lines(v: ClusterView, level: dict[str, Detail] | None = None) -> list[Lines]:
    """kafka_exporter's families for one cluster's view (labels: cluster plus theirs);
    ``level`` (``metrics_detail: bounded``): per-partition group series only of the
    groups exporter/expose/detail.py serves in full (sums always)."""
    fam = CompatFamilies.new()
    _partitions(v, fam)
    _groups(v, fam, level)
    return fam.in_order()


def _partitions(v: ClusterView, fam: CompatFamilies) -> None:
    cl = cluster_label(v)
    fam.brokers.add(cl, v.brokers)
    per_topic: dict[str, int] = {}
    for t, lab, po in partition_labels(v):
        per_topic[t] = per_topic.get(t, 0) + 1
        if po.hw is not None:
            fam.topic_partition_current_offset.add(lab, po.hw)
        if po.log_start is not None:
            fam.topic_partition_oldest_offset.add(lab, po.log_start)
        fam.topic_partition_in_sync_replica.add(lab, po.isr)
        fam.topic_partition_replicas.add(lab, po.replicas)
        fam.topic_partition_leader.add(lab, po.leader)
        fam.topic_partition_under_replicated_partition.add(lab, 1 if po.isr < po.replicas else 0)
    for t, n in per_topic.items():
        fam.topic_partitions.add(f'{cl},topic="{escape_label(t)}"', n)


def _groups(v: ClusterView, fam: CompatFamilies, level: dict[str, Detail] | None) -> None:
    cl = cluster_label(v)
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
                    fam.consumergroup_current_offset.add(lab, pv.committed)
            if pv.lag_offsets is not None:
                s[1] += pv.lag_offsets
                if detail:
                    fam.consumergroup_lag.add(lab, pv.lag_offsets)
        for t, (off, lag) in sums.items():
            tl = f'{gl},topic="{escape_label(t)}"'
            fam.consumergroup_current_offset_sum.add(tl, off)
            fam.consumergroup_lag_sum.add(tl, lag)
