"""Errors of a sampling cycle as typed records, not text to parse: the stage (a closed set,
the ``stage`` label of lagwatch_errors_total) and the group an error concerns."""

from __future__ import annotations

from dataclasses import dataclass
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
    STATE_WRITE = "state_write"  # writing the state topic failed (a refusal is not counted)


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorRecord:
    """One error of a cycle."""

    stage: ErrorStage  # where it happened; a string is converted, a typo raises ValueError
    message: str  # what happened, for people (logs, last_error); never parsed
    group: str | None = None  # the group it concerns; None for a broker or the whole cycle
    code: int | None = None  # the Kafka error code of a per-group answer (None: no answer)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stage", ErrorStage(self.stage))

    def __str__(self) -> str:
        return f"{self.stage}: {self.message}"
