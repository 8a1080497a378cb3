"""``--compat kafka_exporter``: kafka_exporter's family names and ``consumergroup`` label.

Same meanings as danielqsj/kafka_exporter (reference/peers.md §2), so
Grafana dashboard 7589 keeps working during a migration. Unlike the
original, lag is never negative and there is no -1 sentinel: a partition with
no committed offset has no series.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.view import ClusterView


def kafka_exporter_families(views: list[ClusterView]) -> list[Metric]:
    tl = ["cluster", "topic", "partition"]
    gl = ["cluster", "consumergroup", "topic", "partition"]
    current = GaugeMetricFamily("kafka_topic_partition_current_offset",
                                "Current (high watermark) offset of a partition", labels=tl)
    oldest = GaugeMetricFamily("kafka_topic_partition_oldest_offset",
                               "Oldest offset of a partition", labels=tl)
    isr = GaugeMetricFamily("kafka_topic_partition_in_sync_replica",
                            "In-sync replicas of a partition", labels=tl)
    replicas = GaugeMetricFamily("kafka_topic_partition_replicas",
                                 "Replicas of a partition", labels=tl)
    leader = GaugeMetricFamily("kafka_topic_partition_leader", "Leader broker id", labels=tl)
    under = GaugeMetricFamily("kafka_topic_partition_under_replicated_partition",
                              "1 if the partition is under-replicated", labels=tl)
    parts = GaugeMetricFamily("kafka_topic_partitions", "Partitions of a topic",
                              labels=["cluster", "topic"])
    brokers = GaugeMetricFamily("kafka_brokers", "Brokers in the cluster", labels=["cluster"])
    cg_off = GaugeMetricFamily("kafka_consumergroup_current_offset",
                               "Committed offset of a consumer group", labels=gl)
    cg_off_sum = GaugeMetricFamily("kafka_consumergroup_current_offset_sum",
                                   "Sum of committed offsets", labels=gl[:3])
    cg_lag = GaugeMetricFamily("kafka_consumergroup_lag", "Lag of a consumer group", labels=gl)
    cg_lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "Sum of lag", labels=gl[:3])
    cg_members = GaugeMetricFamily("kafka_consumergroup_members", "Members of a consumer group",
                                   labels=["cluster", "consumergroup"])
    for v in views:
        brokers.add_metric([v.cluster], v.brokers)
        per_topic: dict[str, int] = {}
        for (t, p), po in v.partitions.items():
            lab = [v.cluster, t, str(p)]
            per_topic[t] = per_topic.get(t, 0) + 1
            if po.hw is not None:
                current.add_metric(lab, po.hw)
            if po.log_start is not None:
                oldest.add_metric(lab, po.log_start)
            isr.add_metric(lab, po.isr)
            replicas.add_metric(lab, po.replicas)
            leader.add_metric(lab, po.leader)
            under.add_metric(lab, 1 if po.isr < po.replicas else 0)
        for t, n in per_topic.items():
            parts.add_metric([v.cluster, t], n)
        for g in v.groups.values():
            if g.type == "spark":
                continue
            cg_members.add_metric([v.cluster, g.group], len(g.members))
            sums: dict[str, list[int]] = {}
            for pv in g.partitions:
                lab = [v.cluster, g.group, pv.topic, str(pv.partition)]
                s = sums.setdefault(pv.topic, [0, 0])
                if pv.committed is not None:
                    cg_off.add_metric(lab, pv.committed)
                    s[0] += pv.committed
                if pv.lag_offsets is not None:
                    cg_lag.add_metric(lab, pv.lag_offsets)
                    s[1] += pv.lag_offsets
            for t, (off, lag) in sums.items():
                cg_off_sum.add_metric([v.cluster, g.group, t], off)
                cg_lag_sum.add_metric([v.cluster, g.group, t], lag)
    return [current, oldest, isr, replicas, leader, under, parts, brokers, cg_off, cg_off_sum,
            cg_lag, cg_lag_sum, cg_members]
