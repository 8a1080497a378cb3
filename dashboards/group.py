"""Group drill-down: one or a few consumer groups, partition by partition."""

from __future__ import annotations

from grafanalib import core as g

from dashboards import UID_GROUP
from dashboards._lib import (
    CLUSTER_VAR,
    GROUP_VAR,
    STATUS_TIMELINE_HELP,
    TOPIC_VAR,
    TYPE_VAR,
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
    retention_panel,
    stalled_panel,
    stat,
    status_stat,
    status_timeline,
    steps,
    timeseries,
)
from dashboards.progress import (
    catchup_panel,
    catchup_stat,
    exposure_panel,
    lost_panel,
    pace_panel,
    rebalances_panel,
)


def build() -> g.Dashboard:
    state = stat(
        "Group state and type",
        "Kafka's group state (stable, empty, preparing_rebalance, ...) and the group type: classic, "
        "consumer (KIP-848) or spark.",
        [(per_group("kafka_consumergroup_info", labels="cluster, group, state, type"),
          "{{group}}: {{state}} ({{type}})")], "none",
        text_mode="name", thresholds=steps(("text", None)))
    max_lag = stat(
        "Max lag",
        "Largest lag in seconds over the group's partitions: age of the oldest unconsumed record.",
        [(per_group("kafka_consumergroup_max_lag_seconds"), "{{group}}")], "s",
        thresholds=steps(("green", None), ("yellow", 60), ("red", 300)))
    lag_sum = stat(
        "Lag (offsets)",
        "Sum of the lag in offsets over the group's partitions.",
        [(per_group("kafka_consumergroup_lag_offsets_sum"), "{{group}}")], "short")
    members = stat(
        "Members",
        "Members of the group right now. 0 with lag means nobody is consuming (stopped).",
        [(per_group("kafka_consumergroup_members"), "{{group}}")], "none",
        thresholds=steps(("red", None), ("green", 1)))
    stalled = stat(
        "Stalled for",
        "Longest time a partition of the group has had lag without its committed offset moving.",
        [(f"max by (cluster, group) (kafka_consumergroup_stalled_seconds{{{T}}})", "{{group}}")], "s",
        thresholds=steps(("green", None), ("orange", 60), ("red", 300)))

    members_ts = timeseries(
        "Members over time",
        "Group members over time: drops and rejoins show rebalances; a livelocked consumer often "
        "leaves and rejoins on poll timeouts.",
        [(per_group("kafka_consumergroup_members"), "{{group}}")], "none", axis_label="members")
    poll_age = timeseries(
        "Member last poll age",
        "Seconds since each instrumented member last polled, from its own reports. A member that "
        "heartbeats (still in the group) but whose poll age keeps growing is livelocked. Only "
        "instrumented consumers report it.",
        [(per_group("kafka_consumergroup_member_last_poll_age_seconds", labels="cluster, group, client_id"),
          "{{group}} {{client_id}}")], "s")

    return dashboard(
        UID_GROUP, "lagwatch / Consumer group",
        "Drill-down into consumer groups: per-partition offsets (log start, committed, position, LSO, "
        "HW, LEO), lag in offsets and seconds, stalled time, status over time, members, rates.",
        [datasource_variable(), query_variable("cluster", "Cluster", CLUSTER_VAR),
         query_variable("type", "Group type", TYPE_VAR), query_variable("group", "Group", GROUP_VAR),
         query_variable("topic", "Topic", TOPIC_VAR)],
        [
            [(status_stat(G), 5, 4), (state, 5, 4), (max_lag, 4, 4), (lag_sum, 4, 4), (members, 3, 4),
             (stalled, 3, 4)],
            [(partition_table(T, "what a restarted consumer resumes from"), 24, 10)],
            [(lag_offsets_panel(T), 12, 8), (lag_seconds_panel(T), 12, 8)],
            [(status_timeline("Status timeline", STATUS_TIMELINE_HELP, G), 12, 8), (stalled_panel(T), 12, 8)],
            [(produce_consume_panel(T), 12, 8), (lag_velocity_panel(T), 12, 8)],
            [(members_ts, 6, 8), (rebalances_panel(), 6, 8), (poll_age, 6, 8), (retention_panel(T), 6, 8)],
            [(catchup_stat(), 4, 8), (catchup_panel(), 7, 8), (pace_panel(), 7, 8), (lost_panel(), 6, 8)],
            [(exposure_panel(), 24, 8)],
        ],
    )
