"""Panels for the pace of a group: its time to catch up, consume and produce rates as the
exporter measures them, records lost to retention (exporter/evaluate/progress.py),
rebalances and redelivery exposure."""

from __future__ import annotations

from grafanalib import core as g

from dashboards._lib import G, per_group, stat, steps, timeseries


def catchup_stat() -> g.Stat:
    return stat(
        "Time to catch up",
        "Estimated time until the group's lag is gone at its current consume and produce rates "
        "(measured over the exporter's judgement window). No data when the group is caught up, "
        "and when it falls behind: then compare the two rates.",
        [(per_group("kafka_consumergroup_catchup_seconds"), "{{group}}")], "s",
        thresholds=steps(("green", None), ("yellow", 300), ("red", 1800)))


def catchup_panel() -> g.TimeSeries:
    return timeseries(
        "Time to catch up",
        "kafka_consumergroup_catchup_seconds: lag / (consumed - produced records per second), for "
        "the slowest member of the group. Gaps: caught up, or falling behind (no estimate). The "
        "lag alerts do not fire while it is shorter than their window.",
        [(per_group("kafka_consumergroup_catchup_seconds"), "{{group}}")], "s", axis_label="seconds")


def pace_panel() -> g.TimeSeries:
    return timeseries(
        "Consumed vs produced (exporter's window)",
        "Records per second the group's committed offsets advanced and its partitions' high "
        "watermarks advanced, over the exporter's judgement window (thresholds.window). Consumed "
        "below produced while the group has lag: it falls behind by the difference (above 0); below 0 "
        "it gains.",
        [(per_group("kafka_consumergroup_consumed_records_per_second"), "consumed {{group}}"),
         (per_group("kafka_consumergroup_produced_records_per_second"), "produced {{group}}"),
         (f"{per_group('kafka_consumergroup_produced_records_per_second')}\n- "
          f"{per_group('kafka_consumergroup_consumed_records_per_second')}",
          "{{group}} produced - consumed")],
        "short", axis_label="records/s")


def _per_group_increase(counter: str, sel: str) -> tuple[str, str]:
    """A counter's rise per rate interval, per group: the bars of the lost and rebalance panels."""
    return f"max by (cluster, group) (increase({counter}{{{sel}}}[$__rate_interval]))", "{{group}}"


def lost_panel(sel: str = G) -> g.TimeSeries:
    return timeseries(
        "Records lost to retention",
        "Records deleted (retention or delete_records) below the log start before the group read "
        "them, per rate interval: increase of kafka_consumergroup_records_lost_total. Any bar is "
        "data the group will never see (alert KafkaConsumerGroupRecordsLost).",
        [_per_group_increase("kafka_consumergroup_records_lost_total", sel)], "short",
        axis_label="records", draw="bars")


def rebalances_panel(sel: str = G) -> g.TimeSeries:
    return timeseries(
        "Rebalances",
        "Rebalances per rate interval: increase of kafka_consumergroup_rebalances_total (exact for "
        "consumer, streams and share groups, from the group epoch; a lower bound for classic "
        "groups, from member ids changing between samples). More than 5 in 10 minutes is a storm "
        "(alert KafkaConsumerGroupRebalanceStorm); a max.poll.interval.ms loop costs two per round.",
        [_per_group_increase("kafka_consumergroup_rebalances_total", sel)], "short",
        axis_label="rebalances", draw="bars")


def exposure_panel(sel: str = G) -> g.TimeSeries:
    return timeseries(
        "Redelivery exposure",
        "kafka_consumergroup_redelivery_exposure_records: records the group's consumers fetched "
        "and have not committed (position - committed, from their own reports; a Spark query: its "
        "running batch). At-least-once: what a crash or a rebalance right now would deliver again. "
        "Only for instrumented consumers and Spark queries; the commit mode is on the status page.",
        [(f"max by (cluster, group) (kafka_consumergroup_redelivery_exposure_records{{{sel}}})",
          "{{group}}")], "short", axis_label="records")
