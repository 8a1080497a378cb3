"""Render what /metrics serves, one function per family group.

Nothing is kept in labelled gauge objects: every cycle renders the new
immutable :class:`ClusterView` of a cluster, so a deleted group or partition
simply is not in the next view and its series vanish.

The view families (partitions, groups, Spark queries, and kafka_exporter's
names with ``--compat``) are rendered once per cycle by the runner, into the
record it publishes (exporter/store.py); a scrape only writes those bytes. The
few self-metrics depend on the scrape time (data age), so they are built at
scrape time from the same records and encoded by prometheus_client, which
also negotiates OpenMetrics. Unknown values are left out, never NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from exporter.contracts.snapshot import PartitionOffsets
from exporter.contracts.view import STATUSES, ClusterView, GroupView, PartitionView
from exporter.expose.detail import Detail, detail_of
from exporter.expose.metrics import DOC, ERROR_STAGES, FAMILIES
from exporter.expose.textformat import Lines, Packed, escape_label, finite, fmt_value

if TYPE_CHECKING:
    from exporter.store import ClusterRecord

# One family of one cluster: (name, "# HELP/# TYPE" header, read-only sample lines, or
# the deflated lines of a large family: exporter/expose/textformat.py).
Family = tuple[str, bytes, memoryview | Packed]
# What a scrape writes: text, or a family to inflate as it is written (:func:`write_chunks`).
Chunk = bytes | memoryview | Packed
Exposition = tuple[Family, ...]

_PARTITIONS = ("kafka_partition_log_start_offset", "kafka_partition_high_watermark_offset",
               "kafka_partition_last_stable_offset", "kafka_partition_log_end_offset",
               "kafka_partition_replicas", "kafka_partition_in_sync_replicas")
_SPARK = (("kafka_spark_query_batch_duration_seconds", "batch_duration_seconds"),
          ("kafka_spark_query_input_rows_per_second", "input_rows_per_second"),
          ("kafka_spark_query_processed_rows_per_second", "processed_rows_per_second"),
          ("kafka_spark_query_last_progress_age_seconds", "last_progress_age"),
          ("kafka_spark_query_batch_running_seconds", "batch_running_seconds"))


def partition_labels(v: ClusterView) -> Iterator[tuple[str, str, PartitionOffsets]]:
    """(topic, label string, offsets) of every partition, each topic's labels escaped once."""
    cl = f'cluster="{escape_label(v.cluster)}"'
    topic_lab: dict[str, str] = {}
    for (topic, part), po in v.partitions.items():
        tl = topic_lab.get(topic)
        if tl is None:
            tl = topic_lab[topic] = f'{cl},topic="{escape_label(topic)}"'
        yield topic, f'{tl},partition="{part}"', po


def _group_labels(v: ClusterView, group: str) -> str:
    return f'cluster="{escape_label(v.cluster)}",group="{escape_label(group)}"'


def render_partitions(v: ClusterView, fam: dict[str, Lines]) -> None:
    """kafka_partition_*: broker-side offsets and replicas of every sampled partition."""
    ls, hw, lso, leo, reps, isr = (fam[n] for n in _PARTITIONS)
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


def render_groups(v: ClusterView, fam: dict[str, Lines], compat: frozenset[str],
                  level: dict[str, Detail] | None = None) -> None:
    """kafka_consumergroup_*: each group's state, status and per-partition lag; with
    ``level`` (``metrics_detail: bounded``: exporter/expose/detail.py), only the status
    series that is 1, and of each group only what its level says."""
    info, members, status = (fam["kafka_consumergroup_info"], fam["kafka_consumergroup_members"],
                             fam["kafka_consumergroup_status"])
    max_lag, lag_sum = fam["kafka_consumergroup_max_lag_seconds"], fam["kafka_consumergroup_lag_offsets_sum"]
    per_partition = (fam["kafka_consumergroup_committed_offset"], fam["kafka_consumergroup_position_offset"],
                     fam["kafka_consumergroup_lag_offsets"], fam["kafka_consumergroup_lag_seconds"],
                     fam["kafka_consumergroup_stalled_seconds"])
    poll_age = fam["kafka_consumergroup_member_last_poll_age_seconds"]
    epoch = fam["kafka_consumergroup_epoch"]
    compat_ke = "kafka_exporter" in compat
    for g in v.groups.values():
        gl = _group_labels(v, g.group)
        for st in STATUSES if level is None else (g.status,):  # bounded: the current one, 1
            status.add(f'{gl},status="{st}"', 1 if st == g.status else 0)
        mls = g.max_lag_seconds
        if finite(mls):
            max_lag.add(gl, mls)  # type: ignore[arg-type]
        lv = Detail.PARTITIONS if level is None else level[g.group]
        if lv == Detail.STATUS:
            continue
        info.add(f'{gl},state="{escape_label(g.state)}",type="{g.type}"', 1)
        if compat_ke:  # kafka_exporter's name for the same family: one series, both labels
            members.add(f'{gl},consumergroup="{escape_label(g.group)}"', len(g.members))
        else:
            members.add(gl, len(g.members))
        if g.epoch is not None and g.epoch >= 0:
            epoch.add(gl, g.epoch)
        if g.total_lag is not None:
            lag_sum.add(gl, g.total_lag)
        seen_clients: set[str] = set()
        for m in g.members:
            if m.last_poll_age is not None and m.client_id not in seen_clients:
                seen_clients.add(m.client_id)
                poll_age.add(f'{gl},client_id="{escape_label(m.client_id)}"', m.last_poll_age)
        if lv == Detail.PARTITIONS:
            _partition_lines(gl, g.partitions, per_partition)


def _partition_lines(gl: str, partitions: Iterable[PartitionView],
                     out: tuple[Lines, Lines, Lines, Lines, Lines]) -> None:
    """One group's per-partition series (committed, position, lag in offsets and seconds,
    stalled), formatted into one text per family and added at once: the most numerous
    lines of a large cluster, so each costs a list append, not an encode and a copy."""
    committed, position, lag_o, lag_s, stalled = (f"{f.name}{{" for f in out)
    cl: list[str] = []
    po: list[str] = []
    lo: list[str] = []
    ls: list[str] = []
    st: list[str] = []
    gtl: dict[str, str] = {}
    for p in partitions:
        tl = gtl.get(p.topic)
        if tl is None:
            tl = gtl[p.topic] = f'{gl},topic="{escape_label(p.topic)}"'
        pl = f'{tl},partition="{p.partition}"}} '
        if p.committed is not None:
            cl.append(f"{committed}{pl}{p.committed}\n")
        if p.position is not None:
            po.append(f"{position}{pl}{p.position}\n")
        if p.lag_offsets is not None:
            lo.append(f"{lag_o}{pl}{p.lag_offsets}\n")
        # Most partitions of a large cluster are caught up: 0 s needs no formatting.
        v = p.lag_seconds
        if v == 0:
            ls.append(f"{lag_s}{pl}0\n")
        elif finite(v):
            ls.append(f"{lag_s}{pl}{fmt_value(v)}\n")  # type: ignore[arg-type]
        v = p.stalled_seconds
        st.append(f"{stalled}{pl}{fmt_value(v) if v else '0'}\n")
    for lines, text in zip(out, (cl, po, lo, ls, st), strict=True):
        if text:
            lines.add_text("".join(text))


def render_progress(v: ClusterView, fam: dict[str, Lines], groups: Iterable[GroupView]) -> None:
    """Rates, time to catch up and records lost per group (exporter/evaluate/progress.py)."""
    consumed, produced = (fam["kafka_consumergroup_consumed_records_per_second"],
                          fam["kafka_consumergroup_produced_records_per_second"])
    eta, lost = fam["kafka_consumergroup_catchup_seconds"], fam["kafka_consumergroup_records_lost_total"]
    for g in groups:
        pr = g.progress
        if pr is None:
            continue
        gl = _group_labels(v, g.group)
        if finite(pr.consume_rate) and finite(pr.produce_rate):
            consumed.add(gl, pr.consume_rate)  # type: ignore[arg-type]
            produced.add(gl, pr.produce_rate)  # type: ignore[arg-type]
        if finite(pr.catchup_seconds):
            eta.add(gl, pr.catchup_seconds)  # type: ignore[arg-type]
        lost.add(gl, pr.records_lost_total)


def render_below_log_start(v: ClusterView, fam: dict[str, Lines], groups: Iterable[GroupView],
                           detailed: Iterable[GroupView]) -> None:
    """Records below the log start now (exporter/evaluate/retention.py): the group's sum
    for every group in ``groups`` (0 when none), the partitions' own in ``detailed`` only
    where there are some, so a cluster of caught-up groups adds no per-partition series."""
    total = fam["kafka_consumergroup_group_records_below_log_start"]
    per_tp = fam["kafka_consumergroup_records_below_log_start"]
    for g in groups:
        if g.progress is not None:
            total.add(_group_labels(v, g.group), g.progress.below_log_start)
    for g in detailed:
        pr = g.progress
        if pr is None or not pr.below_log_start:
            continue
        gl = _group_labels(v, g.group)
        for (topic, partition), pp in pr.partitions.items():
            if pp.below_log_start:
                per_tp.add(f'{gl},topic="{escape_label(topic)}",partition="{partition}"',
                           pp.below_log_start)


def render_rebalances(v: ClusterView, fam: dict[str, Lines], groups: Iterable[GroupView]) -> None:
    """kafka_consumergroup_rebalances_total per group (exporter/evaluate/rebalances.py)."""
    out = fam["kafka_consumergroup_rebalances_total"]
    for g in groups:
        if g.rebalances is not None:
            out.add(_group_labels(v, g.group), g.rebalances.total)


def render_exposure(v: ClusterView, fam: dict[str, Lines], groups: Iterable[GroupView]) -> None:
    """Records fetched and not committed, per partition and per group
    (exporter/evaluate/exposure.py); absent where unknown."""
    per_tp = fam["kafka_consumergroup_partition_redelivery_exposure_records"]
    total = fam["kafka_consumergroup_redelivery_exposure_records"]
    for g in groups:
        ex = g.exposure
        if ex is None or ex.records is None:
            continue
        gl = _group_labels(v, g.group)
        total.add(gl, ex.records)
        for (topic, partition), n in ex.partitions.items():
            per_tp.add(f'{gl},topic="{escape_label(topic)}",partition="{partition}"', n)


def render_unsubscribed(v: ClusterView, fam: dict[str, Lines], groups: Iterable[GroupView]) -> None:
    """kafka_consumergroup_topic_unsubscribed: one series per topic a group holds offsets on
    but no member subscribes to, so that alerts can tell an abandoned topic from a consumed
    one (its partitions' own series are served as for any other)."""
    out = fam["kafka_consumergroup_topic_unsubscribed"]
    for g in groups:
        for topic in sorted({p.topic for p in g.partitions if p.unsubscribed}):
            out.add(f'{_group_labels(v, g.group)},topic="{escape_label(topic)}"', 1)


def render_spark(v: ClusterView, fam: dict[str, Lines], groups: Iterable[GroupView]) -> None:
    """kafka_spark_query_*: progress of the Spark queries shown as groups."""
    for g in groups:
        sp = g.spark
        if sp is None:
            continue
        gl = _group_labels(v, g.group)
        for name, attr in _SPARK:
            val = getattr(sp, attr)
            if attr == "batch_running_seconds":
                val = val or 0.0  # no batch running
            if finite(val):
                fam[name].add(gl, val)


def render_cluster(v: ClusterView, compat: frozenset[str] = frozenset(), bounded: bool = False
                   ) -> Exposition:
    """The view families of one cluster's view, encoded once, in the contract's order;
    ``bounded``: every group's status and max lag, the rest only of the groups
    exporter/expose/detail.py picks."""
    fam = {f.name: Lines(f.name, f.help, f.kind) for f in FAMILIES if f.name.startswith("kafka_")}
    render_partitions(v, fam)
    groups = list(v.groups.values())
    level = {g.group: detail_of(g) for g in groups} if bounded else None
    render_groups(v, fam, compat, level)
    served = groups if level is None else [g for g in groups if level[g.group] >= Detail.GROUP]
    render_progress(v, fam, served)
    render_rebalances(v, fam, served)
    render_spark(v, fam, served)
    detailed = groups if level is None else [g for g in served if level[g.group] == Detail.PARTITIONS]
    render_exposure(v, fam, detailed)
    render_below_log_start(v, fam, served, detailed)
    render_unsubscribed(v, fam, detailed)
    out = list(fam.values())
    if "kafka_exporter" in compat:
        from exporter.expose.compat import kafka_exporter_lines

        out.extend(kafka_exporter_lines(v, level))
    # A read-only view of each buffer, not a copy, or the deflated text of a large family:
    # the text of a large cluster is ~50 MB.
    return tuple((f.name, f.header().encode(), f.body()) for f in out)


# -- self-metrics, at scrape time -------------------------------------------------------

def _gauge(name: str) -> GaugeMetricFamily:
    d = DOC[name]
    return GaugeMetricFamily(name, d.help, labels=list(d.labels))


def _counter(name: str) -> CounterMetricFamily:
    d = DOC[name]
    return CounterMetricFamily(name.removesuffix("_total"), d.help, labels=list(d.labels))


def self_families(records: Iterable[ClusterRecord], now: float) -> list[Metric]:
    """lagwatch_*: how each cluster's runner is doing; ``now`` gives the data age."""
    up, dur, last, age, brokers = (_gauge("lagwatch_up"), _gauge("lagwatch_sample_duration_seconds"),
                                   _gauge("lagwatch_last_sample_timestamp_seconds"),
                                   _gauge("lagwatch_data_age_seconds"), _gauge("lagwatch_brokers"))
    errs, reqs, cycles = (_counter("lagwatch_errors_total"), _counter("lagwatch_kafka_requests_total"),
                          _counter("lagwatch_cycles_total"))
    rreqs = _counter("lagwatch_reports_kafka_requests_total")
    dropped = _gauge("lagwatch_dropped_group_partitions")
    cycle = _gauge("lagwatch_cycle_duration_seconds")
    rr, rd = _counter("lagwatch_reports_received_total"), _counter("lagwatch_reports_dropped_total")
    for r in records:
        v, st = r.view, r.stats
        c = [v.cluster]
        up.add_metric(c, 1.0 if v.up else 0.0)
        dur.add_metric(c, v.sample_duration)
        brokers.add_metric(c, v.brokers)
        dropped.add_metric(c, v.dropped_group_partitions)
        if v.sampled_at > 0:
            last.add_metric(c, v.sampled_at)
            age.add_metric(c, max(0.0, now - v.sampled_at))
        for stage in sorted(set(ERROR_STAGES) | set(st.errors)):
            errs.add_metric([v.cluster, stage], st.errors.get(stage, 0))
        reqs.add_metric(c, st.requests)
        rreqs.add_metric(c, st.reports_requests)
        cycle.add_metric(c, st.cycle_duration)
        cycles.add_metric(c, st.cycles)
        for kind in sorted({"consumer", "spark"} | set(st.reports_received)):
            rr.add_metric([v.cluster, kind], st.reports_received.get(kind, 0))
        for reason, n in sorted(st.reports_dropped.items()):
            rd.add_metric([v.cluster, reason], n)
    return [up, dur, cycle, last, age, brokers, errs, reqs, rreqs, cycles, dropped, rr, rd,
            *state_families(records)]


def state_families(records: Iterable[ClusterRecord]) -> list[Metric]:
    """lagwatch_state_*: the state topic's figures, for the clusters that use it."""
    writable, restored = _gauge("lagwatch_state_writable"), _gauge("lagwatch_state_restored_groups")
    written, dropped = (_counter("lagwatch_state_records_written_total"),
                        _counter("lagwatch_state_records_dropped_total"))
    shards, refused = _gauge("lagwatch_shards_owned"), _gauge("lagwatch_coordination_refused")
    for r in records:
        s = r.stats.state
        if s is None:
            continue
        c = [r.view.cluster]
        if s.writable is not None:
            writable.add_metric(c, 1.0 if s.writable else 0.0)
        written.add_metric(c, s.written)
        restored.add_metric(c, s.restored_groups)
        for reason, n in sorted(s.dropped.items()):
            dropped.add_metric([r.view.cluster, reason], n)
        if s.shards is not None:
            shards.add_metric(c, s.shards)
            refused.add_metric(c, 1.0 if s.refused else 0.0)
    return [writable, written, dropped, restored, shards, refused]


class SelfMetrics(Collector):
    """The self-metrics of one scrape, for prometheus_client's encoders."""

    def __init__(self, records: Iterable[ClusterRecord], now: float) -> None:
        self.records, self.now = records, now

    def collect(self) -> Iterator[Metric]:
        yield from self_families(self.records, self.now)


# -- one scrape ---------------------------------------------------------------------------

def openmetrics_header(name: str, header: bytes) -> bytes:
    """A counter's header as OpenMetrics wants it: the family is named without ``_total``
    (its samples keep it); the text format 0.0.4 names the family after its samples."""
    if not name.endswith("_total") or not header.endswith(b" counter\n"):
        return header
    base = name.removesuffix("_total").encode()
    return header.replace(b" " + name.encode() + b" ", b" " + base + b" ")


def view_chunks(records: Iterable[ClusterRecord], openmetrics: bool = False
                ) -> list[Chunk]:
    """The view families of every record, each family contiguous across clusters.

    Written to the socket one by one: joining 50 MB into one response body
    would double the memory of every scrape."""
    parts = [r.exposition for r in records]
    order: dict[str, list[Family]] = {}
    for p in parts:
        for f in p:
            order.setdefault(f[0], []).append(f)
    out: list[Chunk] = []
    for name, present in order.items():
        header = present[0][1]
        out.append(openmetrics_header(name, header) if openmetrics else header)
        out.extend(body for _n, _h, body in present if body)
    return out


def scrape(records: Iterable[ClusterRecord], accept: str | None, now: float
           ) -> tuple[list[Chunk], str]:
    """Body chunks and content type of /metrics from one consistent set of records:
    view families first (pre-rendered), then self-metrics (ending with "# EOF" in
    OpenMetrics)."""
    records = list(records)
    encoder, ctype = choose_encoder(accept or "")
    openmetrics = ctype.startswith("application/openmetrics-text")
    return [*view_chunks(records, openmetrics), encoder(SelfMetrics(records, now))], ctype


def write_chunks(chunks: Iterable[Chunk], write: Callable[[bytes | memoryview], object]) -> None:
    """Write a scrape's chunks, inflating the deflated families piece by piece."""
    for c in chunks:
        if isinstance(c, Packed):
            for piece in c.pieces():
                write(piece)
        else:
            write(c)


def body_of(chunks: Iterable[Chunk]) -> bytes:
    """A scrape's whole body (tests, tools: the server writes it in pieces)."""
    out = bytearray()
    write_chunks(chunks, out.extend)
    return bytes(out)
