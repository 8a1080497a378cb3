"""Render the evaluated views as Prometheus metrics.

Nothing is stored in labelled gauge objects: every scrape renders the latest
immutable :class:`ClusterView` of each cluster, so a deleted group or
partition simply is not in the next view and its series vanish.

The per-partition families can hold hundreds of thousands of series, which
prometheus_client's generic encoder renders too slowly (about 3 µs a
sample). So the view families are rendered to text by :class:`ViewText`, once
per new view and per cluster (the runner does it right after publishing), and a
scrape only joins cached strings. The few self-metrics go through a regular
prometheus_client custom collector. Unknown values are left out, never NaN.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.snapshot import PartitionOffsets
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
    FamilyDoc("lagwatch_cycle_duration_seconds", "gauge", ("cluster",),
              "Duration of the last whole cycle: sampling, record timestamps, evaluation, rendering."),
    FamilyDoc("lagwatch_last_sample_timestamp_seconds", "gauge", ("cluster",),
              "Unix time of the last successful sample."),
    FamilyDoc("lagwatch_data_age_seconds", "gauge", ("cluster",),
              "Age of the data served, at scrape time."),
    FamilyDoc("lagwatch_brokers", "gauge", ("cluster",), "Brokers in the cluster metadata."),
    FamilyDoc("lagwatch_errors_total", "counter", ("cluster", "stage"),
              "Sampling errors by stage (metadata, list_groups, describe_group, offset_fetch, "
              "list_offsets, leo, exact_lag, worker_crash, cycle)."),
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
    cycle_duration: float = 0.0
    requests: int = 0
    reports_received: dict[str, int] | None = None
    reports_dropped: dict[str, int] | None = None


class SelfCollector(Collector):
    """Self-metrics of every cluster runner (a handful of series)."""

    def __init__(self, store: StoreProtocol, clock: object = None) -> None:
        import time as _time

        self.store = store
        self.clock = clock or _time.time

    def collect(self) -> Iterator[Metric]:
        views = self.store.views()
        up, dur, last, age, brokers = (_g("lagwatch_up"), _g("lagwatch_sample_duration_seconds"),
                                       _g("lagwatch_last_sample_timestamp_seconds"),
                                       _g("lagwatch_data_age_seconds"), _g("lagwatch_brokers"))
        errs, reqs, cycles = (_c("lagwatch_errors_total"), _c("lagwatch_kafka_requests_total"),
                              _c("lagwatch_cycles_total"))
        dropped = _g("lagwatch_dropped_group_partitions")
        cycle = _g("lagwatch_cycle_duration_seconds")
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
            for stage in sorted(set(ERROR_STAGES) | set(v.errors_by_stage)):
                errs.add_metric([v.cluster, stage], v.errors_by_stage.get(stage, 0))
            st = self.store.self_stats(v.cluster)
            reqs.add_metric(c, st.requests)
            cycle.add_metric(c, st.cycle_duration)
            cycles.add_metric(c, st.cycles)
            for kind in sorted({"consumer", "spark"} | set(st.reports_received or {})):
                rr.add_metric([v.cluster, kind], (st.reports_received or {}).get(kind, 0))
            for reason, n in sorted((st.reports_dropped or {}).items()):
                rd.add_metric([v.cluster, reason], n)
        yield from (up, dur, cycle, last, age, brokers, errs, reqs, cycles, dropped, rr, rd)


class StoreProtocol:  # pragma: no cover - structural type, see exporter.state.Store
    def views(self) -> list[ClusterView]: ...
    def self_stats(self, cluster: str) -> SelfStats: ...


ERROR_STAGES = ("metadata", "list_groups", "describe_group", "offset_fetch", "list_offsets", "leo",
                "exact_lag", "worker_crash", "cycle")


# -- fast text rendering of the view families ---------------------------------------

def escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def fmt_value(v: float | int) -> str:
    if isinstance(v, int):
        return str(v)
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


class Lines:
    """Sample lines of one family, encoded as they are added (a list of 400k small
    strings would cost more memory than the text itself)."""

    __slots__ = ("name", "help", "kind", "buf")

    def __init__(self, name: str, help_text: str, kind: str = "gauge") -> None:
        self.name, self.help, self.kind = name, help_text, kind
        self.buf = bytearray()

    def add(self, labels: str, v: float | int) -> None:
        self.buf += f"{self.name}{{{labels}}} {fmt_value(v)}\n".encode()

    def header(self) -> str:
        return f"# HELP {self.name} {_escape_help(self.help)}\n# TYPE {self.name} {self.kind}\n"


def partition_labels(v: ClusterView) -> Iterator[tuple[str, str, PartitionOffsets]]:
    """(topic, label string, offsets) of every partition, each topic's labels escaped once."""
    cl = f'cluster="{escape_label(v.cluster)}"'
    topic_lab: dict[str, str] = {}
    for (topic, part), po in v.partitions.items():
        tl = topic_lab.get(topic)
        if tl is None:
            tl = topic_lab[topic] = f'{cl},topic="{escape_label(topic)}"'
        yield topic, f'{tl},partition="{part}"', po


def _doc_lines(name: str) -> Lines:
    return Lines(name, _DOC[name].help)


Rendered = dict[str, tuple[bytes, bytearray]]


def render_cluster(v: ClusterView, compat: frozenset[str] = frozenset()) -> Rendered:
    """Family name -> (header, samples) for one cluster's view, encoded once."""
    names = [f.name for f in FAMILIES if f.name.startswith("kafka_")]
    fam = {n: _doc_lines(n) for n in names}
    cl = f'cluster="{escape_label(v.cluster)}"'
    ls, hw, lso, leo = (fam["kafka_partition_log_start_offset"], fam["kafka_partition_high_watermark_offset"],
                        fam["kafka_partition_last_stable_offset"], fam["kafka_partition_log_end_offset"])
    reps, isr = fam["kafka_partition_replicas"], fam["kafka_partition_in_sync_replicas"]
    for _topic, lab, po in partition_labels(v):
        if po.log_start is not None:
            ls.add(lab, po.log_start)
        if po.hw is not None:
            hw.add(lab, po.hw)
        if po.lso is not None:
            lso.add(lab, po.lso)
        if po.leo is not None:
            leo.add(lab, po.leo)
        reps.add(lab, po.replicas)
        isr.add(lab, po.isr)
    info, members, status = (fam["kafka_consumergroup_info"], fam["kafka_consumergroup_members"],
                             fam["kafka_consumergroup_status"])
    committed, position = (fam["kafka_consumergroup_committed_offset"],
                           fam["kafka_consumergroup_position_offset"])
    lag_o, lag_s, stalled = (fam["kafka_consumergroup_lag_offsets"], fam["kafka_consumergroup_lag_seconds"],
                             fam["kafka_consumergroup_stalled_seconds"])
    poll_age = fam["kafka_consumergroup_member_last_poll_age_seconds"]
    compat_ke = "kafka_exporter" in compat
    for g in v.groups.values():
        gl = f'{cl},group="{escape_label(g.group)}"'
        info.add(f'{gl},state="{escape_label(g.state)}",type="{g.type}"', 1)
        if compat_ke:  # kafka_exporter's name for the same family: one series, both labels
            members.add(f'{gl},consumergroup="{escape_label(g.group)}"', len(g.members))
        else:
            members.add(gl, len(g.members))
        for st in STATUSES:
            status.add(f'{gl},status="{st}"', 1 if st == g.status else 0)
        mls = g.max_lag_seconds
        if _ok(mls):
            fam["kafka_consumergroup_max_lag_seconds"].add(gl, mls)  # type: ignore[arg-type]
        if g.total_lag is not None:
            fam["kafka_consumergroup_lag_offsets_sum"].add(gl, g.total_lag)
        seen_clients: set[str] = set()
        for m in g.members:
            if m.last_poll_age is not None and m.client_id not in seen_clients:
                seen_clients.add(m.client_id)
                poll_age.add(f'{gl},client_id="{escape_label(m.client_id)}"', m.last_poll_age)
        gtl: dict[str, str] = {}
        for p in g.partitions:
            tl = gtl.get(p.topic)
            if tl is None:
                tl = gtl[p.topic] = f'{gl},topic="{escape_label(p.topic)}"'
            pl = f'{tl},partition="{p.partition}"'
            if p.committed is not None:
                committed.add(pl, p.committed)
            if p.position is not None:
                position.add(pl, p.position)
            if p.lag_offsets is not None:
                lag_o.add(pl, p.lag_offsets)
            if _ok(p.lag_seconds):
                lag_s.add(pl, p.lag_seconds)  # type: ignore[arg-type]
            stalled.add(pl, p.stalled_seconds)
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
                    fam[name].add(gl, val)  # type: ignore[arg-type]
    out = list(fam.values())
    if "kafka_exporter" in compat:
        from exporter.compat import kafka_exporter_lines

        out.extend(kafka_exporter_lines(v))
    return {f.name: (f.header().encode(), f.buf) for f in out}  # no copy of the buffers


class ViewText:
    """Cached text of the view families; rendered once per new view of each cluster."""

    def __init__(self, store: StoreProtocol, compat: frozenset[str] = frozenset()) -> None:
        self.store = store
        self.compat = compat
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._cache: dict[str, tuple[ClusterView, Rendered]] = {}

    def prerender(self, view: ClusterView) -> None:
        self._get(view)

    def _get(self, view: ClusterView) -> Rendered:
        with self._locks_guard:
            lock = self._locks.setdefault(view.cluster, threading.Lock())
        # One render per cluster at a time: a scrape arriving mid-render waits for it
        # instead of rendering the same view again, and the old text is dropped before
        # the new one is built so two copies of ~50 MB never coexist.
        with lock:
            hit = self._cache.get(view.cluster)
            if hit is not None and hit[0] is view:
                return hit[1]
            self._cache.pop(view.cluster, None)
            hit = None
            rendered = render_cluster(view, self.compat)
            self._cache[view.cluster] = (view, rendered)
            return rendered

    def chunks(self) -> list[bytes | bytearray]:
        """The exposition as byte chunks, families contiguous across clusters.

        Written to the socket one by one: joining 50 MB into one response body
        would double the memory of every scrape."""
        parts = [self._get(v) for v in self.store.views()]
        names: list[str] = []
        for p in parts:
            names.extend(n for n in p if n not in names)
        out: list[bytes | bytearray] = []
        for n in names:
            present = [p[n] for p in parts if n in p]
            out.append(present[0][0])
            out.extend(body for _h, body in present if body)
        return out


def metrics_table() -> str:
    """The README's metrics table, generated from FAMILIES (tests/test_readme.py keeps them equal)."""
    rows = ["| family | type | labels | meaning |", "|---|---|---|---|"]
    rows += [f"| `{f.name}` | {f.kind} | {', '.join(f.labels)} | {f.help} |" for f in FAMILIES]
    return "\n".join(rows)
