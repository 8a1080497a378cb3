"""The metric contract: every family lagwatch serves, its type, labels and meaning.

docs/metrics.md is generated from :data:`FAMILIES` (tests/test_readme.py
keeps them equal), and the renderer (exporter/expose/render.py) takes names and help
texts from here, so a family cannot be served without being documented.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from exporter.contracts.errors import ErrorStage
from exporter.state.codec import DropReason


@dataclass(frozen=True)
class FamilyDoc:
    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


# Stages of lagwatch_errors_total, all served from the first cycle (at 0): the Kafka
# requests of a cycle, then a Python exception inside the worker's sampling (a bug; the
# worker keeps running), a worker process that died, and an exception in the runner's cycle.
ERROR_STAGES = tuple(ErrorStage)


class CycleStage(StrEnum):
    """The stages of a whole cycle, in order (the ``stage`` label of
    lagwatch_cycle_stage_seconds): where a slow cycle spends its time."""

    SAMPLE = "sample"  # asking the Kafka worker and receiving its snapshot
    RECORD_TIMESTAMPS = "record_timestamps"  # the records' own timestamps, where lag seconds need them
    STATE_RESTORE = "state_restore"  # the state topic read back: after a start, and shards moved in
    EVALUATION = "evaluation"
    RENDER = "render"  # the families rendered once per cycle, the worker's lines waited for

# The metric contract. docs/metrics.md is checked against this list.
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
              "Always 1; state and type (classic, consumer, streams, share, spark) of the group."),
    FamilyDoc("kafka_consumergroup_members", "gauge", ("cluster", "group"),
              "Members of the group (for Spark: 1 while the driver is alive)."),
    FamilyDoc("kafka_consumergroup_committed_offset", "gauge",
              ("cluster", "group", "topic", "partition"),
              "Committed offset (share groups: the share-partition start offset; Spark: endOffset of "
              "the last completed batch)."),
    FamilyDoc("kafka_consumergroup_position_offset", "gauge",
              ("cluster", "group", "topic", "partition"),
              "Next offset the consumer will read, as reported by instrumented consumers."),
    FamilyDoc("kafka_consumergroup_lag_offsets", "gauge",
              ("cluster", "group", "topic", "partition"),
              "max(0, high watermark - committed offset) (share groups: the lag the broker reports, "
              "which leaves out records acknowledged beyond the start offset)."),
    FamilyDoc("kafka_consumergroup_lag_seconds", "gauge",
              ("cluster", "group", "topic", "partition"),
              "Age of the oldest unconsumed record; 0 when caught up."),
    FamilyDoc("kafka_consumergroup_stalled_seconds", "gauge",
              ("cluster", "group", "topic", "partition"),
              "How long the committed offset has not moved while lag > 0; 0 otherwise."),
    FamilyDoc("kafka_consumergroup_topic_unsubscribed", "gauge", ("cluster", "group", "topic"),
              "1 for a topic on which the group holds committed offsets but which no member "
              "subscribes to any more (a group that moved to another topic); absent otherwise."),
    FamilyDoc("kafka_consumergroup_epoch", "gauge", ("cluster", "group"),
              "Group epoch of consumer (KIP-848), streams and share groups: the coordinator bumps it "
              "at every membership or assignment change, so its rate is the group's churn."),
    FamilyDoc("kafka_consumergroup_status", "gauge", ("cluster", "group", "status"),
              "One series per status; 1 for the group's current status, 0 for the others."),
    FamilyDoc("kafka_consumergroup_max_lag_seconds", "gauge", ("cluster", "group"),
              "Largest lag_seconds over the group's partitions."),
    FamilyDoc("kafka_consumergroup_lag_offsets_sum", "gauge", ("cluster", "group"),
              "Sum of lag_offsets over the group's partitions."),
    FamilyDoc("kafka_consumergroup_consumed_records_per_second", "gauge", ("cluster", "group"),
              "How fast the group's committed offsets advance, summed over its partitions, over "
              "the judgement window (thresholds.window); absent until a quarter of it is sampled."),
    FamilyDoc("kafka_consumergroup_produced_records_per_second", "gauge", ("cluster", "group"),
              "How fast the high watermarks of the group's partitions advance, over the same "
              "window; consumed below produced with a backlog means the group falls behind."),
    FamilyDoc("kafka_consumergroup_catchup_seconds", "gauge", ("cluster", "group"),
              "Estimated time until the group's lag is gone at current rates: total lag / "
              "(consumed - produced records per second), per member owning partitions with a "
              "backlog, the slowest one. Absent when caught up and when a member with a backlog "
              "consumes no faster than its partitions are produced to (the group falls behind)."),
    FamilyDoc("kafka_consumergroup_records_lost_total", "counter", ("cluster", "group"),
              "Records deleted (retention, delete_records) below the log start offset before the "
              "group consumed them, counted as the log start passes its committed offset; 0 from "
              "the group's first sample (losses older than that are not counted)."),
    FamilyDoc("kafka_consumergroup_records_below_log_start", "gauge",
              ("cluster", "group", "topic", "partition"),
              "Records between the group's committed offset and the partition's log start offset "
              "now, max(0, log start - committed): deleted before the group read them, whenever "
              "that was (before lagwatch started too). Served only for partitions with such a "
              "deficit (absent: 0) of topics a member subscribes to."),
    FamilyDoc("kafka_consumergroup_group_records_below_log_start", "gauge", ("cluster", "group"),
              "Sum of records_below_log_start over the group's partitions, 0 when none is below "
              "the log start; unlike records_lost_total it is there from the first sample, "
              "whatever lagwatch saw before."),
    FamilyDoc("kafka_consumergroup_rebalances_total", "counter", ("cluster", "group"),
              "Rebalances of the group since lagwatch watches it (0 at its first sample): consumer, "
              "streams and share groups exactly, from the group epoch's rises; classic groups at "
              "least, one per cycle in which the member ids changed (DescribeGroups has no "
              "generation), or what their instrumented members' own rebalance counts saw when more. "
              "Not served for Spark queries."),
    FamilyDoc("kafka_consumergroup_partition_redelivery_exposure_records", "gauge",
              ("cluster", "group", "topic", "partition"),
              "Records fetched but not committed (at-least-once): position - committed, from the "
              "consumer's own report; for a Spark query the running micro-batch's end - start "
              "offsets (0 while none runs). What a crash or a rebalance right now would deliver "
              "again. Only for instrumented consumers and Spark queries; absent when unknown."),
    FamilyDoc("kafka_consumergroup_redelivery_exposure_records", "gauge", ("cluster", "group"),
              "Records the group's consumers fetched but have not committed, summed over its "
              "partitions (partition_redelivery_exposure_records): what a crash or a rebalance "
              "right now would deliver again. Absent when no member reports its position."),
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
    FamilyDoc("lagwatch_cycle_stage_seconds", "gauge", ("cluster", "stage"),
              "Duration of each stage of the last cycle that sampled, in order: sample (the Kafka "
              "worker's sample, its transfer included), record_timestamps, state_restore (after a "
              "start, and shards moved in), evaluation, render."),
    FamilyDoc("lagwatch_last_sample_timestamp_seconds", "gauge", ("cluster",),
              "Unix time of the last successful sample."),
    FamilyDoc("lagwatch_data_age_seconds", "gauge", ("cluster",),
              "Age of the data served, at scrape time."),
    FamilyDoc("lagwatch_brokers", "gauge", ("cluster",), "Brokers in the cluster metadata."),
    FamilyDoc("lagwatch_errors_total", "counter", ("cluster", "stage"),
              f"Sampling errors by stage ({', '.join(ERROR_STAGES)})."),
    FamilyDoc("lagwatch_kafka_requests_total", "counter", ("cluster",),
              "Kafka requests sent for sampling: every request kafka-python sends (metadata, "
              "listings, per-coordinator group reads, ListOffsets) plus librdkafka's admin "
              "client's own counters."),
    FamilyDoc("lagwatch_reports_kafka_requests_total", "counter", ("cluster",),
              "Kafka requests sent by the reports topic's tail (librdkafka's counters)."),
    FamilyDoc("lagwatch_cycles_total", "counter", ("cluster",), "Sampling cycles run."),
    FamilyDoc("lagwatch_groups_at_rest", "gauge", ("cluster",),
              "Groups served again without being evaluated in the last cycle: at rest, nothing "
              "but time moving since they were (caught up, or stopped with nobody consuming)."),
    FamilyDoc("lagwatch_dropped_group_partitions", "gauge", ("cluster",),
              "Group-partitions left out by the max_group_partitions cardinality cap."),
    FamilyDoc("lagwatch_reports_received_total", "counter", ("cluster", "kind"),
              "Valid reports read from the reports topic."),
    FamilyDoc("lagwatch_reports_dropped_total", "counter", ("cluster", "reason"),
              "Reports rejected by validation, by reason."),
    FamilyDoc("lagwatch_state_writable", "gauge", ("cluster",),
              "1 while lagwatch writes its judgement's state to its state topic, 0 once the brokers "
              "refused it (authorization: a restart then starts every clock again); absent before "
              "the first write and with state.enabled false."),
    FamilyDoc("lagwatch_state_records_written_total", "counter", ("cluster",),
              "State records written to the state topic (tombstones of deleted groups included)."),
    FamilyDoc("lagwatch_state_records_dropped_total", "counter", ("cluster", "reason"),
              f"State records not restored at start, by reason ({', '.join(r.value for r in DropReason)})."),
    FamilyDoc("lagwatch_state_restored_groups", "gauge", ("cluster",),
              "Groups whose judgement this process restored from the state topic: at start and, "
              "with replicas, when shards moved to it."),
    FamilyDoc("lagwatch_shards_owned", "gauge", ("cluster",),
              "With state.replicas: the state topic's partitions (shards) this replica judges the "
              "groups of (all of them when it may not join); absent without replicas."),
    FamilyDoc("lagwatch_shards", "gauge", ("cluster",),
              "With state.replicas: the shards the replicas divide (the state topic's partitions). "
              "While lagwatch_shards_owned summed over the replicas is below it, the groups of some "
              "shards are watched by none; absent without replicas."),
    FamilyDoc("lagwatch_coordination_refused", "gauge", ("cluster",),
              "With state.replicas: 1 when lagwatch may not join its coordination group or use its "
              "state topic (authorization), so this replica judges and serves every group alone; "
              "absent without replicas."),
)
DOC = {f.name: f for f in FAMILIES}

_TP = ("cluster", "topic", "partition")
_GROUP_TP = ("cluster", "consumergroup", "topic", "partition")
_GROUP_TOPIC = ("cluster", "consumergroup", "topic")
# ``--compat kafka_exporter``: danielqsj/kafka_exporter v1.9.0's families (its README's
# metric list), same names and meanings, served beside lagwatch's own
# (exporter/expose/compat.py). Its ``kafka_consumergroup_members`` has the name of
# lagwatch's own family: that one gets a ``consumergroup`` label beside ``group`` instead.
COMPAT_FAMILIES: tuple[FamilyDoc, ...] = (
    FamilyDoc("kafka_topic_partition_current_offset", "gauge", _TP,
              "Current (high watermark) offset of a partition"),
    FamilyDoc("kafka_topic_partition_oldest_offset", "gauge", _TP, "Oldest offset of a partition"),
    FamilyDoc("kafka_topic_partition_in_sync_replica", "gauge", _TP, "In-sync replicas of a partition"),
    FamilyDoc("kafka_topic_partition_replicas", "gauge", _TP, "Replicas of a partition"),
    FamilyDoc("kafka_topic_partition_leader", "gauge", _TP, "Leader broker id of a partition"),
    FamilyDoc("kafka_topic_partition_under_replicated_partition", "gauge", _TP,
              "1 if the partition is under-replicated"),
    FamilyDoc("kafka_topic_partitions", "gauge", ("cluster", "topic"), "Partitions of a topic"),
    FamilyDoc("kafka_brokers", "gauge", ("cluster",), "Brokers in the cluster"),
    FamilyDoc("kafka_consumergroup_current_offset", "gauge", _GROUP_TP,
              "Committed offset of a consumer group"),
    FamilyDoc("kafka_consumergroup_current_offset_sum", "gauge", _GROUP_TOPIC,
              "Sum of committed offsets of a group per topic"),
    FamilyDoc("kafka_consumergroup_lag", "gauge", _GROUP_TP,
              "Lag of a consumer group (high watermark - committed)"),
    FamilyDoc("kafka_consumergroup_lag_sum", "gauge", _GROUP_TOPIC, "Sum of lag of a group per topic"),
)


def metrics_table(families: tuple[FamilyDoc, ...] = FAMILIES) -> str:
    """The metrics reference (docs/metrics.md), generated from FAMILIES (tests/test_readme.py
    keeps them equal)."""
    rows = ["| family | type | labels | meaning |", "|---|---|---|---|"]
    rows += [f"| `{f.name}` | {f.kind} | {', '.join(f.labels)} | {f.help} |" for f in families]
    return "\n".join(rows)


def compat_table() -> str:
    """docs/metrics.md's table of the ``--compat kafka_exporter`` families."""
    return metrics_table(COMPAT_FAMILIES)
