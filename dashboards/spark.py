"""Spark Structured Streaming queries: lag, progress and micro-batches of each query.

A query is a group with type="spark" (named after the query); its committed
offset is the endOffset of its last completed batch, reported by the lagwatch
listener. The query variable lists only type="spark" groups and its All value
expands to that list, so the kafka_consumergroup_* panels show Spark queries only.
"""

from __future__ import annotations

from grafanalib import core as g

from dashboards import UID_SPARK
from dashboards._lib import (
    CLUSTER_VAR,
    SPARK_GROUP_VAR,
    STATUS_TIMELINE_HELP,
    TOPIC_VAR,
    G,
    T,
    dashboard,
    datasource_variable,
    lag_offsets_panel,
    lag_seconds_panel,
    lag_velocity_panel,
    partition_table,
    per_group,
    produce_consume_panel,
    query_variable,
    stalled_panel,
    stat,
    status_stat,
    status_timeline,
    steps,
    timeseries,
    value_mappings,
)


def build() -> g.Dashboard:
    max_lag = stat(
        "Max lag",
        "Largest lag in seconds over the query's partitions: age of the oldest record the query has "
        "not processed in a completed batch.",
        [(per_group("kafka_consumergroup_max_lag_seconds"), "{{group}}")], "s",
        thresholds=steps(("green", None), ("yellow", 60), ("red", 300)))
    lag_sum = stat(
        "Lag (offsets)",
        "Sum of the lag in offsets over the query's partitions (HW - endOffset of the last batch).",
        [(per_group("kafka_consumergroup_lag_offsets_sum"), "{{group}}")], "short")
    driver = stat(
        "Driver",
        "Whether the query's driver is alive according to the listener's heartbeats (members = 1).",
        [(per_group("kafka_consumergroup_members"), "{{group}}")], "none",
        mappings=value_mappings({1: ("alive", "green"), 0: ("gone", "red")}),
        thresholds=steps(("red", None), ("green", 1)))
    progress = stat(
        "Last progress",
        "Seconds since the query last reported progress. A hung batch emits no progress at all, so "
        "this keeps growing.",
        [(per_group("kafka_spark_query_last_progress_age_seconds"), "{{group}}")], "s",
        thresholds=steps(("green", None), ("yellow", 60), ("red", 300)))
    running = stat(
        "Current batch running for",
        "How long the current micro-batch has been running; 0 when no batch is running.",
        [(per_group("kafka_spark_query_batch_running_seconds"), "{{group}}")], "s",
        thresholds=steps(("green", None), ("yellow", 60), ("red", 300)))

    batch = timeseries(
        "Batch duration",
        "Duration of each query's last completed micro-batch. Batches longer than the trigger "
        "interval make the query fall behind.",
        [(per_group("kafka_spark_query_batch_duration_seconds"), "{{group}}")], "s")
    rows = timeseries(
        "Input vs processed rows",
        "Rows per second arriving (input) and processed in the last micro-batch. Processed below "
        "input for long means the query cannot keep up.",
        [(per_group("kafka_spark_query_input_rows_per_second"), "input {{group}}"),
         (per_group("kafka_spark_query_processed_rows_per_second"), "processed {{group}}")],
        "short", axis_label="rows/s")
    liveness = timeseries(
        "Progress age and running batch",
        "Seconds since the last progress report and how long the current batch has been running. Both "
        "climbing together is a hung batch; progress age climbing with no running batch is a dead driver.",
        [(per_group("kafka_spark_query_last_progress_age_seconds"), "progress age {{group}}"),
         (per_group("kafka_spark_query_batch_running_seconds"), "batch running {{group}}")], "s")

    return dashboard(
        UID_SPARK, "lagwatch / Spark queries",
        "Spark Structured Streaming queries reading Kafka (reported by the lagwatch listener): lag "
        "in seconds and offsets against the endOffset of the last batch, batch duration, rates, liveness.",
        [datasource_variable(), query_variable("cluster", "Cluster", CLUSTER_VAR),
         query_variable("group", "Query", SPARK_GROUP_VAR, all_value=None),
         query_variable("topic", "Topic", TOPIC_VAR)],
        [
            [(status_stat(G), 4, 4), (max_lag, 4, 4), (lag_sum, 4, 4), (driver, 4, 4), (progress, 4, 4),
             (running, 4, 4)],
            [(partition_table(T, "for Spark: endOffset of the last completed batch",
                              title="Partition offsets of the queries"), 24, 10)],
            [(lag_seconds_panel(T), 12, 8), (lag_offsets_panel(T), 12, 8)],
            [(batch, 8, 8), (rows, 8, 8), (liveness, 8, 8)],
            [(status_timeline("Query status timeline", STATUS_TIMELINE_HELP, G), 12, 8),
             (stalled_panel(T), 12, 8)],
            [(produce_consume_panel(T, consumed="processed"), 12, 8), (lag_velocity_panel(T), 12, 8)],
        ],
    )
