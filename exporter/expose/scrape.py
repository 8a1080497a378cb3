"""What a scrape serves: the families each cycle rendered (exporter/expose/render.py),
each contiguous across clusters, then the self-metrics (``lagwatch_*``), which depend on
the scrape time (data age) and so are built at scrape time from the same records and
encoded by prometheus_client, which also negotiates OpenMetrics. The only part of
exporter/expose that knows the store's records."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from exporter.expose.metrics import DOC, ERROR_STAGES
from exporter.expose.render import Chunk, Family
from exporter.expose.textformat import Packed
from exporter.store import ClusterRecord

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
    dropped, resting = _gauge("lagwatch_dropped_group_partitions"), _gauge("lagwatch_groups_at_rest")
    cycle, stages = _gauge("lagwatch_cycle_duration_seconds"), _gauge("lagwatch_cycle_stage_seconds")
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
        for stage, seconds in st.stages.items():
            stages.add_metric([v.cluster, stage], seconds)
        cycles.add_metric(c, st.cycles)
        resting.add_metric(c, st.groups_at_rest)
        for kind in sorted({"consumer", "spark"} | set(st.reports_received)):
            rr.add_metric([v.cluster, kind], st.reports_received.get(kind, 0))
        for reason, n in sorted(st.reports_dropped.items()):
            rd.add_metric([v.cluster, reason], n)
    return [up, dur, cycle, stages, last, age, brokers, errs, reqs, rreqs, cycles, resting, dropped, rr, rd,
            *state_families(records)]


def state_families(records: Iterable[ClusterRecord]) -> list[Metric]:
    """lagwatch_state_*: the state topic's figures, for the clusters that use it."""
    writable, restored = _gauge("lagwatch_state_writable"), _gauge("lagwatch_state_restored_groups")
    written, dropped = (_counter("lagwatch_state_records_written_total"),
                        _counter("lagwatch_state_records_dropped_total"))
    shards, refused = _gauge("lagwatch_shards_owned"), _gauge("lagwatch_coordination_refused")
    every = _gauge("lagwatch_shards")
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
        if s.all_shards:  # 0: the state topic not known yet
            every.add_metric(c, s.all_shards)
    return [writable, written, dropped, restored, shards, every, refused]


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
