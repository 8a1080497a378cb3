"""Render the evaluated views as Prometheus metric families.

A custom collector reads the latest immutable :class:`ClusterView` of each
cluster; nothing is stored in labelled gauge objects, so a deleted group or
partition simply is not in the next view and its series vanish. Families are
built once per new view and cached, so scrapes cost only the text encoding.
Unknown values are left out, never exported as NaN.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.view import STATUSES, ClusterView


@dataclass(frozen=True)
class FamilyDoc:
    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


# The metric contract. README's metrics table is checked against this list.
FAMILIES: tuple[FamilyDoc, ...] = (
    FamilyDoc("kafka_partition_log_start_offset", "gauge", ("cluster", "topic", "partition"),
              "Oldest offset still in the log (ListOffsets earliest)."),
    FamilyDoc("kafka_partition_high_watermark_offset", "gauge", ("cluster", "topic", "partition"),
              "High watermark: end of the data replicated to all in-sync replicas."),
    FamilyDoc("kafka_partition_last_stable_offset", "gauge", ("cluster", "topic", "partition"),
              "Last stable offset: what read_committed consumers can read."),
    FamilyDoc("kafka_partition_log_end_offset", "gauge", ("cluster", "topic", "partition"),
              "Log end offset of the partition leader, including records not yet replicated."),
    FamilyDoc("kafka_partition_replicas", "gauge", ("cluster", "topic", "partition"),
              "Number of replicas."),
    FamilyDoc("kafka_partition_in_sync_replicas", "gauge", ("cluster", "topic", "partition"),
              "Number of in-sync replicas."),
    FamilyDoc("kafka_consumergroup_info", "gauge", ("cluster", "group", "state", "type"),
              "Always 1; state and type (classic, consumer, spark) of the group."),
    FamilyDoc("kafka_consumergroup_members", "gauge", ("cluster", "group"),
              "Members of the group (for Spark: 1 while the driver is alive)."),
    FamilyDoc("kafka_consumergroup_committed_offset", "gauge",
              ("cluster", "group", "topic", "partition"),
              "Committed offset (Spark: endOffset of the last completed batch)."),
    FamilyDoc("kafka_consumergroup_position_offset", "gauge",
              ("cluster", "group", "topic", "partition"),
              "Next offset the consumer will read, as reported by instrumented consumers."),
    FamilyDoc("kafka_consumergroup_lag_offsets", "gauge",
              ("cluster", "group", "topic", "partition"),
              "max(0, high watermark - committed offset)."),
    FamilyDoc("kafka_consumergroup_lag_seconds", "gauge",
              ("cluster", "group", "topic", "partition"),
              "Age of the oldest unconsumed record; 0 when caught up."),
    FamilyDoc("kafka_consumergroup_stalled_seconds", "gauge",
              ("cluster", "group", "topic", "partition"),
              "How long the committed offset has not moved while lag > 0; 0 otherwise."),
    FamilyDoc("kafka_consumergroup_status", "gauge", ("cluster", "group", "status"),
              "One series per status; 1 for the group's current status, 0 for the others."),
    FamilyDoc("kafka_consumergroup_max_lag_seconds", "gauge", ("cluster", "group"),
              "Largest lag_seconds over the group's partitions."),
    FamilyDoc("kafka_consumergroup_lag_offsets_sum", "gauge", ("cluster", "group"),
              "Sum of lag_offsets over the group's partitions."),
    FamilyDoc("kafka_consumergroup_member_last_poll_age_seconds", "gauge",
              ("cluster", "group", "client_id"),
              "Seconds since an instrumented member last polled (from its reports)."),
    FamilyDoc("kafka_spark_query_batch_duration_seconds", "gauge", ("cluster", "group"),
              "Duration of the query's last completed micro-batch."),
    FamilyDoc("kafka_spark_query_input_rows_per_second", "gauge", ("cluster", "group"),
              "Input rate of the last micro-batch."),
    FamilyDoc("kafka_spark_query_processed_rows_per_second", "gauge", ("cluster", "group"),
              "Processing rate of the last micro-batch."),
    FamilyDoc("kafka_spark_query_last_progress_age_seconds", "gauge", ("cluster", "group"),
              "Seconds since the query last reported progress."),
    FamilyDoc("kafka_spark_query_batch_running_seconds", "gauge", ("cluster", "group"),
              "How long the current micro-batch has been running (0 when none is)."),
    FamilyDoc("lagwatch_up", "gauge", ("cluster",),
              "1 if the last sampling cycle of this cluster succeeded."),
    FamilyDoc("lagwatch_sample_duration_seconds", "gauge", ("cluster",),
              "Duration of the last sampling cycle."),
    FamilyDoc("lagwatch_last_sample_timestamp_seconds", "gauge", ("cluster",),
              "Unix time of the last successful sample."),
    FamilyDoc("lagwatch_data_age_seconds", "gauge", ("cluster",),
              "Age of the data served, at scrape time."),
    FamilyDoc("lagwatch_brokers", "gauge", ("cluster",), "Brokers in the cluster metadata."),
    FamilyDoc("lagwatch_errors_total", "counter", ("cluster", "stage"),
              "Sampling errors by stage (metadata, list_groups, describe_group, offset_fetch, "
              "list_offsets, leo, exact_lag, cycle)."),
    FamilyDoc("lagwatch_kafka_requests_total", "counter", ("cluster",),
              "Kafka requests sent by the sampler (librdkafka counters plus LEO requests)."),
    FamilyDoc("lagwatch_cycles_total", "counter", ("cluster",), "Sampling cycles run."),
    FamilyDoc("lagwatch_dropped_group_partitions", "gauge", ("cluster",),
              "Group-partitions left out by the max_group_partitions cardinality cap."),
    FamilyDoc("lagwatch_reports_received_total", "counter", ("cluster", "kind"),
              "Valid reports read from the reports topic."),
    FamilyDoc("lagwatch_reports_dropped_total", "counter", ("cluster", "reason"),
              "Reports rejected by validation, by reason."),
)
_DOC = {f.name: f for f in FAMILIES}


def _g(name: str) -> GaugeMetricFamily:
    d = _DOC[name]
    return GaugeMetricFamily(name, d.help, labels=list(d.labels))


def _c(name: str) -> CounterMetricFamily:
    d = _DOC[name]
    return CounterMetricFamily(name.removesuffix("_total"), d.help, labels=list(d.labels))


def _ok(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


@dataclass
class SelfStats:
    """Counters owned by the runner, read at scrape time."""

    cycles: int = 0
    requests: int = 0
    reports_received: dict[str, int] | None = None
    reports_dropped: dict[str, int] | None = None


class ViewCollector(Collector):
    def __init__(self, store: StoreProtocol, compat: frozenset[str] = frozenset(),
                 clock: object = None) -> None:
        import time as _time

        self.store = store
        self.compat = compat
        self.clock = clock or _time.time
        self._cache_key: tuple = ()
        self._cache: list[Metric] = []
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        views = self.store.views()
        key = tuple((v.cluster, id(v)) for v in views)
        with self._lock:
            if key != self._cache_key:
                self._cache = build_view_families(views, self.compat)
                self._cache_key = key
            cached = self._cache
        yield from cached
        yield from self._self_families(views)

    def _self_families(self, views: list[ClusterView]) -> Iterator[Metric]:
        up, dur, last, age, brokers = (_g("lagwatch_up"), _g("lagwatch_sample_duration_seconds"),
                                       _g("lagwatch_last_sample_timestamp_seconds"),
                                       _g("lagwatch_data_age_seconds"), _g("lagwatch_brokers"))
        errs, reqs, cycles = (_c("lagwatch_errors_total"), _c("lagwatch_kafka_requests_total"),
                              _c("lagwatch_cycles_total"))
        dropped = _g("lagwatch_dropped_group_partitions")
        rr, rd = _c("lagwatch_reports_received_total"), _c("lagwatch_reports_dropped_total")
        now = self.clock()  # type: ignore[operator]
        for v in views:
            c = [v.cluster]
            up.add_metric(c, 1.0 if v.up else 0.0)
            dur.add_metric(c, v.sample_duration)
            brokers.add_metric(c, v.brokers)
            dropped.add_metric(c, v.dropped_group_partitions)
            if v.sampled_at > 0:
                last.add_metric(c, v.sampled_at)
                age.add_metric(c, max(0.0, now - v.sampled_at))
            for stage, n in sorted(v.errors_by_stage.items()):
                errs.add_metric([v.cluster, stage], n)
            st = self.store.self_stats(v.cluster)
            reqs.add_metric(c, st.requests)
            cycles.add_metric(c, st.cycles)
            for kind, n in sorted((st.reports_received or {}).items()):
                rr.add_metric([v.cluster, kind], n)
            for reason, n in sorted((st.reports_dropped or {}).items()):
                rd.add_metric([v.cluster, reason], n)
        yield from (up, dur, last, age, brokers, errs, reqs, cycles, dropped, rr, rd)


class StoreProtocol:  # pragma: no cover - structural type, see exporter.state.Store
    def views(self) -> list[ClusterView]: ...
    def self_stats(self, cluster: str) -> SelfStats: ...


def build_view_families(views: list[ClusterView], compat: frozenset[str] = frozenset()
                        ) -> list[Metric]:
    names = [f.name for f in FAMILIES if f.name.startswith("kafka_")]
    fam = {n: _g(n) for n in names}
    for v in views:
        cl = v.cluster
        for (topic, part), po in v.partitions.items():
            lab = [cl, topic, str(part)]
            if po.log_start is not None:
                fam["kafka_partition_log_start_offset"].add_metric(lab, po.log_start)
            if po.hw is not None:
                fam["kafka_partition_high_watermark_offset"].add_metric(lab, po.hw)
            if po.lso is not None:
                fam["kafka_partition_last_stable_offset"].add_metric(lab, po.lso)
            if po.leo is not None:
                fam["kafka_partition_log_end_offset"].add_metric(lab, po.leo)
            fam["kafka_partition_replicas"].add_metric(lab, po.replicas)
            fam["kafka_partition_in_sync_replicas"].add_metric(lab, po.isr)
        for g in v.groups.values():
            gl = [cl, g.group]
            fam["kafka_consumergroup_info"].add_metric([cl, g.group, g.state, g.type], 1)
            fam["kafka_consumergroup_members"].add_metric(gl, len(g.members))
            for s in STATUSES:
                fam["kafka_consumergroup_status"].add_metric([cl, g.group, s],
                                                             1 if s == g.status else 0)
            if _ok(g.max_lag_seconds):
                fam["kafka_consumergroup_max_lag_seconds"].add_metric(gl, g.max_lag_seconds)
            if g.total_lag is not None:
                fam["kafka_consumergroup_lag_offsets_sum"].add_metric(gl, g.total_lag)
            seen_clients: set[str] = set()
            for m in g.members:
                if m.last_poll_age is not None and m.client_id not in seen_clients:
                    seen_clients.add(m.client_id)
                    fam["kafka_consumergroup_member_last_poll_age_seconds"].add_metric(
                        [cl, g.group, m.client_id], m.last_poll_age)
            for p in g.partitions:
                pl = [cl, g.group, p.topic, str(p.partition)]
                if p.committed is not None:
                    fam["kafka_consumergroup_committed_offset"].add_metric(pl, p.committed)
                if p.position is not None:
                    fam["kafka_consumergroup_position_offset"].add_metric(pl, p.position)
                if p.lag_offsets is not None:
                    fam["kafka_consumergroup_lag_offsets"].add_metric(pl, p.lag_offsets)
                if _ok(p.lag_seconds):
                    fam["kafka_consumergroup_lag_seconds"].add_metric(pl, p.lag_seconds)
                fam["kafka_consumergroup_stalled_seconds"].add_metric(pl, p.stalled_seconds)
            sp = g.spark
            if sp is not None:
                for name, val in (
                    ("kafka_spark_query_batch_duration_seconds", sp.batch_duration_seconds),
                    ("kafka_spark_query_input_rows_per_second", sp.input_rows_per_second),
                    ("kafka_spark_query_processed_rows_per_second", sp.processed_rows_per_second),
                    ("kafka_spark_query_last_progress_age_seconds", sp.last_progress_age),
                    ("kafka_spark_query_batch_running_seconds", sp.batch_running_seconds or 0.0),
                ):
                    if _ok(val):
                        fam[name].add_metric(gl, val)
    out: list[Metric] = list(fam.values())
    if "kafka_exporter" in compat:
        from exporter.compat import kafka_exporter_families

        out.extend(kafka_exporter_families(views))
    return out
