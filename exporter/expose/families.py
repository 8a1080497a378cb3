"""The families a cycle renders (``kafka_*``), one typed field each, built from the
metric contract (exporter/expose/metrics.py): a family is named once, there, and a
renderer writes to ``fam.consumergroup_lag_offsets``, not to a string key. The fields
are in the contract's order, which is the exposition's (tests/test_house.py keeps them
equal)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Self

from exporter.expose.metrics import COMPAT_FAMILIES, FAMILIES, FamilyDoc
from exporter.expose.textformat import Lines

PREFIX = "kafka_"


def field_of(name: str) -> str:
    """A family's field: its name without the ``kafka_`` prefix."""
    return name.removeprefix(PREFIX)


class _Families:
    """A set of families with one field each, in the contract's order."""

    __slots__ = ()
    _DOCS: tuple[FamilyDoc, ...] = ()

    @classmethod
    def new(cls) -> Self:
        return cls(**{field_of(f.name): Lines(f.name, f.help, f.kind) for f in cls._DOCS})

    def in_order(self) -> list[Lines]:
        return [getattr(self, f.name) for f in dataclasses.fields(self)]  # type: ignore[arg-type]


@dataclass(slots=True)
class CycleFamilies(_Families):
    """lagwatch's own per-cycle families."""

    _DOCS: ClassVar[tuple[FamilyDoc, ...]] = tuple(f for f in FAMILIES if f.name.startswith(PREFIX))

    partition_log_start_offset: Lines
    partition_high_watermark_offset: Lines
    partition_last_stable_offset: Lines
    partition_log_end_offset: Lines
    partition_replicas: Lines
    partition_in_sync_replicas: Lines
    consumergroup_info: Lines
    consumergroup_members: Lines
    consumergroup_committed_offset: Lines
    consumergroup_position_offset: Lines
    consumergroup_lag_offsets: Lines
    consumergroup_lag_seconds: Lines
    consumergroup_stalled_seconds: Lines
    consumergroup_topic_unsubscribed: Lines
    consumergroup_epoch: Lines
    consumergroup_status: Lines
    consumergroup_max_lag_seconds: Lines
    consumergroup_lag_offsets_sum: Lines
    consumergroup_consumed_records_per_second: Lines
    consumergroup_produced_records_per_second: Lines
    consumergroup_catchup_seconds: Lines
    consumergroup_records_lost_total: Lines
    consumergroup_records_below_log_start: Lines
    consumergroup_group_records_below_log_start: Lines
    consumergroup_rebalances_total: Lines
    consumergroup_partition_redelivery_exposure_records: Lines
    consumergroup_redelivery_exposure_records: Lines
    consumergroup_member_last_poll_age_seconds: Lines
    spark_query_batch_duration_seconds: Lines
    spark_query_input_rows_per_second: Lines
    spark_query_processed_rows_per_second: Lines
    spark_query_last_progress_age_seconds: Lines
    spark_query_batch_running_seconds: Lines


@dataclass(slots=True)
class CompatFamilies(_Families):
    """kafka_exporter's families (``--compat kafka_exporter``)."""

    _DOCS: ClassVar[tuple[FamilyDoc, ...]] = COMPAT_FAMILIES

    topic_partition_current_offset: Lines
    topic_partition_oldest_offset: Lines
    topic_partition_in_sync_replica: Lines
    topic_partition_replicas: Lines
    topic_partition_leader: Lines
    topic_partition_under_replicated_partition: Lines
    topic_partitions: Lines
    brokers: Lines
    consumergroup_current_offset: Lines
    consumergroup_current_offset_sum: Lines
    consumergroup_lag: Lines
    consumergroup_lag_sum: Lines
