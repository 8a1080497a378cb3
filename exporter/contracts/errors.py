"""Errors of a sampling cycle as typed records, not text to parse: the stage (a closed set,
the ``stage`` label of lagwatch_errors_total) and the group an error concerns."""

from __future__ import annotations

from enum import StrEnum


class ErrorStage(StrEnum):
    """Where in a cycle an error happened; equal to its label value."""

    METADATA = "metadata"  # no broker answered a metadata request: the cycle failed
    LIST_GROUPS = "list_groups"  # a broker did not answer ListGroups
    DESCRIBE_GROUP = "describe_group"  # DescribeGroups / Consumer-, Streams-, ShareGroupDescribe
    OFFSET_FETCH = "offset_fetch"  # OffsetFetch / DescribeShareGroupOffsets
    LIST_OFFSETS = "list_offsets"  # log start, high watermark, last stable offset
    LEO = "leo"  # log end offset (ListOffsets with replica_id -2)
    EXACT_LAG = "exact_lag"  # record timestamps for exact lag seconds
    SAMPLE_EXCEPTION = "sample_exception"  # a Python exception inside the worker's sampling
    WORKER_CRASH = "worker_crash"  # the Kafka worker process died or hung
    CYCLE = "cycle"  # the runner's own cycle raised


class ErrorRecord(tuple):
    """One error: a (stage, message) pair, as Snapshot.errors has always held, plus the
    group it concerns (None for a broker or the whole cycle) as an attribute, so nobody
    parses the group id back out of the message."""

    group: str | None

    def __new__(cls, stage: ErrorStage | str, message: str, group: str | None = None) -> ErrorRecord:
        self = super().__new__(cls, (ErrorStage(stage), message))
        self.group = group
        return self

    def __getnewargs__(self) -> tuple[ErrorStage, str, str | None]:  # type: ignore[override]
        return self[0], self[1], self.group

    @property
    def stage(self) -> ErrorStage:
        return self[0]

    @property
    def message(self) -> str:
        return self[1]
