"""Overview: every group and Spark query of the selected clusters, and the exporter's own health."""

from __future__ import annotations

from grafanalib import core as g

from dashboards import UID_OVERVIEW
from dashboards._lib import (
    CLUSTER_VAR,
    GROUP_URL,
    GROUP_VAR,
    STATUS_COLORS,
    STUCK,
    TYPE,
    TYPE_VAR,
    C,
    G,
    dashboard,
    datasource_variable,
    link_override,
    per_group,
    query_variable,
    stat,
    steps,
    table,
    timeseries,
    unit_override,
    value_mappings,
)
from dashboards.progress import catchup_panel, exposure_panel, lost_panel, rebalances_panel
from exporter.contracts.view import STATUSES

STUCK_RE = "|".join(STUCK)


def _top(kind: str, type_match: str, metric: str, unit: str, what: str, help_: str) -> g.TimeSeries:
    return timeseries(
        f"Top 10 {kind} by lag ({what})",
        help_ + " topk is evaluated at every step, so more than 10 series can appear over a long range.",
        [(f"topk(10,\n  {per_group(metric)}\n"
          f"  and on(cluster, group) kafka_consumergroup_info{{{G}, {type_match}, {TYPE}}}\n)",
          "{{cluster}} / {{group}}")],
        unit, axis_label="" if unit == "s" else "offsets",
        thresholds=steps(("green", None), ("red", 300)) if unit == "s" else None)


def _stuck_table() -> g.Table:
    # One series per stuck group, value 1, labels cluster, group, status, type (aggregated so
    # that job/instance labels or two exporter replicas cannot break the joins).
    stuck = (f'(kafka_consumergroup_status{{{G}, status=~"{STUCK_RE}"}} == 1)\n'
             f'    * on(cluster, group) group_left(type)\n'
             f'    max by (cluster, group, type) (kafka_consumergroup_info{{{G}, {TYPE}}})')

    def per_stuck(expr: str) -> str:
        return (f"{expr}\n  * on(cluster, group) group_left(status, type)\n"
                f"  max by (cluster, group, status, type) (\n    {stuck}\n  )")

    return table(
        "Stuck groups: livelocked, stalled, stopped",
        "Groups whose current status is livelocked (members alive but not polling), stalled (committed "
        "offset frozen while a member owns the partitions) or stopped (lag and nobody consuming). "
        "Click a group to open its drill-down. Empty means no group is stuck right now.",
        [
            ("current", stuck),
            ("max lag (s)", per_stuck(f"kafka_consumergroup_max_lag_seconds{{{G}}}")),
            ("lag (offsets)", per_stuck(f"kafka_consumergroup_lag_offsets_sum{{{G}}}")),
            ("stalled for (s)",
             per_stuck(f"max by (cluster, group) (kafka_consumergroup_stalled_seconds{{{G}}})")),
            ("members", per_stuck(f"kafka_consumergroup_members{{{G}}}")),
        ],
        "none", labels=("cluster", "group", "type", "status"), sort_by="stalled for (s)",
        hidden=("current",),
        overrides=[unit_override("max lag (s)", "s"), unit_override("stalled for (s)", "s"),
                   link_override("group", "Open group drill-down", GROUP_URL)],
    )


def build() -> g.Dashboard:
    by_status = stat(
        "Groups by status",
        "Number of consumer groups and Spark queries of the selected types in each status (sum of the "
        "0/1 status series, so a status nobody is in shows 0). Anything but ok in colour needs a look.",
        [("sum by (status) (\n  "
          + per_group("kafka_consumergroup_status", labels="cluster, group, status")
          + f"\n  and on(cluster, group) kafka_consumergroup_info{{{G}, {TYPE}}}\n)",
          "{{status}}")], "none",
        thresholds=steps(("green", None), ("red", 1)),
        overrides=[{"matcher": {"id": "byName", "options": s},
                    "properties": [{"id": "thresholds", "value": {
                        "mode": "absolute",
                        "steps": steps(("green", None), (STATUS_COLORS.get(s, "red"), 1))}}]}
                   for s in STATUSES],
    )
    by_type = stat(
        "Groups by type",
        "Groups known to the exporter by type: classic and consumer (KIP-848) consumer groups, Kafka "
        "Streams streams groups (KIP-1071), share groups (KIP-932, queues), and spark (Structured "
        "Streaming queries reported by the lagwatch listener).",
        [(f"count by (type) ("
          f"{per_group('kafka_consumergroup_info', G + ', ' + TYPE, 'cluster, group, type')})",
          "{{type}}")], "none",
        thresholds=steps(("blue", None)))
    worst = stat(
        "Worst lag",
        "Largest lag in seconds over all selected groups and partitions, per cluster: the age of the "
        "oldest record some group has not consumed yet.",
        [(f"max by (cluster) (kafka_consumergroup_max_lag_seconds{{{G}}})", "{{cluster}}")], "s",
        thresholds=steps(("green", None), ("yellow", 60), ("red", 300)))
    total = stat(
        "Total lag (offsets)",
        "Sum of the lag in offsets of all selected groups, per cluster.",
        [(f"sum by (cluster) ({per_group('kafka_consumergroup_lag_offsets_sum')})", "{{cluster}}")], "short")
    up = stat(
        "Exporter up",
        "lagwatch_up per cluster: UP when the last sampling cycle of the cluster succeeded.",
        [(f"lagwatch_up{{{C}}}", "{{cluster}} {{instance}}")], "none",
        mappings=value_mappings({1: ("UP", "green"), 0: ("DOWN", "red")}),
        thresholds=steps(("red", None), ("green", 1)))
    age = stat(
        "Data age",
        "Age of the data lagwatch serves, at scrape time. It grows when sampling falls behind or fails.",
        [(f"max by (cluster) (lagwatch_data_age_seconds{{{C}}})", "{{cluster}}")], "s",
        thresholds=steps(("green", None), ("yellow", 120), ("red", 600)))

    top = [
        _top("consumer groups", 'type!="spark"', "kafka_consumergroup_max_lag_seconds", "s", "seconds",
             "Consumer groups with the largest lag in seconds (worst partition of each group)."),
        _top("consumer groups", 'type!="spark"', "kafka_consumergroup_lag_offsets_sum", "short", "offsets",
             "Consumer groups with the largest lag in offsets (sum over their partitions)."),
        _top("Spark queries", 'type="spark"', "kafka_consumergroup_max_lag_seconds", "s", "seconds",
             "Spark Structured Streaming queries with the largest lag in seconds (worst partition)."),
        _top("Spark queries", 'type="spark"', "kafka_consumergroup_lag_offsets_sum", "short", "offsets",
             "Spark Structured Streaming queries with the largest lag in offsets (sum over partitions)."),
    ]

    duration = timeseries(
        "Sampling cycle duration",
        "How long the last sampling cycle of each cluster took. A cycle longer than the sampling "
        "interval makes the data older.",
        [(f"lagwatch_sample_duration_seconds{{{C}}}", "{{cluster}} {{instance}}")], "s")
    age_ts = timeseries(
        "Data age over time",
        "Age of the served data at scrape time, per cluster; a saw-tooth up to the sampling interval "
        "is normal.",
        [(f"lagwatch_data_age_seconds{{{C}}}", "{{cluster}} {{instance}}")], "s")
    errors = timeseries(
        "Sampling errors by stage",
        "Errors per second while sampling, by stage (metadata, list_groups, describe_group, "
        "offset_fetch, list_offsets, leo, exact_lag, cycle). No line means no error so far.",
        [(f"sum by (cluster, stage) (rate(lagwatch_errors_total{{{C}}}[$__rate_interval]))",
          "{{cluster}} {{stage}}")], "short", axis_label="errors/s", draw="bars")
    requests = timeseries(
        "Kafka requests per cycle",
        "Kafka requests the sampler sends per sampling cycle (librdkafka requests plus LEO requests); "
        "it should stay flat as groups are added. Missing when no cycle ran in the interval.",
        [(f"sum by (cluster) (rate(lagwatch_kafka_requests_total{{{C}}}[$__rate_interval]))\n"
          f"  / (sum by (cluster) (rate(lagwatch_cycles_total{{{C}}}[$__rate_interval])) > 0)",
          "{{cluster}}")],
        "short", axis_label="requests/cycle")
    reports = timeseries(
        "Reports from consumers and Spark listeners",
        "Reports read from the reports topic per second by kind, and reports rejected by validation "
        "by reason. Only present when instrumented consumers or the Spark listener report.",
        [(f"sum by (cluster, kind) (rate(lagwatch_reports_received_total{{{C}}}[$__rate_interval]))",
          "received {{cluster}} {{kind}}"),
         (f"sum by (cluster, reason) (rate(lagwatch_reports_dropped_total{{{C}}}[$__rate_interval]))",
          "dropped {{cluster}} {{reason}}")],
        "short", axis_label="reports/s")
    dropped = stat(
        "Dropped group-partitions",
        "Group-partitions left out by the max_group_partitions cardinality cap. Above 0, some lag is "
        "not exported: raise the cap or filter groups/topics.",
        [(f"max by (cluster) (lagwatch_dropped_group_partitions{{{C}}})", "{{cluster}}")], "none",
        thresholds=steps(("green", None), ("orange", 1)))
    brokers = stat(
        "Brokers",
        "Brokers in the cluster metadata as seen by the last sampling cycle.",
        [(f"max by (cluster) (lagwatch_brokers{{{C}}})", "{{cluster}}")], "none",
        thresholds=steps(("blue", None)))

    shards = timeseries(
        "Shards per replica",
        "With state.replicas: the shards each replica judges the groups of, and all the shards "
        "of the cluster. While the replicas' sum is below all, some groups are watched by none "
        "(KafkaConsumerLagShardsUnowned); a replica that may not join judges all of them. Empty "
        "without replicas.",
        [(f"lagwatch_shards_owned{{{C}}}", "{{cluster}} {{instance}}"),
         (f"max by (cluster) (lagwatch_shards{{{C}}})", "{{cluster}} all shards")],
        "none", axis_label="shards")
    state = timeseries(
        "State topic",
        "State records written per second (what a restart or a moved shard reads back), and records "
        "refused at a read-back by reason. Writable 0: the brokers refused the writes, and a "
        "restart starts every stall clock again.",
        [(f"sum by (cluster) (rate(lagwatch_state_records_written_total{{{C}}}[$__rate_interval]))",
          "written {{cluster}}"),
         (f"sum by (cluster, reason) (rate(lagwatch_state_records_dropped_total{{{C}}}"
          "[$__rate_interval]))", "dropped {{cluster}} {{reason}}"),
         (f"min by (cluster) (lagwatch_state_writable{{{C}}})", "writable {{cluster}}")],
        "short", axis_label="records/s")

    return dashboard(
        UID_OVERVIEW, "lagwatch / Overview",
        "Kafka consumer groups and Spark Structured Streaming queries: status, lag in seconds and "
        "offsets, stuck groups, and the health of the lagwatch exporter.",
        [datasource_variable(), query_variable("cluster", "Cluster", CLUSTER_VAR),
         query_variable("type", "Group type", TYPE_VAR), query_variable("group", "Group", GROUP_VAR)],
        [
            [(by_status, 8, 5), (by_type, 4, 5), (worst, 3, 5), (total, 3, 5), (up, 3, 5), (age, 3, 5)],
            [(top[0], 12, 9), (top[1], 12, 9)],
            [(top[2], 12, 9), (top[3], 12, 9)],
            [(_stuck_table(), 24, 8)],
            [(duration, 8, 7), (age_ts, 8, 7), (errors, 8, 7)],
            [(requests, 8, 7), (reports, 8, 7), (dropped, 4, 7), (brokers, 4, 7)],
            [(catchup_panel(), 8, 7), (lost_panel(), 8, 7), (rebalances_panel(), 8, 7)],
            [(exposure_panel(), 24, 7)],
            [(shards, 12, 7), (state, 12, 7)],
        ],
    )
